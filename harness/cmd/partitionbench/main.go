// Command partitionbench measures the history's weekly partitions
// (store/postgres/partitions.go) on a large journal: it fills a schema
// with --operations settled operations (two history rows each, the shape
// a fused call leaves) spread over --weeks past weeks, by generate_series
// rather than RPCs, then measures
//
//   - table and index sizes;
//   - the hot path (Register, Claim, MarkSucceeded through the store, at
//     --concurrency callers) on the empty schema and on the full one;
//   - purging one week's operations with row deletes (the oldest week,
//     which one pending operation pins) against purging the next week's
//     by leaving its history for the partition's drop: time and WAL of
//     the purge, of the maintenance (checks and drop), and of the VACUUM
//     that row deletes leave behind.
//
// WAL is measured as the server's WAL position before and after, so run it
// on a server nobody else writes to. It prints progress as it goes and
// writes a Markdown report to --out.
//
//	cd harness && go run ./cmd/partitionbench --database-url postgres://postgres@127.0.0.1:55433/partbench --out bench/PARTITIONS.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
)

const week = 7 * 24 * time.Hour

type config struct {
	databaseURL, schema, out string
	operations, weeks        int
	tenants, concurrency     int
	batch                    int
	retention, duration      time.Duration
}

func main() {
	var c config
	fs := flag.NewFlagSet("partitionbench", flag.ExitOnError)
	fs.StringVar(&c.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (WAL figures are the whole server's: use one nobody else writes to)")
	fs.StringVar(&c.schema, "schema", "partbench", "schema to create (an existing one of that name is dropped)")
	fs.StringVar(&c.out, "out", "", "write the Markdown report here (default: stdout only)")
	fs.IntVar(&c.operations, "operations", 10_000_000, "settled operations to load")
	fs.IntVar(&c.weeks, "weeks", 10, "past weeks to spread them over (at least 5)")
	fs.IntVar(&c.tenants, "tenants", 100, "tenants to spread them over")
	fs.IntVar(&c.concurrency, "concurrency", 16, "hot-path callers")
	fs.IntVar(&c.batch, "batch", 1000, "operations per purge statement")
	fs.DurationVar(&c.retention, "retention", 720*time.Hour, "the action's retention")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "hot-path measuring window (after 2 s of warm-up)")
	_ = fs.Parse(os.Args[1:])
	if c.weeks < 5 || c.operations < c.weeks || c.tenants < 1 || c.concurrency < 1 || c.batch < 1 || c.retention <= 0 || c.duration <= 0 {
		fmt.Fprintln(os.Stderr, "partitionbench: --weeks must be at least 5, --operations at least --weeks, and the other numbers positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "partitionbench:", err)
		os.Exit(1)
	}
}

// report collects the Markdown and echoes progress.
type report struct{ md strings.Builder }

func (r *report) progress(format string, args ...any) {
	fmt.Printf("%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (r *report) line(format string, args ...any) { fmt.Fprintf(&r.md, format+"\n", args...) }

func monday(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

func withSchema(raw, schema string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func run(ctx context.Context, c config) error {
	r := &report{}
	admin, err := pgx.Connect(ctx, c.databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.Background())
	schema := pgx.Identifier{c.schema}.Sanitize()
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	dbURL, err := withSchema(c.databaseURL, c.schema)
	if err != nil {
		return err
	}
	s, err := postgres.Open(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer s.Close()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	var version, settings string
	_ = pool.QueryRow(ctx, `SELECT version(), format('shared_buffers=%s max_wal_size=%s wal_compression=%s full_page_writes=%s',
		current_setting('shared_buffers'), current_setting('max_wal_size'), current_setting('wal_compression'), current_setting('full_page_writes'))`).Scan(&version, &settings)
	r.line("# The history partitioned by week, measured at %s operations", count(c.operations))
	r.line("")
	r.line("Produced by `cd harness && go run ./cmd/partitionbench %s` on %s (%d cores), %s; %s; %s.",
		strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), strings.SplitN(version, " on ", 2)[0], settings, "autovacuum off for the bench's tables (VACUUM is run and measured explicitly)")
	r.line("")
	r.line("Load average when it started: %s (other work shared the machine's cores; the hot-path figures move with it).", loadavg())
	r.line("")

	r.progress("hot path on the empty journal (%d callers, %v)", c.concurrency, c.duration)
	empty, err := hotPath(ctx, s, c, "empty")
	if err != nil {
		return err
	}

	w0 := monday(time.Now()).Add(-time.Duration(c.weeks) * week)
	if err := fill(ctx, r, s, pool, c, w0); err != nil {
		return err
	}
	sizes, err := sizesOf(ctx, pool)
	if err != nil {
		return err
	}
	r.progress("hot path on the full journal")
	full, err := hotPath(ctx, s, c, "full")
	if err != nil {
		return err
	}

	r.line("## Hot path")
	r.line("")
	r.line("%d callers through the store (batched, as configured by default), each repeating Register, Claim, MarkSucceeded on a new key for %v after 2 s of warm-up. The full journal's new operations go into the current week's partition.", c.concurrency, c.duration)
	r.line("")
	r.line("| journal | cycles/s | Register p50 / p99 ms | Claim p50 / p99 ms | MarkSucceeded p50 / p99 ms |")
	r.line("|---|---:|---:|---:|---:|")
	for _, h := range []hot{empty, full} {
		r.line("| %s | %.0f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |", h.label, h.perSec,
			ms(h.p50[0]), ms(h.p99[0]), ms(h.p50[1]), ms(h.p99[1]), ms(h.p50[2]), ms(h.p99[2]))
	}
	r.line("")
	r.line("## Sizes after the load")
	r.line("")
	r.line("| relation | rows | heap | indexes |")
	r.line("|---|---:|---:|---:|")
	for _, z := range sizes {
		r.line("| %s | %s | %s | %s |", z.name, count(int(z.rows)), mib(z.heap), mib(z.index))
	}
	r.line("")

	if err := purges(ctx, r, s, pool, c, w0); err != nil {
		return err
	}
	r.line("Load average when it ended: %s.", loadavg())
	fmt.Println()
	fmt.Print(r.md.String())
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(r.md.String()), 0o644); err != nil {
			return err
		}
		r.progress("wrote %s", c.out)
	}
	return nil
}

// fill loads the operations week by week: the past weeks' partitions are
// made by the store itself (EnsurePartitions under a clock set to each
// week), then each week's operations and their history by
// generate_series, then one pending operation (a pin) in each of
// pinnedWeeks.
func fill(ctx context.Context, r *report, s *postgres.Store, pool *pgxpool.Pool, c config, w0 time.Time) error {
	for k := range c.weeks {
		at := w0.Add(time.Duration(k) * week)
		s.SetClock(func() time.Time { return at })
		if _, err := s.EnsurePartitions(ctx); err != nil {
			return err
		}
	}
	s.SetClock(nil)
	parts, err := s.Partitions(ctx)
	if err != nil {
		return err
	}
	// Measured by hand below: an autovacuum in the middle of a purge would
	// add its WAL to the purge's.
	for _, t := range append([]string{"operations", "operation_events_default"}, names(parts)...) {
		if _, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{t}.Sanitize()+` SET (autovacuum_enabled = off)`); err != nil {
			return err
		}
	}
	// Loading into tables without their indexes and building them after
	// is several times faster than maintaining them row by row; the
	// definitions are read back from the catalog, so they are the
	// migrations' own.
	start := time.Now()
	rebuild, err := dropIndexes(ctx, pool)
	if err != nil {
		return err
	}
	per := c.operations / c.weeks
	loaded := 0
	for k := range c.weeks {
		n := per
		if k == c.weeks-1 {
			n = c.operations - per*(c.weeks-1)
		}
		from := w0.Add(time.Duration(k) * week)
		// Operation g of the week is created at from + g/n of the week and
		// settled a second later; keys and tenants as a real journal has
		// them: the tenant first, then a key.
		args := []any{n, fmt.Sprintf("w%02d-", k), from, week.Seconds(), c.tenants}
		for _, q := range []string{
			`INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, prev_status,
				attempt_count, lease_owner, external_id, result, created_at, updated_at, attempt_started_at, first_attempt_at)
			 SELECT 't' || (g % $5), $2 || g, 'create_payment', md5(g::text) || md5($2 || g),
				'{"amount_minor":490000,"currency":"RUB","order_id":"817"}', 'succeeded', 'in_progress',
				1, 'bench', 'pay_' || g, '{"payment_id":"pay_1","status":"captured"}', t + interval '1 second', t + interval '1 second', t, t
			 FROM generate_series(1, $1::int) g, LATERAL (SELECT $3::timestamptz + make_interval(secs => $4::float8 * (g - 1) / $1) AS t) x`,
			`INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, reason)
			 SELECT 't' || (g % $5), $2 || g, $3::timestamptz + make_interval(secs => $4::float8 * (g - 1) / $1), NULL, 'in_progress', 1, 'bench', 'registered and claimed'
			 FROM generate_series(1, $1::int) g`,
			`INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id)
			 SELECT 't' || (g % $5), $2 || g, $3::timestamptz + make_interval(secs => $4::float8 * (g - 1) / $1 + 1), 'in_progress', 'succeeded', 1, 'bench', 'effect confirmed', 'pay_' || g
			 FROM generate_series(1, $1::int) g`,
		} {
			if _, err := pool.Exec(ctx, q, args...); err != nil {
				return fmt.Errorf("load week %d: %w", k, err)
			}
		}
		loaded += n
		el := time.Since(start)
		r.progress("loaded week %d/%d: %s operations, %s history rows, %.0f operations/s, %v", k+1, c.weeks, count(loaded), count(2*loaded),
			float64(loaded)/el.Seconds(), el.Round(time.Second))
	}
	for _, k := range pinnedWeeks {
		key, at := fmt.Sprintf("pin-w%02d", k), w0.Add(time.Duration(k)*week+time.Hour)
		if _, err := pool.Exec(ctx, `INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, created_at, updated_at)
			VALUES ('t0', $1, 'create_payment', 'h', '{}', 'pending', $2, $2)`, key, at); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, reason)
			VALUES ('t0', $1, $2, NULL, 'pending', 0, 'bench', 'registered')`, key, at); err != nil {
			return err
		}
	}
	r.progress("rebuilding the indexes")
	tIdx := time.Now()
	if err := rebuild(ctx); err != nil {
		return err
	}
	r.progress("  indexes built in %v", time.Since(tIdx).Round(time.Second))
	r.progress("VACUUM ANALYZE (the visibility map makes the partition checks index-only)")
	t0 := time.Now()
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE operations`); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE operation_events`); err != nil {
		return err
	}
	r.progress("loaded in %v, vacuumed in %v", time.Since(start).Round(time.Second), time.Since(t0).Round(time.Second))
	r.line("## Load")
	r.line("")
	r.line("%s operations of `create_payment` (terminal, succeeded), two history rows each, %d tenants, spread evenly over %d weeks from %s (one partition a week), loaded by generate_series in %v, VACUUM ANALYZE in %v. One pending operation in each of weeks 0 and 3 pins it.",
		count(c.operations), c.tenants, c.weeks, w0.Format("2006-01-02"), t0.Sub(start).Round(time.Second), time.Since(t0).Round(time.Second))
	r.line("")
	return nil
}

// dropIndexes drops the indexes and primary keys of operations and
// operation_events and returns what builds them again.
func dropIndexes(ctx context.Context, pool *pgxpool.Pool) (func(context.Context) error, error) {
	rows, err := pool.Query(ctx, `
		SELECT 'ALTER TABLE ' || quote_ident(t.relname) || ' DROP CONSTRAINT ' || quote_ident(c.conname),
		       'ALTER TABLE ' || quote_ident(t.relname) || ' ADD CONSTRAINT ' || quote_ident(c.conname) || ' ' || pg_get_constraintdef(c.oid), 0
		FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
		WHERE c.contype = 'p' AND t.relname IN ('operations', 'operation_events') AND t.relnamespace = current_schema()::regnamespace
		UNION ALL
		SELECT 'DROP INDEX ' || quote_ident(i.relname), pg_get_indexdef(i.oid), 1
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		WHERE NOT x.indisprimary AND t.relname IN ('operations', 'operation_events') AND t.relnamespace = current_schema()::regnamespace
		ORDER BY 3`)
	if err != nil {
		return nil, err
	}
	type def struct {
		Drop, Create string
		Order        int
	}
	defs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[def])
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		if _, err := pool.Exec(ctx, d.Drop); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Drop, err)
		}
	}
	return func(ctx context.Context) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '1GB'`); err != nil {
			return err
		}
		for _, d := range defs {
			if _, err := conn.Exec(ctx, d.Create); err != nil {
				return fmt.Errorf("%s: %w", d.Create, err)
			}
		}
		return nil
	}, nil
}

func names(parts []postgres.EventPartition) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p.Name)
	}
	return out
}

type size struct {
	name              string
	rows, heap, index int64
}

// sizesOf reads the operations table, the history (all partitions) and
// its two largest partitions.
func sizesOf(ctx context.Context, pool *pgxpool.Pool) ([]size, error) {
	rows, err := pool.Query(ctx, `
		SELECT 'operations', (SELECT count(*) FROM operations), pg_table_size('operations'), pg_indexes_size('operations')
		UNION ALL
		SELECT 'operation_events (' || count(*) || ' partitions)', (SELECT count(*) FROM operation_events), sum(pg_table_size(inhrelid)), sum(pg_indexes_size(inhrelid))
		FROM pg_inherits WHERE inhparent = 'operation_events'::regclass
		UNION ALL
		(SELECT 'largest partition: ' || c.relname, c.reltuples::bigint, pg_table_size(c.oid), pg_indexes_size(c.oid)
		 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE i.inhparent = 'operation_events'::regclass ORDER BY pg_table_size(c.oid) DESC LIMIT 1)`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (size, error) {
		var z size
		err := r.Scan(&z.name, &z.rows, &z.heap, &z.index)
		return z, err
	})
}

type hot struct {
	label    string
	perSec   float64
	p50, p99 [3]time.Duration
}

// hotPath runs c.concurrency callers through Register, Claim and
// MarkSucceeded on new keys, and times each call.
func hotPath(ctx context.Context, s *postgres.Store, c config, label string) (hot, error) {
	const warmup = 2 * time.Second
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+c.duration)
	lat := make([][3][]time.Duration, c.concurrency)
	var cycles atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	payload := []byte(`{"amount_minor":490000,"currency":"RUB","order_id":"817"}`)
	for w := range c.concurrency {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && time.Now().Before(until); i++ {
				key := fmt.Sprintf("hot-%s-%d-%d", label, w, i)
				tenant := fmt.Sprintf("t%d", (w*7919+i)%c.tenants)
				var d [3]time.Duration
				t0 := time.Now()
				_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "create_payment", RequestHash: "h", Payload: payload})
				t1 := time.Now()
				d[0] = t1.Sub(t0)
				if err == nil {
					_, err = s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdClaim, Key: key, WorkerID: "bench", LeaseSeconds: 30})
				}
				t2 := time.Now()
				d[1] = t2.Sub(t1)
				if err == nil {
					_, err = s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: 1, ExternalID: "pay_" + key})
				}
				d[2] = time.Since(t2)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				if t0.After(from) {
					for k := range d {
						lat[w][k] = append(lat[w][k], d[k])
					}
					cycles.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return hot{}, fmt.Errorf("hot path (%s): %w", label, firstErr)
	}
	h := hot{label: label, perSec: float64(cycles.Load()) / c.duration.Seconds()}
	for k := range 3 {
		var all []time.Duration
		for w := range lat {
			all = append(all, lat[w][k]...)
		}
		h.p50[k], h.p99[k] = bench.Percentile(all, 50), bench.Percentile(all, 99)
	}
	fmt.Printf("           %s: %.0f cycles/s; p50/p99 ms register %.2f/%.2f claim %.2f/%.2f mark %.2f/%.2f\n", label, h.perSec,
		ms(h.p50[0]), ms(h.p99[0]), ms(h.p50[1]), ms(h.p99[1]), ms(h.p50[2]), ms(h.p99[2]))
	return h, nil
}

// measured is one step's time and WAL.
type measured struct {
	took time.Duration
	wal  int64
}

// measure runs fn after a CHECKPOINT (so each step pays its own full-page
// images, as the first change of a page after a checkpoint does) and
// returns its time and the WAL written meanwhile.
func measure(ctx context.Context, pool *pgxpool.Pool, fn func() error) (measured, error) {
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return measured{}, err
	}
	var lsn0 string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
		return measured{}, err
	}
	t0 := time.Now()
	if err := fn(); err != nil {
		return measured{}, err
	}
	took := time.Since(t0)
	var wal int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, lsn0).Scan(&wal); err != nil {
		return measured{}, err
	}
	return measured{took, wal}, nil
}

// pinnedWeeks hold a pending operation each: their partitions are purged
// row by row. Weeks 0-3 are purged in order row, drop, drop, row, so that
// whatever the order favours (caches warming, the machine's load) falls on
// both ways.
var pinnedWeeks = []int{0, 3}

// weekRun is one week's purge, measured.
type weekRun struct {
	week                     int
	pinned                   bool
	before, purge, drop, vac measured
	res                      store.PurgeResult
	droppedRows              int64
}

// purges measures the two ways one week's operations go, twice each.
func purges(ctx context.Context, r *report, s *postgres.Store, pool *pgxpool.Pool, c config, w0 time.Time) error {
	purgeAll := func(res *store.PurgeResult) func() error {
		return func() error {
			start := time.Now()
			last := start
			for {
				b, err := s.Purge(ctx, store.PurgeParams{Action: "create_payment", Retention: c.retention, Limit: c.batch})
				if err != nil {
					return err
				}
				res.Operations += b.Operations
				res.Events += b.Events
				if time.Since(last) > 10*time.Second {
					last = time.Now()
					r.progress("  purged %s operations, %.0f/s", count(int(res.Operations)), float64(res.Operations)/time.Since(start).Seconds())
				}
				if b.Operations < int64(c.batch) {
					return nil
				}
			}
		}
	}
	var rep postgres.PartitionReport
	maintain := func() error {
		var err error
		rep, err = s.MaintainPartitions(ctx)
		if err == nil && rep.Busy {
			err = errors.New("maintenance found its lock busy; is another store maintaining this schema?")
		}
		return err
	}
	vacuum := func(tables ...string) func() error {
		return func() error {
			for _, t := range tables {
				if _, err := pool.Exec(ctx, `VACUUM `+pgx.Identifier{t}.Sanitize()); err != nil {
					return err
				}
			}
			return nil
		}
	}
	weekName := func(k int) string {
		return "operation_events_w" + w0.Add(time.Duration(k)*week).Format("20060102")
	}
	var runs []weekRun
	for k := range 4 {
		run := weekRun{week: k}
		for _, p := range pinnedWeeks {
			run.pinned = run.pinned || p == k
		}
		// The week's retention has just passed, and no later week's.
		at := w0.Add(time.Duration(k+1)*week + c.retention + time.Minute)
		s.SetClock(func() time.Time { return at })
		how := "draining: the purge leaves its history for the drop"
		if run.pinned {
			how = "pinned: row deletes"
		}
		r.progress("week %d (%s)", k, how)
		var err error
		if run.before, err = measure(ctx, pool, maintain); err != nil {
			return err
		}
		r.progress("  maintenance %v: pinned %v, draining %v, dropped %v", run.before.took.Round(time.Millisecond), rep.Pinned, rep.Draining, rep.Dropped)
		if run.purge, err = measure(ctx, pool, purgeAll(&run.res)); err != nil {
			return err
		}
		r.progress("  purged %d operations, %d events in %v, WAL %s", run.res.Operations, run.res.Events, run.purge.took.Round(time.Millisecond), mib(run.purge.wal))
		tables := []string{"operations"}
		if run.pinned {
			tables = append(tables, weekName(k))
		} else {
			if run.drop, err = measure(ctx, pool, maintain); err != nil {
				return err
			}
			r.progress("  maintenance %v: dropped %v (%d rows)", run.drop.took.Round(time.Millisecond), rep.Dropped, rep.DroppedRows)
			if len(rep.Dropped) != 1 || rep.Dropped[0] != weekName(k) {
				return fmt.Errorf("the maintenance dropped %v, want %s", rep.Dropped, weekName(k))
			}
			run.droppedRows = rep.DroppedRows
		}
		if run.vac, err = measure(ctx, pool, vacuum(tables...)); err != nil {
			return err
		}
		r.progress("  VACUUM %v: %v, WAL %s", tables, run.vac.took.Round(time.Millisecond), mib(run.vac.wal))
		runs = append(runs, run)
	}
	s.SetClock(nil)

	r.line("## Purging one week")
	r.line("")
	r.line("Retention %v, purge batches of %d operations with no pause, the store's clock set so that the week's retention has just passed. Each step starts after a CHECKPOINT; WAL is the server's insert position before and after. Weeks 0 and 3 hold a pending operation each, so they are pinned and purged as before this change (row deletes). Weeks 1 and 2 hold only terminal operations: the maintenance marks them draining, the purge deletes their operations and leaves their history, and the next maintenance drops the partition. The order (row, drop, drop, row) spreads what the order favours over both.", c.retention, c.batch)
	r.line("")
	r.line("| step | week 0: row deletes | week 1: drop | week 2: drop | week 3: row deletes |")
	r.line("|---|---:|---:|---:|---:|")
	row := func(name string, f func(weekRun) string) {
		cells := []string{name}
		for _, w := range runs {
			cells = append(cells, f(w))
		}
		r.line("| %s |", strings.Join(cells, " | "))
	}
	row("maintenance before (checks of the ended partitions)", func(w weekRun) string { return fmtM(w.before) })
	row("purge", func(w weekRun) string { return fmtM(w.purge) })
	row("maintenance after (the drop)", func(w weekRun) string {
		if w.pinned {
			return "—"
		}
		return fmtM(w.drop)
	})
	row("VACUUM of what the purge left", func(w weekRun) string { return fmtM(w.vac) })
	row("**purge + drop + VACUUM**", func(w weekRun) string {
		return "**" + fmtM(measured{w.purge.took + w.drop.took + w.vac.took, w.purge.wal + w.drop.wal + w.vac.wal}) + "**"
	})
	row("operations / history rows purged", func(w weekRun) string {
		return fmt.Sprintf("%s / %s", count(int(w.res.Operations)), count(int(w.res.Events)))
	})
	row("rows that went with the partition", func(w weekRun) string {
		if w.pinned {
			return "—"
		}
		return count(int(w.droppedRows))
	})
	r.line("")
	return nil
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func fmtM(m measured) string { return fmt.Sprintf("%.1f s, %s WAL", m.took.Seconds(), mib(m.wal)) }

func ms(d time.Duration) float64 { return bench.Millis(d) }

func mib(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return fmt.Sprintf("%gM", float64(n)/1e6)
	case n >= 10_000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
