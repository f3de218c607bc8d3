package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// journalServer implements pb.JournalServiceServer over a journal.Service.
// It only converts between protobuf and the service's types; errors become
// gRPC statuses in the interceptor (see unaryInterceptor).
type journalServer struct {
	pb.UnimplementedJournalServiceServer
	svc     *journal.Service
	metrics *metrics
}

func (s *journalServer) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	envelope, refused := s.canonicalPayload(ctx, req.GetActionType(), req.GetPayload())
	jr := journal.RegisterRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Action: req.GetActionType(), Envelope: envelope, PayloadRefused: refused,
		Refs: req.GetRefs(), ParentKey: req.GetParentKey(),
	}
	if c := req.GetClaim(); c != nil {
		jr.Claim = &journal.ClaimOptions{WorkerID: c.GetWorkerId(), LeaseSeconds: int(c.GetLeaseSeconds())}
	}
	res, err := s.svc.Register(ctx, jr)
	if err != nil {
		switch opjournal.ErrorCode(err) {
		case opjournal.CodePayloadMismatch:
			s.metrics.outcome(req.GetActionType(), "conflict")
		case opjournal.CodeBudgetExceeded:
			s.metrics.budgetExceeded(req.GetActionType(), err, nil)
		}
		return nil, err
	}
	op, err := operationPBView(res.Operation, full, true)
	if err != nil {
		return nil, err
	}
	out := &pb.RegisterResponse{Operation: op, Created: res.Created}
	if res.Created {
		s.metrics.outcome(res.Operation.Action, "registered")
		s.metrics.budgetExceeded(res.Operation.Action, nil, res.Operation)
	} else {
		s.metrics.outcome(res.Operation.Action, "replayed")
	}
	claimed := false
	if res.Claim != nil {
		c := s.claimFields(*res.Claim)
		claimed = c.claimed
		out.Claimed, out.Attempt, out.LeaseUntil, out.RetryAfterSeconds, out.LeaseSeconds = c.claimed, c.attempt, c.leaseUntil, c.retryAfter, c.leaseSeconds
	}
	out.Next = nextPB[opjournal.NextStepOf(res.Operation, res.Claim != nil, claimed)]
	if out.Next == pb.NextStep_NEXT_STEP_AWAIT_APPROVAL && res.Claim == nil {
		// At most 30 s, less before the deadline (the store's clock).
		out.RetryAfterSeconds = int32(max(1, journal.RetryAfterSeconds(res.RetryAfter)))
	}
	return out, nil
}

// claimAnswer is what a claim tells its caller.
type claimAnswer struct {
	claimed      bool
	attempt      int32
	leaseUntil   *timestamppb.Timestamp
	retryAfter   int32
	leaseSeconds int32
}

func (s *journalServer) claimFields(cr journal.ClaimResult) claimAnswer {
	if cr.Claimed {
		s.metrics.outcome(cr.Operation.Action, "claim_won")
		op := cr.Operation
		// The lease granted, from the claim's own times (one statement,
		// one clock): SDKs count it down on their monotonic clock.
		lease := int32(op.LeaseUntil.Sub(op.AttemptStartedAt).Round(time.Second) / time.Second)
		return claimAnswer{claimed: true, attempt: int32(op.AttemptCount), leaseUntil: timestamppb.New(op.LeaseUntil), leaseSeconds: lease}
	}
	s.metrics.outcome(cr.Operation.Action, "claim_lost")
	ra := int32(journal.RetryAfterSeconds(cr.RetryAfter))
	if ra == 0 && opjournal.NextStepOf(cr.Operation, true, false) == opjournal.NextWait {
		ra = 1 // changing hands: ask again soon
	}
	return claimAnswer{retryAfter: ra}
}

// nextPB maps the journal's decision to the wire.
var nextPB = map[opjournal.NextStep]pb.NextStep{
	opjournal.NextCallProvider:         pb.NextStep_NEXT_STEP_CALL_PROVIDER,
	opjournal.NextReplay:               pb.NextStep_NEXT_STEP_REPLAY,
	opjournal.NextWait:                 pb.NextStep_NEXT_STEP_WAIT,
	opjournal.NextVerificationRequired: pb.NextStep_NEXT_STEP_VERIFICATION_REQUIRED,
	opjournal.NextFailedFinal:          pb.NextStep_NEXT_STEP_FAILED_FINAL,
	opjournal.NextClaim:                pb.NextStep_NEXT_STEP_CLAIM,
	opjournal.NextAwaitApproval:        pb.NextStep_NEXT_STEP_AWAIT_APPROVAL,
}

func (s *journalServer) Claim(ctx context.Context, req *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	res, err := s.svc.Claim(ctx, journal.ClaimRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), WorkerID: req.GetWorkerId(), LeaseSeconds: int(req.GetLeaseSeconds()),
	})
	if err != nil {
		return nil, err
	}
	op, err := operationPBView(res.Operation, full, true)
	if err != nil {
		return nil, err
	}
	c := s.claimFields(res)
	out := &pb.ClaimResponse{Operation: op, Claimed: c.claimed, Attempt: c.attempt, LeaseUntil: c.leaseUntil,
		RetryAfterSeconds: c.retryAfter, LeaseSeconds: c.leaseSeconds,
		Next: nextPB[opjournal.NextStepOf(res.Operation, true, c.claimed)]}
	return out, nil
}

func (s *journalServer) ExtendLease(ctx context.Context, req *pb.ExtendLeaseRequest) (*pb.ExtendLeaseResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	op, err := s.svc.ExtendLease(ctx, journal.ExtendLeaseRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), LeaseSeconds: int(req.GetLeaseSeconds()),
	})
	if err != nil {
		s.countStale(ctx, req.GetOperationKey(), err)
		return nil, err
	}
	s.metrics.outcome(op.Action, "lease_extended")
	pop, err := operationPBView(op, full, full)
	if err != nil {
		return nil, err
	}
	// Whole seconds from now, rounded down: an SDK never believes in more
	// lease than it has.
	granted := int32(op.LeaseUntil.Sub(op.UpdatedAt) / time.Second)
	return &pb.ExtendLeaseResponse{Operation: pop, LeaseUntil: pop.GetLeaseUntil(), LeaseSeconds: granted}, nil
}

func (s *journalServer) MarkSucceeded(ctx context.Context, req *pb.MarkSucceededRequest) (*pb.MarkSucceededResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	result, refused := canonicalResult(ctx, req.GetResult())
	op, err := s.svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), ExternalID: req.GetExternalId(), Result: result,
		ResultCanonical: true, ResultRefused: refused, Actor: req.GetActor(),
	})
	if err != nil {
		s.countStale(ctx, req.GetOperationKey(), err)
		return nil, err
	}
	if op.NeedsReview && req.GetExternalId() != op.ExternalID && slices.Contains(op.DuplicateExternalIDs, req.GetExternalId()) {
		s.metrics.outcome(op.Action, "duplicate_effect")
	} else {
		s.metrics.outcome(op.Action, "succeeded")
	}
	pop, err := operationPBView(op, full, full)
	return &pb.MarkSucceededResponse{Operation: pop}, err
}

func (s *journalServer) MarkUnknown(ctx context.Context, req *pb.MarkUnknownRequest) (*pb.MarkUnknownResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	op, err := s.svc.MarkUnknown(ctx, journal.MarkRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), ErrorCode: req.GetErrorCode(),
	})
	if err != nil {
		s.countStale(ctx, req.GetOperationKey(), err)
		return nil, err
	}
	s.metrics.outcome(op.Action, "unknown")
	pop, err := operationPBView(op, full, full)
	return &pb.MarkUnknownResponse{Operation: pop}, err
}

func (s *journalServer) MarkFailedFinal(ctx context.Context, req *pb.MarkFailedFinalRequest) (*pb.MarkFailedFinalResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	result, refused := canonicalResult(ctx, req.GetResult())
	op, err := s.svc.MarkFailedFinal(ctx, journal.MarkRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), ErrorCode: req.GetErrorCode(), Result: result,
		ResultCanonical: true, ResultRefused: refused,
	})
	if err != nil {
		s.countStale(ctx, req.GetOperationKey(), err)
		return nil, err
	}
	s.metrics.outcome(op.Action, "failed_final")
	pop, err := operationPBView(op, full, full)
	return &pb.MarkFailedFinalResponse{Operation: pop}, err
}

func (s *journalServer) Lookup(ctx context.Context, req *pb.LookupRequest) (*pb.LookupResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_FULL)
	if err != nil {
		return nil, err
	}
	op, err := s.svc.LookupWait(ctx, tenantOf(ctx), req.GetOperationKey(), time.Duration(req.GetWaitSeconds())*time.Second)
	if err != nil {
		return nil, err
	}
	pop, err := operationPBView(op, full, full)
	if err != nil {
		return nil, err
	}
	if err := s.heldBudgets(ctx, op, pop); err != nil {
		return nil, err
	}
	return &pb.LookupResponse{Operation: pop}, nil
}

// countStale counts a stale attempt under the operation's action. The
// lookup happens only on this rare error path.
func (s *journalServer) countStale(ctx context.Context, key string, err error) {
	if !errors.Is(err, opjournal.ErrStaleAttempt) {
		return
	}
	action := ""
	if op, lerr := s.svc.Lookup(ctx, tenantOf(ctx), key); lerr == nil {
		action = op.Action
	}
	s.metrics.outcome(action, "stale_attempt")
}

var statusPB = map[opjournal.Status]pb.Status{
	opjournal.StatusPending:          pb.Status_STATUS_PENDING,
	opjournal.StatusInProgress:       pb.Status_STATUS_IN_PROGRESS,
	opjournal.StatusUnknown:          pb.Status_STATUS_UNKNOWN,
	opjournal.StatusSucceeded:        pb.Status_STATUS_SUCCEEDED,
	opjournal.StatusFailedFinal:      pb.Status_STATUS_FAILED_FINAL,
	opjournal.StatusAwaitingApproval: pb.Status_STATUS_AWAITING_APPROVAL,
}

// operationPB converts a record for the wire, every field (the FULL view).
func operationPB(op *opjournal.Operation) (*pb.Operation, error) {
	return operationPBView(op, true, true)
}

// operationPBView converts a record for the wire with its payload (and the
// operator's note, which only the FULL view carries) only if payload and
// its result only if result: what an answer's view (AIP-157)
// leaves out is never decoded into a Struct, which is most of the CPU of
// converting an operation. The agent's calls answer in BASIC by default
// (their caller sent the payload and the result itself); Register and
// Claim keep the stored result in BASIC, as it is what a replay returns.
func operationPBView(op *opjournal.Operation, payload, result bool) (*pb.Operation, error) {
	out := &pb.Operation{
		OperationKey:         op.Key,
		ActionType:           op.Action,
		RequestHash:          op.RequestHash,
		Status:               statusPB[op.Status],
		AttemptCount:         int32(op.AttemptCount),
		ExternalId:           op.ExternalID,
		ErrorCode:            op.ErrorCode,
		NeedsReview:          op.NeedsReview,
		ReviewReason:         op.ReviewReason,
		LeaseOwner:           op.LeaseOwner,
		DuplicateExternalId:  op.DuplicateExternalID,
		DuplicateExternalIds: op.DuplicateExternalIDs,
		DuplicateReports:     int32(op.DuplicateReports),
		CreatedAt:            timestamppb.New(op.CreatedAt),
		Refs:                 op.Refs,
		ParentKey:            op.ParentKey,
	}
	out.CheckCount = int32(op.CheckCount)
	out.Approval = approvalPB(op.Approval)
	for _, h := range op.Budgets {
		out.Budgets = append(out.Budgets, &pb.BudgetHold{Budget: h.Budget, Scope: h.Scope, Amount: h.Amount, OverLimit: h.OverLimit})
	}
	if payload {
		out.Note = op.Note
	}
	for _, t := range []struct {
		src time.Time
		dst **timestamppb.Timestamp
	}{{op.UpdatedAt, &out.UpdatedAt}, {op.LeaseUntil, &out.LeaseUntil}, {op.UnknownSince, &out.UnknownSince}, {op.LastCheckedAt, &out.LastCheckedAt}, {op.NextCheckAt, &out.NextCheckAt},
		{op.AttemptStartedAt, &out.AttemptStartedAt}, {op.FirstAttemptAt, &out.FirstAttemptAt}} {
		if !t.src.IsZero() {
			*t.dst = timestamppb.New(t.src)
		}
	}
	for _, j := range []struct {
		raw  json.RawMessage
		dst  **structpb.Struct
		want bool
	}{{op.Payload, &out.Payload, payload}, {op.Result, &out.Result, result}} {
		if j.raw == nil || !j.want {
			continue
		}
		// structFromJSON rather than protojson.Unmarshal: the same Struct
		// at a fraction of the CPU (see structdecode.go).
		st, err := structFromJSON(j.raw)
		if err != nil {
			return nil, &opjournal.Error{Code: opjournal.CodeInternal, Message: "stored JSON is unreadable", Err: err}
		}
		*j.dst = st
	}
	return out, nil
}

// approvalPB converts an operation's approval for the wire (nil: none was
// needed). Every view carries it: an agent told to await approval reads
// what it waits for.
func approvalPB(a *opjournal.Approval) *pb.Approval {
	if a == nil {
		return nil
	}
	out := &pb.Approval{Required: a.Required, Approvers: a.Approvers, DistinctFromRequester: a.DistinctFromRequester,
		TwoPerson: a.TwoPerson, RequestedBy: a.RequestedBy, RequestedByLabel: a.RequestedByLabel, OnTimeout: a.OnTimeout, Rule: a.Rule,
		Budgets: a.Budgets}
	if !a.Deadline.IsZero() {
		out.Deadline = timestamppb.New(a.Deadline)
	}
	for _, d := range a.Approvals {
		out.Approvals = append(out.Approvals, &pb.ApprovalDecision{Principal: d.Principal, Label: d.Label, At: timestamppb.New(d.At), Reason: d.Reason})
	}
	return out
}

func (s *journalServer) GetPolicy(context.Context, *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	pol := s.svc.Policy()
	return &pb.GetPolicyResponse{Fingerprint: pol.Fingerprint(), Source: string(pol.Source())}, nil
}

// WhoAmI answers who the caller is: the principal its credential
// authenticated, or the local administrator without authentication.
func (s *journalServer) WhoAmI(ctx context.Context, _ *pb.WhoAmIRequest) (*pb.WhoAmIResponse, error) {
	p, ok := ctx.Value(principalKey{}).(auth.Principal)
	if !ok {
		return &pb.WhoAmIResponse{PrincipalId: "local-admin", Name: "local-admin", Roles: []string{string(auth.RoleAdmin)}}, nil
	}
	out := &pb.WhoAmIResponse{Authenticated: true, PrincipalId: p.ID, Name: p.Name, Tenant: p.Tenant}
	for _, r := range p.Roles {
		out.Roles = append(out.Roles, string(r))
	}
	if !p.Expires.IsZero() {
		out.ExpiresAt = timestamppb.New(p.Expires)
	}
	return out, nil
}
