package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestPurge: a pass purges each action by its own retention, reports
// what it did, counts on a dry run, waits for nobody (another purger
// holding the lock is ErrPurgeBusy) and refuses an action without policy.
func TestPurge(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testclock.New()
	st.SetClock(clk.Now)
	svc := journal.New(st, policy.Default(), journal.Limits{})
	ctx := context.Background()
	done := func(key, action, payload string) {
		t.Helper()
		res, err := svc.Register(ctx, journal.RegisterRequest{Key: key, Action: action, Payload: json.RawMessage(payload), Claim: &journal.ClaimOptions{WorkerID: "w"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: key, Attempt: res.Operation.AttemptCount, ExternalID: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	done("pay", "create_payment", `{"order_id":"1","amount_minor":1,"currency":"EUR"}`)
	done("app", "submit_application", `{"job_id":"j"}`)
	clk.Advance(721 * time.Hour) // past create_payment's 720h, within submit_application's 2160h

	dry, err := svc.Purge(ctx, journal.PurgeOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range dry {
		got[r.Action] = r.Operations
	}
	if got["create_payment"] != 1 || got["submit_application"] != 0 || len(dry) != 4 {
		t.Fatalf("dry run: %+v", dry)
	}

	unlock, ok, err := st.TryLock(ctx, journal.PurgeLock)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := svc.Purge(ctx, journal.PurgeOptions{}); !errors.Is(err, journal.ErrPurgeBusy) {
		t.Fatalf("purge beside another purger: %v", err)
	}
	if _, err := svc.Purge(ctx, journal.PurgeOptions{DryRun: true}); err != nil {
		t.Fatalf("a dry run needs no lock: %v", err)
	}
	unlock()

	var progress []journal.PurgeReport
	reps, err := svc.Purge(ctx, journal.PurgeOptions{Action: "create_payment", BatchSize: 1, Progress: func(r journal.PurgeReport) { progress = append(progress, r) }})
	if err != nil || len(reps) != 1 || reps[0].Operations != 1 || reps[0].Events != 2 || reps[0].Batches != 2 || len(progress) != 2 {
		t.Fatalf("purge: %+v %v (progress %+v)", reps, err, progress)
	}
	if _, err := svc.Lookup(ctx, "", "pay"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("pay survived: %v", err)
	}
	if _, err := svc.Lookup(ctx, "", "app"); err != nil {
		t.Fatalf("app went: %v", err)
	}
	if _, err := svc.Purge(ctx, journal.PurgeOptions{Action: "nope"}); opjournal.ErrorCode(err) != opjournal.CodeUnknownAction {
		t.Fatalf("unknown action: %v", err)
	}
	ages, err := svc.OldestTerminal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ages {
		want := time.Duration(0)
		if a.Action == "submit_application" {
			want = 721 * time.Hour
		}
		if a.Age != want {
			t.Errorf("%s: oldest terminal age %v, want %v", a.Action, a.Age, want)
		}
	}
}
