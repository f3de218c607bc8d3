package main

import (
	"strings"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// TestABTablePairsRounds checks that each variant is compared with the
// base of the same round: the machine is twice as slow in round 2, which
// the paired ratios cancel.
func TestABTablePairsRounds(t *testing.T) {
	row := func(scenario string, round int, p50, p99, cpu float64) bench.Row {
		return bench.Row{System: "ab", Scenario: scenario, Store: "postgres", Concurrency: 1, Round: round,
			OpsPerSec: 1000 / p50, P50ms: p50, P99ms: p99, CPUClientUs: cpu, CPUServerUs: 2 * cpu}
	}
	rows := []bench.Row{
		row("noop", 1, 0.10, 0.30, 50), row("noop+client-gomaxprocs-1", 1, 0.08, 0.30, 40),
		row("noop", 2, 0.20, 0.60, 100), row("noop+client-gomaxprocs-1", 2, 0.16, 0.60, 80),
		row("noop", 3, 0.10, 0.30, 50), row("noop+client-gomaxprocs-1", 3, 0.09, 0.30, 45),
		{System: "raw-sql", Scenario: "full-cycle", Concurrency: 1, Round: 1, P50ms: 1}, // not an A/B row
	}
	got := abTable(rows)
	want := "| noop | client-gomaxprocs-1 | 1 | 0.800 (12%) | 1.000 | 0.800 | 0.800 | 3 |\n"
	if !strings.HasPrefix(got, "| operation | variant | c |") || !strings.HasSuffix(got, want) || strings.Count(got, "\n") != 3 {
		t.Errorf("abTable =\n%s\nwant its last line %q", got, want)
	}
	if abTable(rows[6:]) != "" {
		t.Errorf("abTable of no A/B rows is not empty")
	}
}

func TestParseLevels(t *testing.T) {
	if got, err := parseLevels("--x", " 1, 2,4 "); err != nil || len(got) != 3 || got[2] != 4 {
		t.Errorf("parseLevels = %v, %v", got, err)
	}
	if got, err := parseLevels("--x", ""); err != nil || got != nil {
		t.Errorf("parseLevels of nothing = %v, %v", got, err)
	}
	for _, bad := range []string{"0", "1,,2", "x", "-3"} {
		if _, err := parseLevels("--x", bad); err == nil || !strings.Contains(err.Error(), "--x: bad level") {
			t.Errorf("parseLevels(%q) = %v, want a usage error", bad, err)
		}
	}
}
