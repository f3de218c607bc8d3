package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
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
	want := "| noop | client-gomaxprocs-1 | 1 | 0.800 (12%) | 1.000 | 0.800 | 0.800 (0/3) | 3 |\n"
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

// TestParseABServer reads --ab-server's 'NAME=BIN [ARG ...]': "-" or no
// binary is --bin, a bare name is a file here (not one in $PATH), the
// other words are serve arguments; and it refuses, naming the flag, a
// missing name or "=", a name the scenario or the keys cannot carry, an
// argument where the binary goes, and a binary that is not there, not a
// file or not executable.
func TestParseABServer(t *testing.T) {
	dir := t.TempDir()
	defBin := filepath.Join(dir, "opjournal")
	other := filepath.Join(dir, "opjournal-stock")
	plain := filepath.Join(dir, "readme")
	for path, mode := range map[string]os.FileMode{defBin: 0o755, other: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	for _, tc := range []struct {
		in   string
		want abServer
	}{
		{"no-replay-cache=- --replay-cache-size 0", abServer{name: "no-replay-cache", bin: defBin, args: []string{"--replay-cache-size", "0"}}},
		{"same=", abServer{name: "same", bin: defBin}},
		{"same=-", abServer{name: "same", bin: defBin}},
		{"stock-codec=" + other, abServer{name: "stock-codec", bin: other}},
		{" stock_1.2 = opjournal-stock  --group-commit=off ", abServer{name: "stock_1.2", bin: "./opjournal-stock", args: []string{"--group-commit=off"}}},
		{"eq=- --flag=a,b,c", abServer{name: "eq", bin: defBin, args: []string{"--flag=a,b,c"}}},
	} {
		got, err := parseABServer(tc.in, defBin)
		if err != nil || got.name != tc.want.name || got.bin != tc.want.bin || !slices.Equal(got.args, tc.want.args) {
			t.Errorf("parseABServer(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"no-replay-cache", `no "=" after the name`},
		{"=- --replay-cache-size 0", `name "": letters, digits`},
		{"a+b=-", `name "a+b"`},
		{"two words=-", `name "two words"`},
		{"-x=-", `name "-x"`},
		{"base=-", `the name "base" is the base's`},
		{"nc= --replay-cache-size 0", `the binary "--replay-cache-size" looks like an argument: name the binary first, - for --bin (nc=- --replay-cache-size 0)`},
		{"nc=--replay-cache-size 0", `looks like an argument`},
		{"x=bin/no-such-opjournal", "stat bin/no-such-opjournal: no such file or directory"},
		{"x=no-such", "stat ./no-such: no such file or directory"},
		{"x=" + dir, dir + " is not a file"},
		{"x=readme", "./readme is not executable"},
	} {
		_, err := parseABServer(tc.in, defBin)
		if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("--ab-server %q: ", tc.in)) || !strings.Contains(err.Error(), tc.want) ||
			!strings.HasSuffix(err.Error(), "; want 'NAME=BIN [ARG ...]' (BIN - for --bin)") {
			t.Errorf("parseABServer(%q) = %v, want an error naming the flag and saying %q", tc.in, err, tc.want)
		}
	}
	if _, err := parseABServer("x=-", filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--bin "+filepath.Join(dir, "missing")+": ") {
		t.Errorf("parseABServer with a missing --bin = %v, want an error about --bin", err)
	}
	if _, err := parseABServers([]string{"a=-", "b=-", "a=" + other}, defBin); err == nil || !strings.Contains(err.Error(), `a second variant named "a"`) {
		t.Errorf("parseABServers with a name twice = %v", err)
	}
}

// TestABFlagsRefused checks the A/B flags that cannot work together are
// usage errors (exit status 2) before anything starts.
func TestABFlagsRefused(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ab-server", "x=-"}, "--ab-server: the server variants run in the A/B only; add --scenarios ab"},
		{[]string{"--scenarios", "fused-grpc", "--ab-server", "x=-"}, "add --scenarios ab"},
		{[]string{"--scenarios", "ab", "--ab-server", "x"}, `--ab-server "x": no "="`},
		{[]string{"--scenarios", "ab", "--ab-op", "rest", "--ab", "no-buffers"}, "--ab-op rest with --ab no-buffers: the client variants are gRPC dial options"},
		{[]string{"--scenarios", "ab", "--ab-op", "grpc"}, `--ab-op: "grpc", want fused, full-cycle, replay, noop or rest`},
		{[]string{"--scenarios", "ab", "--ab", "no-such"}, `--ab: no variant "no-such"`},
		{[]string{"--scenarios", "ab", "--ab", "no-buffers", "--ab-server", "no-buffers=-"}, "--ab-server no-buffers: --ab has a client variant of that name"},
	} {
		_, stderr, status := runCompare(t, append([]string{"--bin", self, "--database-url", "postgres://nobody@127.0.0.1:1/none"}, tc.args...)...)
		if status != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: status %d, stderr %q; want 2 and %q", tc.args, status, stderr, tc.want)
		}
	}
}

// TestABTableServerVariant checks a server variant's rows (its own
// server's CPU) are compared with the base's like a client variant's.
func TestABTableServerVariant(t *testing.T) {
	row := func(scenario string, c, round int, p50, srv float64) bench.Row {
		return bench.Row{System: "ab", Scenario: scenario, Store: "postgres", Concurrency: c, Round: round,
			P50ms: p50, P99ms: 2 * p50, CPUClientUs: 100, CPUServerUs: srv}
	}
	var rows []bench.Row
	for r := 1; r <= 3; r++ {
		rows = append(rows, row("rest", 1, r, 1, 200), row("rest+no-replay-cache", 1, r, 1.1, 150),
			row("rest", 32, r, 4, 100), row("rest+no-replay-cache", 32, r, 2, 50))
	}
	got := abTable(rows)
	for _, want := range []string{
		"| rest | no-replay-cache | 1 | 1.100 (0%) | 1.100 | 1.000 | 0.750 (0/3) | 3 |\n",
		"| rest | no-replay-cache | 32 | 0.500 (0%) | 0.500 | 1.000 | 0.500 (0/3) | 3 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("abTable =\n%s\nlacks %q", got, want)
		}
	}
}

// TestABServerVariantsInRounds runs a real A/B against PostgreSQL: the
// run's server over the bench's connection, a client variant and two
// server variants (the same binary as is, and without the replay cache),
// alternating in rounds at a one-caller level and a --concurrency one,
// each server variant's CPU its own process's; then the same two servers
// over the REST mirror.
func TestABServerVariantsInRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and drives three of them")
	}
	bin := buildServer(t)
	for _, op := range []string{"fused", "rest"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--database-url", pgtest.BaseURL(), "--bin", bin, "--peers-bin", "",
				"--scenarios", "ab", "--ab-op", op, "--ab-server", "same=-", "--ab-server", "no-replay-cache=" + bin + " --replay-cache-size 0",
				"--concurrency", "2", "--one-caller-concurrency", "1", "--rounds", "2", "--warmup", "50ms", "--duration", "400ms",
				"--growth-rows", "0", "--purge-rows", "0", "--results-dir", dir, "--results-md", ""}
			variants := []string{op + "+same", op + "+no-replay-cache"}
			if op == "fused" {
				args = append(args, "--ab", "no-buffers")
				variants = slices.Insert(variants, 0, op+"+no-buffers")
			}
			var stdout, stderr bytes.Buffer
			cmd := newRoot(&stdout, &stderr)
			cmd.SetArgs(args)
			// The run prints its progress and tables to os.Stdout.
			out, err := captureStdout(t, func() error { return cmd.ExecuteContext(context.Background()) })
			if err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			rows, _ := readRun(t, dir)
			var got []string
			for _, r := range rows {
				got = append(got, fmt.Sprintf("r%d %s c=%d", r.Round, r.Scenario, r.Concurrency))
				if r.System != "ab" || r.Errors > 0 || r.OpsPerSec <= 0 || r.CPUServerUs <= 0 {
					t.Errorf("r%d %s %s c=%d: %d errors, %.0f ops/s, server CPU %.0f µs/op (%s)", r.Round, r.System, r.Scenario, r.Concurrency, r.Errors, r.OpsPerSec, r.CPUServerUs, r.Note)
				}
			}
			var want []string
			for _, c := range []int{1, 2} {
				for _, r := range []int{1, 2} {
					steps := append([]string{op}, variants...)
					if r == 2 {
						slices.Reverse(steps)
					}
					for _, s := range steps {
						want = append(want, fmt.Sprintf("r%d %s c=%d", r, s, c))
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("rows measured:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, s := range []string{"ab: same = the server " + bin + " (--bin) with no arguments of its own (pid ",
				"ab: no-replay-cache = the server " + bin + " (--bin) with --replay-cache-size 0 (pid ",
				"| " + op + " | no-replay-cache | 2 | "} {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
		})
	}
}

// captureStdout runs f with os.Stdout going to a file, and returns what
// it printed there.
func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	saved := os.Stdout
	os.Stdout = tmp
	err = f()
	os.Stdout = saved
	b, rerr := os.ReadFile(tmp.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(b), err
}
