// Command opjournal-bench-peers measures opjournal's peers for
// opjournal-bench: DBOS Transact Go (a workflow whose ID is the operation
// key, with one step) and River (a job unique by args, worked to
// completion), each doing the same trivial side effect. It lives in its own
// module so opjournal itself never depends on either.
//
// It sets both peers up once, then measures on request, so that
// opjournal-bench can put a peer's points in the same alternating rounds
// as its own: each line on stdin asks for one point,
//
//	<system> <concurrency> <warm-up> <duration>     e.g. "dbos 32 100ms 300ms"
//
// (system dbos or river), and each answer is that point's row, one JSON
// object per line on stdout. Progress goes to stderr. At the end of stdin
// it stops both peers and drops their schemas.
//
//	opjournal-bench-peers --database-url URL --schema-prefix bench_x [--max-concurrency 64]
//
// Each peer gets a fresh schema (<prefix>_dbos, <prefix>_river).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/opjournal/opjournal/internal/testkit/bench"
)

type config struct {
	databaseURL, prefix string
	maxC                int // the most callers a point may ask for (River's workers)
	poolMax             int
}

// peer is one set-up peer: op makes a point's operation, whose keys are
// unique to the point (bench.Run numbers each point's calls from 1, and a
// key seen before would be a peer's replay, not its work).
type peer struct {
	scenario string
	note     string
	op       func(point int64) bench.Op
}

func main() {
	var c config
	flag.StringVar(&c.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server")
	flag.StringVar(&c.prefix, "schema-prefix", "bench_peers", "prefix of the schemas created (and dropped) for each peer")
	flag.IntVar(&c.maxC, "max-concurrency", 64, "the most callers a point may ask for")
	flag.IntVar(&c.poolMax, "pool-max-conns", 16, "pgx pool size of each peer")
	flag.Parse()
	if c.maxC < 1 {
		fmt.Fprintln(os.Stderr, "--max-concurrency: want at least 1")
		os.Exit(2)
	}
	if err := serve(context.Background(), c, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "opjournal-bench-peers:", err)
		os.Exit(1)
	}
}

// serve sets up the peers and answers the requests on in until its end.
// A peer that cannot be set up answers each request with a row whose Note
// says why, so that the bench reports it instead of stopping.
func serve(ctx context.Context, c config, in *os.File, out *os.File) error {
	peers := map[string]*peer{}
	failed := map[string]error{}
	for _, p := range []struct {
		system string
		setup  func(context.Context, config, string) (*peer, func(), error)
	}{{"dbos", setupDBOS}, {"river", setupRiver}} {
		schema := c.prefix + "_" + p.system
		drop, err := createSchema(ctx, c.databaseURL, schema)
		if err != nil {
			return err
		}
		defer drop()
		pr, stop, err := p.setup(ctx, c, schema)
		if err != nil {
			fmt.Fprintf(os.Stderr, "  %s: %v\n", p.system, err)
			failed[p.system] = err
			continue
		}
		defer stop()
		peers[p.system] = pr
	}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	var points int64
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		l, err := parseRequest(f, c.maxC)
		if err != nil {
			return err
		}
		system := f[0]
		var r bench.Row
		switch p, ok := peers[system]; {
		case ok:
			points++
			r = bench.RunWithCPU(ctx, l, 0, p.op(points))
			r.Scenario = p.scenario
			if p.note != "" {
				r.Note = strings.TrimSuffix(p.note+"; "+r.Note, "; ")
			}
			fmt.Fprintf(os.Stderr, "  %-10s %-26s c=%-3d %8.0f ops/s  p50 %7.2f ms  p99 %7.2f ms  errors %d %s\n",
				system, p.scenario, l.Concurrency, r.OpsPerSec, r.P50ms, r.P99ms, r.Errors, r.Note)
		case failed[system] != nil:
			r = bench.Row{Concurrency: l.Concurrency, Note: "failed: " + failed[system].Error()}
		default:
			return fmt.Errorf("unknown peer %q (want dbos or river)", system)
		}
		r.System, r.Store = system, "postgres"
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

// parseRequest reads "<system> <concurrency> <warm-up> <duration>".
func parseRequest(f []string, maxC int) (bench.Load, error) {
	if len(f) != 4 {
		return bench.Load{}, fmt.Errorf("request %q: want <system> <concurrency> <warm-up> <duration>", strings.Join(f, " "))
	}
	cc, err := strconv.Atoi(f[1])
	if err != nil || cc < 1 || cc > maxC {
		return bench.Load{}, fmt.Errorf("request %q: concurrency must be 1..%d", strings.Join(f, " "), maxC)
	}
	w, errW := time.ParseDuration(f[2])
	d, errD := time.ParseDuration(f[3])
	if err := errors.Join(errW, errD); err != nil || w < 0 || d <= 0 {
		return bench.Load{}, fmt.Errorf("request %q: bad warm-up or duration", strings.Join(f, " "))
	}
	return bench.Load{Concurrency: cc, Warmup: w, Duration: d}, nil
}

// createSchema creates schema and returns what drops it.
func createSchema(ctx context.Context, base, schema string) (func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, err
	}
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+id+" CASCADE") // best effort
		conn.Close(context.Background())
	}, nil
}

// performed holds the keys whose side effect ran and that no caller has
// checked yet (checkPerformed).
var performed sync.Map

// sideEffect is the trivial side effect both peers perform.
func sideEffect(key string) string {
	performed.Store(key, true)
	return "pay_" + key
}

// checkPerformed fails a call whose side effect did not run: a peer that
// answered with the record of an earlier call with the same key (a
// finished workflow, a duplicate job) measured a replay, not the work.
func checkPerformed(key string) error {
	if _, ran := performed.LoadAndDelete(key); !ran {
		return fmt.Errorf("%s: answered without running the side effect (a replay of an earlier call's key)", key)
	}
	return nil
}

// runID keeps keys unique across runs on the same database.
var runID = strconv.FormatInt(time.Now().UnixNano(), 36)

// setupDBOS launches DBOS on schema with one workflow of one step.
func setupDBOS(ctx context.Context, c config, schema string) (*peer, func(), error) {
	u, err := withParams(c.databaseURL, map[string]string{"pool_max_conns": strconv.Itoa(c.poolMax)})
	if err != nil {
		return nil, nil, err
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "opjournal-bench", DatabaseURL: u, DatabaseSchema: schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, nil, fmt.Errorf("dbos: %w", err)
	}
	stop := func() { dbos.Shutdown(dctx, 10*time.Second) }
	wf := func(ctx dbos.Context, key string) (string, error) {
		return dbos.RunAsStep(ctx, func(context.Context) (string, error) { return sideEffect(key), nil })
	}
	dbos.RegisterWorkflow(dctx, wf)
	if err := dbos.Launch(dctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("dbos launch: %w", err)
	}
	return &peer{scenario: "workflow-1-step", op: func(point int64) bench.Op {
		return func(_ context.Context, _ int, seq int64) error {
			key := fmt.Sprintf("bench:%s:%d:%d", runID, point, seq)
			h, err := dbos.RunWorkflow(dctx, wf, key, dbos.WithWorkflowID(key))
			if err != nil {
				return err
			}
			if _, err = h.GetResult(); err != nil {
				return err
			}
			return checkPerformed(key)
		}
	}}, stop, nil
}

// effectArgs is River's job: unique by its args (the operation key).
type effectArgs struct {
	Key string `json:"key"`
}

func (effectArgs) Kind() string { return "bench_effect" }

func (effectArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type effectWorker struct {
	river.WorkerDefaults[effectArgs]
}

func (effectWorker) Work(_ context.Context, j *river.Job[effectArgs]) error {
	sideEffect(j.Args.Key)
	return nil
}

// completions hands River's "job completed" events to the callers waiting
// for them, including events that arrive before the caller starts waiting.
type completions struct {
	mu      sync.Mutex
	waiting map[int64]chan struct{}
}

func (cs *completions) ch(id int64) chan struct{} {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ch, ok := cs.waiting[id]
	if !ok {
		ch = make(chan struct{})
		cs.waiting[id] = ch
	}
	return ch
}

func (cs *completions) done(id int64) { close(cs.ch(id)) }

func (cs *completions) forget(id int64) {
	cs.mu.Lock()
	delete(cs.waiting, id)
	cs.mu.Unlock()
}

// setupRiver migrates River's tables into schema and starts a client with
// one worker per caller the bench may ask for.
func setupRiver(ctx context.Context, c config, schema string) (_ *peer, _ func(), err error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	u, err := withParams(c.databaseURL, map[string]string{"pool_max_conns": strconv.Itoa(c.poolMax), "search_path": schema})
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, pool.Close)
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return nil, nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &effectWorker{})
	// River's lowest-latency settings: fetch as soon as a job is inserted
	// (cooldown at its 1 ms minimum), poll often as a fallback.
	client, err := river.NewClient(drv, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.maxC}},
		Workers:           workers,
		Schema:            schema,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, nil, err
	}
	cs := &completions{waiting: map[int64]chan struct{}{}}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	stops = append(stops, cancel)
	go func() {
		for e := range events {
			cs.done(e.Job.ID)
		}
	}()
	if err := client.Start(ctx); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = client.Stop(context.Background()) })
	return &peer{scenario: "unique-job", note: "River's batch completer records completions every 250 ms unless 100 are waiting", op: func(point int64) bench.Op {
		return func(ctx context.Context, _ int, seq int64) error {
			key := fmt.Sprintf("bench:%s:%d:%d", runID, point, seq)
			res, err := client.Insert(ctx, effectArgs{Key: key}, nil)
			if err != nil {
				return err
			}
			if res.UniqueSkippedAsDuplicate {
				return fmt.Errorf("job %d skipped as duplicate", res.Job.ID)
			}
			defer cs.forget(res.Job.ID)
			select {
			case <-cs.ch(res.Job.ID):
				return checkPerformed(key)
			case <-time.After(30 * time.Second):
				return fmt.Errorf("job %d not completed after 30s", res.Job.ID)
			}
		}
	}}, stop, nil
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
