// Package storetest is the conformance suite every store.Store runs. Each
// rule of docs/spec.md that a store enforces is a test here; a store package
// calls Run from its own test with a function that makes a fresh database.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// Opener opens a Store on one database. Calling it again opens another,
// independent Store on the SAME database: a second server process, or the
// same process after a restart. Stores are closed when the test ends.
type Opener func(t *testing.T) store.Store

// NewDatabase creates an empty, isolated database for one test and returns
// its Opener.
type NewDatabase func(t *testing.T) Opener

// Run runs the whole conformance suite.
func Run(t *testing.T, newDB NewDatabase) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newDB NewDatabase)
	}{
		{"RegisterNew", testRegisterNew},
		{"RegisterReplay", testRegisterReplay},
		{"RegisterPayloadMismatchChangesNothing", testRegisterPayloadMismatch},
		{"RegisterWithClaim", testRegisterWithClaim},
		{"RegisterWithClaimExisting", testRegisterWithClaimExisting},
		{"TenantsAreSeparate", testTenants},
		{"ClaimPendingOnce", testClaimPendingOnce},
		{"ClaimNotFound", testClaimNotFound},
		{"ClaimFromUnknownFollowsPolicy", testClaimFromUnknown},
		{"ClaimTerminalReturnsState", testClaimTerminal},
		{"LeaseExpiryOnDatabaseClock", testLeaseExpiry},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"ConcurrentRegisterWithClaimAndClaims", testRegisterWithClaimRace},
		{"ConcurrentRegistersOneCreated", testConcurrentRegisters},
		{"ConcurrentConflictingRegisters", testConcurrentConflictingRegisters},
		{"TwoProcessesOneDatabase", testTwoProcesses},
		{"MarkSucceeded", testMarkSucceeded},
		{"MarkSucceededSameExternalIDIsNoop", testMarkSucceededNoop},
		{"MarkSucceededDuplicateEffect", testMarkSucceededDuplicate},
		{"MarkSucceededFromStaleAttempt", testMarkSucceededStale},
		{"MarkSucceededAttemptNeverIssued", testMarkSucceededNeverIssued},
		{"MarkSucceededAfterFailedFinal", testMarkSucceededAfterFailedFinal},
		{"ConcurrentMarkSucceededDifferentIDs", testConcurrentMarkSucceeded},
		{"MarkUnknown", testMarkUnknown},
		{"MarkFailedFinal", testMarkFailedFinal},
		{"StaleAttemptChangesNothing", testStaleAttempt},
		{"ConcurrentMarksByHolder", testConcurrentHolderMarks},
		{"MarkNotFound", testMarkNotFound},
		{"RestartKeepsEverything", testRestart},
		{"HistoryRecordsEveryChange", testHistoryRecordsEveryChange},
		{"RefusalsWriteNoHistory", testRefusalsWriteNoHistory},
		{"ListFiltersAndPages", testListFiltersAndPages},
		{"DueForCheckFollowsTheClock", testDueForCheckFollowsTheClock},
		{"RecordCheck", testRecordCheckRules},
		{"ReleaseForRetry", testReleaseForRetry},
		{"ConcurrentReleasesOneApplies", testConcurrentReleasesOneApplies},
		{"Escalate", testEscalate},
		{"Resolve", testResolve},
		{"SetNote", testSetNote},
		{"ApprovalRegister", testApprovalRegister},
		{"Approve", testApprove},
		{"ApproveTwoPerson", testApproveTwoPerson},
		{"RejectApproval", testReject},
		{"ApprovalTimeout", testApprovalTimeout},
		{"ConcurrentApprovalDecisions", testConcurrentDecisions},
		{"AwaitingApprovals", testAwaitingApprovals},
		{"Refs", testRefs},
		{"ParentKey", testParentKey},
		{"ProviderDedupWindow", testProviderWindow},
		{"Purge", testPurge},
		{"OldestTerminal", testOldestTerminal},
		{"ConcurrentPurgers", testConcurrentPurgers},
		{"PurgeRacesReplay", testPurgeRacesReplay},
		{"TryLock", testTryLock},
		{"ListKeyPrefix", testListKeyPrefix},
		{"ListUpdatedRange", testListUpdatedRange},
		{"ListLeaseExpired", testListLeaseExpired},
		{"Counts", testCounts},
		{"Activity", testActivity},
		{"BudgetReserve", testBudgetReserve},
		{"BudgetRelease", testBudgetRelease},
		{"BudgetWindow", testBudgetWindow},
		{"BudgetApproval", testBudgetApproval},
		{"BudgetPurge", testBudgetPurge},
		{"BudgetListing", testBudgetListing},
		{"ConcurrentBudget", testConcurrentBudget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB)
		})
	}
}

const (
	tenant = "acme"
	action = "create_payment"
)

var (
	payload  = json.RawMessage(`{"amount_minor":490000,"currency":"RUB","order_id":"817"}`)
	hashA    = "a1" + fmt.Sprintf("%062x", 1)
	hashB    = "b2" + fmt.Sprintf("%062x", 2)
	noRetry  = ClaimPolicy{WorkerID: "w1", LeaseSeconds: 30}
	sameKey  = ClaimPolicy{WorkerID: "w1", LeaseSeconds: 30, AllowRetryAfterUnknown: true}
	testTime = 30 * time.Second
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTime)
	t.Cleanup(cancel)
	return ctx
}

// setup returns a Store on a fresh database and a context for the test.
func setup(t *testing.T, newDB NewDatabase) (store.Store, context.Context) {
	t.Helper()
	return newDB(t)(t), ctxT(t)
}

func register(t *testing.T, s store.Store, key string) *opjournal.Operation {
	t.Helper()
	res, err := s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload})
	if err != nil {
		t.Fatalf("register %q: %v", key, err)
	}
	return res.Operation
}

func claim(t *testing.T, s store.Store, key string, cp ClaimPolicy) store.Applied {
	t.Helper()
	res, err := s.Apply(ctxT(t), tenant, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: key}, &cp))
	if err != nil {
		t.Fatalf("claim %q: %v", key, err)
	}
	return res
}

func get(t *testing.T, s store.Store, key string) *opjournal.Operation {
	t.Helper()
	op, err := s.Get(ctxT(t), tenant, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return op
}

// claimed registers key and claims it, returning the claim.
func claimed(t *testing.T, s store.Store, key string, cp ClaimPolicy) store.Applied {
	t.Helper()
	register(t, s, key)
	cr := claim(t, s, key, cp)
	if !cr.Claimed {
		t.Fatalf("claim of fresh %q not granted: %+v", key, cr.Operation)
	}
	return cr
}

func wantCode(t *testing.T, err error, code opjournal.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got := opjournal.ErrorCode(err); got != code {
		t.Fatalf("got error %v (code %s), want code %s", err, got, code)
	}
}

func wantStatus(t *testing.T, op *opjournal.Operation, st opjournal.Status) {
	t.Helper()
	if op.Status != st {
		t.Fatalf("status = %s, want %s (operation %+v)", op.Status, st, *op)
	}
}

// sameRecord fails unless a and b are the same row (JSON compared by value).
func sameRecord(t *testing.T, a, b *opjournal.Operation) {
	t.Helper()
	ca, cb := *a, *b
	if !jsonEqual(ca.Payload, cb.Payload) || !jsonEqual(ca.Result, cb.Result) {
		t.Fatalf("JSON differs:\n%s %s\n%s %s", ca.Payload, ca.Result, cb.Payload, cb.Result)
	}
	ca.Payload, cb.Payload, ca.Result, cb.Result = nil, nil, nil, nil
	if !ca.CreatedAt.Equal(cb.CreatedAt) || !ca.UpdatedAt.Equal(cb.UpdatedAt) || !ca.LeaseUntil.Equal(cb.LeaseUntil) {
		t.Fatalf("times differ:\n%+v\n%+v", ca, cb)
	}
	ca.CreatedAt, cb.CreatedAt, ca.UpdatedAt, cb.UpdatedAt, ca.LeaseUntil, cb.LeaseUntil = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(ca, cb) {
		t.Fatalf("records differ:\n%+v\n%+v", ca, cb)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// clockOf gives the store a clock the test moves (store.Clock), so that a
// lease expires or a lag passes at once rather than after a sleep.
func clockOf(t *testing.T, s store.Store) *testclock.Clock {
	t.Helper()
	sc, ok := s.(store.Clock)
	if !ok {
		t.Fatalf("%T does not implement store.Clock", s)
	}
	c := testclock.New()
	sc.SetClock(c.Now)
	return c
}

func testRegisterNew(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	res, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	op := res.Operation
	if !res.Created || res.Claimed {
		t.Fatalf("created=%v claimed=%v, want created and not claimed", res.Created, res.Claimed)
	}
	wantStatus(t, op, opjournal.StatusPending)
	if op.Key != "k1" || op.Tenant != tenant || op.Action != action || op.RequestHash != hashA || op.AttemptCount != 0 ||
		!jsonEqual(op.Payload, payload) || op.Result != nil || !op.LeaseUntil.IsZero() || op.NeedsReview || op.CreatedAt.IsZero() || !op.CreatedAt.Equal(op.UpdatedAt) {
		t.Fatalf("unexpected new record: %+v", *op)
	}
	sameRecord(t, op, get(t, s, "k1"))
}

func testRegisterReplay(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	first := register(t, s, "k1")
	res, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created {
		t.Fatal("second register reported created")
	}
	sameRecord(t, first, res.Operation)

	// Once succeeded, a replay returns the stored result.
	cr := claim(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: "pay_1", Result: json.RawMessage(`{"payment_id":"pay_1"}`)})); err != nil {
		t.Fatal(err)
	}
	res, err = s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res.Operation, opjournal.StatusSucceeded)
	if res.Created || res.Operation.ExternalID != "pay_1" || !jsonEqual(res.Operation.Result, json.RawMessage(`{"payment_id":"pay_1"}`)) {
		t.Fatalf("replay of succeeded: %+v", *res.Operation)
	}
}

func testRegisterPayloadMismatch(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "k1")
	cr := claim(t, s, "k1", noRetry)
	before := get(t, s, "k1")
	for _, withClaim := range []*ClaimPolicy{nil, &sameKey} {
		_, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashB, Payload: json.RawMessage(`{"amount_minor":1}`)}, withClaim))
		wantCode(t, err, opjournal.CodePayloadMismatch)
		if !errors.Is(err, opjournal.ErrPayloadMismatch) {
			t.Fatalf("errors.Is(%v, ErrPayloadMismatch) = false", err)
		}
	}
	sameRecord(t, before, get(t, s, "k1"))
	if before.AttemptCount != cr.Operation.AttemptCount {
		t.Fatal("attempt changed")
	}
}

func testRegisterWithClaim(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cp := ClaimPolicy{WorkerID: "agent-7", LeaseSeconds: 45}
	res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || !res.Claimed {
		t.Fatalf("register with claim: created=%v result=%+v", res.Created, res)
	}
	op := res.Operation
	wantStatus(t, op, opjournal.StatusInProgress)
	if op.AttemptCount != 1 || op.LeaseOwner != "agent-7" {
		t.Fatalf("attempt=%d owner=%q", op.AttemptCount, op.LeaseOwner)
	}
	// The lease is now + 45 s on the database clock of the same statement.
	if d := op.LeaseUntil.Sub(op.UpdatedAt); d != 45*time.Second {
		t.Fatalf("lease_until - updated_at = %s, want exactly 45s (database clock)", d)
	}
	sameRecord(t, op, get(t, s, "k1"))
}

func testRegisterWithClaimExisting(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "k1")
	cp := ClaimPolicy{WorkerID: "w2", LeaseSeconds: 30}
	res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp))
	if err != nil {
		t.Fatal(err)
	}
	if res.Created || !res.Claimed || res.Operation.AttemptCount != 1 {
		t.Fatalf("register-with-claim of pending: created=%v result=%+v", res.Created, res)
	}
	// The lease is live: a second register-with-claim loses, with a hint.
	res, err = s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp))
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.RetryAfter <= 0 || res.RetryAfter > 30*time.Second {
		t.Fatalf("second register-with-claim: %+v", res)
	}
	wantStatus(t, res.Operation, opjournal.StatusInProgress)
	if res.Operation.AttemptCount != 1 {
		t.Fatalf("attempt = %d, want 1", res.Operation.AttemptCount)
	}
}

func testTenants(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	for _, tn := range []string{"a", "b"} {
		res, err := s.Apply(ctx, tn, &protocol.Command{Kind: protocol.CmdRegister, Key: "shared-key", Action: action, RequestHash: map[string]string{"a": hashA, "b": hashB}[tn], Payload: payload})
		if err != nil || !res.Created {
			t.Fatalf("tenant %s: created=%v err=%v", tn, res.Created, err)
		}
	}
	if _, err := s.Get(ctx, "c", "shared-key"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("tenant c sees another tenant's key: %v", err)
	}
	a, _ := s.Get(ctx, "a", "shared-key")
	b, _ := s.Get(ctx, "b", "shared-key")
	if a.RequestHash != hashA || b.RequestHash != hashB {
		t.Fatal("tenants share a record")
	}
}

func testClaimPendingOnce(t *testing.T, newDB NewDatabase) {
	s, _ := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	wantStatus(t, cr.Operation, opjournal.StatusInProgress)
	if cr.Operation.AttemptCount != 1 || cr.Operation.LeaseOwner != "w1" {
		t.Fatalf("claim: %+v", *cr.Operation)
	}
	again := claim(t, s, "k1", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 30, AllowRetryAfterUnknown: true})
	if again.Claimed || again.RetryAfter <= 0 || again.RetryAfter > 30*time.Second {
		t.Fatalf("claim of a live lease: claimed=%v retry_after=%s", again.Claimed, again.RetryAfter)
	}
	if again.Operation.AttemptCount != 1 || again.Operation.LeaseOwner != "w1" {
		t.Fatalf("losing claim changed the row: %+v", *again.Operation)
	}
}

func testClaimNotFound(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	_, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "nope"}, &noRetry))
	wantCode(t, err, opjournal.CodeNotFound)
	_, err = s.Get(ctx, tenant, "nope")
	wantCode(t, err, opjournal.CodeNotFound)
}

func testClaimFromUnknown(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: cr.Operation.AttemptCount, ErrorCode: "timeout"})); err != nil {
		t.Fatal(err)
	}
	// reconcile_before_retry: waits for the reconciler.
	lost := claim(t, s, "k1", noRetry)
	if lost.Claimed || lost.RetryAfter != 0 {
		t.Fatalf("claim from unknown under reconcile_before_retry: %+v", lost)
	}
	wantStatus(t, lost.Operation, opjournal.StatusUnknown)
	// retry_same_key: the provider deduplicates, so the same key may go again.
	won := claim(t, s, "k1", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 30, AllowRetryAfterUnknown: true})
	if !won.Claimed || won.Operation.AttemptCount != 2 || won.Operation.LeaseOwner != "w2" {
		t.Fatalf("claim from unknown under retry_same_key: %+v %+v", won, *won.Operation)
	}
	wantStatus(t, won.Operation, opjournal.StatusInProgress)
}

func testClaimTerminal(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "ok", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "ok", Attempt: cr.Operation.AttemptCount, ExternalID: "x1", Result: json.RawMessage(`{"id":"x1"}`)})); err != nil {
		t.Fatal(err)
	}
	cr = claimed(t, s, "no", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "no", Attempt: cr.Operation.AttemptCount, ErrorCode: "card_declined"})); err != nil {
		t.Fatal(err)
	}
	for key, st := range map[string]opjournal.Status{"ok": opjournal.StatusSucceeded, "no": opjournal.StatusFailedFinal} {
		res := claim(t, s, key, sameKey)
		if res.Claimed {
			t.Fatalf("claimed terminal %s", key)
		}
		wantStatus(t, res.Operation, st)
		if res.Operation.AttemptCount != 1 {
			t.Fatalf("attempt moved on terminal %s", key)
		}
	}
	if op := get(t, s, "ok"); !jsonEqual(op.Result, json.RawMessage(`{"id":"x1"}`)) {
		t.Fatalf("stored result lost: %s", op.Result)
	}
}

func testLeaseExpiry(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	register(t, s, "k1")
	cr := claim(t, s, "k1", ClaimPolicy{WorkerID: "w1", LeaseSeconds: 1})
	if !cr.Claimed {
		t.Fatal("not claimed")
	}
	// Both times come from one statement on the database clock: exact.
	if d := cr.Operation.LeaseUntil.Sub(cr.Operation.UpdatedAt); d != time.Second {
		t.Fatalf("lease_until - updated_at = %s, want exactly 1s", d)
	}
	// The lease ends on the database clock: a millisecond before, it holds;
	// at its end, the effective status turns unknown.
	clk.Advance(time.Second - time.Millisecond)
	wantStatus(t, get(t, s, "k1"), opjournal.StatusInProgress)
	clk.Advance(time.Millisecond)
	wantStatus(t, get(t, s, "k1"), opjournal.StatusUnknown)
	// Under reconcile_before_retry nobody may claim; the holder may not
	// mark unknown or failed_final any more (it no longer holds a lease).
	if res := claim(t, s, "k1", noRetry); res.Claimed || res.Operation.Status != opjournal.StatusUnknown {
		t.Fatalf("claim of an expired lease under reconcile_before_retry: %+v", res)
	}
	_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "k1", Attempt: 1, ErrorCode: "late"}))
	wantCode(t, err, opjournal.CodeStaleAttempt)
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: 1}))
	wantCode(t, err, opjournal.CodeStaleAttempt)
	// Under retry_same_key the expired lease is claimable with a new attempt.
	res := claim(t, s, "k1", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 30, AllowRetryAfterUnknown: true})
	if !res.Claimed || res.Operation.AttemptCount != 2 {
		t.Fatalf("claim of an expired lease under retry_same_key: %+v", res)
	}
	// The vanished worker's late confirmation is still a fact.
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: 1, ExternalID: "pay_1"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusSucceeded)
}

// race starts n goroutines that wait on one gate and then call fn together.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			fn(i)
		}()
	}
	close(gate)
	wg.Wait()
}

func testConcurrentClaims(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "k1")
	var won, lost, failed atomic.Int64
	race(64, func(i int) {
		res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "k1"}, &ClaimPolicy{WorkerID: fmt.Sprintf("w%d", i), LeaseSeconds: 30}))
		switch {
		case err != nil:
			t.Errorf("claim %d: %v", i, err)
			failed.Add(1)
		case res.Claimed:
			won.Add(1)
		default:
			lost.Add(1)
		}
	})
	if won.Load() != 1 || lost.Load() != 63 {
		t.Fatalf("64 concurrent claims: %d won, %d lost, %d failed; want exactly 1 lease", won.Load(), lost.Load(), failed.Load())
	}
	if op := get(t, s, "k1"); op.AttemptCount != 1 || op.Status != opjournal.StatusInProgress {
		t.Fatalf("after the race: %+v", *op)
	}
}

func testRegisterWithClaimRace(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	var won, created atomic.Int64
	race(64, func(i int) {
		cp := ClaimPolicy{WorkerID: fmt.Sprintf("w%d", i), LeaseSeconds: 30}
		if i%2 == 0 {
			res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp))
			if err != nil {
				t.Errorf("register-with-claim %d: %v", i, err)
				return
			}
			if res.Created {
				created.Add(1)
			}
			if res.Claimed {
				won.Add(1)
			}
			return
		}
		res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "k1"}, &cp))
		if opjournal.ErrorCode(err) == opjournal.CodeNotFound {
			return // claimed before anyone registered: a correct answer
		}
		if err != nil {
			t.Errorf("claim %d: %v", i, err)
			return
		}
		if res.Claimed {
			won.Add(1)
		}
	})
	if won.Load() != 1 || created.Load() != 1 {
		t.Fatalf("register-with-claim racing claims: %d leases granted, %d created; want 1 and 1", won.Load(), created.Load())
	}
	if op := get(t, s, "k1"); op.AttemptCount != 1 {
		t.Fatalf("attempt_count = %d, want 1", op.AttemptCount)
	}
}

func testConcurrentRegisters(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	var created atomic.Int64
	race(64, func(i int) {
		res, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload})
		if err != nil {
			t.Errorf("register %d: %v", i, err)
			return
		}
		if res.Created {
			created.Add(1)
		}
	})
	if created.Load() != 1 {
		t.Fatalf("64 concurrent registers created %d operations, want 1", created.Load())
	}
}

func testConcurrentConflictingRegisters(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	var created, mismatched, replayed atomic.Int64
	race(32, func(i int) {
		h := hashA
		if i%2 == 1 {
			h = hashB
		}
		res, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: h, Payload: payload})
		switch {
		case opjournal.ErrorCode(err) == opjournal.CodePayloadMismatch:
			mismatched.Add(1)
		case err != nil:
			t.Errorf("register %d: %v", i, err)
		case res.Created:
			created.Add(1)
		default:
			replayed.Add(1)
		}
	})
	// One hash wins; every caller with the same hash replays, every caller
	// with the other gets a conflict: 16 of each kind.
	if created.Load() != 1 || replayed.Load() != 15 || mismatched.Load() != 16 {
		t.Fatalf("created=%d replayed=%d mismatched=%d; want 1/15/16", created.Load(), replayed.Load(), mismatched.Load())
	}
}

func testTwoProcesses(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	a, b := open(t), open(t)
	ctx := ctxT(t)
	const keys = 20
	var won [keys]atomic.Int64
	race(40, func(i int) {
		s := a
		if i%2 == 1 {
			s = b
		}
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%d", k)
			cp := ClaimPolicy{WorkerID: fmt.Sprintf("p%d", i), LeaseSeconds: 30}
			res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload}, &cp))
			if err != nil {
				t.Errorf("register-with-claim: %v", err)
				return
			}
			if res.Claimed {
				won[k].Add(1)
			}
		}
	})
	for k := range won {
		if won[k].Load() != 1 {
			t.Fatalf("key k%d: %d leases granted across two stores, want 1", k, won[k].Load())
		}
	}
}

func testMarkSucceeded(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: "pay_1", Result: json.RawMessage(`{"payment_id":"pay_1","status":"captured"}`)}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusSucceeded)
	if op.ExternalID != "pay_1" || !op.LeaseUntil.IsZero() || op.NeedsReview || !jsonEqual(op.Result, json.RawMessage(`{"status":"captured","payment_id":"pay_1"}`)) {
		t.Fatalf("after MarkSucceeded: %+v", *op)
	}
	sameRecord(t, op, get(t, s, "k1"))
}

func testMarkSucceededNoop(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	p := protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: "pay_1", Result: json.RawMessage(`{"a":1}`)}
	first, err := Op(s.Apply(ctx, tenant, &p))
	if err != nil {
		t.Fatal(err)
	}
	p.Result = json.RawMessage(`{"a":2}`)
	second, err := Op(s.Apply(ctx, tenant, &p))
	if err != nil {
		t.Fatal(err)
	}
	sameRecord(t, first, second)
	sameRecord(t, first, get(t, s, "k1"))
	// A repeat without an external_id is not a second effect: nothing
	// changes, nothing goes to review, no event.
	before := len(events(t, s, "k1"))
	p.ExternalID = ""
	third, err := Op(s.Apply(ctx, tenant, &p))
	if err != nil {
		t.Fatal(err)
	}
	sameRecord(t, first, third)
	if third.NeedsReview || len(events(t, s, "k1")) != before {
		t.Fatalf("an empty external_id after %q: %+v, %d events (was %d)", first.ExternalID, *third, len(events(t, s, "k1")), before)
	}
}

func testMarkSucceededDuplicate(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: "pay_1", Result: json.RawMessage(`{"n":1}`)})); err != nil {
		t.Fatal(err)
	}
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: "pay_2", Result: json.RawMessage(`{"n":2}`)}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusSucceeded)
	if op.ExternalID != "pay_1" || op.DuplicateExternalID != "pay_2" || !op.NeedsReview || op.ReviewReason == "" || !jsonEqual(op.Result, json.RawMessage(`{"n":1}`)) {
		t.Fatalf("duplicate effect not recorded as such: %+v", *op)
	}
	sameRecord(t, op, get(t, s, "k1"))
}

func testMarkSucceededStale(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: cr.Operation.AttemptCount, ErrorCode: "timeout"})); err != nil {
		t.Fatal(err)
	}
	second := claim(t, s, "k1", sameKey)
	if !second.Claimed || second.Operation.AttemptCount != 2 {
		t.Fatalf("reclaim: %+v", second)
	}
	// Attempt 1 learns its call went through: accepted, a confirmed effect is a fact.
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: 1, ExternalID: "pay_1"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusSucceeded)
	if op.ExternalID != "pay_1" || op.AttemptCount != 2 {
		t.Fatalf("stale MarkSucceeded: %+v", *op)
	}
	// Attempt 2 may no longer fail the operation.
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "k1", Attempt: 2, ErrorCode: "x"}))
	wantCode(t, err, opjournal.CodeStaleAttempt)
}

func testMarkSucceededNeverIssued(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "pending")
	claimed(t, s, "claimed", noRetry)
	for _, tc := range []struct {
		key     string
		attempt int
	}{{"pending", 1}, {"pending", 0}, {"claimed", 0}, {"claimed", 2}, {"claimed", -1}} {
		before := get(t, s, tc.key)
		_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: tc.key, Attempt: tc.attempt, ExternalID: "x"}))
		wantCode(t, err, opjournal.CodeInvalidArgument)
		sameRecord(t, before, get(t, s, tc.key))
	}
}

func testMarkSucceededAfterFailedFinal(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "k1", Attempt: cr.Operation.AttemptCount, ErrorCode: "declined"})); err != nil {
		t.Fatal(err)
	}
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: 1, ExternalID: "pay_9"}))
	if err != nil {
		t.Fatal(err)
	}
	// The contradiction goes to a person; nothing is overwritten.
	wantStatus(t, op, opjournal.StatusFailedFinal)
	if !op.NeedsReview || op.DuplicateExternalID != "pay_9" || op.ErrorCode != "declined" || op.ExternalID != "" {
		t.Fatalf("success after failed_final: %+v", *op)
	}
}

func testConcurrentMarkSucceeded(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	var ok atomic.Int64
	race(16, func(i int) {
		_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k1", Attempt: cr.Operation.AttemptCount, ExternalID: fmt.Sprintf("pay_%d", i)}))
		if err != nil {
			t.Errorf("mark %d: %v", i, err)
			return
		}
		ok.Add(1)
	})
	op := get(t, s, "k1")
	wantStatus(t, op, opjournal.StatusSucceeded)
	if ok.Load() != 16 || op.ExternalID == "" || op.DuplicateExternalID == "" || op.ExternalID == op.DuplicateExternalID || !op.NeedsReview {
		t.Fatalf("16 different confirmations: ok=%d %+v", ok.Load(), *op)
	}
}

func testMarkUnknown(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: cr.Operation.AttemptCount, ErrorCode: "timeout"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusUnknown)
	if op.ErrorCode != "timeout" || !op.LeaseUntil.IsZero() || op.AttemptCount != 1 {
		t.Fatalf("after MarkUnknown: %+v", *op)
	}
	sameRecord(t, op, get(t, s, "k1"))
}

func testMarkFailedFinal(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "k1", Attempt: cr.Operation.AttemptCount, ErrorCode: "card_declined"}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusFailedFinal)
	if op.ErrorCode != "card_declined" || !op.LeaseUntil.IsZero() {
		t.Fatalf("after MarkFailedFinal: %+v", *op)
	}
	// Terminal: a replay returns it, a late MarkUnknown is stale.
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: 1}))
	wantCode(t, err, opjournal.CodeStaleAttempt)
	sameRecord(t, op, get(t, s, "k1"))
}

func testStaleAttempt(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: cr.Operation.AttemptCount})); err != nil {
		t.Fatal(err)
	}
	if res := claim(t, s, "k1", sameKey); !res.Claimed || res.Operation.AttemptCount != 2 {
		t.Fatalf("reclaim: %+v", res)
	}
	before := get(t, s, "k1")
	for _, mark := range []protocol.CommandKind{protocol.CmdMarkUnknown, protocol.CmdMarkFailedFinal} {
		_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: mark, Key: "k1", Attempt: 1, ErrorCode: "late"})
		wantCode(t, err, opjournal.CodeStaleAttempt)
		if !errors.Is(err, opjournal.ErrStaleAttempt) {
			t.Fatal("errors.Is(ErrStaleAttempt) = false")
		}
		_, err = s.Apply(ctx, tenant, &protocol.Command{Kind: mark, Key: "k1", Attempt: 3})
		wantCode(t, err, opjournal.CodeInvalidArgument)
	}
	sameRecord(t, before, get(t, s, "k1"))
	// A pending operation has no holder at all.
	register(t, s, "p")
	_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "p", Attempt: 1}))
	wantCode(t, err, opjournal.CodeInvalidArgument)
}

func testConcurrentHolderMarks(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	cr := claimed(t, s, "k1", noRetry)
	var ok, stale atomic.Int64
	race(32, func(i int) {
		mark := protocol.CmdMarkUnknown
		if i%2 == 1 {
			mark = protocol.CmdMarkFailedFinal
		}
		_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: mark, Key: "k1", Attempt: cr.Operation.AttemptCount})
		switch opjournal.ErrorCode(err) {
		case "":
			ok.Add(1)
		case opjournal.CodeStaleAttempt:
			stale.Add(1)
		default:
			t.Errorf("mark %d: %v", i, err)
		}
	})
	if ok.Load() != 1 || stale.Load() != 31 {
		t.Fatalf("32 racing marks by the holder: %d applied, %d stale; want 1 and 31", ok.Load(), stale.Load())
	}
}

func testMarkNotFound(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	_, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "nope", Attempt: 1}))
	wantCode(t, err, opjournal.CodeNotFound)
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "nope", Attempt: 1}))
	wantCode(t, err, opjournal.CodeNotFound)
	_, err = Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "nope", Attempt: 1}))
	wantCode(t, err, opjournal.CodeNotFound)
}

func testRestart(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	s := open(t)
	ctx := ctxT(t)
	register(t, s, "pending")
	cr := claimed(t, s, "leased", noRetry)
	cr2 := claimed(t, s, "done", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "done", Attempt: cr2.Operation.AttemptCount, ExternalID: "e1", Result: json.RawMessage(`{"x":[1,2]}`)})); err != nil {
		t.Fatal(err)
	}
	before := map[string]*opjournal.Operation{}
	for _, k := range []string{"pending", "leased", "done"} {
		before[k] = get(t, s, k)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t)
	for k, op := range before {
		after, err := s2.Get(ctx, tenant, k)
		if err != nil {
			t.Fatalf("after restart: %v", err)
		}
		sameRecord(t, op, after)
	}
	// The lease survives the restart: the holder can still finish.
	if _, err := Op(s2.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "leased", Attempt: cr.Operation.AttemptCount})); err != nil {
		t.Fatalf("holder after restart: %v", err)
	}
}
