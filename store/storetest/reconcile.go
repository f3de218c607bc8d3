package storetest

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// The rules of reconciliation, review and history.

func events(t *testing.T, s store.Store, key string) []opjournal.Event {
	t.Helper()
	evs, _, err := s.Events(ctxT(t), store.EventsParams{Tenant: tenant, Key: key, Limit: opjournal.MaxPageSize})
	if err != nil {
		t.Fatalf("events %q: %v", key, err)
	}
	return evs
}

// wantHistory compares the (from, to, attempt, actor, external_id) of each
// event and checks ids and times never go backwards.
func wantHistory(t *testing.T, evs []opjournal.Event, want ...opjournal.Event) {
	t.Helper()
	if len(evs) != len(want) {
		t.Fatalf("history has %d events, want %d:\n%s", len(evs), len(want), fmtEvents(evs))
	}
	for i, w := range want {
		e := evs[i]
		if e.From != w.From || e.To != w.To || e.Attempt != w.Attempt || (w.Actor != "" && e.Actor != w.Actor) || e.ExternalID != w.ExternalID || e.Reason == "" {
			t.Fatalf("event %d = %s, want %+v\n%s", i, fmtEvent(e), w, fmtEvents(evs))
		}
		if i > 0 && (e.ID <= evs[i-1].ID || e.At.Before(evs[i-1].At)) {
			t.Fatalf("history goes backwards at %d:\n%s", i, fmtEvents(evs))
		}
	}
}

func fmtEvent(e opjournal.Event) string {
	return fmt.Sprintf("#%d %s→%s attempt=%d actor=%q ext=%q reason=%q", e.ID, e.From, e.To, e.Attempt, e.Actor, e.ExternalID, e.Reason)
}

func fmtEvents(evs []opjournal.Event) string {
	s := ""
	for _, e := range evs {
		s += "  " + fmtEvent(e) + "\n"
	}
	return s
}

func ev(from, to opjournal.Status, attempt int, actor, ext string) opjournal.Event {
	return opjournal.Event{From: from, To: to, Attempt: attempt, Actor: actor, ExternalID: ext}
}

const (
	pending    = opjournal.StatusPending
	inProgress = opjournal.StatusInProgress
	unknown    = opjournal.StatusUnknown
	succeeded  = opjournal.StatusSucceeded
	failed     = opjournal.StatusFailedFinal
)

// makeUnknown registers key, claims it and marks it unknown (attempt 1).
func makeUnknown(t *testing.T, s store.Store, key string) *opjournal.Operation {
	t.Helper()
	cr := claimed(t, s, key, noRetry)
	op, err := Op(s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: key, Attempt: cr.Operation.AttemptCount, ErrorCode: "timeout"}))
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func testHistoryRecordsEveryChange(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cp := ClaimPolicy{WorkerID: "w1", LeaseSeconds: 30}
	if _, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp)); err != nil {
		t.Fatal(err)
	}
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: 1, ErrorCode: "timeout"})); err != nil {
		t.Fatal(err)
	}
	claim(t, s, "k1", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 30, AllowRetryAfterUnknown: true})
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: 1, ExternalID: "pay_1", Actor: "reconciler-a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: 2, ExternalID: "pay_2"})); err != nil {
		t.Fatal(err)
	}
	register(t, s, "k2") // a plain registration is an event too
	wantHistory(t, events(t, s, "k1"),
		ev("", inProgress, 1, "w1", ""),
		ev(inProgress, unknown, 1, "w1", ""),
		ev(unknown, inProgress, 2, "w2", ""),
		ev(inProgress, succeeded, 1, "reconciler-a", "pay_1"),
		ev(succeeded, succeeded, 2, "w2", "pay_2"), // the duplicate, for review
	)
	wantHistory(t, events(t, s, "k2"), ev("", pending, 0, "", ""))
	if _, _, err := s.Events(ctx, store.EventsParams{Tenant: tenant, Key: "nope"}); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("events of a missing key: %v", err)
	}
}

func testRefusalsWriteNoHistory(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	before := len(events(t, s, "k1"))
	claim(t, s, "k1", sameKey) // lost: live lease
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashB, Payload: payload}); err == nil {
		t.Fatal("mismatch accepted")
	}
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}); err != nil {
		t.Fatal(err) // a replay is not a change either
	}
	_, _ = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: cr.Operation.AttemptCount + 1}))
	_, _ = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 1, Actor: "r", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
	_, _ = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: "k1", Resolution: succeeded, ExternalID: "x", Actor: "op", Reason: "r"}))
	if after := len(events(t, s, "k1")); after != before {
		t.Fatalf("refused requests wrote %d events", after-before)
	}
}

func testListFiltersAndPages(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "a-pending")
	claimed(t, s, "b-leased", noRetry)
	makeUnknown(t, s, "c-unknown")
	cr := claimed(t, s, "d-done", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "d-done", Attempt: cr.Operation.AttemptCount, ExternalID: "x"})); err != nil {
		t.Fatal(err)
	}
	makeUnknown(t, s, "e-review")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "e-review", Actor: "r", Reason: "stuck"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "f-email", Action: "send_email", RequestHash: hashA, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, "other", &protocol.Command{Kind: protocol.CmdRegister, Key: "g-other-tenant", Action: action, RequestHash: hashA, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	keys := func(p store.ListParams) []string {
		t.Helper()
		p.Tenant = tenant
		var out []string
		for {
			ops, next, err := s.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				out = append(out, op.Key)
			}
			if next == "" {
				return out
			}
			p.After = next
		}
	}
	yes := true
	for _, tc := range []struct {
		p    store.ListParams
		want string
	}{
		{store.ListParams{Limit: 2}, "[a-pending b-leased c-unknown d-done e-review f-email]"},
		{store.ListParams{Limit: 1, ListFilter: store.ListFilter{Statuses: []opjournal.Status{unknown}}}, "[c-unknown e-review]"},
		{store.ListParams{ListFilter: store.ListFilter{Statuses: []opjournal.Status{pending, succeeded}}}, "[a-pending d-done f-email]"},
		{store.ListParams{ListFilter: store.ListFilter{NeedsReview: &yes}}, "[e-review]"},
		{store.ListParams{ListFilter: store.ListFilter{Action: "send_email"}}, "[f-email]"},
		{store.ListParams{ListFilter: store.ListFilter{DueForCheck: true}}, "[c-unknown]"},
	} {
		if got := fmt.Sprint(keys(tc.p)); got != tc.want {
			t.Errorf("list %+v = %s, want %s", tc.p, got, tc.want)
		}
	}
}

func testDueForCheckFollowsTheClock(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	register(t, s, "k1")
	if cr := claim(t, s, "k1", ClaimPolicy{WorkerID: "w1", LeaseSeconds: 1}); !cr.Claimed {
		t.Fatal("not claimed")
	}
	due := func() bool {
		ops, _, err := s.List(ctx, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{DueForCheck: true}})
		if err != nil {
			t.Fatal(err)
		}
		return len(ops) == 1 && ops[0].Key == "k1"
	}
	if due() {
		t.Fatal("a live lease is due for a check")
	}
	// The vanished worker's lease expires on the database clock: due.
	clk.Advance(time.Second)
	if !due() {
		t.Fatal("an expired lease is not due for a check")
	}
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "k1", Attempt: 1, Actor: "r1", Reason: "not found yet", NextCheckAfter: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	// The expiry is now written down: unknown since the lease's end.
	if op.Status != unknown || op.CheckCount != 1 || !op.LeaseUntil.IsZero() || op.UnknownSince.IsZero() ||
		op.NextCheckAt.Sub(op.LastCheckedAt) != time.Second {
		t.Fatalf("after RecordCheck: %+v", *op)
	}
	clk.Advance(time.Second - time.Millisecond)
	if due() {
		t.Fatal("due again before next_check_at")
	}
	clk.Advance(time.Millisecond)
	if !due() {
		t.Fatal("not due at next_check_at")
	}
	wantHistory(t, events(t, s, "k1"), ev("", pending, 0, "", ""), ev(pending, inProgress, 1, "w1", ""), ev(inProgress, unknown, 1, "r1", ""))
}

func testRecordCheckRules(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	makeUnknown(t, s, "k1")
	for i := 1; i <= 3; i++ {
		op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "k1", Attempt: 1, Actor: "r", Reason: "5xx", NextCheckAfter: time.Duration(i) * time.Hour}))
		if err != nil {
			t.Fatal(err)
		}
		if op.CheckCount != i || op.NextCheckAt.Sub(op.LastCheckedAt) != time.Duration(i)*time.Hour || op.ErrorCode != "timeout" {
			t.Fatalf("check %d: %+v", i, *op)
		}
	}
	_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "k1", Attempt: 2, Actor: "r", NextCheckAfter: time.Second}))
	wantCode(t, err, opjournal.CodeInvalidArgument) // attempt 2 was never issued
	register(t, s, "p")
	claimed(t, s, "live", noRetry)
	for _, key := range []string{"live"} {
		_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: key, Attempt: 1, Actor: "r", NextCheckAfter: time.Second}))
		wantCode(t, err, opjournal.CodeInvalidState)
	}
}

func testReleaseForRetry(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	makeUnknown(t, s, "k1")
	before := get(t, s, "k1")
	// Absence does not count inside the visibility lag (database clock).
	_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 1, Actor: "r", Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true, ReleaseAfter: time.Hour}}))
	wantCode(t, err, opjournal.CodeInvalidState)
	sameRecord(t, before, get(t, s, "k1"))
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 2, Actor: "r", Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
	wantCode(t, err, opjournal.CodeInvalidArgument)

	release := func() (*opjournal.Operation, error) {
		return Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 1, Actor: "r", Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true, ReleaseAfter: time.Second}}))
	}
	clk.Advance(time.Second - time.Millisecond)
	_, err = release()
	wantCode(t, err, opjournal.CodeInvalidState) // a millisecond early
	clk.Advance(time.Millisecond)
	op, err := release()
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != pending || op.AttemptCount != 1 || !op.UnknownSince.IsZero() {
		t.Fatalf("released: %+v", *op)
	}
	if op.UpdatedAt.Sub(before.UnknownSince) < time.Second {
		t.Fatalf("released %s after the outcome became unknown, inside the 1 s lag", op.UpdatedAt.Sub(before.UnknownSince))
	}
	// The retry claims it like any pending operation (even under
	// reconcile_before_retry): attempt 2, which starts without attempt 1's
	// error code (it stays in the history).
	if cr := claim(t, s, "k1", noRetry); !cr.Claimed || cr.Operation.AttemptCount != 2 || cr.Operation.ErrorCode != "" {
		t.Fatalf("claim after release: %+v", cr)
	}
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 1, Actor: "r", Reason: "late", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
	wantCode(t, err, opjournal.CodeStaleAttempt)
	wantHistory(t, events(t, s, "k1"),
		ev("", pending, 0, "", ""), ev(pending, inProgress, 1, "w1", ""), ev(inProgress, unknown, 1, "w1", ""),
		ev(unknown, pending, 1, "r", ""), ev(pending, inProgress, 2, "w1", ""))

	// Under review, only a person decides.
	makeUnknown(t, s, "k2")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "k2", Actor: "r", Reason: "x"})); err != nil {
		t.Fatal(err)
	}
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k2", Attempt: 1, Actor: "r", Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
	wantCode(t, err, opjournal.CodeInvalidState)
}

func testConcurrentReleasesOneApplies(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	makeUnknown(t, s, "k1")
	var applied atomic.Int64
	race(16, func(i int) {
		_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 1, Actor: fmt.Sprintf("r%d", i), Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
		switch opjournal.ErrorCode(err) {
		case "":
			applied.Add(1)
		case opjournal.CodeInvalidState:
		default:
			t.Errorf("release %d: %v", i, err)
		}
	})
	if applied.Load() != 1 {
		t.Fatalf("16 racing releases applied %d times, want 1", applied.Load())
	}
	if n := len(events(t, s, "k1")); n != 4 {
		t.Fatalf("history has %d events, want 4 (register, claim, unknown, one release)", n)
	}
}

func testEscalate(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	makeUnknown(t, s, "k1")
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "k1", Actor: "reconciler-1", Reason: "verifier keeps failing"}))
	if err != nil {
		t.Fatal(err)
	}
	if !op.NeedsReview || op.ReviewReason != "verifier keeps failing" || op.Status != unknown {
		t.Fatalf("escalated: %+v", *op)
	}
	again, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "k1", Actor: "reconciler-2", Reason: "other"}))
	if err != nil {
		t.Fatal(err)
	}
	sameRecord(t, op, again)
	if n := len(events(t, s, "k1")); n != 4 {
		t.Fatalf("a repeated escalation wrote history (%d events)", n)
	}
	// Under review nothing is claimed automatically, even with retry_same_key.
	if cr := claim(t, s, "k1", sameKey); cr.Claimed {
		t.Fatal("claimed an operation under review")
	}
	cr := claimed(t, s, "done", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "done", Attempt: cr.Operation.AttemptCount})); err != nil {
		t.Fatal(err)
	}
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "done", Actor: "r", Reason: "x"}))
	wantCode(t, err, opjournal.CodeInvalidState)
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "nope", Actor: "r", Reason: "x"}))
	wantCode(t, err, opjournal.CodeNotFound)
}

func testResolve(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	// unknown → succeeded by an operator.
	makeUnknown(t, s, "k1")
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: "k1", Resolution: succeeded, ExternalID: "pay_77", Result: json.RawMessage(`{"payment_id":"pay_77"}`), Actor: "alice", Reason: "found in the provider's dashboard"}))
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != succeeded || op.ExternalID != "pay_77" || !jsonEqual(op.Result, json.RawMessage(`{"payment_id":"pay_77"}`)) || op.NeedsReview {
		t.Fatalf("resolved: %+v", *op)
	}
	evs := events(t, s, "k1")
	wantHistory(t, evs[len(evs)-1:], ev(unknown, succeeded, 1, "alice", "pay_77"))
	// Escalated and pending → failed_final.
	register(t, s, "k2")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "k2", Actor: "r", Reason: "x"})); err != nil {
		t.Fatal(err)
	}
	op, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: "k2", Resolution: failed, ErrorCode: "cancelled_by_customer", Actor: "bob", Reason: "customer cancelled"}))
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != failed || op.ErrorCode != "cancelled_by_customer" || op.NeedsReview || op.ReviewReason != "x" {
		t.Fatalf("resolved: %+v", *op)
	}
	// A duplicate effect under review: the operator settles it.
	cr := claimed(t, s, "k3", noRetry)
	for _, ext := range []string{"pay_1", "pay_2"} {
		if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k3", Attempt: cr.Operation.AttemptCount, ExternalID: ext})); err != nil {
			t.Fatal(err)
		}
	}
	// Terminal states never go backwards: neither verdict applies to a
	// succeeded operation, also under review; the
	// operator acknowledges it instead.
	before := get(t, s, "k3")
	for _, to := range []opjournal.Status{failed, succeeded} {
		_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: "k3", Resolution: to, ExternalID: "pay_1", Actor: "carol", Reason: "pay_2 refunded"}))
		wantCode(t, err, opjournal.CodeInvalidState)
		sameRecord(t, before, get(t, s, "k3"))
	}
	if op, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdAcknowledge, Key: "k3", Actor: "carol", Reason: "pay_2 refunded"})); err != nil ||
		op.NeedsReview || op.Status != succeeded || op.ExternalID != "pay_1" || op.DuplicateExternalID != "pay_2" {
		t.Fatalf("acknowledge duplicate: %v %+v", err, op)
	}
	// Not unknown and not under review: nothing to resolve.
	register(t, s, "k4")
	claimed(t, s, "k5", noRetry)
	for _, key := range []string{"k4", "k5", "k1"} {
		before := get(t, s, key)
		_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: key, Resolution: failed, Actor: "x", Reason: "y"}))
		wantCode(t, err, opjournal.CodeInvalidState)
		sameRecord(t, before, get(t, s, key))
	}
}
