package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/storetest"
)

// These tests make a batch deterministically: with one worker per kind, a
// first call is parked on a row lock held by the test's own transaction,
// the calls under test queue up behind it, and once all of them wait the
// lock is released, so the worker takes them all in ONE statement. Each
// call must still get exactly the answer it gets on its own.

// openOneWorker opens a store with one batch worker per kind (and the
// extra URL parameters given), and a plain connection to the same schema
// for the test's own transactions.
func openOneWorker(t *testing.T, params ...string) (*Store, *pgx.Conn) {
	t.Helper()
	base := pgtest.NewSchema(t)
	s, err := Open(context.Background(), base+"&opjournal_batch_workers=1"+strings.Join(params, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return s, conn
}

// inOneBatch runs calls[0] alone, parked on the lock that lockSQL takes
// in a transaction of the test's own, then queues calls[1:] one at a time
// (so they are batched in this order), releases the lock and waits for all.
// It fails the test unless calls[1:] ran as ONE batch.
func inOneBatch[In, Out any](t *testing.T, conn *pgx.Conn, lockSQL string, b *batcher[In, Out], calls []func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		t.Fatal(err)
	}
	stats := func() (batches, calls, waiting int64) { return b.q.Stats() }
	b0, c0, _ := stats()
	var wg sync.WaitGroup
	wg.Go(calls[0])
	await.Until(t, "the worker to take the first call", func() bool { n, _, _ := stats(); return n == b0+1 })
	for i := 1; i < len(calls); i++ {
		wg.Go(calls[i])
		await.Until(t, "the call to queue", func() bool { _, _, w := stats(); return w == int64(i) })
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	b1, c1, _ := stats()
	if nb, nc := b1-b0, c1-c0; nb != 2 || nc != int64(len(calls)) {
		t.Fatalf("%d batches with %d calls, want 2 with %d (the first alone, then the rest together)", nb, nc, len(calls))
	}
}

var claim = &storetest.ClaimPolicy{WorkerID: "w", LeaseSeconds: 60}

func register(t *testing.T, s *Store, tenant, key, hash string) {
	t.Helper()
	if _, err := s.registerOne(context.Background(), tenant, storetest.Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "a",
		RequestHash: hash, Payload: json.RawMessage(`{"k":"` + key + `"}`)}, claim)); err != nil {
		t.Fatal(err)
	}
}

// mark is a MarkSucceeded of tenant's key.
func mark(tenant, key string, attempt int, externalID string, result json.RawMessage) applyCall {
	return applyCall{tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: attempt, ExternalID: externalID, Result: result}}
}

func TestOneBatchOfMarkSucceededAnswersEachCallAsAlone(t *testing.T) {
	s, conn := openOneWorker(t)
	ctx := context.Background()
	for _, k := range []string{"m0", "m1", "m2", "m3", "m5", "m6", "m7"} {
		register(t, s, "", k, "h")
	}
	register(t, s, "t2", "m4", "h")

	type outcome struct {
		op  *opjournal.Operation
		err error
	}
	run := func(lockKey string, calls []applyCall) []outcome {
		out := make([]outcome, len(calls))
		fns := make([]func(), len(calls))
		for i := range calls {
			fns[i] = func() { op, err := storetest.Op(s.Apply(ctx, calls[i].tenant, calls[i].c)); out[i] = outcome{op, err} }
		}
		inOneBatch(t, conn, `SELECT 1 FROM operations WHERE operation_key = '`+lockKey+`' FOR UPDATE`, s.marks, fns)
		return out
	}
	calls := []applyCall{
		mark("", "m0", 1, "e0", nil),
		mark("", "m1", 1, "e1", nil),
		mark("", "m1", 9, "e1-never", nil), // the same key again, an attempt never issued
		mark("", "m2", 7, "e2", nil),       // never issued
		mark("", "m3", 1, "e3", json.RawMessage(`{"ok":true}`)),
		mark("t2", "m4", 1, "e4", nil),
	}
	results := run("m0", calls)
	for i, want := range []string{"e0", "e1", "", "", "e3", "e4"} {
		r := results[i]
		if want == "" {
			if got := opjournal.ErrorCode(r.err); got != opjournal.CodeInvalidArgument {
				t.Errorf("%s with an attempt never issued: %+v, %v; want INVALID_ARGUMENT", calls[i].c.Key, r.op, r.err)
			}
			continue
		}
		if r.err != nil || r.op == nil || r.op.Status != opjournal.StatusSucceeded || r.op.ExternalID != want {
			t.Errorf("call %d (%s): %+v, %v; want succeeded with %s", i, calls[i].c.Key, r.op, r.err, want)
		}
	}

	// A call the database refuses fails the statement: the others are
	// then applied one by one, and only it fails.
	poisoned := run("m5", []applyCall{
		mark("", "m5", 1, "e5", nil),
		mark("", "m6", 1, "e6", json.RawMessage(`{not json`)),
		mark("", "m7", 1, "e7", nil),
	})
	if poisoned[1].err == nil {
		t.Errorf("m6 with a result that is not JSON: no error")
	}
	for _, i := range []int{0, 2} {
		if r := poisoned[i]; r.err != nil || r.op.Status != opjournal.StatusSucceeded {
			t.Errorf("call %d beside the refused one: %+v, %v; want succeeded", i, r.op, r.err)
		}
	}

	for _, c := range []struct {
		tenant, key string
		status      opjournal.Status
		events      int
	}{{"", "m1", opjournal.StatusSucceeded, 2}, {"", "m2", opjournal.StatusInProgress, 1}, {"", "m6", opjournal.StatusInProgress, 1},
		{"t2", "m4", opjournal.StatusSucceeded, 2}, {"", "m3", opjournal.StatusSucceeded, 2}, {"", "m7", opjournal.StatusSucceeded, 2}} {
		op, err := s.Get(ctx, c.tenant, c.key)
		if err != nil || op.Status != c.status || op.NeedsReview {
			t.Errorf("%s: %+v, %v; want %s, not under review", c.key, op, err, c.status)
		}
		evs, _, err := s.Events(ctx, store.EventsParams{Tenant: c.tenant, Key: c.key})
		if err != nil || len(evs) != c.events {
			t.Errorf("%s: %d events (%v), want %d", c.key, len(evs), err, c.events)
		}
	}
	if op, _ := s.Get(ctx, "", "m3"); op == nil || string(op.Result) != `{"ok":true}` {
		t.Errorf("m3's result: %+v", op)
	}
}

func TestOneBatchOfRegisterAnswersEachCallAsAlone(t *testing.T) {
	s, conn := openOneWorker(t)
	ctx := context.Background()
	register(t, s, "", "r2", "h-first")
	register(t, s, "", "r3", "h")
	if _, err := storetest.Op(s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "r3", Attempt: 1, ExternalID: "x3"})); err != nil {
		t.Fatal(err)
	}
	params := func(tenant, key, hash, payload string, c *storetest.ClaimPolicy) applyCall {
		return applyCall{tenant, storetest.Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "a", RequestHash: hash, Payload: json.RawMessage(payload)}, c)}
	}
	run := func(lockKey string, calls []applyCall) ([]store.Applied, []error) {
		results, errs := make([]store.Applied, len(calls)), make([]error, len(calls))
		fns := make([]func(), len(calls))
		for i := range calls {
			fns[i] = func() { results[i], errs[i] = s.Apply(ctx, calls[i].tenant, calls[i].c) }
		}
		// The first call's insert waits for our uncommitted insert of the same key.
		inOneBatch(t, conn, `INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status)
			VALUES ('', '`+lockKey+`', 'a', 'h', '{"k":"`+lockKey+`"}', 'pending')`, s.registers, fns)
		return results, errs
	}
	results, errs := run("r0", []applyCall{
		params("", "r0", "h", `{"k":"r0"}`, nil),
		params("", "r1", "h", `{"k":"r1"}`, claim),
		params("", "r1", "h-other", `{"k":"r1","other":1}`, claim), // the same key, other parameters
		params("", "r1", "h", `{"k":"r1"}`, claim),                 // the same request again
		params("", "r2", "h-other", `{"k":"r2"}`, claim),
		params("", "r3", "h", `{"k":"r3"}`, claim), // replay of a succeeded operation
		params("t2", "r1", "h", `{"k":"r1"}`, nil), // same key, other tenant
	})
	// r0: inserted by the other transaction with the same request: a replay.
	if errs[0] != nil || results[0].Created || results[0].Operation.Status != opjournal.StatusPending {
		t.Errorf("r0: %+v, %v; want the existing pending operation, not created", results[0], errs[0])
	}
	if errs[1] != nil || !results[1].Created || !results[1].Claimed || results[1].Operation.AttemptCount != 1 {
		t.Errorf("r1, first: %+v, %v; want created and claimed", results[1], errs[1])
	}
	if opjournal.ErrorCode(errs[2]) != opjournal.CodePayloadMismatch {
		t.Errorf("r1 with other parameters in the same batch: %+v, %v; want PAYLOAD_MISMATCH", results[2], errs[2])
	}
	if errs[3] != nil || results[3].Created || results[3].Claimed || results[3].RetryAfter <= 0 {
		t.Errorf("r1 again: %+v, %v; want the lease held elsewhere, with a retry-after", results[3], errs[3])
	}
	if opjournal.ErrorCode(errs[4]) != opjournal.CodePayloadMismatch {
		t.Errorf("r2 with other parameters: %v, want PAYLOAD_MISMATCH", errs[4])
	}
	if errs[5] != nil || results[5].Created || results[5].Claimed ||
		results[5].Operation.Status != opjournal.StatusSucceeded || results[5].Operation.ExternalID != "x3" {
		t.Errorf("r3 replay: %+v, %v; want the succeeded operation, unclaimed", results[5], errs[5])
	}
	if errs[6] != nil || !results[6].Created || results[6].Operation.Tenant != "t2" {
		t.Errorf("t2/r1: %+v, %v; want created in tenant t2", results[6], errs[6])
	}

	// A call the database refuses fails the statement: the others are
	// then applied one by one, and only it fails.
	results, errs = run("r4", []applyCall{
		params("", "r4", "h", `{"k":"r4"}`, nil),
		params("", "r5", "h", `{not json`, nil),
		params("", "r6", "h", `{"k":"r6"}`, claim),
	})
	if errs[1] == nil {
		t.Errorf("r5 with a payload that is not JSON: no error")
	}
	if errs[2] != nil || !results[2].Created || !results[2].Claimed {
		t.Errorf("r6 beside the refused one: %+v, %v; want created and claimed", results[2], errs[2])
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM operations WHERE operation_key = 'r5'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("r5: %d rows (%v), want none", n, err)
	}
	for _, c := range []struct{ tenant, key string }{{"", "r1"}, {"t2", "r1"}, {"", "r6"}} {
		evs, _, err := s.Events(ctx, store.EventsParams{Tenant: c.tenant, Key: c.key})
		if err != nil || len(evs) != 1 {
			t.Errorf("%s/%s: %d events (%v), want 1", c.tenant, c.key, len(evs), err)
		}
	}
	if op, _ := s.Get(ctx, "", "r2"); op == nil || op.RequestHash != "h-first" || op.AttemptCount != 1 {
		t.Errorf("r2 after the conflict: %+v", op)
	}
}

// TestQueuedCallGivesUpAtItsOwnBound: behind a statement that hangs, a
// queued call answers UNAVAILABLE when its own statement bound ends (the
// bound covers the queue, as it covers the wait for a pooled connection),
// not after the hung statement's bound plus its own.
func TestQueuedCallGivesUpAtItsOwnBound(t *testing.T) {
	s, conn := openOneWorker(t, "&opjournal_statement_timeout=1s")
	ctx := context.Background()
	register(t, s, "", "h1", "h")

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM operations WHERE operation_key = 'h1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	m := &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "h1", Attempt: 1, ExternalID: "x"}
	first := make(chan error, 1)
	go func() { _, err := storetest.Op(s.Apply(ctx, "", m)); first <- err }()
	await.Until(t, "the first call to run", func() bool { n, _, _ := s.marks.q.Stats(); return n == 1 })
	start := time.Now()
	_, err = storetest.Op(s.Apply(ctx, "", m))
	elapsed := time.Since(start)
	if opjournal.ErrorCode(err) != opjournal.CodeUnavailable {
		t.Errorf("queued call: %v, want UNAVAILABLE", err)
	}
	if elapsed > 1600*time.Millisecond {
		t.Errorf("queued call answered after %s; its bound is 1s", elapsed)
	}
	if err := <-first; opjournal.ErrorCode(err) != opjournal.CodeUnavailable {
		t.Errorf("hung call: %v, want UNAVAILABLE", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock is gone: the same call now applies.
	if op, err := storetest.Op(s.Apply(ctx, "", m)); err != nil || op.Status != opjournal.StatusSucceeded {
		t.Errorf("after the lock: %+v, %v", op, err)
	}
}
