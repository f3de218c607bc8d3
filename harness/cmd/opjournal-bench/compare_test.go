package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// runCompare runs `opjournal-bench args…` in-process, as main does, and
// returns stdout, stderr and the exit status exit would end with.
func runCompare(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := cli.Execute(context.Background(), newRoot(&out, &errOut), args)
	if err != nil {
		errOut.WriteString("opjournal-bench: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitStatus(err)
}

// writeSummary writes s as dir/name/summary.json and returns its path.
func writeSummary(t *testing.T, dir, name string, s summary) string {
	t.Helper()
	path := filepath.Join(dir, name, "summary.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteJSONFile(path, s); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptr(v float64) *float64 { return &v }

// hot is a hot path's figure as summary.json holds it.
func hot(name, unit string, v float64) bench.TargetResult {
	return bench.TargetResult{Name: name, Unit: unit, Measured: ptr(v), Median: ptr(v), Verdict: bench.Met}
}

// synthRun is a synthetic summary: two ratios and a CPU figure of the hot
// path, a ratio and two absolute figures among the other targets.
func synthRun(fused, oneCaller, cpu, purge, rss float64) summary {
	return summary{
		HotPath: []bench.TargetResult{
			hot("fused gRPC / raw SQL (3 statements) at c=32", "", fused),
			hot("server CPU per fused operation at c=32", "µs", cpu),
			hot("one caller: fused p50 / raw SQL p50", "", oneCaller),
		},
		Targets: []target{
			{Name: "p99 fused gRPC during a purge of 20k / without (c=32)", Measured: purge, Want: "≤ 1.5", Met: true},
			{Name: "server peak RSS, MiB (max c=32)", Measured: rss, Want: "≤ 128", Met: true},
			{Name: "journal bytes per succeeded operation (live rows, VACUUM FULL)", Measured: 806.17, Want: "≤ 1024", Met: true},
		},
	}
}

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	base := writeSummary(t, dir, "base", synthRun(1.42, 1.61, 141, 1.00, 90.44))
	// Every ratio within 10% (1.61 → 1.77 is 9.9%; 1.00 → 1.10 is 10%,
	// whose quotient is 10.000000000000009%, and agrees); the absolutes
	// far apart.
	near := writeSummary(t, dir, "near", synthRun(1.50, 1.77, 300, 1.10, 45))
	// The one-caller ratio 11% apart.
	far := writeSummary(t, dir, "far", synthRun(1.42, 1.7871, 141, 1.00, 90.44))

	skipped := synthRun(1.42, 1.61, 141, 1.00, 90.44)
	skipped.HotPath[0] = bench.TargetResult{Name: skipped.HotPath[0].Name, Verdict: bench.Skip, Detail: "not run"}
	skipped.HotPath[2].Measured = nil // a MISS without a figure (a failed round)
	skipped.HotPath[2].Verdict = bench.Miss
	skipped.HotPath = append(skipped.HotPath, hot("REST fused / gRPC fused at c=32", "", 0.7))
	skipped.Targets[0] = target{Name: "p99 during purge / without", Want: "≤ 1.5", Detail: "not measured"}
	skippedDir := filepath.Dir(writeSummary(t, dir, "skipped", skipped))

	zero := synthRun(0, 1.61, 141, 1.00, 90.44)
	zeroPath := writeSummary(t, dir, "zero", zero)
	zeroToo := writeSummary(t, dir, "zero-too", zero)

	notJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(notJSON, []byte("MET fused gRPC 1.42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notSummary := filepath.Join(dir, "rows.json")
	if err := os.WriteFile(notSummary, []byte(`[{"system": "raw-sql"}]`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		status int
		want   []string // lines stdout must hold, each whitespace-collapsed
		not    []string // substrings stdout must not hold
		stderr string   // a substring of stderr
	}{
		{
			name: "agreement", args: []string{"compare", base, near}, status: 0,
			want: []string{
				"figure A B diff verdict",
				"fused gRPC / raw SQL (3 statements) at c=32 1.42 1.50 5.6% AGREE",
				"server CPU per fused operation at c=32 141 µs 300 µs 112.8% absolute",
				"one caller: fused p50 / raw SQL p50 1.61 1.77 9.9% AGREE",
				"p99 fused gRPC during a purge of 20k / without (c=32) 1.00 1.10 10.0% AGREE",
				"server peak RSS, MiB (max c=32) 90.44 MiB 45.00 MiB 101.0% absolute",
				"journal bytes per succeeded operation (live rows, VACUUM FULL) 806.17 bytes 806.17 bytes 0.0% absolute",
				"3 of 3 ratios agree within 10%",
			},
		},
		{
			name: "a ratio 11% apart", args: []string{"compare", base, far}, status: 4,
			want: []string{
				"one caller: fused p50 / raw SQL p50 1.61 1.79 11.0% DIFFER",
				"fused gRPC / raw SQL (3 statements) at c=32 1.42 1.42 0.0% AGREE",
				"2 of 3 ratios agree within 10%",
			},
			stderr: "the runs differ: 1 of 3 judged figures differ by more than 10%",
		},
		{
			name: "a wider --within", args: []string{"compare", "--within", "0.15", base, far}, status: 0,
			want: []string{"one caller: fused p50 / raw SQL p50 1.61 1.79 11.0% AGREE", "3 of 3 ratios agree within 15%"},
		},
		{
			name: "--absolute judges the absolutes", args: []string{"compare", "--absolute", base, near}, status: 4,
			want: []string{
				"server CPU per fused operation at c=32 141 µs 300 µs 112.8% absolute DIFFER",
				"journal bytes per succeeded operation (live rows, VACUUM FULL) 806.17 bytes 806.17 bytes 0.0% absolute AGREE",
				"3 of 3 ratios agree within 10%; 1 of 3 absolute figures",
			},
			stderr: "2 of 6 judged figures differ by more than 10%",
		},
		{
			name: "only in one, not measured, a directory", args: []string{"compare", skippedDir, base}, status: 0,
			want: []string{
				"fused gRPC / raw SQL (3 statements) at c=32 - 1.42 - not measured",
				"one caller: fused p50 / raw SQL p50 - 1.61 - not measured",
				"REST fused / gRPC fused at c=32 0.70 - - only in A",
				"p99 during purge / without - - - only in A",
				"p99 fused gRPC during a purge of 20k / without (c=32) - 1.00 - only in B",
				"0 of 0 ratios agree within 10%",
			},
		},
		{
			name: "both zero agree", args: []string{"compare", zeroPath, zeroToo}, status: 0,
			want: []string{"fused gRPC / raw SQL (3 statements) at c=32 0.00 0.00 0.0% AGREE", "3 of 3 ratios agree within 10%"},
		},
		{
			name: "one zero differs", args: []string{"compare", "--within", "2", zeroPath, base}, status: 4,
			want: []string{"fused gRPC / raw SQL (3 statements) at c=32 0.00 1.42 100.0% DIFFER", "2 of 3 ratios agree within 200%"},
		},
		{
			name: "not JSON", args: []string{"compare", base, notJSON}, status: 2,
			stderr: notJSON + ": not a summary.json: invalid character",
		},
		{
			name: "JSON but not a summary", args: []string{"compare", notSummary, base}, status: 2,
			stderr: notSummary + ": not a summary.json",
		},
		{
			name: "unreadable", args: []string{"compare", base, filepath.Join(dir, "none")}, status: 1,
			stderr: filepath.Join(dir, "none") + ": no such file or directory",
		},
		{name: "one argument", args: []string{"compare", base}, status: 2, stderr: "accepts 2 arg(s), received 1"},
		{name: "three arguments", args: []string{"compare", base, near, far}, status: 2, stderr: "accepts 2 arg(s), received 3"},
		{name: "a negative --within", args: []string{"compare", "--within", "-0.1", base, near}, status: 2, stderr: "--within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, status := runCompare(t, tc.args...)
			if status != tc.status {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", status, tc.status, stdout, stderr)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(stdout, "\n") {
				lines[strings.Join(strings.Fields(l), " ")] = true
			}
			for _, w := range tc.want {
				if !lines[w] {
					t.Errorf("stdout lacks the line %q:\n%s", w, stdout)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(stdout, n) {
					t.Errorf("stdout has %q:\n%s", n, stdout)
				}
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

// TestCompareAligns checks that the columns line up: every line of the
// table has its verdict at the same rune offset.
func TestCompareAligns(t *testing.T) {
	var out bytes.Buffer
	a, b := synthRun(1.42, 1.61, 141, 1.00, 90.44), synthRun(1.5, 1.7, 9999, 1.05, 100)
	if err := compare(&out, a, b, compareOptions{within: 0.1}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	header := []rune(lines[0])
	col := strings.Index(lines[0], "verdict")
	col = len([]rune(lines[0][:col]))
	for _, l := range lines[1 : len(lines)-1] {
		r := []rune(l)
		if len(r) <= col || r[col-1] != ' ' || r[col] == ' ' {
			t.Errorf("line %q: the verdict is not at column %d (header %q)", l, col, string(header))
		}
	}
}

// TestCompareOtherUnits reads the unit of every other target the bench
// writes (targets): the purge's is a ratio, the others absolute.
func TestCompareOtherUnits(t *testing.T) {
	row := func(system, scenario string, c int, p50, p99 float64) bench.Row {
		return bench.Row{System: system, Scenario: scenario, Store: "postgres", Concurrency: c, OpsPerSec: 100, P50ms: p50, P99ms: p99}
	}
	rows := []bench.Row{
		row("opjournal", "fused-grpc-before-purge", 32, 2, 20), row("opjournal", "fused-grpc-during-purge", 32, 2, 24),
		row("gateway", "gateway-http", 32, 22, 46), row("gateway", "direct-http", 32, 1.5, 9),
	}
	c := config{purgeRows: 20000, growthC: 32, gatewayLevels: []int{32}, levels: []int{1, 32}}
	want := map[string]string{"p99 fused gRPC during a purge of 20k / without (c=32)": "",
		"added p50 through the gateway, http, c=32 (ms)": "ms", "server peak RSS, MiB (max c=32)": "MiB",
		"journal bytes per succeeded operation (live rows, VACUUM FULL)": "bytes", "p99 during purge / without": ""}
	ts := targets(rows, summary{PurgeOutlasted: true}, c)
	ts = append(ts, targets(nil, summary{}, c)[0]) // the purge not measured
	for _, tg := range ts {
		u, ok := want[tg.Name]
		if !ok {
			t.Errorf("target %q: no unit expected for it in this test", tg.Name)
			continue
		}
		if unit, ratio := otherUnit(tg.Name); unit != u || ratio != (u == "") {
			t.Errorf("otherUnit(%q) = %q, %v; want %q", tg.Name, unit, ratio, u)
		}
	}
	if len(ts) != len(want) {
		t.Errorf("%d targets, want %d", len(ts), len(want))
	}
}
