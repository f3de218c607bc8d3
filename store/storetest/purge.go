package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// Retention and purge: only terminal operations that no person must look
// at, unchanged for the retention (database clock), go, with their
// history and refs; concurrent purgers delete each row once; a key purged
// and registered again is a new operation.

const retention = 720 * time.Hour

func succeed(t *testing.T, s store.Store, key string, refs map[string]string) {
	t.Helper()
	registerWith(t, s, tenant, key, refs, "")
	cr := claim(t, s, key, noRetry)
	if !cr.Claimed {
		t.Fatalf("claim %q: %+v", key, cr)
	}
	if _, err := Op(s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: cr.Operation.AttemptCount, ExternalID: "pay_" + key})); err != nil {
		t.Fatal(err)
	}
}

func purgeAll(t *testing.T, s store.Store, act string, limit int) store.PurgeResult {
	t.Helper()
	var total store.PurgeResult
	for {
		res, err := s.Purge(ctxT(t), store.PurgeParams{Action: act, Retention: retention, Limit: limit})
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		total.Operations += res.Operations
		total.Events += res.Events
		if res.Operations < int64(limit) {
			return total
		}
	}
}

func testPurge(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	// Old rows: two that may go, and every kind that must stay.
	succeed(t, s, "old-succeeded", map[string]string{"order_id": "817"})
	clk.Advance(time.Second)
	cr := claimed(t, s, "old-failed", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "old-failed", Attempt: cr.Operation.AttemptCount, ErrorCode: "card_declined"})); err != nil {
		t.Fatal(err)
	}
	succeed(t, s, "old-review", nil) // a duplicate effect puts it under review
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "old-review", Attempt: 1, ExternalID: "pay_other"})); err != nil {
		t.Fatal(err)
	}
	register(t, s, "old-pending")
	makeUnknown(t, s, "old-unknown")
	claimed(t, s, "old-expired", ClaimPolicy{WorkerID: "w1", LeaseSeconds: 1})
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "old-other-action", Action: "send_email", RequestHash: hashA, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(retention)
	// A terminal row changed recently stays too.
	succeed(t, s, "recent-succeeded", nil)

	// The protocol's rule decides; the store must delete exactly those.
	all := listKeys(t, s, store.ListParams{Tenant: tenant})
	want := map[string]bool{}
	for _, k := range all {
		if protocol.Purgeable(get(t, s, k), retention, clk.Now()) && get(t, s, k).Action == action {
			want[k] = true
		}
	}
	if len(want) != 2 || !want["old-succeeded"] || !want["old-failed"] {
		t.Fatalf("Purgeable chose %v", want)
	}
	evOld := len(events(t, s, "old-succeeded")) + len(events(t, s, "old-failed"))

	// A dry run counts and deletes nothing.
	dry, err := s.Purge(ctx, store.PurgeParams{Action: action, Retention: retention, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Operations != 2 || dry.Events != int64(evOld) || dry.Oldest.IsZero() || dry.Newest.Before(dry.Oldest) {
		t.Fatalf("dry run = %+v, want 2 operations and %d events", dry, evOld)
	}
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant}), all...)

	// Batches of one: the oldest goes first.
	res, err := s.Purge(ctx, store.PurgeParams{Action: action, Retention: retention, Limit: 1})
	if err != nil || res.Operations != 1 {
		t.Fatalf("first batch: %+v, %v", res, err)
	}
	if _, err := s.Get(ctx, tenant, "old-succeeded"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("the oldest purgeable operation is still there: %v", err)
	}
	if rest := purgeAll(t, s, action, 1); rest.Operations != 1 {
		t.Fatalf("rest: %+v", rest)
	}
	for k := range want {
		if _, err := s.Get(ctx, tenant, k); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
			t.Fatalf("%s survived: %v", k, err)
		}
		_, _, err := s.Events(ctx, store.EventsParams{Tenant: tenant, Key: k})
		wantCode(t, err, opjournal.CodeNotFound)
	}
	for _, k := range all {
		if !want[k] {
			get(t, s, k) // still there
		}
	}
	// The refs went with the row: the order's search finds nothing now.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817"}}}))

	// A purged key registered again is a new operation, with a history of
	// its own and new refs.
	again := registerWith(t, s, tenant, "old-succeeded", map[string]string{"order_id": "818"}, "")
	if !again.Created || again.Operation.Status != opjournal.StatusPending || again.Operation.AttemptCount != 0 {
		t.Fatalf("register after purge: %+v", again)
	}
	if evs := events(t, s, "old-succeeded"); len(evs) != 1 {
		t.Fatalf("history after purge and register: %s", fmtEvents(evs))
	}
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "818"}}}), "old-succeeded")

	// Nothing else is ever purgeable, however old: non-terminal rows and
	// reviews wait for ever.
	clk.Advance(10 * retention)
	purgeAll(t, s, action, 100)
	for _, k := range []string{"old-review", "old-pending", "old-unknown", "old-expired"} {
		get(t, s, k)
	}
	if _, err := s.Get(ctx, tenant, "old-other-action"); err != nil {
		t.Fatalf("another action's operation went: %v", err)
	}
	// Bad parameters are refused.
	_, err = s.Purge(ctx, store.PurgeParams{Action: action, Limit: 10})
	wantCode(t, err, opjournal.CodeInvalidArgument)
}

func testOldestTerminal(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	oldest, now, err := s.OldestTerminal(ctx, action)
	if err != nil || !oldest.IsZero() || !now.Equal(clk.Now()) {
		t.Fatalf("empty journal: %v %v %v", oldest, now, err)
	}
	register(t, s, "pending") // not terminal: not counted
	succeed(t, s, "first", nil)
	at := get(t, s, "first").UpdatedAt
	clk.Advance(time.Hour)
	succeed(t, s, "second", nil)
	oldest, now, err = s.OldestTerminal(ctx, action)
	if err != nil || !oldest.Equal(at) || now.Sub(oldest) != time.Hour {
		t.Fatalf("oldest terminal = %v (want %v), now %v, %v", oldest, at, now, err)
	}
}

// testConcurrentPurgers: several purgers (in two processes) share the
// work; every purgeable row is deleted exactly once.
func testConcurrentPurgers(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	a, b := open(t), open(t)
	clkA := clockOf(t, a)
	b.(store.Clock).SetClock(clkA.Now) // one database, one clock
	const n = 120
	for i := range n {
		succeed(t, a, fmt.Sprintf("k%03d", i), map[string]string{"n": fmt.Sprint(i)})
	}
	clkA.Advance(retention)
	var deleted, events atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 6 {
		s := []store.Store{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := s.Purge(ctxT(t), store.PurgeParams{Action: action, Retention: retention, Limit: 7})
				if err != nil {
					errs <- err
					return
				}
				deleted.Add(res.Operations)
				events.Add(res.Events)
				if res.Operations == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("purger: %v", err)
	}
	if deleted.Load() != n || events.Load() != 3*n {
		t.Fatalf("purgers deleted %d operations and %d events, want %d and %d", deleted.Load(), events.Load(), n, 3*n)
	}
	if left := listKeys(t, a, store.ListParams{Tenant: tenant}); len(left) != 0 {
		t.Fatalf("left: %v", left)
	}
}

// testPurgeRacesReplay: a replay racing the purge of its operation
// answers either the stored result or a fresh operation, never an error,
// and leaves no stray: a fresh row exists exactly when the answer was
// fresh.
func testPurgeRacesReplay(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	s := open(t)
	clk := clockOf(t, s)
	const n = 60
	for i := range n {
		succeed(t, s, fmt.Sprintf("k%03d", i), nil)
	}
	clk.Advance(retention)
	created := make([]bool, n)
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			res, err := s.Purge(ctxT(t), store.PurgeParams{Action: action, Retention: retention, Limit: 3})
			if err != nil {
				errs <- err
				return
			}
			if res.Operations == 0 {
				return
			}
		}
	}()
	race(n, func(i int) {
		key := fmt.Sprintf("k%03d", i)
		res, err := s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload})
		switch {
		case err != nil:
			errs <- fmt.Errorf("replay of %s: %w", key, err)
		case res.Created:
			created[i] = true
			if res.Operation.Status != opjournal.StatusPending {
				errs <- fmt.Errorf("fresh %s is %s", key, res.Operation.Status)
			}
		case res.Operation.Status != opjournal.StatusSucceeded || res.Operation.ExternalID != "pay_"+key:
			errs <- fmt.Errorf("replay of %s answered %+v", key, *res.Operation)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fresh := 0
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		op, err := s.Get(ctxT(t), tenant, key)
		switch {
		case opjournal.ErrorCode(err) == opjournal.CodeNotFound:
			if created[i] {
				t.Fatalf("%s: answered fresh, but no row", key)
			}
		case err != nil:
			t.Fatal(err)
		case created[i] != (op.Status == opjournal.StatusPending):
			t.Fatalf("%s: answered created=%v, row is %s", key, created[i], op.Status)
		case created[i]:
			fresh++
		}
	}
	t.Logf("%d of %d replays found their operation purged and registered it afresh", fresh, n)
}

// testTryLock: one holder at a time across processes on one database.
func testTryLock(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	a, b := open(t), open(t)
	ctx := ctxT(t)
	unlock, ok, err := a.TryLock(ctx, "purge")
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := b.TryLock(ctx, "purge"); err != nil || ok {
		t.Fatalf("second process took a held lock: %v %v", ok, err)
	}
	if u, ok, err := b.TryLock(ctx, "other"); err != nil || !ok {
		t.Fatalf("another name: %v %v", ok, err)
	} else {
		u()
	}
	unlock()
	unlockB, ok, err := b.TryLock(ctx, "purge")
	if err != nil || !ok {
		t.Fatalf("lock after unlock: %v %v", ok, err)
	}
	unlockB()
}
