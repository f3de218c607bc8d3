package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
)

// TestReportOnlyRedrawsTheCommittedRun redraws the report of the full run of
// 2026-11-30 (the rows kept in internal/testkit/bench/testdata) from a summary written
// without the hot path's table: the table is computed again, the older names of
// its figures leave the other targets, RESULTS.md and summary.json hold
// it, and --require-targets turns its misses into errTargetsMissed.
func TestReportOnlyRedrawsTheCommittedRun(t *testing.T) {
	dir := t.TempDir()
	rows, err := os.ReadFile("../../../internal/testkit/bench/testdata/rows-2026-11-30.json")
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

// TestRunInRounds runs the bench for real (the server binary built here,
// PostgreSQL from pgtest) at one caller in two short rounds: every point
// is measured once per round, in the same order, with keys of its own
// (a key registered in round 1 again in round 2 would come back as a
// replay, not claimed, and fail the fused path), and the targets carry
// the per-round figures, their median and spread.
func TestRunInRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and drives it")
	}
	bin := buildServer(t)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := newRoot(&stdout, &stderr)
	cmd.SetArgs([]string{"--database-url", pgtest.BaseURL(), "--bin", bin, "--peers-bin", "",
		"--scenarios", "raw-sql,fused-grpc,replay-grpc,grpc", "--concurrency", "1", "--one-caller-concurrency", "1,2",
		"--rounds", "2", "--warmup", "20ms", "--duration", "150ms", "--growth-rows", "0", "--purge-rows", "0",
		"--results-dir", dir, "--results-md", filepath.Join(dir, "RESULTS.md")})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	rows, sum := readRun(t, dir)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("r%d %s c=%d", r.Round, r.Scenario, r.Concurrency))
		if r.Errors > 0 || r.OpsPerSec <= 0 {
			t.Errorf("round %d %s c=%d: %d errors, %.0f ops/s (%s)", r.Round, r.Scenario, r.Concurrency, r.Errors, r.OpsPerSec, r.Note)
		}
	}
	want := []string{
		// Round after round, each round through every level, the even
		// rounds in the reverse order.
		"r1 full-cycle c=1", "r1 fused-grpc c=1", "r1 replay-grpc c=1", "r1 noop-health-check c=1", "r1 full-cycle c=2", "r1 fused-grpc c=2",
		"r2 fused-grpc c=2", "r2 full-cycle c=2", "r2 noop-health-check c=1", "r2 replay-grpc c=1", "r2 fused-grpc c=1", "r2 full-cycle c=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows measured:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range sum.HotPath {
		if r.Name == "one caller: fused p50 / raw SQL p50" && (len(r.Rounds) != 2 || r.Median == nil || r.Spread == nil || *r.Median != *r.Measured) {
			t.Errorf("%s: rounds %v median %v spread %v", r.Name, r.Rounds, r.Median, r.Spread)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	for _, s := range []string{"- rounds: 2; ", "## One caller and a few", "| 2 | ", "| verdict | figure | median | target | spread | rounds | CPU-normalised (spread) |"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("RESULTS.md lacks %q", s)
		}
	}
}

// TestGrowthAndPeersInRounds runs the growth pair and the peers against a
// real PostgreSQL: the grown and the empty journal each on a server of
// its own, alternating in rounds, DBOS in every level's rounds beside the
// fused path, River once per level, and every schema they made dropped
// at the end.
func TestGrowthAndPeersInRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and the peers and drives them")
	}
	bin, peers := buildServer(t), filepath.Join(t.TempDir(), "opjournal-bench-peers")
	build := exec.Command("go", "build", "-o", peers, ".")
	build.Dir = filepath.Join("..", "..", "bench", "peers")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build peers: %v\n%s", err, out)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	schemas := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := schemas()

	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := newRoot(&stdout, &stderr)
	cmd.SetArgs([]string{"--database-url", pgtest.BaseURL(), "--bin", bin, "--peers-bin", peers,
		"--scenarios", "fused-grpc,peers,growth", "--concurrency", "2", "--one-caller-concurrency", "1", "--growth-concurrency", "2",
		"--rounds", "2", "--warmup", "20ms", "--duration", "150ms", "--growth-rows", "2000", "--purge-rows", "0",
		"--results-dir", dir, "--results-md", ""})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	rows, sum := readRun(t, dir)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("r%d %s %s c=%d", r.Round, r.System, r.Scenario, r.Concurrency))
		if r.Errors > 0 || r.OpsPerSec <= 0 {
			t.Errorf("round %d %s %s c=%d: %d errors, %.0f ops/s (%s)", r.Round, r.System, r.Scenario, r.Concurrency, r.Errors, r.OpsPerSec, r.Note)
		}
	}
	want := []string{
		"r1 opjournal fused-grpc c=2", "r1 dbos workflow-1-step c=2", "r1 opjournal fused-grpc c=1", "r1 dbos workflow-1-step c=1",
		"r2 dbos workflow-1-step c=1", "r2 opjournal fused-grpc c=1", "r2 dbos workflow-1-step c=2", "r2 opjournal fused-grpc c=2",
		"r0 river unique-job c=1", "r0 river unique-job c=2",
		"r1 opjournal fused-grpc-at-0 c=2", "r1 opjournal fused-grpc-at-2k c=2", "r2 opjournal fused-grpc-at-2k c=2", "r2 opjournal fused-grpc-at-0 c=2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows measured:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range sum.HotPath {
		switch r.Name {
		case "p99 at the grown journal / empty (fused gRPC)":
			if len(r.Rounds) != 2 || !strings.Contains(r.Detail, "fused-grpc-at-2k vs fused-grpc-at-0 c=2") {
				t.Errorf("%s: rounds %v (%s), want two rounds of the growth pair", r.Name, r.Rounds, r.Detail)
			}
		case "ahead of DBOS at every c (lowest fused / DBOS)":
			if len(r.Rounds) != 2 || r.Measured == nil {
				t.Errorf("%s: rounds %v (%s), want two rounds", r.Name, r.Rounds, r.Detail)
			}
		}
	}
	if n := schemas(); n != before {
		t.Errorf("%d bench schemas after the run, %d before: the run's, the growth pair's or the peers' were left", n, before)
	}
}

// readRun reads a run's latest.json (every row) and summary.json from dir.
func readRun(t *testing.T, dir string) ([]bench.Row, summary) {
	t.Helper()
	var rows []bench.Row
	var sum summary
	for name, v := range map[string]any{"latest.json": &rows, "summary.json": &sum} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return rows, sum
}

// buildServer builds the opjournal server binary into the test's
// temporary directory and returns its path.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "opjournal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/opjournal/opjournal/cmd/opjournal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
