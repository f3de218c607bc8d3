// Command opjournal-bench measures opjournal against the floor (the protocol's
// three statements issued directly with pgx) and against two peers (DBOS
// Transact and River, run by the separate harness/bench/peers module) in one run
// on one PostgreSQL, with the real server process.
//
//	opjournal-bench [--duration 10s] [--warmup 2s] [--concurrency 1,8,32,64] [--growth-rows 1000000] …
//
// It creates a fresh schema per run (dropped at the end), starts
// `opjournal serve` on it, drives each scenario at each concurrency for a
// fixed duration after a warm-up, in --rounds alternating rounds (the
// scenarios of every level one after the other, the even rounds in the
// reverse order), and
// writes a table of the medians to stdout, results/latest.json (every
// round's rows), results/summary.json, results/chart.svg and RESULTS.md. It
// ends with the hot path's targets (bench.HotPathTargets), one MET/MISS/SKIP
// line each, on the median of the figure's rounds with their spread;
// --require-targets makes a MISS exit with status 3. `make bench` is the full run, `make bench-quick` a short one.
//
// `opjournal-bench compare A B` says whether two runs' summary.json agree:
// every ratio within --within (10%) of the other run's, exit status 4 if
// not. `make bench-quick-twice` runs bench-quick twice and compares them.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/protocodec"
	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/hashkey"
)

type config struct {
	databaseURL string
	bin         string
	peersBin    string
	levels      []int
	// oneCaller are the levels, besides levels, at which raw SQL and the
	// fused path run (the one-caller figures: p50 and p99 at c=1, 2, 4).
	oneCaller []int
	// gatewayLevels are the concurrency levels of the gateway rows.
	gatewayLevels []int
	// rounds is how many times each scenario of a level is measured, the
	// scenarios alternating (bench.Alternate); the figures are medians.
	rounds     int
	warmup     time.Duration
	duration   time.Duration
	fewDur     time.Duration // per point at 4 callers or fewer (0: duration)
	poolMax    int
	growthRows int
	growthC    int
	purgeRows  int
	// purgeRounds is how many times the purge scenario loads and purges.
	purgeRounds int
	contenders  int
	resultsDir  string
	resultsMD   string
	serverLog   string
	replayKeys  int
	only        map[string]bool // scenarios to run; empty: all
	// requireTargets makes a MISS of the hot path's targets exit non-zero.
	requireTargets bool
	serverArgs     []string
	serverEnv      []string
	// ab are the client-side variants to try (abVariants).
	ab []string
	// abServers are the server-side variants to try (--ab-server), each
	// a server of its own beside the run's.
	abServers []abServer
	abOp      string // the operation of the A/B: fused, full-cycle, replay, noop or rest (abOps)
	// steal measures a point of a schedule again while the hypervisor
	// takes more of the CPU than --steal-limit (nil: never).
	steal *stealGate
}

// want reports whether the scenario (or group: "contention", "peers",
// "growth") is to run.
func (c config) want(scenario string) bool { return len(c.only) == 0 || c.only[scenario] }

// wantRow reports whether a row of the system's scenario is to be
// measured: raw-sql and grpc are named by their system, the purge rows by
// "purge", and the growth row always runs when its group does.
func (c config) wantRow(system, scenario string) bool {
	name := strings.TrimSuffix(scenario, "-at-"+count(c.growthRows))
	if strings.HasPrefix(scenario, "fused-grpc-") && strings.Contains(scenario, "purge") {
		name = "purge"
	}
	switch system {
	case "raw-sql", "grpc":
		name = system
	case "dbos", "river":
		name = "peers"
	}
	return c.want(name) || c.want(scenario) || strings.HasPrefix(scenario, "fused-grpc-at-")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	exit(err)
}

// newRoot is the command line; the run is RunE.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var c config
	var levels string
	cmd := &cobra.Command{
		Use:   "opjournal-bench [--duration 10s] [--warmup 2s] [--concurrency 1,8,32,64] [flags]",
		Short: "measure opjournal against the floor (raw SQL) and its peers on one PostgreSQL",
		Long: `Measure opjournal against the floor (the protocol's three statements issued directly
with pgx) and against two peers (DBOS Transact and River, run by the separate
harness/bench/peers module) in one run on one PostgreSQL, with the real server
process. It creates a fresh schema per run (dropped at the end), starts
"opjournal serve" on it, drives each scenario at each concurrency for a fixed
duration after a warm-up, in alternating rounds (--rounds: every scenario of
every level once per round, the even rounds in the reverse order), and writes a table of the medians to
stdout, results/latest.json (every round's rows), results/summary.json,
results/chart.svg and RESULTS.md, ending with the targets, one MET/MISS/SKIP
line each: the median of the figure's per-round values, with their spread
((max - min) / median; above 10% it is printed unstable).

"--scenarios ab" measures one operation (--ab-op) and nothing else, on the
run's server over the bench's connection (the base) against variants of it in
alternating rounds at every --one-caller-concurrency and --concurrency level,
and prints each variant's p50, p99 and CPU per operation over the base's in the
same round: client settings (--ab) over a connection of their own, and server
builds or settings (--ab-server NAME=BIN [ARG ...]), each a second "opjournal
serve" on the same schema, whose CPU is the variant's server CPU.

Exit status: 0, also on a MISS unless --require-targets (then 3); 1 when the
run fails; 2 for bad flags. "opjournal-bench compare A B" compares two runs
(exit status 4 when they differ).`,
		Example: `  opjournal-bench --database-url postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  opjournal-bench --warmup 200ms --duration 700ms --growth-rows 100000 --purge-rows 100000 \
      --results-dir harness/bench/results/quick --results-md ""
  opjournal-bench --scenarios fused-grpc,gateway --concurrency 1,32
  opjournal-bench --scenarios ab --ab-op fused --ab-server 'stock-codec=bin/opjournal-stock' \
      --one-caller-concurrency 1,4 --concurrency 32 --rounds 9 --duration 1s --warmup 200ms \
      --peers-bin "" --growth-rows 0 --purge-rows 0 --results-dir /tmp/ab --results-md ""
  opjournal-bench --report-only     # redraw the report from the last results`,
	}
	fs := cmd.Flags()
	fs.StringVar(&c.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (a fresh schema is created in it); opjournal_* parameters reach only the opjournal server")
	fs.StringVar(&c.bin, "bin", "bin/opjournal", "the opjournal server binary")
	fs.StringVar(&c.peersBin, "peers-bin", "bin/opjournal-bench-peers", "the peers binary built from harness/bench/peers (\"\" skips the peers)")
	fs.StringVar(&levels, "concurrency", "1,8,32,64", "concurrency levels")
	oneCaller := fs.String("one-caller-concurrency", "1,2,4", "levels at which raw-sql and fused-grpc also run (the one-caller figures), besides --concurrency")
	gatewayLevels := fs.String("gateway-concurrency", "1,32", "concurrency levels of the gateway rows")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds: each scenario of every level is measured this many times, the scenarios alternating (A B, B A, A B, …), and every figure is the median of its per-round values, with their spread")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up before each measured point")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per point")
	fs.DurationVar(&c.fewDur, "few-callers-duration", 0, "measured time per point at 4 callers or fewer, whose latencies are fsync-bound and need more calls to hold still (default: --duration)")
	fs.IntVar(&c.poolMax, "pool-max-conns", 16, "pgx pool size of the server and of raw-sql (and of the peers)")
	fs.IntVar(&c.growthRows, "growth-rows", 1_000_000, "operations bulk-loaded for the growth scenario (0 skips it)")
	fs.IntVar(&c.growthC, "growth-concurrency", 32, "concurrency of the growth scenario")
	fs.IntVar(&c.purgeRows, "purge-rows", 1_000_000, "expired operations bulk-loaded and purged (opjournal purge) while the fused path is measured, at --growth-concurrency (0 skips it)")
	fs.IntVar(&c.purgeRounds, "purge-rounds", 1, "passes of the purge scenario (each loads --purge-rows, measures the fused path, then purges them while measuring it again); the p99 figure is the median over the passes")
	fs.IntVar(&c.contenders, "contenders", 64, "callers on the same key in the contention scenario")
	fs.IntVar(&c.replayKeys, "replay-keys", 1000, "succeeded keys the replay scenario cycles through")
	fs.StringVar(&c.resultsDir, "results-dir", "harness/bench/results", "where latest.json, summary.json and chart.svg go")
	fs.StringVar(&c.resultsMD, "results-md", "harness/bench/RESULTS.md", "the report with the machine description (\"\" skips it)")
	fs.StringVar(&c.serverLog, "server-log", "", "copy the server's log to this file")
	only := fs.String("scenarios", "", "run only these, comma-separated: raw-sql, full-cycle-grpc, fused-grpc, fused-rest, replay-grpc, grpc (a no-op health check), sqlite (full cycle and fused on the embedded store), contention, peers, growth, purge, gateway (HTTP and MCP through opjournal-gateway against direct calls) (default: all; the targets whose scenarios did not run print SKIP)")
	serverArgs := fs.String("server-args", "", "extra space-separated arguments for \"opjournal serve\" (e.g. --pprof-addr 127.0.0.1:6060)")
	reportOnly := fs.Bool("report-only", false, "measure nothing: redraw the chart and RESULTS.md from --results-dir's latest.json and summary.json (after a change to the report)")
	serverEnv := fs.String("server-env", "", "extra space-separated NAME=VALUE environment for the server (e.g. GOMAXPROCS=1)")
	fs.StringSliceVar(&c.ab, "ab", nil, "with --scenarios ab: client-side settings to try against the default connection, in alternating rounds at the --one-caller-concurrency and --concurrency levels: no-buffers, static-window, client-gomaxprocs-1")
	var abServers []string
	fs.StringArrayVar(&abServers, "ab-server", nil, "with --scenarios ab, repeatable: a server-side variant 'NAME=BIN [ARG ...]': BIN (- or nothing: --bin) started as a second \"opjournal serve\" on the run's schema, with --server-env and --server-args plus the space-separated ARGs, measured as scenario OP+NAME in the rounds with the run's server, its CPU the row's server CPU (e.g. 'no-replay-cache=- --replay-cache-size 0', 'stock-codec=bin/opjournal-stock')")
	fs.StringVar(&c.abOp, "ab-op", "fused", "the operation the A/B (--ab, --ab-server) drives: fused (Register with claim, MarkSucceeded), full-cycle (Register, Claim, MarkSucceeded), replay (Register of a succeeded key), noop (a health check) or rest (the fused path over the REST mirror; --ab-server only, the --ab settings being gRPC's)")
	stealLimit := fs.Float64("steal-limit", 0.10, "measure a point of the rounds, or a whole purge pass, again (after a wait) when the hypervisor took more than this share of the machine's CPU during it (0: never)")
	stealWait := fs.Duration("steal-wait", 4*time.Minute, "the longest the run waits in all for the hypervisor's steal to fall below --steal-limit; then points and passes are kept as measured, their steal in the rows")
	fs.BoolVar(&c.requireTargets, "require-targets", false, "exit with status 3, after writing the report, if any of the hot path's targets is a MISS (a SKIP does not fail)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if c.oneCaller, err = parseLevels("--one-caller-concurrency", *oneCaller); err != nil {
			return err
		}
		if c.gatewayLevels, err = parseLevels("--gateway-concurrency", *gatewayLevels); err != nil {
			return err
		}
		if c.rounds < 1 {
			return cli.Usage(fmt.Errorf("--rounds: %d, want at least 1", c.rounds))
		}
		if *stealLimit < 0 || *stealLimit >= 1 || *stealWait < 0 {
			return cli.Usage(fmt.Errorf("--steal-limit %v, --steal-wait %s: want a share in [0, 1) and a duration of at least 0", *stealLimit, *stealWait))
		}
		c.steal = newStealGate(*stealLimit, *stealWait)
		if c.abServers, err = parseABServers(abServers, c.bin); err != nil {
			return cli.Usage(err)
		}
		return start(cmd.Context(), c, levels, *only, *serverArgs, *serverEnv, *reportOnly)
	}
	cmd.AddCommand(newCompare())
	return cli.NewRoot(cmd, "", stdout, stderr)
}

// start completes c from the flags' text and runs the bench (or, with
// reportOnly, redraws the report).
func start(ctx context.Context, c config, levels, only, serverArgs, serverEnv string, reportOnly bool) error {
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.only[s] = true
		}
	}
	if err := checkAB(c); err != nil {
		return cli.Usage(err)
	}
	c.serverArgs = strings.Fields(serverArgs)
	// Every server the bench starts shares one request-hash key (the
	// payment action redacts fields), as a deployment's replicas do.
	c.serverEnv = append([]string{hashkey.EnvFor(hashkey.Random("bench"))}, strings.Fields(serverEnv)...)
	var err error
	if c.levels, err = parseLevels("--concurrency", levels); err != nil {
		return err
	}
	if reportOnly {
		return rereport(c)
	}
	return run(ctx, c)
}

// parseLevels reads a flag's comma-separated concurrency levels; "" is
// none.
func parseLevels(flag, text string) ([]int, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var out []int
	for _, s := range strings.Split(text, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, cli.Usage(fmt.Errorf("%s: bad level %q", flag, s))
		}
		out = append(out, n)
	}
	return out, nil
}

// errTargetsMissed is run's error when --require-targets is set and
// targets were missed; the report is written.
type errTargetsMissed int

func (n errTargetsMissed) Error() string {
	return fmt.Sprintf("%d of the hot path's targets missed (--require-targets)", int(n))
}

// exit ends the process for err with exitStatus's status: 0 for none, 3
// for missed targets, 4 for runs that differ (compare), 2 for a usage
// error, 1 for any other error.
func exit(err error) {
	if s := exitStatus(err); s == 3 || s == 4 {
		fmt.Fprintln(os.Stderr, "opjournal-bench:", err)
		os.Exit(s)
	}
	cli.Exit("opjournal-bench", err)
}

// exitStatus is the process's status for err (from cli.Execute), as exit
// ends it.
func exitStatus(err error) int {
	var missed errTargetsMissed
	var differ errRunsDiffer
	switch {
	case err == nil:
		return 0
	case errors.As(err, &missed):
		return 3
	case errors.As(err, &differ):
		return 4
	case cli.IsUsage(err):
		return 2
	}
	return 1
}

// summary is what the run measured besides the rows: the server's
// footprint, the purge and the targets (the hot path's, computed from the rows
// by bench.HotPathTargets, and the others).
type summary struct {
	Machine           map[string]string `json:"machine"`
	ServerPeakRSSMiB  float64           `json:"server_peak_rss_mib"`
	BytesPerOperation float64           `json:"bytes_per_operation"`
	Operations        int64             `json:"operations"`
	JournalBytes      int64             `json:"journal_bytes"`
	// The same after VACUUM FULL: live rows only, without the dead row
	// versions that updates leave until autovacuum makes their space
	// reusable.
	CompactBytesPerOperation float64   `json:"compact_bytes_per_operation"`
	CompactJournalBytes      int64     `json:"compact_journal_bytes"`
	Relations                []relSize `json:"relations"` // after VACUUM FULL
	EventsPerOperation       float64   `json:"events_per_operation"`
	// Purge: opjournal purge of PurgeRows expired operations beside the
	// fused load.
	PurgeRows       int64   `json:"purge_rows,omitempty"`
	PurgeSeconds    float64 `json:"purge_seconds,omitempty"`
	PurgeRowsPerSec float64 `json:"purge_rows_per_sec,omitempty"`
	// PurgeOutlasted: the purge was still running when the measurement
	// during it ended (so every sample saw it).
	PurgeOutlasted bool                 `json:"purge_outlasted_measurement,omitempty"`
	HotPath        []bench.TargetResult `json:"hot_path_targets"`
	Targets        []target             `json:"targets"` // the other targets (purge, gateway, footprint)
}

// relSize is one table's footprint as PostgreSQL reports it.
type relSize struct {
	Table   string `json:"table"`
	Rows    int64  `json:"rows"`
	Heap    int64  `json:"heap_bytes"`
	Indexes int64  `json:"index_bytes"`
	Toast   int64  `json:"toast_bytes"`
}

type target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Want     string  `json:"want"`
	Met      bool    `json:"met"`
	Detail   string  `json:"detail,omitempty"`
}

func run(ctx context.Context, c config) error {
	started, stealAtStart := time.Now(), bench.ReadSteal()
	serverURL := c.databaseURL
	var err error
	if c.databaseURL, err = withoutOpjournalParams(c.databaseURL); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, c.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.Background())
	sum := summary{Machine: machine(ctx, admin)}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return err
	}
	defer func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "drop schema:", err)
		}
	}()
	dbURL, err := withParams(c.databaseURL, map[string]string{"search_path": schema, "pool_max_conns": strconv.Itoa(c.poolMax)})
	if err != nil {
		return err
	}
	serverDBURL, err := withParams(serverURL, map[string]string{"search_path": schema, "pool_max_conns": strconv.Itoa(c.poolMax)})
	if err != nil {
		return err
	}
	var serverLog io.Writer
	if c.serverLog != "" {
		f, err := os.Create(c.serverLog)
		if err != nil {
			return err
		}
		defer f.Close()
		serverLog = f
	}
	srv, err := startServer(ctx, c, "opjournal", serverDBURL, serverLog)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop(10 * time.Second) }()
	fmt.Printf("opjournal-bench: schema %s, server pid %d (gRPC %s, REST %s), pool_max_conns=%d, %s warm-up + %s per point\n",
		schema, srv.Pid(), srv.Field("grpc_addr"), srv.Field("http_addr"), c.poolMax, c.warmup, c.duration)

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	conn, err := dial(srv)
	if err != nil {
		return err
	}
	defer conn.Close()
	cl := pb.NewJournalServiceClient(conn)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	restBase := "http://" + srv.Field("http_addr")
	k := keyer(hex.EncodeToString(b[:]))

	var rows []bench.Row
	// measureOnce measures a point outside the levels' rounds: the purge
	// rows, in the purge's own passes (round 0 for a single pass). It runs
	// for at least a second: a purge pass has two points, not a level's
	// many. A point beside a purge cannot be repeated alone, so its steal
	// is recorded, not waited out (a nil gate): purgeScenario makes the
	// whole pass again instead.
	measureOnce := func(system, scenario string, cc, round int, op bench.Op) bench.Row {
		var once *stealGate
		r := once.measure(ctx, scenario, func(int) bench.Row {
			return bench.RunWithCPU(ctx, bench.Load{Concurrency: cc, Warmup: c.warmup, Duration: max(c.pointDuration(cc), time.Second)}, srv.Pid(), op)
		})
		r.System, r.Scenario, r.Store, r.Round = system, scenario, "postgres", round
		progress(r)
		return r
	}
	// Succeeded keys for the replay scenario, made by the fused path.
	replayKeys := make([]string, c.replayKeys)
	for i := range replayKeys {
		replayKeys[i] = k.key("replay", 0, int64(i))
	}
	if err := parallel(16, len(replayKeys), func(i int) error { return fused(cl, k, "replay", 0)(ctx, 0, int64(i)) }); err != nil {
		return fmt.Errorf("prepare replay keys: %w", err)
	}

	// The peers: DBOS in the levels' rounds, beside the fused path; River
	// once per level (peersProc.riverRows).
	var peers *peersProc
	var peerSteps []step
	if c.peersBin != "" && c.want("peers") {
		peers, err = startPeers(ctx, c, schema, slices.Max(append(c.allLevels(), 1)))
		if err != nil {
			return fmt.Errorf("peers: %w", err)
		}
		defer peers.close() //nolint:errcheck // closed, and its error printed, after the levels; this is for an early return
		peerSteps = []step{peers.dbosStep()}
	}
	raw := step{system: "raw-sql", scenario: "full-cycle", op: func(k keyer, cc int) bench.Op { return rawSQL(pool, k, cc) }}
	fusedStep := step{system: "opjournal", scenario: "fused-grpc", op: func(k keyer, cc int) bench.Op { return fused(cl, k, "fused", cc) }}
	if c.only["ab"] {
		ab, err := abRows(ctx, c, srv, serverDBURL, serverLog, k, replayKeys)
		rows = append(rows, ab...)
		if err != nil {
			return err
		}
		if t := abTable(ab); t != "" {
			fmt.Print("\nA/B of client and server variants (median over the rounds of variant ÷ base in the same round; below 1 is better):\n" + t + "\n")
		}
	}
	// Every level of this server in one schedule, round after round (round
	// 1 of each level, then round 2 of each, …): a figure's rounds then
	// spread over the whole schedule, minutes, rather than over its
	// level's stretch of it, and so over more of a shared machine's
	// changing states (its disk and its CPU speed up and slow down
	// independently, for tens of seconds at a time). Within a level, each
	// ratio's two sides are adjacent: full cycle and raw SQL, raw SQL and
	// fused, fused and REST, replay and the no-op, the fused path and DBOS
	// (after the no-op, whose server is idle while a peer runs).
	var schedule []step
	at := func(cc int, steps ...step) {
		for _, s := range steps {
			s.c = cc
			schedule = append(schedule, s)
		}
	}
	for _, cc := range c.levels {
		at(cc,
			step{system: "opjournal", scenario: "full-cycle-grpc", op: func(k keyer, cc int) bench.Op { return fullCycle(cl, k, cc) }},
			raw,
			fusedStep,
			step{system: "opjournal", scenario: "fused-rest", op: func(k keyer, cc int) bench.Op { return restFused(hc, restBase, k, cc) }},
			step{system: "opjournal", scenario: "replay-grpc", op: func(keyer, int) bench.Op { return replay(cl, replayKeys) }},
			step{system: "grpc", scenario: "noop-health-check", op: func(keyer, int) bench.Op { return noop(healthpb.NewHealthClient(conn)) }})
		at(cc, peerSteps...)
	}
	// One caller and a few: raw SQL and the fused path at the levels the
	// main ones do not include.
	for _, cc := range c.oneCaller {
		if !slices.Contains(c.levels, cc) {
			at(cc, raw, fusedStep)
			at(cc, peerSteps...)
		}
	}
	schedule = slices.DeleteFunc(schedule, func(s step) bool { return !c.wantRow(s.system, s.scenario) })
	rows = append(rows, runRounds(ctx, c, 0, srv.Pid(), k, "postgres", schedule)...)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if c.want("sqlite") {
		sq, err := sqliteRows(ctx, c, k)
		if err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		rows = append(rows, sq...)
	}
	if c.want("contention") {
		cr := contention(ctx, cl, k, c.contenders, bench.Load{Warmup: c.warmup, Duration: c.duration}, srv.Pid())
		cr.System, cr.Scenario, cr.Store = "opjournal", "contention-same-key", "postgres"
		rows = append(rows, cr)
		progress(cr)
	}

	sum.ServerPeakRSSMiB, err = peakRSSMiB(srv.Pid())
	if err != nil {
		return err
	}
	if err := footprint(ctx, pool, &sum); err != nil {
		return err
	}
	fmt.Printf("server peak RSS (VmHWM) %.1f MiB; journal %d operations (%.2f events each): %d bytes with indexes = %.0f bytes/operation as is, %.0f after VACUUM FULL\n",
		sum.ServerPeakRSSMiB, sum.Operations, sum.EventsPerOperation, sum.JournalBytes, sum.BytesPerOperation, sum.CompactBytesPerOperation)

	if peers != nil {
		rows = append(rows, peers.riverRows(c, c.allLevels())...)
		if err := peers.close(); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
		}
	}

	if c.growthRows > 0 && c.want("growth") {
		gr, err := growthRows(ctx, c, admin, serverURL, schema, k)
		rows = append(rows, gr...)
		if err != nil {
			return fmt.Errorf("growth: %w", err)
		}
	}
	if c.want("gateway") {
		// The targets compare with the fused SDK path at one caller,
		// measured in the gateway's own rounds (system "gateway").
		ref := step{system: "gateway", scenario: "fused-grpc", pid: srv.Pid(), op: func(k keyer, cc int) bench.Op { return fused(cl, k, "fused-ref", cc) }}
		gr, err := gatewayRows(ctx, c, srv.Field("grpc_addr"), k, ref)
		rows = append(rows, gr...)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	if c.purgeRows > 0 && c.want("purge") {
		purged, err := purgeScenario(ctx, c, pool, serverDBURL, &sum, func(scenario string, round, attempt int) bench.Row {
			return measureOnce("opjournal", scenario, c.growthC, round, fused(cl, k.round(round).attempt(attempt), scenario, c.growthC))
		})
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		rows = append(rows, purged...)
	}
	// The peak RSS again: the growth run may have raised it.
	if rss, err := peakRSSMiB(srv.Pid()); err == nil {
		sum.ServerPeakRSSMiB = rss
	}
	sum.Targets = targets(bench.MedianRows(rows), sum, c)
	sum.HotPath = bench.CheckTargets(bench.HotPathTargets, rows)
	sum.Machine["run_seconds"] = fmt.Sprintf("%.0f", time.Since(started).Seconds())
	sum.Machine["loadavg_at_end"] = loadavg()
	// The hypervisor's share of the CPU over the whole run, and what the
	// steal gate did about it: a run on a host whose other guests took
	// the CPU measures them too.
	sum.Machine["steal"] = fmt.Sprintf("%.1f%% of the CPU over the run", 100*stealAtStart.StolenSince(bench.ReadSteal()))
	if c.steal != nil && c.steal.limit > 0 {
		sum.Machine["steal"] += fmt.Sprintf("; points and purge passes over %.0f%% measured again: %d, kept over it: %d", 100*c.steal.limit, c.steal.remeasured, c.steal.kept)
	}
	sum.Machine["per_point"] = fmt.Sprintf("%s warm-up + %s measured", c.warmup, c.duration)
	if c.fewDur > 0 {
		sum.Machine["per_point"] += fmt.Sprintf(" (%s at 4 callers or fewer)", c.fewDur)
	}
	return report(c, rows, sum)
}

// startServer starts "opjournal serve" on dbURL (a PostgreSQL URL with its
// search_path) with the run's server arguments and environment, copying
// its log to log if set. It does not purge by itself: the purge scenario
// runs `opjournal purge` when it means to.
func startServer(ctx context.Context, c config, name, dbURL string, log io.Writer) (*procs.Proc, error) {
	spec := procs.Spec{Name: name, Path: c.bin, Ready: "serving", Env: c.serverEnv, Log: log, Args: append([]string{"serve",
		"--database-url", dbURL, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--purge-interval", "0"}, c.serverArgs...)}
	return procs.Start(ctx, spec, 60*time.Second)
}

// dial connects to a server the bench started, with the SDK's codec
// (client.Dial's): the generated encoders, not reflection; opts are
// added (an A/B's client variant).
func dial(srv *procs.Proc, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(srv.Field("grpc_addr"), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), protocodec.DialOption()}, opts...)...)
}

// growthRows measures the fused path on a journal grown by c.growthRows
// bulk-loaded operations against the same path on an empty journal, in
// alternating rounds at c.growthC: two servers of their own, each on a
// fresh schema (dropped at the end), so that the two sides of the p99
// ratio differ only by the rows loaded and are measured seconds apart,
// not minutes (the run's own journal holds whatever the levels before
// wrote, and its fused row was measured long before the load).
func growthRows(ctx context.Context, c config, admin *pgx.Conn, serverURL, schema string, k keyer) ([]bench.Row, error) {
	var steps []step
	var stop []func()
	defer func() {
		for _, f := range slices.Backward(stop) {
			f()
		}
	}()
	for _, n := range []int{0, c.growthRows} {
		name := schema + "_at_" + strconv.Itoa(n)
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
			return nil, err
		}
		stop = append(stop, func() {
			if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
				fmt.Fprintln(os.Stderr, "drop schema:", err)
			}
		})
		params := map[string]string{"search_path": name, "pool_max_conns": strconv.Itoa(c.poolMax)}
		serverDBURL, err := withParams(serverURL, params)
		if err != nil {
			return nil, err
		}
		srv, err := startServer(ctx, c, "opjournal (at "+count(n)+")", serverDBURL, nil)
		if err != nil {
			return nil, err
		}
		stop = append(stop, func() { _ = srv.Stop(10 * time.Second) })
		if n > 0 {
			// The server has made the tables; the load goes into them.
			dbURL, err := withParams(c.databaseURL, params)
			if err != nil {
				return nil, err
			}
			pool, err := pgxpool.New(ctx, dbURL)
			if err != nil {
				return nil, err
			}
			fmt.Printf("growth: bulk-loading %d operations …\n", n)
			t0 := time.Now()
			err = bulkLoad(ctx, pool, n)
			pool.Close()
			if err != nil {
				return nil, fmt.Errorf("bulk load: %w", err)
			}
			fmt.Printf("growth: loaded, vacuumed and checkpointed in %s\n", time.Since(t0).Round(time.Millisecond))
		}
		conn, err := dial(srv)
		if err != nil {
			return nil, err
		}
		stop = append(stop, func() { conn.Close() })
		cl := pb.NewJournalServiceClient(conn)
		steps = append(steps, step{system: "opjournal", scenario: "fused-grpc-at-" + count(n), pid: srv.Pid(),
			op: func(k keyer, cc int) bench.Op { return fused(cl, k, "growth", cc) }})
	}
	return runRounds(ctx, c, c.growthC, 0, k, "postgres", steps), nil
}

// sqliteRows measures the opjournal scenarios that apply to the embedded
// store (full cycle and fused over gRPC) through a second server process
// on a fresh SQLite file.
func sqliteRows(ctx context.Context, c config, k keyer) ([]bench.Row, error) {
	dir, err := os.MkdirTemp("", "opjournal-bench-sqlite-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	spec := procs.Spec{Name: "opjournal (sqlite)", Path: c.bin, Ready: "serving", Env: c.serverEnv, Args: append([]string{"serve",
		"--database-url", "sqlite://" + filepath.Join(dir, "bench.db"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, c.serverArgs...)}
	srv, err := procs.Start(ctx, spec, 60*time.Second)
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop(10 * time.Second) }()
	conn, err := dial(srv)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cl := pb.NewJournalServiceClient(conn)
	var rows []bench.Row
	for _, cc := range c.levels {
		rows = append(rows, runRounds(ctx, c, cc, srv.Pid(), k, "sqlite", []step{
			{system: "opjournal", scenario: "full-cycle-grpc", op: func(k keyer, cc int) bench.Op { return fullCycle(cl, k, cc) }},
			{system: "opjournal", scenario: "fused-grpc", op: func(k keyer, cc int) bench.Op { return fused(cl, k, "fused-sqlite", cc) }},
		})...)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// step is one scenario of a level's rounds; op makes its operation with
// the round's keyer, so that no two rounds register the same key.
type step struct {
	system, scenario string
	op               func(k keyer, c int) bench.Op
	// run, if set, measures the point in another process instead (a peer),
	// and returns its row.
	run        func(ctx context.Context, l bench.Load) bench.Row
	c          int // the step's concurrency, if not runRounds's cc
	pid        int // the process whose CPU is the row's server CPU, if not runRounds's pid
	gomaxprocs int // the bench's GOMAXPROCS during the step's runs, if not 0 (an A/B of the client)
}

// pointDuration is the measured time of a point at cc callers.
func (c config) pointDuration(cc int) time.Duration {
	if cc <= 4 && c.fewDur > 0 {
		return c.fewDur
	}
	return c.duration
}

// runRounds measures steps at concurrency cc in c.rounds alternating
// rounds (bench.Alternate), the server's CPU from pid, printing each row
// as it is measured.
func runRounds(ctx context.Context, c config, cc, pid int, k keyer, store string, steps []step) []bench.Row {
	started := time.Now()
	if len(steps) == 0 {
		return nil
	}
	level := func(s step) int { return cmp.Or(s.c, cc) }
	var names []string
	var round time.Duration
	for _, s := range steps {
		names = append(names, fmt.Sprintf("%s c=%d", s.scenario, level(s)))
		round += c.warmup + c.pointDuration(level(s))
	}
	fmt.Printf("%s: %d rounds of %s, about %s\n", store, c.rounds, strings.Join(names, ", "),
		(time.Duration(c.rounds) * round).Round(time.Second))
	var rows []bench.Row
	for _, sl := range bench.Alternate(c.rounds, len(steps)) {
		if ctx.Err() != nil {
			break
		}
		s := steps[sl.Index]
		cc := level(s)
		prev := 0
		if s.gomaxprocs > 0 {
			prev = runtime.GOMAXPROCS(s.gomaxprocs)
		}
		l := bench.Load{Concurrency: cc, Warmup: c.warmup, Duration: c.pointDuration(cc)}
		name := fmt.Sprintf("r%d %s c=%d", sl.Round, s.scenario, cc)
		r := c.steal.measure(ctx, name, func(attempt int) bench.Row {
			if s.run != nil {
				return s.run(ctx, l)
			}
			return bench.RunWithCPU(ctx, l, cmp.Or(s.pid, pid), s.op(k.round(sl.Round).attempt(attempt), cc))
		})
		if prev > 0 {
			runtime.GOMAXPROCS(prev)
		}
		r.System, r.Scenario, r.Store, r.Round = s.system, s.scenario, store, sl.Round
		rows = append(rows, r)
		progress(r)
	}
	fmt.Printf("%s: done in %s\n", store, time.Since(started).Round(100*time.Millisecond))
	return rows
}

// footprint measures the journal's storage from the database itself: as
// it stands after the runs, and after VACUUM FULL (live rows only), with
// each table's heap, index and TOAST sizes.
func footprint(ctx context.Context, pool *pgxpool.Pool, sum *summary) error {
	// The history is partitioned (migration 000006), and a partitioned
	// table's own size is 0: sizes are summed over its partition tree
	// (empty for a table that is not partitioned, hence the coalesce).
	total := `SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM operation_events),
		(SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size('operations')) FROM pg_partition_tree('operations'))
		+ (SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size('operation_events')) FROM pg_partition_tree('operation_events'))`
	var events int64
	if err := pool.QueryRow(ctx, total).Scan(&sum.Operations, &events, &sum.JournalBytes); err != nil {
		return err
	}
	sum.BytesPerOperation = float64(sum.JournalBytes) / float64(max(sum.Operations, 1))
	sum.EventsPerOperation = float64(events) / float64(max(sum.Operations, 1))
	for _, t := range []string{"operations", "operation_events"} {
		if _, err := pool.Exec(ctx, "VACUUM FULL "+t); err != nil {
			return err
		}
	}
	if err := pool.QueryRow(ctx, total).Scan(&sum.Operations, &events, &sum.CompactJournalBytes); err != nil {
		return err
	}
	sum.CompactBytesPerOperation = float64(sum.CompactJournalBytes) / float64(max(sum.Operations, 1))
	sum.Relations = nil
	for _, t := range []string{"operations", "operation_events"} {
		r := relSize{Table: t}
		if err := pool.QueryRow(ctx, `WITH rels AS (SELECT relid FROM pg_partition_tree($1)
			UNION ALL SELECT $1::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree($1)))
			SELECT (SELECT count(*) FROM `+t+`), sum(pg_relation_size(relid))::bigint, sum(pg_indexes_size(relid))::bigint,
			sum(pg_total_relation_size(relid) - pg_relation_size(relid) - pg_indexes_size(relid))::bigint FROM rels`, t).Scan(&r.Rows, &r.Heap, &r.Indexes, &r.Toast); err != nil {
			return err
		}
		sum.Relations = append(sum.Relations, r)
	}
	return nil
}

// parallel calls f(0) … f(n-1) from w goroutines and returns the first error.
func parallel(w, n int, f func(i int) error) error {
	var next atomic.Int64
	errs := make([]error, w)
	var wg sync.WaitGroup
	for g := range w {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && errs[g] == nil; i = int(next.Add(1)) - 1 {
				errs[g] = f(i)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// progress prints one measured row as soon as it is known.
func progress(r bench.Row) {
	scenario := r.Scenario
	if r.Store != "" && r.Store != "postgres" {
		scenario += " (" + r.Store + ")"
	}
	round := "  "
	if r.Round > 0 {
		round = fmt.Sprintf("r%d", r.Round)
	}
	fmt.Printf("  %s %-10s %-26s c=%-3d %8.0f ops/s  p50 %7.2f ms  p99 %7.2f ms  CPU µs/op client %4.0f server %4.0f postgres %4.0f",
		round, r.System, scenario, r.Concurrency, r.OpsPerSec, r.P50ms, r.P99ms, r.CPUClientUs, r.CPUServerUs, r.CPUPostgresUs)
	if r.Errors > 0 {
		fmt.Printf("  errors %d (%s)", r.Errors, r.Note)
	}
	if r.StealPct >= 1 {
		fmt.Printf("  steal %.0f%%", r.StealPct)
	}
	fmt.Println()
}

// withoutOpjournalParams returns u without the opjournal server's own
// parameters (opjournal_batch_workers, …), which pgx would send to
// PostgreSQL as settings.
func withoutOpjournalParams(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	q := pu.Query()
	for k := range q {
		if strings.HasPrefix(k, "opjournal_") {
			q.Del(k)
		}
	}
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}

// withParams returns u with the query parameters set.
func withParams(u string, params map[string]string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	q := pu.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}

// peakRSSMiB reads VmHWM (the peak resident set) of a process.
func peakRSSMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// bulkLoad inserts n succeeded operations with their two history rows, the
// shape a fused operation leaves, then VACUUM ANALYZEs both tables and
// checkpoints.
func bulkLoad(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return bulkLoadAged(ctx, pool, n, "bulk:", 0)
}

// bulkLoadAged is bulkLoad with keys prefix+N, changed age ago.
func bulkLoadAged(ctx context.Context, pool *pgxpool.Pool, n int, prefix string, age time.Duration) error {
	for _, sql := range []string{
		`INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, prev_status,
			attempt_count, lease_owner, external_id, result, created_at, updated_at, attempt_started_at, first_attempt_at)
		 SELECT '', $2 || g, 'create_payment', md5(g::text) || md5((-g)::text),
			'{"amount_minor":490000,"currency":"RUB","order_id":"817"}', 'succeeded', 'in_progress',
			1, 'bench', 'pay_' || g, '{"payment_id":"pay_1","status":"captured"}', t, t, t, t
		 FROM generate_series(1, $1::int) g, (SELECT now() - make_interval(secs => $3::float8) AS t) n`,
		`INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id)
		 SELECT '', $2 || g, now() - make_interval(secs => $3::float8), NULL, 'in_progress', 1, 'bench', 'registered and claimed', NULL
		 FROM generate_series(1, $1::int) g`,
		`INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id)
		 SELECT '', $2 || g, now() - make_interval(secs => $3::float8), 'in_progress', 'succeeded', 1, 'bench', 'effect confirmed', 'pay_' || g
		 FROM generate_series(1, $1::int) g`,
	} {
		if _, err := pool.Exec(ctx, sql, n, prefix, age.Seconds()); err != nil {
			return err
		}
	}
	for _, t := range []string{"operations", "operation_events"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
	}
	// The load leaves about a gigabyte of dirty pages: without a checkpoint
	// here, PostgreSQL writes them back during the next measurement, whose
	// p99 then measures the disk's write-back (278 ms against 18 on one
	// run), not a grown journal.
	_, err := pool.Exec(ctx, "CHECKPOINT")
	return err
}

// count renders 1000000 as "1M" and 200000 as "200k".
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// machine describes where the run happened.
func machine(ctx context.Context, conn *pgx.Conn) map[string]string {
	m := map[string]string{"date": time.Now().UTC().Format(time.RFC3339)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "processor") {
				n++
			}
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
			}
		}
		m["cpus"] = strconv.Itoa(n)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m["memory"] = strings.Join(strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:], " ")
	}
	if b, err := exec.Command("go", "version").Output(); err == nil {
		m["go"] = strings.TrimSpace(string(b))
	}
	for k, q := range map[string]string{"postgres": "SELECT version()", "fsync": "SHOW fsync",
		"synchronous_commit": "SHOW synchronous_commit", "shared_buffers": "SHOW shared_buffers"} {
		var v string
		if conn.QueryRow(ctx, q).Scan(&v) == nil {
			m[k] = v
		}
	}
	m["loadavg_at_start"] = loadavg()
	return m
}

// loadavg is the machine's load over 1, 5 and 15 minutes ("" off Linux):
// the machine may be shared, and a loaded one moves every figure.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// find returns the row of system/scenario at concurrency c.
func find(rows []bench.Row, system, scenario string, c int) (bench.Row, bool) {
	i := slices.IndexFunc(rows, func(r bench.Row) bool {
		return r.System == system && r.Scenario == scenario && r.Concurrency == c && r.OpsPerSec > 0 && r.Store != "sqlite"
	})
	if i < 0 {
		return bench.Row{}, false
	}
	return rows[i], true
}

// targets checks the targets that the hot path's table
// (bench.HotPathTargets) does not hold: the purge, the gateway and the
// footprint.
func targets(rows []bench.Row, s summary, c config) []target {
	var ts []target
	if c.purgeRows > 0 {
		b, okB := find(rows, "opjournal", "fused-grpc-before-purge", c.growthC)
		d, okD := find(rows, "opjournal", "fused-grpc-during-purge", c.growthC)
		if okB && okD {
			v := d.P99ms / b.P99ms
			detail := fmt.Sprintf("%.2f vs %.2f ms; opjournal purge removed %s expired operations (and their history) in %.1f s = %.0f operations/s",
				d.P99ms, b.P99ms, count(c.purgeRows), s.PurgeSeconds, s.PurgeRowsPerSec)
			if !s.PurgeOutlasted {
				detail += "; the purge ended before the measurement did"
			}
			ts = append(ts, target{Name: fmt.Sprintf("p99 fused gRPC during a purge of %s / without (c=%d)", count(c.purgeRows), c.growthC),
				Measured: round2(v), Want: "≤ 1.5", Met: v <= 1.5 && s.PurgeOutlasted, Detail: detail})
		} else {
			ts = append(ts, target{Name: "p99 during purge / without", Want: "≤ 1.5", Detail: "not measured"})
		}
	}
	for _, door := range []string{"http", "mcp"} {
		for _, cc := range c.gatewayLevels {
			g, okG := find(rows, "gateway", "gateway-"+door, cc)
			d, okD := find(rows, "gateway", "direct-"+door, cc)
			if !okG || !okD {
				continue
			}
			added50, added99 := g.P50ms-d.P50ms, g.P99ms-d.P99ms
			detail := fmt.Sprintf("p50 %.2f vs %.2f ms direct, p99 %.2f vs %.2f ms (+%.2f); the gateway's CPU %.0f µs per call (medians of the rounds)", g.P50ms, d.P50ms, g.P99ms, d.P99ms, added99, g.CPUServerUs)
			// At one caller the target is the hot path's (bench.HotPathTargets).
			if cc != 1 {
				ts = append(ts, target{Name: fmt.Sprintf("added p50 through the gateway, %s, c=%d (ms)", door, cc), Measured: round2(added50), Want: "(no target)", Met: true, Detail: detail})
			}
		}
	}
	ts = append(ts, target{Name: "server peak RSS, MiB (max c=" + strconv.Itoa(slices.Max(c.levels)) + ")", Measured: round2(s.ServerPeakRSSMiB), Want: "≤ 128", Met: s.ServerPeakRSSMiB <= 128})
	ts = append(ts, target{Name: "journal bytes per succeeded operation (live rows, VACUUM FULL)", Measured: round2(s.CompactBytesPerOperation), Want: "≤ 1024", Met: s.CompactBytesPerOperation <= 1024,
		Detail: fmt.Sprintf("%d bytes / %d operations, tables + indexes + TOAST, %.2f history rows each; %.0f bytes/operation as the runs left it (dead row versions not yet vacuumed)",
			s.CompactJournalBytes, s.Operations, s.EventsPerOperation, s.BytesPerOperation)})
	return ts
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// rereport renders the report again from the files a run wrote.
func rereport(c config) error {
	var rows []bench.Row
	var sum summary
	for name, v := range map[string]any{"latest.json": &rows, "summary.json": &sum} {
		b, err := os.ReadFile(filepath.Join(c.resultsDir, name))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	// Issue 16's table is computed from the rows again, so a change to it
	// shows on an old run; a summary written before the table existed has
	// those figures among the other targets, under older names.
	sum.HotPath = bench.CheckTargets(bench.HotPathTargets, rows)
	sum.Targets = slices.DeleteFunc(sum.Targets, func(t target) bool {
		for _, old := range []string{"fused gRPC / raw-sql at", "full cycle gRPC / raw-sql at", "replay / fused gRPC at",
			"fused gRPC / dbos at", "fused gRPC / river at", "p99 fused gRPC at ", "p99 at growth",
			"added p50 through the gateway, http, c=1 ", "added p50 through the gateway, mcp, c=1 "} {
			if strings.HasPrefix(t.Name, old) {
				return true
			}
		}
		return false
	})
	return report(c, rows, sum)
}

// report prints the table and the targets, the hot path's last, and writes the
// JSON files, the chart and RESULTS.md. With --require-targets a MISS of
// the hot path's targets is its error (errTargetsMissed), after all of that.
func report(c config, rows []bench.Row, s summary) error {
	med := bench.MedianRows(rows)
	fmt.Println()
	if n := len(bench.Rounds(rows)); n > 0 {
		fmt.Printf("Medians of %d rounds per point:\n", n)
	}
	bench.WriteTable(os.Stdout, med)
	fmt.Println()
	if t := oneCallerTable(med); t != "" {
		fmt.Print("One caller and a few (medians of the rounds):\n" + t + "\n")
	}
	if len(s.Targets) > 0 {
		fmt.Println("Other targets:")
		for _, t := range s.Targets {
			fmt.Printf("  %-4s %-45s %10.2f  want %-6s %s\n", verdict(t), t.Name, t.Measured, t.Want, t.Detail)
		}
		fmt.Println()
	}
	fmt.Printf("Targets (the hot path): %s\n", tally(s.HotPath))
	bench.WriteTargets(os.Stdout, "  ", s.HotPath)
	if err := writeReport(c, rows, s); err != nil {
		return err
	}
	if n := bench.Missed(s.HotPath); n > 0 && c.requireTargets {
		return errTargetsMissed(n)
	}
	return nil
}

// oneCallerTable is a Markdown table of raw SQL and the fused path at the
// levels up to 4 callers: p50, p99 and the fused/raw ratios; "" if
// neither ran there.
func oneCallerTable(rows []bench.Row) string {
	var b strings.Builder
	for _, r := range rows {
		if r.System != "raw-sql" || r.Scenario != "full-cycle" || r.Concurrency > 4 {
			continue
		}
		f, ok := find(rows, "opjournal", "fused-grpc", r.Concurrency)
		if !ok || r.P50ms <= 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| c | raw SQL p50 ms | p99 ms | fused gRPC p50 ms | p99 ms | fused / raw p50 | p99 | fused server CPU µs/op |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		}
		fmt.Fprintf(&b, "| %d | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.0f |\n", r.Concurrency, r.P50ms, r.P99ms, f.P50ms, f.P99ms, f.P50ms/r.P50ms, f.P99ms/r.P99ms, f.CPUServerUs)
	}
	return b.String()
}

// tally counts the verdicts: "3 MET, 7 MISS, 1 SKIP".
func tally(rs []bench.TargetResult) string {
	var parts []string
	for _, v := range []string{bench.Met, bench.Miss, bench.Skip} {
		n := 0
		for _, r := range rs {
			if r.Verdict == v {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, v))
	}
	return strings.Join(parts, ", ")
}

// writeReport writes the JSON files, the chart and RESULTS.md.
func writeReport(c config, rows []bench.Row, s summary) error {
	if err := os.MkdirAll(c.resultsDir, 0o755); err != nil {
		return err
	}
	if err := bench.WriteJSONFile(filepath.Join(c.resultsDir, "latest.json"), rows); err != nil {
		return err
	}
	if err := bench.WriteJSONFile(filepath.Join(c.resultsDir, "summary.json"), s); err != nil {
		return err
	}
	svgPath := filepath.Join(c.resultsDir, "chart.svg")
	f, err := os.Create(svgPath)
	if err != nil {
		return err
	}
	// The no-op RPC is a ceiling, not a system; at 3–10× the others it
	// would flatten their lines, so it stays in the table only.
	charted := slices.DeleteFunc(bench.MedianRows(rows), func(r bench.Row) bool { return r.System == "grpc" })
	if err := bench.WriteSVG(f, "ops/s by concurrency ("+s.Machine["cpus"]+" CPUs; SQLite rows marked)", charted); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if c.resultsMD == "" {
		return nil
	}
	rel, err := filepath.Rel(filepath.Dir(c.resultsMD), svgPath)
	if err != nil {
		rel = svgPath
	}
	return os.WriteFile(c.resultsMD, []byte(markdown(c, rows, s, rel)), 0o644)
}

func verdict(t target) string {
	switch {
	case t.Detail == "not measured":
		return "n/a"
	case t.Met:
		return "MET"
	}
	return "MISS"
}

// markdown renders RESULTS.md.
func markdown(c config, all []bench.Row, s summary, chart string) string {
	rows := bench.MedianRows(all)
	rounds := len(bench.Rounds(all))
	var b strings.Builder
	b.WriteString("# opjournal benchmark results\n\n")
	b.WriteString("Generated by `opjournal-bench` (`make bench`); raw rows in `results/latest.json`, ")
	b.WriteString("footprint and targets in `results/summary.json` (the hot path's under `hot_path_targets`). Where the time goes, and why the targets\n")
	b.WriteString("that are missed are missed: [`ANALYSIS.md`](ANALYSIS.md).\n\n## Machine\n\n")
	keys := make([]string, 0, len(s.Machine))
	for k := range s.Machine {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, s.Machine[k])
	}
	// A redrawn report (--report-only) describes the run it redraws.
	perPoint := cmp.Or(s.Machine["per_point"], fmt.Sprintf("%s warm-up + %s measured", c.warmup, c.duration))
	fmt.Fprintf(&b, "- run: %s per point, pool_max_conns=%d (server, raw-sql and peers), one gRPC connection, PostgreSQL on the same machine\n",
		perPoint, c.poolMax)
	serverConf := "the server with its defaults (group commit with one statement in flight per kind, GOGC=400, GOMEMLIMIT=64MiB)"
	// The request-hash key is random per run and stays out of the report.
	env := slices.DeleteFunc(slices.Clone(c.serverEnv), func(e string) bool { return strings.HasPrefix(e, hashkey.EnvFor()) })
	if extra := strings.TrimSpace(strings.Join(append(slices.Clone(c.serverArgs), env...), " ")); extra != "" {
		serverConf += ", plus " + extra
	}
	fmt.Fprintf(&b, "- server: %s\n", serverConf)
	if rounds > 0 {
		fmt.Fprintf(&b, "- rounds: %d; the scenarios alternate (A B, B A, A B, …: the even rounds in the reverse order), every point is measured once per round, the levels of the run's server in one schedule "+
			"(round 1 of every level, then round 2 of every level, …), and every row below and every figure is the median over the rounds "+
			"(per-round rows in `results/latest.json`, field `round`)\n", rounds)
	}
	fmt.Fprintf(&b, "\n![ops/s by concurrency](%s)\n\n## Rows\n\n", chart)
	b.WriteString("CPU columns: CPU time per operation in µs of the bench client (for the peers: the peer's whole process), the opjournal server, and all PostgreSQL processes.\n\n")
	b.WriteString("| system | scenario | store | c | ops/s | p50 ms | p99 ms | errors | CPU client | CPU server | CPU postgres |\n|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.0f | %.2f | %.2f | %d | %.0f | %.0f | %.0f |\n", r.System, r.Scenario, r.Store, r.Concurrency, r.OpsPerSec, r.P50ms, r.P99ms, r.Errors, r.CPUClientUs, r.CPUServerUs, r.CPUPostgresUs)
	}
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(&b, "\n- %s / %s c=%d: %s", r.System, r.Scenario, r.Concurrency, r.Note)
		}
	}
	fmt.Fprintf(&b, "\n\n## Footprint\n\n- server peak RSS (VmHWM): %.1f MiB\n- journal: %d operations (%.2f history rows each), as the levels left it:\n"+
		"  %d bytes as the runs left it (%.0f bytes/operation, dead row versions included), %d bytes after VACUUM FULL (%.0f bytes/operation)\n\n"+
		"| table (after VACUUM FULL) | rows | heap | indexes | TOAST |\n|---|--:|--:|--:|--:|\n",
		s.ServerPeakRSSMiB, s.Operations, s.EventsPerOperation, s.JournalBytes, s.BytesPerOperation, s.CompactJournalBytes, s.CompactBytesPerOperation)
	for _, r := range s.Relations {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", r.Table, r.Rows, r.Heap, r.Indexes, r.Toast)
	}
	b.WriteString("\n")
	if t := oneCallerTable(rows); t != "" {
		b.WriteString("## One caller and a few\n\nRaw SQL's three statements and the fused SDK path (Register with claim, MarkSucceeded) at a few callers, medians of the rounds.\n\n" + t + "\n")
	}
	if rounds > 0 {
		fmt.Fprintf(&b, "## Targets (the hot path)\n\n%s. Each figure is computed in each of the %d rounds from that round's rows (the two sides of a ratio measured "+
			"a second or two apart, so that the machine's drift cancels); the verdict is on the median, and the spread is (max − min) / median of the "+
			"per-round figures, marked unstable above %.0f%%. Rows measured once (River; the purge, when it runs a single pass) enter every round as they are. "+
			"A throughput ratio is also estimated from both sides' CPU per operation (client + server + PostgreSQL; CPU-normalised): "+
			"the two agree when both are CPU-bound on a quiet machine, and the CPU figure moves much less when another tenant takes CPU. ",
			tally(s.HotPath), rounds, bench.UnstableSpread*100)
	} else {
		fmt.Fprintf(&b, "## Targets (the hot path)\n\n%s. ", tally(s.HotPath))
	}
	fmt.Fprintf(&b, "Computed from the rows by `bench.HotPathTargets` ([`targets.go`](targets.go)); "+
		"each figure is compared as printed (ratios to hundredths, CPU to whole µs). Server CPU is the opjournal server process's "+
		"CPU time from `/proc` over the point, warm-up included, per operation it completed. A SKIP is a figure whose scenario did not run; "+
		"`--require-targets` makes any MISS exit with status 3.\n\n")
	b.WriteString(bench.TargetsMarkdown(s.HotPath))
	b.WriteString("\n## Other targets\n\n| target | measured | want | verdict | detail |\n|---|--:|---|---|---|\n")
	for _, t := range s.Targets {
		fmt.Fprintf(&b, "| %s | %.2f | %s | %s | %s |\n", t.Name, t.Measured, t.Want, verdict(t), t.Detail)
	}
	b.WriteString(scenarioDoc)
	return b.String()
}

const scenarioDoc = `
## Scenarios

- **raw-sql full-cycle**: the protocol's three statements per operation with pgx, each its own commit
  (insert pending; conditional claim UPDATE checked for one row; succeeded UPDATE), no history rows.
- **opjournal full-cycle-grpc**: Register → Claim → MarkSucceeded through the real server (generated gRPC client).
- **opjournal fused-grpc**: Register with claim → MarkSucceeded (two calls, two commits).
- **opjournal fused-rest**: the same over the REST mirror.
- **opjournal replay-grpc**: Register of a key that already succeeded (the stored result comes back).
- **grpc noop-health-check**: a gRPC health check on the same connection, which does no work: the ceiling of any RPC here.
- **opjournal full-cycle-grpc, fused-grpc (sqlite)**: the same through a second server on a fresh SQLite file;
  its server CPU includes SQLite's, which runs in the server process.
- **opjournal contention-same-key**: rounds of 64 callers registering-with-claim one new key at once;
  samples are each caller's time to its answer; every round must have exactly one winner.
- **opjournal fused-grpc-at-N, fused-grpc-at-0**: fused-grpc through two servers of their own, on fresh schemas, one after bulk-loading
  N succeeded operations (one history row each), VACUUM ANALYZE and a checkpoint, the other on an empty journal, in alternating rounds.
- **dbos workflow-1-step**: DBOS Transact Go, a workflow whose ID is the key, with one step (the side effect), awaited.
- **river unique-job**: River, a job unique by args inserted and awaited until completed by a worker (the side effect).
`
