package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/internal/bench"
)

// TestReportOnlyRedrawsTheCommittedRun redraws the report of the full run of
// 2026-11-30 (the rows kept in internal/bench/testdata) from a summary written
// without the hot path's table: the table is computed again, the older names of
// its figures leave the other targets, RESULTS.md and summary.json hold
// it, and --require-targets turns its misses into errTargetsMissed.
func TestReportOnlyRedrawsTheCommittedRun(t *testing.T) {
	dir := t.TempDir()
	rows, err := os.ReadFile("../../internal/bench/testdata/rows-2026-11-30.json")
	if err != nil {
		t.Fatal(err)
	}
	old := summary{Machine: map[string]string{"cpus": "2"}, Targets: []target{
		{Name: "fused gRPC / raw-sql at c=32", Measured: 0.84, Want: "≥ 1.3"},
		{Name: "fused gRPC / dbos at c=1", Measured: 0.97, Want: "> 1"},
		{Name: "p99 fused gRPC at 1M / empty (c=32)", Measured: 1.13, Want: "≤ 1.2", Met: true},
		{Name: "server peak RSS, MiB (max c=64)", Measured: 82.45, Want: "≤ 128", Met: true},
	}}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), rows, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteJSONFile(filepath.Join(dir, "summary.json"), old); err != nil {
		t.Fatal(err)
	}
	c := config{resultsDir: dir, resultsMD: filepath.Join(dir, "RESULTS.md"), levels: []int{1, 8, 32, 64}}
	if err := rereport(c); err != nil {
		t.Fatalf("rereport: %v", err)
	}
	md, err := os.ReadFile(c.resultsMD)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Targets (the hot path)\n\n2 MET, 9 MISS, 2 SKIP.",
		"| MISS | fused gRPC / raw SQL (3 statements) at c=32 | 0.84 | ≥ 1.3 |",
		"| MET | p99 at the grown journal / empty (fused gRPC) | 1.13 | ≤ 1.2 |",
		"## Other targets",
		"| server peak RSS, MiB (max c=64) | 82.45 |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
	if strings.Contains(string(md), "fused gRPC / dbos at c=1") || strings.Contains(string(md), "raw-sql at c=32") {
		t.Errorf("RESULTS.md still has the old names of the hot path's figures")
	}
	var got summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err == nil {
		err = json.Unmarshal(b, &got)
	}
	if err != nil || len(got.HotPath) != len(bench.HotPathTargets) || bench.Missed(got.HotPath) != 9 || len(got.Targets) != 1 {
		t.Errorf("summary.json: %d of the hot path's figures (%d missed), %d other targets, err %v",
			len(got.HotPath), bench.Missed(got.HotPath), len(got.Targets), err)
	}

	c.requireTargets = true
	var missed errTargetsMissed
	if err := rereport(c); !errors.As(err, &missed) || missed != 9 {
		t.Errorf("rereport with --require-targets = %v, want 9 targets missed", err)
	}
}
