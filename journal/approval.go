package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/policy"
)

// approvalOf evaluates the action's approval block on a registration: the
// approval to record (nil when none is needed) and how long it stays open.
// The requester is the authenticated principal, or without
// authentication what the caller stated (its claim's worker_id).
func approvalOf(act *policy.Action, canonical json.RawMessage, refs map[string]string, caller Caller, stated string) (*opjournal.Approval, time.Duration) {
	ap := act.Approval
	if ap == nil {
		return nil, 0
	}
	need, rule := ap.Needed(canonical, refs)
	if !need {
		return nil, 0
	}
	requester, _ := caller.who(stated)
	label := ""
	if caller.Principal != "" {
		label = caller.Label
	}
	return &opjournal.Approval{
		Required: true, Approvers: slices.Clone(ap.Approvers), DistinctFromRequester: ap.DistinctFor(caller.Principal != ""),
		TwoPerson: ap.TwoPerson, RequestedBy: requester, RequestedByLabel: label, OnTimeout: ap.OnTimeout, Rule: rule,
	}, ap.Timeout
}

// DecisionRequest is a person's decision on an operation awaiting
// approval (Approve, Reject).
type DecisionRequest struct {
	Caller
	Key string
	// RequestHash is the request hash the approver saw; another one is
	// CodePayloadMismatch and changes nothing.
	RequestHash string
	// Reason is required (≤ MaxReasonLen), for the history.
	Reason string
	// ErrorCode (Reject only) is the error code the operation ends with;
	// "" is opjournal.ErrorApprovalRejected.
	ErrorCode string
	// Actor is who the caller says decides: required without
	// authentication (it is then the approver), stated_actor with it.
	Actor string
}

// ApproveResult is what Approve did.
type ApproveResult struct {
	Operation *opjournal.Operation
	// Released is true when this approval made the operation pending (the
	// only one needed, or the second of two).
	Released bool
}

// maxHashLen bounds a request hash a caller sends (ours are 64 hex
// digits).
const maxHashLen = 128

// Approve records a person's approval of the exact request (RequestHash)
// of an operation awaiting approval: it becomes pending, or under
// two_person stays awaiting until a second principal approves. The
// approver is the authenticated principal; it must have one of the roles
// the operation's approval names (CodePermissionDenied otherwise), and
// under distinct_from_requester must not be the principal who registered
// it (CodePermissionDenied). Another hash is CodePayloadMismatch; an
// operation not awaiting approval (already approved included), a passed
// deadline or the same principal twice is CodeInvalidState. Nothing
// changes on any refusal.
func (s *Service) Approve(ctx context.Context, req DecisionRequest) (ApproveResult, error) {
	if req.ErrorCode != "" {
		return ApproveResult{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "error_code", "belongs to a rejection")
	}
	if err := s.checkDecision(ctx, req, true); err != nil {
		return ApproveResult{}, err
	}
	op, err := s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdApprove, Key: req.Key,
		RequestHash: req.RequestHash, Reason: req.Reason})
	if err != nil {
		return ApproveResult{}, err
	}
	s.changed(req.Tenant, req.Key)
	return ApproveResult{Operation: op, Released: op.Status == opjournal.StatusPending}, nil
}

// Reject records a person's refusal of the exact request of an operation
// awaiting approval: it becomes failed_final with ErrorCode (default
// approval_rejected), which every later Register of the key replays. The
// same checks as Approve, but the requester may reject its own request
// (a refusal can do no harm), and one rejection is enough under
// two_person.
func (s *Service) Reject(ctx context.Context, req DecisionRequest) (*opjournal.Operation, error) {
	if err := checkText("error_code", req.ErrorCode, MaxErrorCodeLen); err != nil {
		return nil, err
	}
	if req.ErrorCode == "" {
		req.ErrorCode = opjournal.ErrorApprovalRejected
	}
	if err := s.checkDecision(ctx, req, false); err != nil {
		return nil, err
	}
	op, err := s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdReject, Key: req.Key,
		RequestHash: req.RequestHash, Reason: req.Reason, ErrorCode: req.ErrorCode})
	if err != nil {
		return nil, err
	}
	s.changed(req.Tenant, req.Key)
	return op, nil
}

// checkDecision validates a decision and checks who may take it against
// the approval recorded on the operation. That record never changes
// after registration (only its list of approvals does, which the table
// checks in the same statement as the change), so reading it first
// cannot race with anything.
func (s *Service) checkDecision(ctx context.Context, req DecisionRequest, approve bool) error {
	if err := firstError(checkKey(req.Key), checkToken("request_hash", req.RequestHash, maxHashLen), checkReason(req.Reason), req.checkActor(req.Actor)); err != nil {
		return err
	}
	verb := "reject"
	if approve {
		verb = "approve"
	}
	op, err := s.store.Get(ctx, req.Tenant, req.Key)
	if err != nil {
		return fmt.Errorf("%s %q: %w", verb, req.Key, err)
	}
	a := op.Approval
	if a == nil {
		return nil // the table refuses: nothing to decide
	}
	// An authenticated caller must hold one of the approvers' roles; only
	// a journal without authentication (no principal, no roles) skips the
	// check, so a door that forgets to pass the roles fails closed.
	if (req.Principal != "" || req.Roles != nil) && !slices.ContainsFunc(req.Roles, func(r string) bool { return slices.Contains(a.Approvers, r) }) {
		return opjournal.Errorf(opjournal.CodePermissionDenied, "", "%q (roles %s) may not decide on operation %q: its approval is for %s",
			req.display(req.Principal), strings.Join(req.Roles, ", "), req.Key, strings.Join(a.Approvers, ", "))
	}
	if !approve {
		return nil
	}
	approver, _ := req.who(req.Actor)
	if a.DistinctFromRequester && req.requested(a, approver) {
		return opjournal.Errorf(opjournal.CodePermissionDenied, "", "%q registered operation %q and may not approve it (distinct_from_requester): another person must", req.display(approver), req.Key)
	}
	// The second approval of two_person must come from another principal.
	// The table checks it against the ids in the same statement as the
	// change; a decision recorded before principal ids holds a name,
	// which only the caller's former names can match, and an old record
	// gains no such decision since, so checking it here cannot race.
	if req.Principal != "" && req.HasApproved(a) {
		return opjournal.Errorf(opjournal.CodeInvalidState, "", "%q has already approved operation %q: two_person needs a second approval from another principal", req.display(approver), req.Key)
	}
	return nil
}

// IsRequester reports whether the caller is the principal who registered
// the operation whose approval is a: the rule distinct_from_requester
// refuses it the approval. The journal's check and the console's hint
// both ask here.
func (c Caller) IsRequester(a *opjournal.Approval) bool {
	return a != nil && c.Principal != "" && c.requested(a, c.Principal)
}

// HasApproved reports whether the caller has already given one of a's
// approvals: under two_person the second must come from another
// principal.
func (c Caller) HasApproved(a *opjournal.Approval) bool {
	if a == nil || c.Principal == "" {
		return false
	}
	for _, d := range a.Approvals {
		if c.is(d.Principal, d.Label == "") {
			return true
		}
	}
	return false
}

// requested reports whether the approver (the caller, or without
// authentication the actor it states) is who registered the operation.
func (c Caller) requested(a *opjournal.Approval, approver string) bool {
	if c.Principal == "" {
		return a.RequestedBy != "" && approver == a.RequestedBy
	}
	return c.is(a.RequestedBy, a.RequestedByLabel == "")
}

// ExpireApproval applies the timeout of an operation's approval whose
// deadline has passed (database clock): on_timeout reject makes it
// failed_final (approval_timeout), escalate puts it under review. The
// sweep (ExpireApprovals) calls it; CodeInvalidState means the question
// was decided, escalated or is not due (nothing changed).
func (s *Service) ExpireApproval(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	op, err := s.applyOp(ctx, Caller{Tenant: tenant}, "", &protocol.Command{Kind: protocol.CmdExpireApproval, Key: key, Actor: ApprovalSweepActor})
	if err != nil {
		return nil, err
	}
	s.changed(tenant, key)
	return op, nil
}

// ApprovalSweepActor is the history's actor of a timeout.
const ApprovalSweepActor = "approval-timeout"

// ExpireApprovalsResult counts what one sweep did.
type ExpireApprovalsResult struct {
	Rejected, Escalated int
	// TimedOut counts both per action.
	TimedOut map[string]int
}

// expireBatch bounds one sweep's list of due approvals.
const expireBatch = 500

// ExpireApprovals applies the timeout of every approval whose deadline has
// passed, in every tenant: one list of the due operations (through the
// deadline's index), then one ExpireApproval each. A decision made in
// between wins (its ExpireApproval is refused and skipped). It stops at
// the first other error.
func (s *Service) ExpireApprovals(ctx context.Context) (ExpireApprovalsResult, error) {
	res := ExpireApprovalsResult{TimedOut: map[string]int{}}
	due, err := s.store.DueApprovals(ctx, expireBatch)
	if err != nil {
		return res, fmt.Errorf("list due approvals: %w", err)
	}
	for _, d := range due {
		op, err := s.ExpireApproval(ctx, d.Tenant, d.Key)
		switch {
		case opjournal.ErrorCode(err) == opjournal.CodeInvalidState, opjournal.ErrorCode(err) == opjournal.CodeNotFound:
			continue // decided (or purged) since the list was read
		case err != nil:
			return res, err
		case op.Status == opjournal.StatusFailedFinal:
			res.Rejected++
		default:
			res.Escalated++
		}
		res.TimedOut[op.Action]++
	}
	return res, nil
}

// ApprovalCount is how many operations of one action await approval (in
// every tenant) and how long the oldest has waited.
type ApprovalCount struct {
	Action    string
	Count     int
	OldestAge time.Duration
}

// ApprovalCounts counts the operations awaiting approval per action, for
// the metrics.
func (s *Service) ApprovalCounts(ctx context.Context) ([]ApprovalCount, error) {
	rows, now, err := s.store.AwaitingApprovals(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ApprovalCount, len(rows))
	for i, r := range rows {
		out[i] = ApprovalCount{Action: r.Action, Count: r.Count, OldestAge: max(0, now.Sub(r.OldestCreated))}
	}
	return out, nil
}
