// Command scaleout measures the fused path (Register with claim, then
// MarkSucceeded: two calls, two commits) with 1, 2 and 4 journal replicas
// (separate `opjournal serve` processes) on one PostgreSQL database,
// through a real PgBouncer in transaction pooling mode and directly, with
// the load spread evenly over the replicas. For each point it reports
// operations per second, latency, and per operation: the database's
// commits (pg_stat_database.xact_commit of its own database), WAL bytes
// (pg_current_wal_lsn, cluster-wide) and the CPU of PostgreSQL's backends
// of that database, of the replicas, of PgBouncer and of the load
// generator, so that the bottleneck is measured, not guessed. It prints
// progress, then a markdown table, and writes the table with the command
// that made it to --out.
//
//	go build -o bin/ ./cmd/opjournal && (cd harness && go build -o ../bin/ ./cmd/scaleout)
//	./bin/scaleout --bin bin/opjournal --replicas 1,2,4 --concurrency 32 --out harness/bench/SCALEOUT.md
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"github.com/opjournal/opjournal/store/postgres"
)

type config struct {
	databaseURL string
	bin         string
	replicas    []int
	modes       []string
	concurrency int
	warmup      time.Duration
	duration    time.Duration
	poolMax     int
	bouncerPool int
	out         string
	rounds      int
}

func main() {
	var c config
	var replicas, modes string
	fs := flag.NewFlagSet("scaleout", flag.ExitOnError)
	fs.StringVar(&c.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"a PostgreSQL server's URL; a database scaleout_<random> is created on it for the run and dropped after")
	fs.StringVar(&c.bin, "bin", "bin/opjournal", "the opjournal binary")
	fs.StringVar(&replicas, "replicas", "1,2,4", "journal replica counts to measure")
	fs.StringVar(&modes, "modes", "pgbouncer,direct,direct-describe",
		"how the replicas reach PostgreSQL, comma-separated: pgbouncer (transaction pooling, default_query_exec_mode=cache_describe), direct (pgx's cached prepared statements), direct-describe (direct, in pgbouncer's statement mode: the cost of no prepared statements without PgBouncer's hop)")
	fs.IntVar(&c.concurrency, "concurrency", 32, "concurrent callers in all, spread evenly over the replicas")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up before each measured point")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per point")
	fs.IntVar(&c.poolMax, "pool-max-conns", 16, "pgx pool size of each replica")
	fs.IntVar(&c.bouncerPool, "pgbouncer-pool", 16, "PgBouncer's server connections for the database (default_pool_size), shared by all replicas")
	fs.IntVar(&c.rounds, "rounds", 1, "repeat the whole sweep this many times")
	fs.StringVar(&c.out, "out", "", "write the markdown table, with this command, to this file (e.g. harness/bench/SCALEOUT.md)")
	_ = fs.Parse(os.Args[1:])
	for _, f := range strings.Split(replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 16 {
			fmt.Fprintf(os.Stderr, "scaleout: --replicas: %q is not a count from 1 to 16\n", f)
			os.Exit(2)
		}
		c.replicas = append(c.replicas, n)
	}
	for _, m := range strings.Split(modes, ",") {
		if m = strings.TrimSpace(m); m != "pgbouncer" && m != "direct" && m != "direct-describe" {
			fmt.Fprintf(os.Stderr, "scaleout: --modes: %q is not pgbouncer, direct or direct-describe\n", m)
			os.Exit(2)
		}
		c.modes = append(c.modes, strings.TrimSpace(m))
	}
	if c.concurrency < 1 || c.rounds < 1 || c.duration <= 0 || c.warmup < 0 || c.poolMax < 1 || c.bouncerPool < 1 {
		fmt.Fprintln(os.Stderr, "scaleout: --concurrency, --duration, --pool-max-conns and --pgbouncer-pool must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, strings.Join(os.Args, " ")); err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(1)
	}
}

// point is one measurement.
type point struct {
	mode     string
	replicas int
	round    int
	row      bench.Row
	ops      int64   // operations completed, warm-up included (the per-op denominators)
	commits  float64 // per operation
	walBytes float64 // per operation
	// CPU in µs per operation.
	cpuPG, cpuServers, cpuBouncer, cpuClient float64
	// CPU in cores (seconds of CPU per second of wall time).
	coresPG, coresServers, coresBouncer, coresClient float64
	// coresMachine is every process's CPU on the machine (/proc/stat),
	// load the 1-minute load average at the end: other work on a shared
	// machine shows here.
	coresMachine, load float64
	// waits are the shares of the run's active backends' samples by wait
	// event ("CPU": not waiting), the largest first.
	waits string
}

func run(ctx context.Context, c config, command string) error {
	admin, err := pgx.Connect(ctx, c.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.Background())
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	db := "scaleout_" + hex.EncodeToString(rb[:])
	// A database of its own: its pg_stat_database row counts only this
	// run's commits, and its backends are this run's.
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return err
	}
	defer func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "scaleout: drop database:", err)
		}
	}()
	u, _ := url.Parse(c.databaseURL)
	u.Path = "/" + db
	direct := u.String()
	if err := postgres.Migrate(direct); err != nil {
		return err
	}
	fmt.Printf("scaleout: database %s migrated; %d callers, %s warm-up + %s per point, pool_max_conns=%d per replica\n",
		db, c.concurrency, c.warmup, c.duration, c.poolMax)

	urls := map[string]string{"direct": direct}
	du, _ := url.Parse(direct)
	dq := du.Query()
	dq.Set("default_query_exec_mode", pgbouncer.ExecMode)
	du.RawQuery = dq.Encode()
	urls["direct-describe"] = du.String()
	var b *pgbouncer.Bouncer
	if slices.Contains(c.modes, "pgbouncer") {
		dir, err := os.MkdirTemp("", "scaleout-pgbouncer-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b, err = pgbouncer.Start(ctx, pgbouncer.Options{Server: direct, Dir: dir, PoolSize: c.bouncerPool, MaxServerConns: c.bouncerPool})
		if err != nil {
			return err
		}
		defer b.Close()
		// The alias's connect_query sets search_path to public: the
		// database is the run's own.
		if urls["pgbouncer"], err = b.AddDatabase(ctx, db, "public"); err != nil {
			return err
		}
		fmt.Printf("scaleout: pgbouncer (pool_mode=transaction, %d server connections) on %s\n", c.bouncerPool, b.Addr())
	}
	// The modes take turns at each replica count (and the sweep repeats
	// --rounds times), so that a change in the machine's other load
	// falls on all of them alike rather than on one.
	var points []point
	for round := 1; round <= c.rounds; round++ {
		for _, n := range c.replicas {
			for _, mode := range c.modes {
				p, err := measure(ctx, c, admin, db, mode, urls[mode], b, n, round)
				if err != nil {
					return err
				}
				points = append(points, p)
				fmt.Printf("scaleout: %-15s %d replica(s): %s ops/s  p50 %.2f ms  p99 %.2f ms  %.2f commits/op  %.0f WAL B/op  CPU µs/op: postgres %.0f, replicas %.0f, pgbouncer %.0f, load %.0f  machine %.2f cores busy, load %.1f  waits: %s  (errors %d %s)\n",
					mode, n, fmtOps(p.row.OpsPerSec), p.row.P50ms, p.row.P99ms, p.commits, p.walBytes, p.cpuPG, p.cpuServers, p.cpuBouncer, p.cpuClient,
					p.coresMachine, p.load, p.waits, p.row.Errors, p.row.Note)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	md := table(c, points, command)
	fmt.Print("\n" + md)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Printf("scaleout: wrote %s\n", c.out)
	}
	return nil
}

var (
	payload = mustStruct(map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"})
	result  = mustStruct(map[string]any{"payment_id": "pay_1", "status": "captured"})
)

// hashKeys is OPJOURNAL_HASH_KEYS=… for every replica of the run.
var hashKeys = hashkey.EnvFor(hashkey.Random("scaleout"))

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// measure starts n replicas on dbURL, drives the fused path over them for
// one point, and stops them.
func measure(ctx context.Context, c config, admin *pgx.Conn, db, mode, dbURL string, b *pgbouncer.Bouncer, n, round int) (point, error) {
	p := point{mode: mode, replicas: n, round: round}
	q, _ := url.Parse(dbURL)
	qq := q.Query()
	qq.Set("pool_max_conns", strconv.Itoa(c.poolMax))
	q.RawQuery = qq.Encode()
	var servers []*procs.Proc
	defer func() {
		for _, s := range servers {
			_ = s.Stop(10 * time.Second)
		}
	}()
	clients := make([]pb.JournalServiceClient, n)
	for i := range n {
		// No purge: a purge pass is not part of what is measured.
		s, err := procs.Start(ctx, procs.Spec{Name: fmt.Sprintf("journal-%d", i+1), Path: c.bin, Ready: "serving",
			Env:  []string{hashKeys}, // the replicas share the request-hash key, as they must
			Args: []string{"serve", "--database-url", q.String(), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--purge-interval", "0"}},
			60*time.Second)
		if err != nil {
			return p, err
		}
		servers = append(servers, s)
		conn, err := grpc.NewClient(s.Field("grpc_addr"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return p, err
		}
		defer conn.Close()
		clients[i] = pb.NewJournalServiceClient(conn)
	}
	// Fresh keys for every point: a key of an earlier round would be a
	// replay, not a new operation.
	prefix := fmt.Sprintf("scaleout:r%d:%s:%d:", round, mode, n)
	op := func(ctx context.Context, w int, seq int64) error {
		cl := clients[w%n] // the callers spread evenly over the replicas
		key := prefix + strconv.FormatInt(seq, 10)
		r, err := cl.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload,
			Claim: &pb.ClaimOptions{WorkerId: "scaleout"}})
		if err != nil {
			return err
		}
		if !r.GetClaimed() {
			return fmt.Errorf("register+claim of %s not claimed", key)
		}
		_, err = cl.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: r.GetAttempt(), ExternalId: "pay_1", Result: result})
		return err
	}

	before, err := sample(ctx, admin, db, servers, b)
	if err != nil {
		return p, err
	}
	fmt.Printf("scaleout: %s, %d replica(s): measuring…\n", mode, n)
	wctx, stopWaits := context.WithCancel(ctx)
	waits := make(chan string, 1)
	go func() { waits <- sampleWaits(wctx, c.databaseURL, db) }()
	p.row = bench.Run(ctx, bench.Load{Concurrency: c.concurrency, Warmup: c.warmup, Duration: c.duration}, op)
	stopWaits()
	p.waits = <-waits
	after, err := sample(ctx, admin, db, servers, b)
	if err != nil {
		return p, err
	}
	p.ops = p.row.Calls
	if p.ops == 0 {
		return p, fmt.Errorf("%s, %d replica(s): no operation succeeded (%s)", mode, n, p.row.Note)
	}
	ops := float64(p.ops)
	wall := after.at.Sub(before.at).Seconds()
	p.commits = float64(after.commits-before.commits) / ops
	p.walBytes = float64(after.wal-before.wal) / ops
	per := func(a, b int64) float64 { return float64(a-b) / ops }
	cores := func(a, b int64) float64 { return float64(a-b) / 1e6 / wall }
	// Per backend: one of the previous point's replicas that was still
	// closing at the first sample is gone at the second, and one opened
	// meanwhile started from nothing.
	var pgAfter, pgBefore int64
	for pid, us := range after.backends {
		pgAfter += us
		pgBefore += before.backends[pid]
	}
	p.cpuPG, p.coresPG = per(pgAfter, pgBefore), cores(pgAfter, pgBefore)
	p.cpuServers, p.coresServers = per(after.servers, before.servers), cores(after.servers, before.servers)
	p.cpuBouncer, p.coresBouncer = per(after.bouncer, before.bouncer), cores(after.bouncer, before.bouncer)
	p.cpuClient, p.coresClient = per(after.client, before.client), cores(after.client, before.client)
	p.coresMachine = cores(after.machine, before.machine)
	p.load = loadAvg()
	return p, nil
}

// counters is one sample of the database's and the processes' counters.
type counters struct {
	at                       time.Time
	commits, wal             int64
	backends                 map[int32]int64 // CPU µs of each backend of the run's database
	servers, bouncer, client int64           // CPU µs
	machine                  int64           // every CPU's busy time, µs
}

// sample reads the counters. PostgreSQL's CPU is that of the backends
// connected to the run's database: this run's work, whatever else runs on
// the server or the machine (the WAL writer's share is not in it).
func sample(ctx context.Context, admin *pgx.Conn, db string, servers []*procs.Proc, b *pgbouncer.Bouncer) (counters, error) {
	var s counters
	s.at = time.Now()
	// pg_stat_database is refreshed when a backend reports (at most every
	// few hundred ms); pg_stat_clear_snapshot makes this read fresh.
	if _, err := admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	if err := admin.QueryRow(ctx, `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1),
		pg_current_wal_lsn() - '0/0'::pg_lsn`, db).Scan(&s.commits, &s.wal); err != nil {
		return s, err
	}
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, db)
	if err != nil {
		return s, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return s, err
	}
	s.backends = map[int32]int64{}
	for _, pid := range pids {
		s.backends[pid] = procCPU(strconv.Itoa(int(pid)))
	}
	for _, p := range servers {
		s.servers += procCPU(strconv.Itoa(p.Pid()))
	}
	if b != nil {
		s.bouncer = procCPU(strconv.Itoa(b.Pid()))
	}
	s.client = procCPU("self")
	s.machine = machineBusy()
	return s, nil
}

// machineBusy is the CPU time all processes used (/proc/stat: every
// field but idle and iowait), in µs.
func machineBusy() int64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		t, _ := strconv.ParseInt(v, 10, 64)
		busy += t
	}
	return busy * 10_000
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// sampleWaits samples, every 20 ms until ctx ends, what the run's
// active backends wait for, and returns the three largest shares.
func sampleWaits(ctx context.Context, serverURL, db string) string {
	u, _ := url.Parse(serverURL)
	u.Path = "/" + db
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return "(not sampled: " + err.Error() + ")"
	}
	defer conn.Close(context.Background())
	counts := map[string]int{}
	total := 0
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return topShares(counts, total)
		case <-t.C:
		}
		rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
			WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()`, db)
		if err != nil {
			continue
		}
		evs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			continue
		}
		for _, e := range evs {
			counts[e]++
			total++
		}
	}
}

func topShares(counts map[string]int, total int) string {
	if total == 0 {
		return "none active"
	}
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range counts {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.n, a.n) })
	var parts []string
	for i, e := range all {
		if i == 3 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.k, 100*float64(e.n)/float64(total)))
	}
	return strings.Join(parts, ", ")
}

// procCPU returns utime+stime of /proc/<pid> in µs; 0 if it cannot be
// read.
func procCPU(pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:13] {
		t, _ := strconv.ParseInt(v, 10, 64)
		ticks += t
	}
	return ticks * 10_000 // USER_HZ = 100
}

func fmtOps(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// table renders the points as markdown, with the machine and the command.
func table(c config, points []point, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scale-out: the fused path with 1, 2 and 4 journal replicas\n\n")
	fmt.Fprintf(&b, "Produced by `go build -o bin/ ./cmd/opjournal && (cd harness && go build -o ../bin/ ./cmd/scaleout) && %s` on %s (%d cores, %s), %s.\n\n",
		command, hostname(), runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "%d callers in all, spread evenly over the replicas (separate `opjournal serve` processes, pool_max_conns=%d each) on one PostgreSQL database; "+
		"each operation is Register with claim, then MarkSucceeded (two calls, two commits); %s warm-up, %s measured per point. "+
		"Paths: **pgbouncer**, all replicas through one PgBouncer 1.18 (pool_mode=transaction, %d server connections, default_query_exec_mode=cache_describe); "+
		"**direct**, each replica's own pool straight to PostgreSQL with pgx's cached prepared statements; **direct-describe**, direct in PgBouncer's statement mode "+
		"(every execution parsed and planned again), which separates the cost of going without prepared statements from that of PgBouncer's hop.\n\n",
		c.concurrency, c.poolMax, c.warmup, c.duration, c.bouncerPool)
	b.WriteString("| round | path | replicas | ops/s | p50 ms | p99 ms | commits/op | WAL B/op | CPU µs/op: postgres backends | replicas | pgbouncer | load generator | cores busy: postgres / replicas / pgbouncer / load / whole machine | load avg | the backends' time (sampled) | errors |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f / %.2f / %.2f / %.2f / %.2f | %.1f | %s | %d |\n",
			p.round, p.mode, p.replicas, fmtOps(p.row.OpsPerSec), p.row.P50ms, p.row.P99ms, p.commits, p.walBytes,
			p.cpuPG, p.cpuServers, p.cpuBouncer, p.cpuClient,
			p.coresPG, p.coresServers, p.coresBouncer, p.coresClient, p.coresMachine, p.load, p.waits, p.row.Errors)
	}
	b.WriteString("\nPer-operation figures divide by every operation completed, warm-up included (the counters run through it). " +
		"WAL is the server's (pg_current_wal_lsn), so anything else writing on the server adds to it; commits are the run's own database's " +
		"(pg_stat_database.xact_commit). \"Cores busy\" is CPU seconds per second of the point.\n")
	return b.String()
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "this machine"
	}
	return h
}
