package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

const awaiting = opjournal.StatusAwaitingApproval

// approvalTimeout is the approvals' timeout in these tests.
const approvalTimeout = time.Hour

// askApproval is the approval a policy asks of a request: one person
// (twoPerson: two) of operator or admin, not the requester "agent-1".
func askApproval(twoPerson bool, onTimeout string) *opjournal.Approval {
	return &opjournal.Approval{Required: true, Approvers: []string{"operator", "admin"}, DistinctFromRequester: true,
		TwoPerson: twoPerson, RequestedBy: "agent-1", OnTimeout: onTimeout, Rule: "payload.amount_minor > 100000"}
}

// registerAwaiting registers key with an approval (and a claim when cp is
// set), as the journal does for a request its policy wants approved.
func registerAwaiting(t *testing.T, s store.Store, key string, a *opjournal.Approval, cp *ClaimPolicy) store.Applied {
	t.Helper()
	res, err := s.Apply(ctxT(t), tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action,
		RequestHash: hashA, Payload: payload, Approval: a, ApprovalTimeout: approvalTimeout}, cp))
	if err != nil {
		t.Fatalf("register %q awaiting approval: %v", key, err)
	}
	return res
}

// decide applies Approve or Reject by principal with the hash it saw.
// Each decision is made with the principal's "-laptop" token: the label
// recorded beside the id.
func decide(t *testing.T, s store.Store, kind protocol.CommandKind, key, principal, hash string) (*opjournal.Operation, error) {
	t.Helper()
	return decideWith(t, s, kind, key, principal, principal+"-laptop", hash)
}

// decideWith is decide with the credential labelled label.
func decideWith(t *testing.T, s store.Store, kind protocol.CommandKind, key, principal, label, hash string) (*opjournal.Operation, error) {
	t.Helper()
	c := &protocol.Command{Kind: kind, Key: key, Actor: principal, ActorLabel: label, StatedActor: "said-" + principal, RequestHash: hash, Reason: "checked by " + principal}
	if kind == protocol.CmdReject {
		c.ErrorCode = opjournal.ErrorApprovalRejected
	}
	return Op(s.Apply(ctxT(t), tenant, c))
}

// expire applies ExpireApproval, as the sweep does.
func expire(t *testing.T, s store.Store, key string) (*opjournal.Operation, error) {
	t.Helper()
	return Op(s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdExpireApproval, Key: key, Actor: "approval-timeout"}))
}

// wantUnchanged fails unless key reads as before and its history did not grow.
func wantUnchanged(t *testing.T, s store.Store, key string, before *opjournal.Operation, evs int) {
	t.Helper()
	sameRecord(t, before, get(t, s, key))
	if n := len(events(t, s, key)); n != evs {
		t.Fatalf("%s: %d events, want %d (a refusal writes none):\n%s", key, n, evs, fmtEvents(events(t, s, key)))
	}
}

// testApprovalRegister: a Register that brings an approval creates the
// operation awaiting_approval, with or without a claim asked (never
// claimed), the approval recorded with its deadline (clock + timeout) and
// an event; a replay (with a claim, or with another approval or none:
// the policy changed) and a Claim change nothing and claim nothing;
// another request is PAYLOAD_MISMATCH.
func testApprovalRegister(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clock := clockOf(t, s)
	for _, cp := range []*ClaimPolicy{nil, &noRetry} {
		key := fmt.Sprintf("k-claim-%v", cp != nil)
		res := registerAwaiting(t, s, key, askApproval(false, opjournal.ApprovalTimeoutReject), cp)
		op := res.Operation
		if !res.Created || res.Claimed {
			t.Fatalf("%s: created=%v claimed=%v, want created, not claimed", key, res.Created, res.Claimed)
		}
		wantStatus(t, op, awaiting)
		a := op.Approval
		if op.AttemptCount != 0 || !op.LeaseUntil.IsZero() || op.LeaseOwner != "" || a == nil || !a.Required || a.RequestedBy != "agent-1" ||
			!slices.Equal(a.Approvers, []string{"operator", "admin"}) || !a.DistinctFromRequester || a.TwoPerson || a.OnTimeout != opjournal.ApprovalTimeoutReject ||
			a.Rule != "payload.amount_minor > 100000" || len(a.Approvals) != 0 {
			t.Fatalf("%s: new record %+v approval %+v", key, *op, a)
		}
		if d := a.Deadline.Sub(clock.Now()); d < approvalTimeout-time.Second || d > approvalTimeout+time.Second {
			t.Fatalf("%s: deadline %s is %s from the clock, want %s", key, a.Deadline, d, approvalTimeout)
		}
		sameRecord(t, op, get(t, s, key))
		evs := events(t, s, key)
		wantHistory(t, evs, ev("", awaiting, 0, "", ""))
		if evs[0].Reason != opjournal.ReasonRegisteredAwaiting || opjournal.KindOf(evs[0].Reason) != opjournal.KindRegistered {
			t.Fatalf("%s: registration event %s", key, fmtEvent(evs[0]))
		}
		// Replays: as they are, with a claim too, and whatever approval
		// the policy now asks.
		for i, a := range []*opjournal.Approval{askApproval(false, opjournal.ApprovalTimeoutReject), nil, askApproval(true, opjournal.ApprovalTimeoutEscalate)} {
			for _, rcp := range []*ClaimPolicy{nil, &noRetry} {
				res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload,
					Approval: a, ApprovalTimeout: time.Minute}, rcp))
				if err != nil {
					t.Fatalf("%s: replay %d: %v", key, i, err)
				}
				if res.Created || res.Claimed {
					t.Fatalf("%s: replay %d created=%v claimed=%v", key, i, res.Created, res.Claimed)
				}
				sameRecord(t, op, res.Operation)
			}
		}
		if cr := claim(t, s, key, noRetry); cr.Claimed || cr.Operation.Status != awaiting {
			t.Fatalf("%s: claim of an operation awaiting approval: %+v", key, cr)
		}
		_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashB, Payload: payload, Approval: askApproval(false, "reject")})
		wantCode(t, err, opjournal.CodePayloadMismatch)
		wantUnchanged(t, s, key, op, 1)
	}
	// A Register without an approval is as before.
	if op := register(t, s, "plain"); op.Status != pending || op.Approval != nil {
		t.Fatalf("plain register: %+v", *op)
	}
	// The agent's commands have nothing to act on.
	key := "k-claim-false"
	before := get(t, s, key)
	for _, c := range []*protocol.Command{
		{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: 1, ExternalID: "pay_x"},
		{Kind: protocol.CmdMarkUnknown, Key: key, Attempt: 1},
		{Kind: protocol.CmdResolve, Key: key, Resolution: succeeded, ExternalID: "pay_x", Reason: "no"},
		{Kind: protocol.CmdEscalate, Key: key, Reason: "no"},
	} {
		if _, err := s.Apply(ctx, tenant, c); err == nil {
			t.Fatalf("%s applied to an operation awaiting approval", c.Kind)
		}
	}
	wantUnchanged(t, s, key, before, 1)
}

// testApprove: another hash is PAYLOAD_MISMATCH and changes nothing; the
// approval makes the operation pending (claimable), records the approver
// and writes "approved: reason" with the principal as actor; a second
// approval, a rejection or an approval of an operation that never needed
// one is INVALID_STATE; another tenant's key is NOT_FOUND.
func testApprove(t *testing.T, newDB NewDatabase) {
	s, _ := setup(t, newDB)
	clock := clockOf(t, s)
	op := registerAwaiting(t, s, "k1", askApproval(false, opjournal.ApprovalTimeoutReject), nil).Operation
	_, err := decide(t, s, protocol.CmdApprove, "k1", "alice", hashB)
	wantCode(t, err, opjournal.CodePayloadMismatch)
	if e := err.(*opjournal.Error); e.Field != "request_hash" {
		t.Fatalf("mismatch names field %q", e.Field)
	}
	_, err = decide(t, s, protocol.CmdReject, "k1", "alice", hashB)
	wantCode(t, err, opjournal.CodePayloadMismatch)
	wantUnchanged(t, s, "k1", op, 1)
	_, err = Op(s.Apply(ctxT(t), "other", &protocol.Command{Kind: protocol.CmdApprove, Key: "k1", Actor: "mallory", RequestHash: hashA, Reason: "x"}))
	wantCode(t, err, opjournal.CodeNotFound)
	wantUnchanged(t, s, "k1", op, 1)

	clock.Advance(time.Minute)
	got, err := decide(t, s, protocol.CmdApprove, "k1", "alice", hashA)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, pending)
	if a := got.Approval; len(a.Approvals) != 1 || a.Approvals[0].Principal != "alice" || a.Approvals[0].Reason != "checked by alice" ||
		a.Approvals[0].At.Sub(clock.Now()).Abs() > time.Second || !a.Deadline.Equal(op.Approval.Deadline) {
		t.Fatalf("approval after approve: %+v", a)
	}
	sameRecord(t, got, get(t, s, "k1"))
	evs := events(t, s, "k1")
	wantHistory(t, evs, ev("", awaiting, 0, "", ""), ev(awaiting, pending, 0, "alice", ""))
	if e := evs[1]; e.Reason != opjournal.ReasonApprovedPrefix+"checked by alice" || e.StatedActor != "said-alice" || opjournal.KindOf(e.Reason) != opjournal.KindApproved {
		t.Fatalf("approval event %s stated %q", fmtEvent(e), e.StatedActor)
	}
	// The principal's id is what the rules compare; its credential's label
	// is kept beside it, in the approval and in the event, for people.
	if a := got.Approval; a.Approvals[0].Label != "alice-laptop" || evs[1].ActorLabel != "alice-laptop" || evs[0].ActorLabel != "" {
		t.Fatalf("labels: approval %+v, events %q %q", a.Approvals[0], evs[0].ActorLabel, evs[1].ActorLabel)
	}
	for _, kind := range []protocol.CommandKind{protocol.CmdApprove, protocol.CmdReject} {
		_, err := decide(t, s, kind, "k1", "bob", hashA)
		wantCode(t, err, opjournal.CodeInvalidState)
		if kind == protocol.CmdApprove && !strings.Contains(err.Error(), "already approved") {
			t.Fatalf("a repeated approval says %v", err)
		}
	}
	wantUnchanged(t, s, "k1", got, 2)
	if cr := claim(t, s, "k1", noRetry); !cr.Claimed || cr.Operation.AttemptCount != 1 || cr.Operation.Approval == nil {
		t.Fatalf("claim after approval: %+v", cr)
	}
	register(t, s, "plain")
	_, err = decide(t, s, protocol.CmdApprove, "plain", "alice", hashA)
	wantCode(t, err, opjournal.CodeInvalidState)
}

// testApproveTwoPerson: under two_person the first approval is recorded
// ("approved (1 of 2)") and the operation still waits (a claim loses);
// the same principal again is INVALID_STATE; a second principal releases
// it.
func testApproveTwoPerson(t *testing.T, newDB NewDatabase) {
	s, _ := setup(t, newDB)
	registerAwaiting(t, s, "k1", askApproval(true, opjournal.ApprovalTimeoutReject), nil)
	first, err := decide(t, s, protocol.CmdApprove, "k1", "alice", hashA)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, first, awaiting)
	if a := first.Approval; len(a.Approvals) != 1 || a.Approvals[0].Principal != "alice" {
		t.Fatalf("first of two: %+v", a)
	}
	evs := events(t, s, "k1")
	wantHistory(t, evs, ev("", awaiting, 0, "", ""), ev(awaiting, awaiting, 0, "alice", ""))
	if evs[1].Reason != opjournal.ReasonApprovedFirstPrefix+"checked by alice" {
		t.Fatalf("first approval's event %s", fmtEvent(evs[1]))
	}
	if cr := claim(t, s, "k1", noRetry); cr.Claimed {
		t.Fatalf("claimed after one of two approvals: %+v", cr)
	}
	// One person is one principal: alice's other token (another label,
	// the same id) is alice again, and a label equal to another's is no
	// one else.
	for _, label := range []string{"alice-laptop", "alice-phone", "bob-laptop", ""} {
		_, err = decideWith(t, s, protocol.CmdApprove, "k1", "alice", label, hashA)
		wantCode(t, err, opjournal.CodeInvalidState)
		if !strings.Contains(err.Error(), "already approved") {
			t.Fatalf("the same principal twice (label %q): %v", label, err)
		}
	}
	wantUnchanged(t, s, "k1", first, 2)
	second, err := decide(t, s, protocol.CmdApprove, "k1", "bob", hashA)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, second, pending)
	if a := second.Approval; len(a.Approvals) != 2 || a.Approvals[0].Principal != "alice" || a.Approvals[1].Principal != "bob" {
		t.Fatalf("second of two: %+v", a)
	}
	wantHistory(t, events(t, s, "k1"), ev("", awaiting, 0, "", ""), ev(awaiting, awaiting, 0, "alice", ""), ev(awaiting, pending, 0, "bob", ""))
}

// testReject: a rejection makes the operation failed_final with its error
// code, under two_person too (after one approval), and every later
// Register replays it; nothing decides it again.
func testReject(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	for _, two := range []bool{false, true} {
		key := fmt.Sprintf("k-two-%v", two)
		registerAwaiting(t, s, key, askApproval(two, opjournal.ApprovalTimeoutReject), nil)
		if two {
			if _, err := decide(t, s, protocol.CmdApprove, key, "alice", hashA); err != nil {
				t.Fatal(err)
			}
		}
		op, err := decide(t, s, protocol.CmdReject, key, "bob", hashA)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, op, failed)
		if op.ErrorCode != opjournal.ErrorApprovalRejected || op.AttemptCount != 0 {
			t.Fatalf("rejected: %+v", *op)
		}
		evs := events(t, s, key)
		e := evs[len(evs)-1]
		if e.From != awaiting || e.To != failed || e.Actor != "bob" || e.Reason != opjournal.ReasonDeniedPrefix+"checked by bob" || opjournal.KindOf(e.Reason) != opjournal.KindDenied {
			t.Fatalf("rejection event %s", fmtEvent(e))
		}
		res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload,
			Approval: askApproval(two, "reject"), ApprovalTimeout: time.Hour}, &noRetry))
		if err != nil || res.Created || res.Claimed || res.Operation.Status != failed {
			t.Fatalf("replay after rejection: %v %+v", err, res)
		}
		for _, kind := range []protocol.CommandKind{protocol.CmdApprove, protocol.CmdReject} {
			_, err := decide(t, s, kind, key, "carol", hashA)
			wantCode(t, err, opjournal.CodeInvalidState)
		}
		_, err = expire(t, s, key)
		wantCode(t, err, opjournal.CodeInvalidState)
		wantUnchanged(t, s, key, op, len(evs))
	}
}

// testApprovalTimeout: before the deadline (database clock) ExpireApproval
// is INVALID_STATE and DueApprovals lists nothing; after it DueApprovals
// lists the operation, Approve and Reject are refused (the deadline
// passed), and ExpireApproval applies on_timeout: reject makes it
// failed_final (approval_timeout); escalate puts it under review, still
// awaiting, where Approve (or Reject) still decides it and ends the review.
func testApprovalTimeout(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clock := clockOf(t, s)
	registerAwaiting(t, s, "rej", askApproval(false, opjournal.ApprovalTimeoutReject), nil)
	registerAwaiting(t, s, "esc", askApproval(false, opjournal.ApprovalTimeoutEscalate), nil)
	registerAwaiting(t, s, "esc2", askApproval(true, opjournal.ApprovalTimeoutEscalate), nil)
	register(t, s, "plain")
	if _, err := Op(s.Apply(ctx, "other", &protocol.Command{Kind: protocol.CmdRegister, Key: "theirs", Action: action, RequestHash: hashA, Payload: payload,
		Approval: askApproval(false, "reject"), ApprovalTimeout: approvalTimeout})); err != nil {
		t.Fatal(err)
	}
	due := func() []store.DueApproval {
		t.Helper()
		d, err := s.DueApprovals(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(d, func(a, b store.DueApproval) int { return strings.Compare(a.Tenant+"/"+a.Key, b.Tenant+"/"+b.Key) })
		return d
	}
	clock.Advance(approvalTimeout - time.Second)
	if d := due(); len(d) != 0 {
		t.Fatalf("due before the deadline: %v", d)
	}
	before := get(t, s, "rej")
	_, err := expire(t, s, "rej")
	wantCode(t, err, opjournal.CodeInvalidState)
	wantUnchanged(t, s, "rej", before, 1)

	clock.Advance(time.Second) // at the deadline
	want := []store.DueApproval{{Tenant: tenant, Key: "esc"}, {Tenant: tenant, Key: "esc2"}, {Tenant: tenant, Key: "rej"}, {Tenant: "other", Key: "theirs"}}
	if d := due(); !slices.Equal(d, want) {
		t.Fatalf("due at the deadline: %v, want %v", d, want)
	}
	for _, kind := range []protocol.CommandKind{protocol.CmdApprove, protocol.CmdReject} {
		_, err := decide(t, s, kind, "rej", "alice", hashA)
		wantCode(t, err, opjournal.CodeInvalidState)
		if !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("%s after the deadline: %v", kind, err)
		}
	}
	wantUnchanged(t, s, "rej", before, 1)

	op, err := expire(t, s, "rej")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, failed)
	if op.ErrorCode != opjournal.ErrorApprovalTimeout || op.NeedsReview {
		t.Fatalf("timed out (reject): %+v", *op)
	}
	evs := events(t, s, "rej")
	if e := evs[len(evs)-1]; e.From != awaiting || e.To != failed || e.Actor != "approval-timeout" || opjournal.KindOf(e.Reason) != opjournal.KindApprovalTimeout {
		t.Fatalf("timeout event %s", fmtEvent(e))
	}
	_, err = expire(t, s, "rej")
	wantCode(t, err, opjournal.CodeInvalidState)

	for _, key := range []string{"esc", "esc2"} {
		op, err := expire(t, s, key)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, op, awaiting)
		if !op.NeedsReview || op.ReviewReason == "" || op.ErrorCode != "" {
			t.Fatalf("timed out (escalate): %+v", *op)
		}
		_, err = expire(t, s, key)
		wantCode(t, err, opjournal.CodeInvalidState)
	}
	if d := due(); !slices.Equal(d, []store.DueApproval{{Tenant: "other", Key: "theirs"}}) {
		t.Fatalf("due after the sweep: %v", d)
	}
	// Under review a person still decides, and the review ends.
	op, err = decide(t, s, protocol.CmdApprove, "esc", "alice", hashA)
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != pending || op.NeedsReview {
		t.Fatalf("approved under review: %+v", *op)
	}
	if op, err = decide(t, s, protocol.CmdApprove, "esc2", "alice", hashA); err != nil || op.Status != awaiting || !op.NeedsReview {
		t.Fatalf("first of two under review: %v %+v", err, op)
	}
	if op, err = decide(t, s, protocol.CmdReject, "esc2", "bob", hashA); err != nil || op.Status != failed || op.NeedsReview {
		t.Fatalf("rejected under review: %v %+v", err, op)
	}
}

// testConcurrentDecisions: decisions racing each other and claims on one
// key: exactly one of many approvals releases an operation (the others
// are INVALID_STATE), never both an approval and a rejection apply, a
// principal racing itself under two_person is recorded once, and two
// principals under two_person release it together; no claim wins before
// the release.
func testConcurrentDecisions(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	const n = 16
	registerAwaiting(t, s, "many", askApproval(false, opjournal.ApprovalTimeoutReject), nil)
	var ok, refused, claims atomic.Int64
	race(2*n, func(i int) {
		if i%2 == 1 {
			if cr, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "many"}, &noRetry)); err == nil && cr.Claimed {
				claims.Add(1)
			}
			return
		}
		_, err := decide(t, s, protocol.CmdApprove, "many", fmt.Sprintf("p%d", i), hashA)
		switch opjournal.ErrorCode(err) {
		case "":
			ok.Add(1)
		case opjournal.CodeInvalidState:
			refused.Add(1)
		default:
			t.Errorf("approve %d: %v", i, err)
		}
	})
	op := get(t, s, "many")
	if ok.Load() != 1 || refused.Load() != n-1 || len(op.Approval.Approvals) != 1 {
		t.Fatalf("%d racing approvals: %d applied, %d refused; approvals %+v", n, ok.Load(), refused.Load(), op.Approval.Approvals)
	}
	if c := claims.Load(); c > 1 || (c == 1) != (op.Status == inProgress) || (c == 0) != (op.Status == pending) {
		t.Fatalf("claims racing the approval: %d won, status %s", c, op.Status)
	}

	registerAwaiting(t, s, "either", askApproval(false, opjournal.ApprovalTimeoutReject), nil)
	var approved, rejected atomic.Int64
	race(n, func(i int) {
		kind := protocol.CmdApprove
		if i%2 == 1 {
			kind = protocol.CmdReject
		}
		_, err := decide(t, s, kind, "either", fmt.Sprintf("p%d", i), hashA)
		switch {
		case err == nil && kind == protocol.CmdApprove:
			approved.Add(1)
		case err == nil:
			rejected.Add(1)
		case opjournal.ErrorCode(err) != opjournal.CodeInvalidState:
			t.Errorf("decision %d: %v", i, err)
		}
	})
	if op := get(t, s, "either"); approved.Load()+rejected.Load() != 1 || (approved.Load() == 1) != (op.Status == pending) {
		t.Fatalf("racing approvals and rejections: %d approved, %d rejected, status %s", approved.Load(), rejected.Load(), op.Status)
	}

	registerAwaiting(t, s, "self", askApproval(true, opjournal.ApprovalTimeoutReject), nil)
	// Each racer is alice with another of her tokens (another label, one
	// principal id): still one person, so one approval.
	race(n, func(i int) {
		_, _ = decideWith(t, s, protocol.CmdApprove, "self", "alice", fmt.Sprintf("alice-token-%d", i), hashA)
	})
	if op := get(t, s, "self"); op.Status != awaiting || len(op.Approval.Approvals) != 1 {
		t.Fatalf("one principal racing itself under two_person: %s, approvals %+v", op.Status, op.Approval.Approvals)
	}

	registerAwaiting(t, s, "pair", askApproval(true, opjournal.ApprovalTimeoutReject), nil)
	var errs atomic.Int64
	race(2, func(i int) {
		if _, err := decide(t, s, protocol.CmdApprove, "pair", []string{"alice", "bob"}[i], hashA); err != nil {
			errs.Add(1)
			t.Errorf("approval %d of two: %v", i, err)
		}
	})
	if op := get(t, s, "pair"); op.Status != pending || len(op.Approval.Approvals) != 2 || errs.Load() != 0 {
		t.Fatalf("two principals at once: %s, approvals %+v", op.Status, op.Approval.Approvals)
	}
}

// testAwaitingApprovals: the counts per action over every tenant, with the
// oldest registration, and the clock.
func testAwaitingApprovals(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clock := clockOf(t, s)
	rows, _, err := s.AwaitingApprovals(ctx)
	if err != nil || len(rows) != 0 {
		t.Fatalf("no approvals: %v %v", rows, err)
	}
	first := registerAwaiting(t, s, "a1", askApproval(false, "reject"), nil).Operation
	clock.Advance(time.Minute)
	registerAwaiting(t, s, "a2", askApproval(false, "reject"), nil)
	if _, err := Op(s.Apply(ctx, "other", &protocol.Command{Kind: protocol.CmdRegister, Key: "a3", Action: action, RequestHash: hashA, Payload: payload,
		Approval: askApproval(false, "reject"), ApprovalTimeout: approvalTimeout})); err != nil {
		t.Fatal(err)
	}
	registerAwaiting(t, s, "done", askApproval(false, "reject"), nil)
	if _, err := decide(t, s, protocol.CmdApprove, "done", "alice", hashA); err != nil {
		t.Fatal(err)
	}
	register(t, s, "plain")
	clock.Advance(time.Minute)
	rows, now, err := s.AwaitingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Action != action || rows[0].Count != 3 || !rows[0].OldestCreated.Equal(first.CreatedAt) {
		t.Fatalf("awaiting approvals: %+v (first created %s)", rows, first.CreatedAt)
	}
	if now.Sub(clock.Now()).Abs() > time.Second {
		t.Fatalf("clock %s, the test's %s", now, clock.Now())
	}
}
