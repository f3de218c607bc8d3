package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/migrations"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/storetest"
)

// The history's weekly partitions (partitions.go): created ahead, rows
// without a partition in the default one, an ended partition dropped by
// the purge once nothing that exists has history in it and kept while
// something does, and the migration that makes the table partitioned.

const week = 7 * 24 * time.Hour

// monday is the Monday 00:00 UTC at or before t.
func monday(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

func partName(w time.Time) string { return "operation_events_w" + w.Format("20060102") }

type partFixture struct {
	s    *postgres.Store
	clk  *testclock.Clock
	conn *pgx.Conn // the same schema, for checks in SQL
	ctx  context.Context
}

func newPartFixture(t *testing.T) *partFixture {
	t.Helper()
	url := pgtest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	clk := testclock.New()
	s.SetClock(clk.Now)
	return &partFixture{s: s, clk: clk, conn: conn, ctx: ctx}
}

func (f *partFixture) names(t *testing.T) []string {
	t.Helper()
	parts, err := f.s.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	return names
}

// rowsIn counts the rows of one partition (-1 if it does not exist).
func (f *partFixture) rowsIn(t *testing.T, part string) int {
	t.Helper()
	var exists bool
	if err := f.conn.QueryRow(f.ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return -1
	}
	var n int
	if err := f.conn.QueryRow(f.ctx, `SELECT count(*) FROM `+pgx.Identifier{part}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var partPayload = json.RawMessage(`{"amount_minor":1}`)

func (f *partFixture) register(t *testing.T, key string) { f.registerAs(t, key, "pay") }

func (f *partFixture) registerAs(t *testing.T, key, action string) {
	t.Helper()
	if _, err := f.s.Apply(f.ctx, "", &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: "h", Payload: partPayload}); err != nil {
		t.Fatalf("register %s: %v", key, err)
	}
}

// succeed registers, claims and confirms key: three history rows.
func (f *partFixture) succeed(t *testing.T, key string) { f.succeedAs(t, key, "pay") }

func (f *partFixture) succeedAs(t *testing.T, key, action string) {
	t.Helper()
	f.registerAs(t, key, action)
	cr, err := f.s.Apply(f.ctx, "", storetest.Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: key}, &storetest.ClaimPolicy{WorkerID: "w", LeaseSeconds: 30}))
	if err != nil || !cr.Claimed {
		t.Fatalf("claim %s: %+v %v", key, cr, err)
	}
	if _, err := storetest.Op(f.s.Apply(f.ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: 1, ExternalID: "x_" + key})); err != nil {
		t.Fatal(err)
	}
}

func (f *partFixture) events(t *testing.T, key string) ([]opjournal.Event, error) {
	t.Helper()
	evs, _, err := f.s.Events(f.ctx, store.EventsParams{Key: key, Limit: 100})
	return evs, err
}

func (f *partFixture) maintain(t *testing.T) postgres.PartitionReport {
	t.Helper()
	rep, err := f.s.MaintainPartitions(f.ctx)
	if err != nil {
		t.Fatalf("maintain: %v", err)
	}
	if rep.Busy {
		t.Fatalf("maintain: busy with no one else here: %+v", rep)
	}
	return rep
}

func (f *partFixture) purgeAll(t *testing.T, retention time.Duration) store.PurgeResult {
	t.Helper()
	var total store.PurgeResult
	for {
		res, err := f.s.Purge(f.ctx, store.PurgeParams{Action: "pay", Retention: retention, Limit: 2})
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		total.Operations += res.Operations
		total.Events += res.Events
		if res.Operations < 2 {
			return total
		}
	}
}

func TestPartitionsCreatedAhead(t *testing.T) {
	t.Parallel()
	f := newPartFixture(t)
	w := monday(time.Now())
	want := []string{partName(w), partName(w.Add(week)), partName(w.Add(2 * week))}
	if got := f.names(t); !containsAll(got, want) {
		t.Fatalf("after Open: partitions %v, want %v among them", got, want)
	}
	// Idempotent: nothing new in the same week.
	if rep := f.maintain(t); len(rep.Created) != 0 {
		t.Fatalf("second maintenance created %v", rep.Created)
	}
	// Three weeks on, the purge's maintenance keeps two weeks ahead.
	f.clk.Advance(3 * week)
	later := monday(f.clk.Now())
	if _, err := f.s.Purge(f.ctx, store.PurgeParams{Action: "pay", Retention: time.Hour, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	want = []string{partName(later), partName(later.Add(week)), partName(later.Add(2 * week))}
	if got := f.names(t); !containsAll(got, want) {
		t.Fatalf("after the purge three weeks on: partitions %v, want %v among them", got, want)
	}
	parts, err := f.s.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.To.Sub(p.From) != week || p.From.Weekday() != time.Monday || !p.From.Equal(monday(p.From)) {
			t.Errorf("partition %s spans %v to %v, want a week from a Monday 00:00 UTC", p.Name, p.From, p.To)
		}
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestDefaultPartition: an event whose week has no partition is not
// refused; the default partition takes it, and the maintenance that
// creates its week moves it there.
func TestDefaultPartition(t *testing.T) {
	t.Parallel()
	f := newPartFixture(t)
	f.clk.Advance(20 * week) // far beyond the partitions made ahead
	f.succeed(t, "far")
	if n := f.rowsIn(t, "operation_events_default"); n != 3 {
		t.Fatalf("default partition holds %d rows, want the 3 of the operation", n)
	}
	rep := f.maintain(t)
	w := monday(f.clk.Now())
	if !slices.Contains(rep.Created, partName(w)) || rep.Moved != 3 {
		t.Fatalf("maintenance: %+v, want %s created and 3 rows moved", rep, partName(w))
	}
	if n := f.rowsIn(t, "operation_events_default"); n != 0 {
		t.Fatalf("default partition still holds %d rows", n)
	}
	if n := f.rowsIn(t, partName(w)); n != 3 {
		t.Fatalf("%s holds %d rows, want 3", partName(w), n)
	}
	evs, err := f.events(t, "far")
	if err != nil || len(evs) != 3 {
		t.Fatalf("history after the move: %d events, %v", len(evs), err)
	}
}

// TestPurgeDropsPartitions walks the partition rules: a week whose every
// operation is terminal drains (the purge leaves its rows for the drop)
// and is dropped once they are gone; a week with an open operation is
// pinned and purged row by row; a draining week that a review pins again
// gets its left rows deleted; a key registered again never sees its
// previous history.
func TestPurgeDropsPartitions(t *testing.T) {
	t.Parallel()
	f := newPartFixture(t)
	const retention = 24 * time.Hour
	w0 := monday(f.clk.Now())
	// Week 0: a1, a2 terminal. Week 1: b1 terminal, b2 pending (a pin).
	// Week 2: c1 terminal, and c2 of another action (not purged here).
	f.succeed(t, "a1")
	f.succeed(t, "a2")
	f.clk.AdvanceTo(w0.Add(week + time.Hour))
	f.succeed(t, "b1")
	f.register(t, "b2")
	f.clk.AdvanceTo(w0.Add(2*week + time.Hour))
	f.succeed(t, "c1")
	f.succeedAs(t, "c2", "other")
	p0, p1, p2 := partName(w0), partName(w0.Add(week)), partName(w0.Add(2*week))
	for part, n := range map[string]int{p0: 6, p1: 4, p2: 6} {
		if got := f.rowsIn(t, part); got != n {
			t.Fatalf("%s holds %d rows, want %d", part, got, n)
		}
	}

	// A day into week 4: weeks 0-2 ended more than the retention ago.
	f.clk.AdvanceTo(w0.Add(4*week + 25*time.Hour))
	rep := f.maintain(t)
	slices.Sort(rep.Draining)
	if !slices.Equal(rep.Draining, []string{p0, p2}) || !slices.Equal(rep.Pinned, []string{p1}) || len(rep.Dropped) != 0 {
		t.Fatalf("maintenance once weeks ended: %+v, want %s and %s draining, %s pinned", rep, p0, p2, p1)
	}

	res := f.purgeAll(t, retention)
	// a1, a2, b1, c1 go, and their 12 history rows are purged as far as
	// anyone can see.
	if res.Operations != 4 || res.Events != 12 {
		t.Fatalf("purge: %+v, want 4 operations and 12 events", res)
	}
	for _, k := range []string{"a1", "a2", "b1", "c1"} {
		if _, err := f.events(t, k); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
			t.Fatalf("history of purged %s: %v", k, err)
		}
	}
	// On disk: all of week 0 and c1's rows in week 2 wait for the drop;
	// b1's rows in the pinned week 1 were deleted.
	if n0, n1, n2 := f.rowsIn(t, p0), f.rowsIn(t, p1), f.rowsIn(t, p2); n0 != 6 || n1 != 1 || n2 != 6 {
		t.Fatalf("rows after the purge: %s %d, %s %d, %s %d; want 6, 1 (b2), 6", p0, n0, p1, n1, p2, n2)
	}

	// a1 registered again: a new operation whose history is its own, with
	// its previous one still on disk in week 0.
	f.register(t, "a1")
	if evs, err := f.events(t, "a1"); err != nil || len(evs) != 1 || evs[0].From != "" {
		t.Fatalf("history of a1 registered again: %+v, %v", evs, err)
	}
	// A duplicate report puts c2 under review: week 2 is pinned now.
	if _, err := storetest.Op(f.s.Apply(f.ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "c2", Attempt: 1, ExternalID: "other"})); err != nil {
		t.Fatal(err)
	}

	// Week 0 goes at once; week 2 was checked for pins less than
	// partitionRecheckEvery (6 h) ago, so c2's review is seen later.
	rep = f.maintain(t)
	if !slices.Equal(rep.Dropped, []string{p0}) || rep.DroppedRows != 6 || !slices.Contains(rep.Unchecked, p2) {
		t.Fatalf("maintenance after the purge: %+v, want %s dropped with its 6 rows, %s unchecked", rep, p0, p2)
	}
	f.clk.Advance(7 * time.Hour)
	rep = f.maintain(t)
	// Week 2 stopped draining: c1's rows were deleted, c2's stay.
	if !slices.Contains(rep.Pinned, p2) || rep.Cleaned != 3 || f.rowsIn(t, p2) != 3 {
		t.Fatalf("week 2 after c2's review: %+v, %d rows; want pinned, 3 cleaned, 3 left", rep, f.rowsIn(t, p2))
	}
	if f.rowsIn(t, p0) != -1 || f.rowsIn(t, p1) != 1 {
		t.Fatalf("week 0 should be gone and week 1 kept: %d, %d", f.rowsIn(t, p0), f.rowsIn(t, p1))
	}
	for k, n := range map[string]int{"a1": 1, "b2": 1, "c2": 4} {
		if evs, err := f.events(t, k); err != nil || len(evs) != n {
			t.Fatalf("history of %s after the drop: %d events, %v; want %d", k, len(evs), err, n)
		}
	}
	parts, err := f.s.Partitions(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.Draining {
			t.Fatalf("%s still draining", p.Name)
		}
	}

	// Once b2 is done and its retention has passed, the purge's own
	// maintenance drains week 1, the purge leaves b2's row there, and the
	// next maintenance drops it.
	cr, err := f.s.Apply(f.ctx, "", storetest.Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "b2"}, &storetest.ClaimPolicy{WorkerID: "w", LeaseSeconds: 30}))
	if err != nil || !cr.Claimed {
		t.Fatal(cr, err)
	}
	if _, err := storetest.Op(f.s.Apply(f.ctx, "", &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "b2", Attempt: 1, ErrorCode: "declined"})); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(2 * retention)
	if res := f.purgeAll(t, retention); res.Operations != 1 || res.Events != 3 { // b2; a1 is pending
		t.Fatalf("second purge: %+v, want b2 and its 3 events", res)
	}
	if n := f.rowsIn(t, p1); n != 1 {
		t.Fatalf("week 1 after b2 went: %d rows, want its 1 left for the drop", n)
	}
	rep = f.maintain(t)
	if !slices.Equal(rep.Dropped, []string{p1}) || rep.DroppedRows != 1 {
		t.Fatalf("maintenance after b2 went: %+v, want %s dropped", rep, p1)
	}
}

// TestPartitionReplicas: several stores on one database maintain at once;
// each week is created once, and none fails.
func TestPartitionReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := testclock.New()
	clk.Advance(10 * week)
	var stores []*postgres.Store
	for range 4 {
		s, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.SetClock(clk.Now)
		stores = append(stores, s)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created []string
	var errs []error
	for _, s := range stores {
		wg.Go(func() {
			for range 5 {
				rep, err := s.MaintainPartitions(ctx)
				mu.Lock()
				created = append(created, rep.Created...)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	w := monday(clk.Now())
	slices.Sort(created)
	want := []string{partName(w), partName(w.Add(week)), partName(w.Add(2 * week))}
	if !slices.Equal(created, want) {
		t.Fatalf("created %v, want each of %v once", created, want)
	}
}

// TestPartitionMigration: rows written before 000006 move into weekly
// partitions with their ids, go back on the way down, and come again.
func TestPartitionMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, "pgx5://"+strings.TrimPrefix(url, "postgres://"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	step := func(v uint) {
		t.Helper()
		if err := m.Migrate(v); err != nil {
			t.Fatalf("migrate to %d: %v", v, err)
		}
	}
	step(5)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// An operation registered 40 days ago and settled now, and one whose
	// history is all old.
	if _, err := conn.Exec(ctx, `
		INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, attempt_count, created_at, updated_at)
		VALUES ('t', 'k1', 'pay', 'h', '{}', 'succeeded', 1, now() - interval '40 days', now()),
		       ('t', 'k2', 'pay', 'h', '{}', 'pending', 0, now() - interval '60 days', now() - interval '60 days');
		INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt)
		VALUES ('t', 'k1', now() - interval '40 days', NULL, 'pending', 0),
		       ('t', 'k1', now(), 'pending', 'succeeded', 1),
		       ('t', 'k2', now() - interval '60 days', NULL, 'pending', 0)`); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID        int64
		Key, Part string
	}
	read := func() []row {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT id, operation_key, tableoid::regclass::text FROM operation_events ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	weekOf := func(ago time.Duration) string { return partName(monday(time.Now().Add(-ago))) }
	check := func(stage string, partitioned bool) {
		t.Helper()
		got := read()
		want := []row{{1, "k1", "operation_events"}, {2, "k1", "operation_events"}, {3, "k2", "operation_events"}}
		if partitioned {
			want[0].Part, want[1].Part, want[2].Part = weekOf(40*24*time.Hour), weekOf(0), weekOf(60*24*time.Hour)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: rows %v, want %v", stage, got, want)
		}
	}
	step(6)
	check("up", true)
	step(5)
	check("down", false)
	step(6)
	check("up again", true)
	// Ids go on after the copied ones, in the current week's partition.
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Apply(ctx, "t", &protocol.Command{Kind: protocol.CmdRegister, Key: "k3", Action: "pay", RequestHash: "h", Payload: partPayload}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := s.Events(ctx, store.EventsParams{Tenant: "t", Key: "k3"})
	if err != nil || len(evs) != 1 || evs[0].ID != 4 {
		t.Fatalf("first event after the migration: %+v, %v; want id 4", evs, err)
	}
	if evs, _, err := s.Events(ctx, store.EventsParams{Tenant: "t", Key: "k1"}); err != nil || len(evs) != 2 {
		t.Fatalf("history of k1 after the migration: %+v, %v", evs, err)
	}
}
