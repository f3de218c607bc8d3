package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	zsqlite "zombiezen.com/go/sqlite"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// hold takes the committer's one slot, as another transaction running
// would, and returns the function that ends it.
func hold(t *testing.T, s *Store) func() {
	t.Helper()
	if !s.commit.q.TryAlone() {
		t.Fatal("the committer is not idle")
	}
	return s.commit.q.Finished
}

func queued(s *Store) int {
	_, _, waiting := s.commit.q.Stats()
	return int(waiting)
}

func transactions(s *Store) int64 {
	groups, _, _ := s.commit.q.Stats()
	return groups
}

// TestWriterQueueIsBoundedByTheCaller: while another transaction runs, a
// write waits only as long as its own context allows, then answers
// UNAVAILABLE having written nothing (it is skipped when its turn comes);
// afterwards the same write applies.
func TestWriterQueueIsBoundedByTheCaller(t *testing.T) {
	s := openTemp(t)
	p := &protocol.Command{Kind: protocol.CmdRegister, Key: "k", Action: "a", RequestHash: "h", Payload: json.RawMessage(`{}`)}

	release := hold(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Apply(ctx, "", p)
	if opjournal.ErrorCode(err) != opjournal.CodeUnavailable || time.Since(start) > 2*time.Second {
		t.Fatalf("register behind a running transaction: %v after %s, want UNAVAILABLE at its deadline", err, time.Since(start))
	}
	release()
	await.Until(t, "the abandoned call to leave the queue", func() bool { return queued(s) == 0 })
	if _, err := s.Get(context.Background(), "", "k"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("after the abandoned register: %v, want NOT_FOUND", err)
	}
	if r, err := s.Apply(context.Background(), "", p); err != nil || !r.Created {
		t.Fatalf("register afterwards: %+v, %v", r, err)
	}
}

// TestGroupCommitAnswersEachCallAsAlone queues calls behind a running
// transaction so that they share ONE transaction: the ones that break a
// rule (a conflicting payload, an attempt never issued) change nothing,
// the same key twice is decided in order, and everything else commits
// with its history.
func TestGroupCommitAnswersEachCallAsAlone(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	reg := func(key, hash string, claim bool) *protocol.Command {
		p := &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "a", RequestHash: hash, Payload: json.RawMessage(`{"k":"` + key + `"}`)}
		if claim {
			p.Claim, p.WorkerID, p.LeaseSeconds = true, "w", 60
		}
		return p
	}
	if _, err := s.Apply(ctx, "", reg("existing", "h1", true)); err != nil {
		t.Fatal(err)
	}

	type result struct {
		what string
		err  error
		ok   bool
	}
	calls := []func() result{
		func() result {
			r, err := s.Apply(ctx, "", reg("a", "h", true))
			return result{"a claimed", err, r.Created && r.Claimed}
		},
		func() result {
			r, err := s.Apply(ctx, "", reg("a", "h", true))
			return result{"a again", err, !r.Created && !r.Claimed}
		},
		func() result {
			_, err := s.Apply(ctx, "", reg("a", "h-other", false))
			return result{"a other payload", nil, opjournal.ErrorCode(err) == opjournal.CodePayloadMismatch}
		},
		func() result {
			_, err := storetest.Op(s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "existing", Attempt: 5, ExternalID: "x"}))
			return result{"existing, attempt never issued", nil, opjournal.ErrorCode(err) == opjournal.CodeInvalidArgument}
		},
		func() result {
			op, err := storetest.Op(s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "existing", Attempt: 1, ExternalID: "x"}))
			return result{"existing succeeded", err, err == nil && op.Status == opjournal.StatusSucceeded}
		},
		func() result { r, err := s.Apply(ctx, "", reg("b", "h", false)); return result{"b", err, r.Created} },
	}
	release := hold(t, s)
	out := make([]result, len(calls))
	var wg sync.WaitGroup
	for i, f := range calls {
		wg.Go(func() { out[i] = f() })
		await.Until(t, fmt.Sprintf("call %d to queue", i), func() bool { return queued(s) == i+1 })
	}
	g0 := transactions(s)
	release()
	wg.Wait()
	for _, r := range out {
		if r.err != nil || !r.ok {
			t.Errorf("%s: %v (as expected: %v)", r.what, r.err, r.ok)
		}
	}
	if g := transactions(s) - g0; g != 1 {
		t.Errorf("%d transactions for the queued calls, want 1", g)
	}
	for key, want := range map[string]int{"a": 1, "b": 1, "existing": 2} {
		evs, _, err := s.Events(ctx, store.EventsParams{Key: key})
		if err != nil || len(evs) != want {
			t.Errorf("%s: %d events (%v), want %d", key, len(evs), err, want)
		}
	}
	if op, err := s.Get(ctx, "", "a"); err != nil || op.RequestHash != "h" || op.AttemptCount != 1 {
		t.Errorf("a: %+v, %v", op, err)
	}
}

// TestGroupCommitUndoesAFailedCallOnly: in one shared transaction, a call
// that wrote and then failed leaves nothing behind, and the calls before
// and after it commit.
func TestGroupCommitUndoesAFailedCallOnly(t *testing.T) {
	s := openTemp(t)
	insert := func(key string, fail bool) txFunc {
		return func(ctx context.Context, tx *wtx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, created_at, updated_at)
				VALUES ('', ?1, 'a', 'h', '{}', 'pending', 0, 0)`, key); err != nil {
				return err
			}
			if fail {
				return opjournal.Errorf(opjournal.CodeInvalidArgument, "", "refused after writing")
			}
			return nil
		}
	}
	release := hold(t, s)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, f := range []txFunc{insert("x", false), insert("y", true), insert("z", false)} {
		wg.Go(func() { errs[i] = s.commit.do(context.Background(), "test", f) })
		await.Until(t, "the call to queue", func() bool { return queued(s) == i+1 })
	}
	release()
	wg.Wait()
	if errs[0] != nil || errs[2] != nil || opjournal.ErrorCode(errs[1]) != opjournal.CodeInvalidArgument {
		t.Fatalf("errors: %v", errs)
	}
	for key, want := range map[string]bool{"x": true, "y": false, "z": true} {
		_, err := s.Get(context.Background(), "", key)
		if got := err == nil; got != want {
			t.Errorf("%s present: %v, want %v (%v)", key, got, want, err)
		}
	}
}

// TestWriterSettings: the write connection, where every commit happens,
// has the store's settings: WAL, every commit fsynced (synchronous=FULL,
// 2), foreign keys on.
func TestWriterSettings(t *testing.T) {
	s := openTemp(t)
	tx, err := s.w.begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1"} {
		var got string
		err := tx.w.run("PRAGMA "+pragma, nil, func(st *zsqlite.Stmt) (bool, error) {
			got = st.ColumnText(0)
			return false, nil
		})
		if err != nil || got != want {
			t.Errorf("PRAGMA %s on the writer: %q (%v), want %q", pragma, got, err, want)
		}
	}
}
