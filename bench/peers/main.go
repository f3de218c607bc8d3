// Command opjournal-bench-peers measures opjournal's peers for
// opjournal-bench: DBOS Transact Go (a workflow whose ID is the operation
// key, with one step) and River (a job unique by args, worked to
// completion), each doing the same trivial side effect. It lives in its own
// module so opjournal itself never depends on either. It prints its rows as
// a JSON array on stdout and its progress on stderr; opjournal-bench runs it.
//
//	opjournal-bench-peers --database-url URL --schema-prefix bench_x [--concurrency 1,8,32,64] [--warmup 2s] [--duration 10s]
//
// Each peer gets a fresh schema (<prefix>_dbos, <prefix>_river), dropped at the end.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/opjournal/opjournal/internal/bench"
)

type config struct {
	databaseURL, prefix string
	levels              []int
	warmup, duration    time.Duration
	poolMax             int
}

func main() {
	var c config
	var levels string
	flag.StringVar(&c.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server")
	flag.StringVar(&c.prefix, "schema-prefix", "bench_peers", "prefix of the schemas created (and dropped) for each peer")
	flag.StringVar(&levels, "concurrency", "1,8,32,64", "concurrency levels")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up before each point")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per point")
	flag.IntVar(&c.poolMax, "pool-max-conns", 16, "pgx pool size of each peer")
	flag.Parse()
	for _, s := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bad concurrency %q\n", s)
			os.Exit(2)
		}
		c.levels = append(c.levels, n)
	}
	ctx := context.Background()
	var rows []bench.Row
	for _, p := range []struct {
		system, scenario string
		run              func(context.Context, config, string) ([]bench.Row, error)
	}{{"dbos", "workflow-1-step", runDBOS}, {"river", "unique-job", runRiver}} {
		schema := c.prefix + "_" + p.system
		got, err := withSchema(ctx, c.databaseURL, schema, func() ([]bench.Row, error) { return p.run(ctx, c, schema) })
		for i := range got {
			got[i].System, got[i].Scenario, got[i].Store = p.system, p.scenario, "postgres"
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "  %s: %v\n", p.system, err)
			got = append(got, bench.Row{System: p.system, Scenario: p.scenario, Store: "postgres", Note: "failed: " + err.Error()})
		}
		rows = append(rows, got...)
	}
	_ = json.NewEncoder(os.Stdout).Encode(rows)
}

// withSchema creates schema, runs f, and drops the schema.
func withSchema(ctx context.Context, base, schema string, f func() ([]bench.Row, error)) ([]bench.Row, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
		return nil, err
	}
	defer conn.Exec(context.Background(), "DROP SCHEMA "+id+" CASCADE") //nolint:errcheck // best effort
	return f()
}

// measure runs op at every level and prints progress.
func measure(ctx context.Context, c config, system, scenario string, op bench.Op) []bench.Row {
	var rows []bench.Row
	for _, l := range c.levels {
		r := bench.RunWithCPU(ctx, bench.Load{Concurrency: l, Warmup: c.warmup, Duration: c.duration}, 0, op)
		fmt.Fprintf(os.Stderr, "  %-10s %-26s c=%-3d %8.0f ops/s  p50 %7.2f ms  p99 %7.2f ms  errors %d %s\n",
			system, scenario, l, r.OpsPerSec, r.P50ms, r.P99ms, r.Errors, r.Note)
		rows = append(rows, r)
	}
	return rows
}

// effects counts the trivial side effect both peers perform.
var effects atomic.Int64

func sideEffect(key string) string {
	effects.Add(1)
	return "pay_" + key
}

// runID keeps keys unique across runs on the same database.
var runID = strconv.FormatInt(time.Now().UnixNano(), 36)

func runDBOS(ctx context.Context, c config, schema string) ([]bench.Row, error) {
	u, err := withParams(c.databaseURL, map[string]string{"pool_max_conns": strconv.Itoa(c.poolMax)})
	if err != nil {
		return nil, err
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "opjournal-bench", DatabaseURL: u, DatabaseSchema: schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, fmt.Errorf("dbos: %w", err)
	}
	defer dbos.Shutdown(dctx, 10*time.Second) //nolint:errcheck // best effort at exit
	wf := func(ctx dbos.Context, key string) (string, error) {
		return dbos.RunAsStep(ctx, func(context.Context) (string, error) { return sideEffect(key), nil })
	}
	dbos.RegisterWorkflow(dctx, wf)
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("dbos launch: %w", err)
	}
	return measure(ctx, c, "dbos", "workflow-1-step", func(_ context.Context, _ int, seq int64) error {
		key := fmt.Sprintf("bench:%s:%d", runID, seq)
		h, err := dbos.RunWorkflow(dctx, wf, key, dbos.WithWorkflowID(key))
		if err != nil {
			return err
		}
		_, err = h.GetResult()
		return err
	}), nil
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

func runRiver(ctx context.Context, c config, schema string) ([]bench.Row, error) {
	u, err := withParams(c.databaseURL, map[string]string{"pool_max_conns": strconv.Itoa(c.poolMax), "search_path": schema})
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &effectWorker{})
	maxC := 1
	for _, l := range c.levels {
		maxC = max(maxC, l)
	}
	// River's lowest-latency settings: fetch as soon as a job is inserted
	// (cooldown at its 1 ms minimum), poll often as a fallback.
	client, err := river.NewClient(drv, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxC}},
		Workers:           workers,
		Schema:            schema,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, err
	}
	cs := &completions{waiting: map[int64]chan struct{}{}}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	go func() {
		for e := range events {
			cs.done(e.Job.ID)
		}
	}()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer client.Stop(context.Background()) //nolint:errcheck // best effort at exit
	rows := measure(ctx, c, "river", "unique-job", func(ctx context.Context, _ int, seq int64) error {
		res, err := client.Insert(ctx, effectArgs{Key: fmt.Sprintf("bench:%s:%d", runID, seq)}, nil)
		if err != nil {
			return err
		}
		if res.UniqueSkippedAsDuplicate {
			return fmt.Errorf("job %d skipped as duplicate", res.Job.ID)
		}
		defer cs.forget(res.Job.ID)
		select {
		case <-cs.ch(res.Job.ID):
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("job %d not completed after 30s", res.Job.ID)
		}
	})
	for i := range rows {
		rows[i].Note = strings.TrimSuffix("River's batch completer records completions every 250 ms unless 100 are waiting; "+rows[i].Note, "; ")
	}
	return rows, nil
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
