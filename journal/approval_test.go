package journal_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

const approvalPolicy = `actions:
  pay:
    payload_schema:
      type: object
      properties:
        amount_minor: {type: integer}
    approval: {when: "payload.amount_minor > 100", timeout: 1h, on_timeout: reject}
  loose:
    approval: {when: "payload.amount > 100"}
  escalating:
    approval: {required: true, timeout: 10m, on_timeout: escalate}
`

// approvalSetup is a Service with approvalPolicy on a SQLite file whose
// clock the test moves.
func approvalSetup(t *testing.T, pol string) (*journal.Service, *testclock.Clock, context.Context) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := testclock.New()
	st.SetClock(clock.Now)
	p, err := policy.Parse([]byte(pol), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return journal.New(st, p, journal.Limits{}), clock, context.Background()
}

var (
	agent = journal.Caller{Tenant: "t", Principal: "agent-1", Roles: []string{"agent"}}
	alice = journal.Caller{Tenant: "t", Principal: "alice", Roles: []string{"operator"}}
	bob   = journal.Caller{Tenant: "t", Principal: "bob", Roles: []string{"admin"}}
)

func registerAs(t *testing.T, svc *journal.Service, c journal.Caller, key, action, payload string) journal.RegisterResult {
	t.Helper()
	res, err := svc.Register(context.Background(), journal.RegisterRequest{Caller: c, Key: key, Action: action, Payload: json.RawMessage(payload),
		Claim: &journal.ClaimOptions{WorkerID: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestApprovalIsDecidedOnceAtRegistration: the policy decides at
// Register (under the threshold: claimed at once; over it: awaiting, not
// claimed, with the requester and a retry-after of at most 30 s); a
// runtime evaluation error fails safe (approval needed).
func TestApprovalIsDecidedOnceAtRegistration(t *testing.T) {
	t.Parallel()
	svc, _, _ := approvalSetup(t, approvalPolicy)
	if res := registerAs(t, svc, agent, "small", "pay", `{"amount_minor":100}`); !res.Claim.Claimed || res.Operation.Approval != nil {
		t.Fatalf("under the threshold: %+v", res.Operation)
	}
	res := registerAs(t, svc, agent, "big", "pay", `{"amount_minor":101}`)
	if res.Claim.Claimed || res.Operation.Status != opjournal.StatusAwaitingApproval || res.Operation.Approval.RequestedBy != "agent-1" ||
		!res.Operation.Approval.DistinctFromRequester || res.RetryAfter != 30*time.Second || res.Claim.RetryAfter != 30*time.Second {
		t.Fatalf("over the threshold: %+v %+v claim %+v", res.Operation, res.Operation.Approval, res.Claim)
	}
	// A payload without the member (no schema checks it) needs approval.
	res = registerAs(t, svc, agent, "odd", "loose", `{"other":1}`)
	if a := res.Operation.Approval; a == nil || res.Operation.Status != opjournal.StatusAwaitingApproval || a.Rule == "payload.amount > 100" {
		t.Fatalf("an evaluation error: %+v", a)
	}
}

// TestApprovalRoles: the recorded approvers' roles decide (an agent's
// role is refused even if the method's table let it through), the
// requester may not approve but may reject, and a second principal
// releases a two-person approval.
func TestApprovalRoles(t *testing.T) {
	t.Parallel()
	svc, _, ctx := approvalSetup(t, approvalPolicy)
	op := registerAs(t, svc, alice, "k", "pay", `{"amount_minor":500}`).Operation
	req := journal.DecisionRequest{Key: "k", RequestHash: op.RequestHash, Reason: "fine"}
	// An authenticated caller whose roles were not passed (an in-process
	// door that forgot them) is refused too: the check fails closed.
	for _, c := range []journal.Caller{agent, {Tenant: "t", Principal: "rec", Roles: []string{"reconciler"}}, {Tenant: "t", Principal: "carol"}} {
		req.Caller = c
		if _, err := svc.Approve(ctx, req); opjournal.ErrorCode(err) != opjournal.CodePermissionDenied {
			t.Fatalf("approval by %v: %v", c.Roles, err)
		}
	}
	req.Caller = alice
	if _, err := svc.Approve(ctx, req); opjournal.ErrorCode(err) != opjournal.CodePermissionDenied {
		t.Fatalf("approval by the requester: %v", err)
	}
	req.Caller = bob
	res, err := svc.Approve(ctx, req)
	if err != nil || !res.Released || res.Operation.Status != opjournal.StatusPending {
		t.Fatalf("approval by another person: %+v %v", res, err)
	}
	op = registerAs(t, svc, alice, "k2", "pay", `{"amount_minor":500}`).Operation
	if op, err := svc.Reject(ctx, journal.DecisionRequest{Caller: alice, Key: "k2", RequestHash: op.RequestHash, Reason: "my mistake"}); err != nil ||
		op.Status != opjournal.StatusFailedFinal || op.ErrorCode != opjournal.ErrorApprovalRejected {
		t.Fatalf("rejection by the requester: %+v %v", op, err)
	}
}

// TestApprovalTimeoutSweep: on the test clock, ExpireApprovals does
// nothing before the deadline and applies each on_timeout once after it,
// in every tenant; a decision before the sweep wins.
func TestApprovalTimeoutSweep(t *testing.T) {
	t.Parallel()
	svc, clock, ctx := approvalSetup(t, approvalPolicy)
	registerAs(t, svc, agent, "rej", "pay", `{"amount_minor":500}`)
	registerAs(t, svc, agent, "esc", "escalating", `{}`)
	other := journal.Caller{Tenant: "u", Principal: "agent-2", Roles: []string{"agent"}}
	registerAs(t, svc, other, "esc", "escalating", `{}`)
	decided := registerAs(t, svc, agent, "decided", "escalating", `{}`).Operation
	clock.Advance(9 * time.Minute)
	if _, err := svc.Approve(ctx, journal.DecisionRequest{Caller: bob, Key: "decided", RequestHash: decided.RequestHash, Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.ExpireApprovals(ctx); err != nil || res.Rejected+res.Escalated != 0 {
		t.Fatalf("before any deadline: %+v %v", res, err)
	}
	clock.Advance(time.Minute)
	res, err := svc.ExpireApprovals(ctx)
	if err != nil || res.Rejected != 0 || res.Escalated != 2 || res.TimedOut["escalating"] != 2 {
		t.Fatalf("at the escalations' deadline: %+v %v", res, err)
	}
	clock.Advance(time.Hour)
	if res, err := svc.ExpireApprovals(ctx); err != nil || res.Rejected != 1 || res.Escalated != 0 {
		t.Fatalf("at the rejection's deadline: %+v %v", res, err)
	}
	if res, err := svc.ExpireApprovals(ctx); err != nil || res.Rejected+res.Escalated != 0 {
		t.Fatalf("a second sweep: %+v %v", res, err)
	}
	for _, tc := range []struct {
		c      journal.Caller
		key    string
		status opjournal.Status
		review bool
	}{{agent, "rej", opjournal.StatusFailedFinal, false}, {agent, "esc", opjournal.StatusAwaitingApproval, true},
		{other, "esc", opjournal.StatusAwaitingApproval, true}, {agent, "decided", opjournal.StatusPending, false}} {
		op, err := svc.Lookup(ctx, tc.c.Tenant, tc.key)
		if err != nil || op.Status != tc.status || op.NeedsReview != tc.review {
			t.Fatalf("%s/%s after the sweeps: %+v %v", tc.c.Tenant, tc.key, op, err)
		}
	}
}

// TestLookupWait: wait_seconds beyond 60 is refused; an operation not
// awaiting approval is answered at once; a decision in this process ends
// the wait at once, a cancelled context ends it too, and with nothing
// happening it ends at wait_seconds.
func TestLookupWait(t *testing.T) {
	t.Parallel()
	svc, _, ctx := approvalSetup(t, approvalPolicy)
	if _, err := svc.LookupWait(ctx, "t", "k", 61*time.Second); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
		t.Fatalf("61 s: %v", err)
	}
	registerAs(t, svc, agent, "small", "pay", `{"amount_minor":1}`)
	start := time.Now()
	if op, err := svc.LookupWait(ctx, "t", "small", time.Minute); err != nil || op.Status != opjournal.StatusInProgress || time.Since(start) > 5*time.Second {
		t.Fatalf("not awaiting: %+v %v after %s", op, err, time.Since(start))
	}
	op := registerAs(t, svc, agent, "big", "pay", `{"amount_minor":500}`).Operation
	got := make(chan *opjournal.Operation, 1)
	go func() {
		op, err := svc.LookupWait(ctx, "t", "big", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- op
	}()
	// The decision may come before the wait starts, or during it: either
	// way the answer shows it, long before the minute (the wait's own
	// re-read is a second, so the 30 s bound tells a wake-up from the end).
	if _, err := svc.Approve(ctx, journal.DecisionRequest{Caller: bob, Key: "big", RequestHash: op.RequestHash, Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	select {
	case op := <-got:
		if op.Status != opjournal.StatusPending {
			t.Fatalf("the long poll answered %s", op.Status)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll did not end after the approval")
	}
	registerAs(t, svc, agent, "big2", "pay", `{"amount_minor":500}`)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Cancelled before its first read the wait is the read's error;
		// after it, the record as read.
		op, err := svc.LookupWait(cctx, "t", "big2", time.Minute)
		if (err == nil) != (op != nil) || (op != nil && op.Status != opjournal.StatusAwaitingApproval) {
			t.Errorf("a cancelled wait: %+v %v", op, err)
		}
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled wait did not end")
	}
	start = time.Now()
	if op, err := svc.LookupWait(ctx, "t", "big2", time.Second); err != nil || op.Status != opjournal.StatusAwaitingApproval || time.Since(start) < time.Second {
		t.Fatalf("a wait without a decision: %+v %v after %s", op, err, time.Since(start))
	}
}

// TestApprovalsRecordedBeforePrincipalIdsFailClosed: an approval written
// before principal ids holds token names and no labels (a Caller without
// Label records exactly that). Such a record is read through the
// caller's former names as well as its id: carol, who asked with her
// "carol-agent" token, may not approve with "carol-ops"; alice, who gave
// the first of two approvals as "alice-laptop", may not give the second
// as "alice-phone". A record written since (it holds labels) is compared
// by id alone: the tokens file's alice-ops is not the JWT subject
// alice-ops that asked.
func TestApprovalsRecordedBeforePrincipalIdsFailClosed(t *testing.T) {
	t.Parallel()
	svc, _, ctx := approvalSetup(t, approvalPolicy+`  transfer:
    approval: {required: true, two_person: true}
`)
	person := func(id, label string, former ...string) journal.Caller {
		return journal.Caller{Tenant: "t", Principal: id, Label: label, FormerNames: former, Roles: []string{"operator", "agent"}}
	}
	oldCarol := journal.Caller{Tenant: "t", Principal: "carol-agent", Roles: []string{"agent"}}
	carol := person("carol", "carol-ops", "carol-agent", "carol-ops")
	op := registerAs(t, svc, oldCarol, "legacy-pay", "pay", `{"amount_minor":500}`).Operation
	if op.Approval.RequestedBy != "carol-agent" || op.Approval.RequestedByLabel != "" {
		t.Fatalf("not a record of the old shape: %+v", op.Approval)
	}
	_, err := svc.Approve(ctx, journal.DecisionRequest{Caller: carol, Key: "legacy-pay", RequestHash: op.RequestHash, Reason: "mine"})
	if opjournal.ErrorCode(err) != opjournal.CodePermissionDenied {
		t.Fatalf("carol approves her own request recorded under her token's name: %v", err)
	}

	oldAlice := journal.Caller{Tenant: "t", Principal: "alice-laptop", Roles: []string{"operator"}}
	op = registerAs(t, svc, agent, "legacy-transfer", "transfer", `{"to":"DE02"}`).Operation
	if _, err := svc.Approve(ctx, journal.DecisionRequest{Caller: oldAlice, Key: "legacy-transfer", RequestHash: op.RequestHash, Reason: "one"}); err != nil {
		t.Fatal(err)
	}
	alice := person("alice", "alice-phone", "alice-laptop", "alice-phone")
	_, err = svc.Approve(ctx, journal.DecisionRequest{Caller: alice, Key: "legacy-transfer", RequestHash: op.RequestHash, Reason: "two"})
	if opjournal.ErrorCode(err) != opjournal.CodeInvalidState {
		t.Fatalf("alice's second approval under her other token: %v", err)
	}
	res, err := svc.Approve(ctx, journal.DecisionRequest{Caller: person("bob", "bob", "bob"), Key: "legacy-transfer", RequestHash: op.RequestHash, Reason: "two"})
	if err != nil || !res.Released {
		t.Fatalf("bob's approval: %+v %v", res, err)
	}

	jwtNamesake := person("jwt:https://idp.test/#alice-ops", "alice-ops", "alice-ops")
	op = registerAs(t, svc, jwtNamesake, "new-pay", "pay", `{"amount_minor":500}`).Operation
	res, err = svc.Approve(ctx, journal.DecisionRequest{Caller: person("alice-ops", "alice-ops", "alice-ops"), Key: "new-pay", RequestHash: op.RequestHash, Reason: "not mine"})
	if err != nil || !res.Released {
		t.Fatalf("another principal with the same label: %+v %v", res, err)
	}
}
