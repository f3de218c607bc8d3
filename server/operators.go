package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The RPCs that settle and review operations, the reconciler's and the
// operators': the list, release, check, escalation, resolution,
// acknowledgement, note and history. Approve and Reject are in approval.go.

var statusFromPB = map[pb.Status]opjournal.Status{
	pb.Status_STATUS_PENDING:           opjournal.StatusPending,
	pb.Status_STATUS_IN_PROGRESS:       opjournal.StatusInProgress,
	pb.Status_STATUS_UNKNOWN:           opjournal.StatusUnknown,
	pb.Status_STATUS_SUCCEEDED:         opjournal.StatusSucceeded,
	pb.Status_STATUS_FAILED_FINAL:      opjournal.StatusFailedFinal,
	pb.Status_STATUS_AWAITING_APPROVAL: opjournal.StatusAwaitingApproval,
}

// fullView reports whether a request asks for payloads and results, def
// being the method's default (AIP-157): BASIC for lists, so that a page
// stays small whatever the operations carry, and for the agent's calls,
// whose caller sent the payload and result itself; FULL for Lookup.
func fullView(v pb.OperationView, def pb.OperationView) (bool, error) {
	if v == pb.OperationView_OPERATION_VIEW_UNSPECIFIED {
		v = def
	}
	switch v {
	case pb.OperationView_OPERATION_VIEW_BASIC:
		return false, nil
	case pb.OperationView_OPERATION_VIEW_FULL:
		return true, nil
	}
	return false, opjournal.Errorf(opjournal.CodeInvalidArgument, "view", "%s is not a view (BASIC or FULL)", v)
}

func (s *journalServer) ListOperations(ctx context.Context, req *pb.ListOperationsRequest) (*pb.ListOperationsResponse, error) {
	full, err := fullView(req.GetView(), pb.OperationView_OPERATION_VIEW_BASIC)
	if err != nil {
		return nil, err
	}
	lr := journal.ListRequest{Caller: callerOf(ctx), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Full: full, ListFilter: journal.ListFilter{NeedsReview: req.NeedsReview, Action: req.GetActionType(), Refs: req.GetRefs(), ParentKey: req.GetParentKey(), DueForCheck: req.GetDueForCheck()}}
	for _, st := range req.GetStatuses() {
		ds, ok := statusFromPB[st]
		if !ok {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "statuses", "%s is not a status to filter by", st)
		}
		lr.Statuses = append(lr.Statuses, ds)
	}
	res, err := s.svc.List(ctx, lr)
	if err != nil {
		return nil, err
	}
	out := &pb.ListOperationsResponse{NextPageToken: res.NextPageToken}
	for _, op := range res.Operations {
		pop, err := operationPB(op)
		if err != nil {
			return nil, err
		}
		out.Operations = append(out.Operations, pop)
	}
	return out, nil
}

func (s *journalServer) ReleaseForRetry(ctx context.Context, req *pb.ReleaseForRetryRequest) (*pb.ReleaseForRetryResponse, error) {
	op, err := s.svc.ReleaseForRetry(ctx, journal.ReleaseRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), Actor: req.GetActor(), Reason: req.GetReason(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "released")
	pop, err := operationPB(op)
	return &pb.ReleaseForRetryResponse{Operation: pop}, err
}

func (s *journalServer) RecordCheck(ctx context.Context, req *pb.RecordCheckRequest) (*pb.RecordCheckResponse, error) {
	op, err := s.svc.RecordCheck(ctx, journal.RecordCheckRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), Actor: req.GetActor(),
		Note: req.GetNote(), NextCheckAfter: time.Duration(req.GetNextCheckAfterSeconds()) * time.Second,
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "checked")
	pop, err := operationPB(op)
	return &pb.RecordCheckResponse{Operation: pop}, err
}

func (s *journalServer) Escalate(ctx context.Context, req *pb.EscalateRequest) (*pb.EscalateResponse, error) {
	op, err := s.svc.Escalate(ctx, journal.EscalateRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Actor: req.GetActor(), Reason: req.GetReason(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "escalated")
	pop, err := operationPB(op)
	return &pb.EscalateResponse{Operation: pop}, err
}

func (s *journalServer) Resolve(ctx context.Context, req *pb.ResolveRequest) (*pb.ResolveResponse, error) {
	var to opjournal.Status
	switch req.GetResolution() {
	case pb.Resolution_RESOLUTION_SUCCEEDED:
		to = opjournal.StatusSucceeded
	case pb.Resolution_RESOLUTION_FAILED_FINAL:
		to = opjournal.StatusFailedFinal
	}
	result, refused := canonicalResult(ctx, req.GetResult())
	op, err := s.svc.Resolve(ctx, journal.ResolveRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), To: to, ExternalID: req.GetExternalId(), Result: result, ResultCanonical: true, ResultRefused: refused,
		ErrorCode: req.GetErrorCode(), Actor: req.GetActor(), Reason: req.GetReason(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "resolved")
	pop, err := operationPB(op)
	return &pb.ResolveResponse{Operation: pop}, err
}

func (s *journalServer) Acknowledge(ctx context.Context, req *pb.AcknowledgeRequest) (*pb.AcknowledgeResponse, error) {
	op, err := s.svc.Acknowledge(ctx, journal.AcknowledgeRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Actor: req.GetActor(), Reason: req.GetReason(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "acknowledged")
	pop, err := operationPB(op)
	return &pb.AcknowledgeResponse{Operation: pop}, err
}

func (s *journalServer) SetNote(ctx context.Context, req *pb.SetNoteRequest) (*pb.SetNoteResponse, error) {
	op, err := s.svc.SetNote(ctx, journal.SetNoteRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), Note: req.GetNote(), Actor: req.GetActor(),
	})
	if err != nil {
		return nil, err
	}
	pop, err := operationPB(op)
	return &pb.SetNoteResponse{Operation: pop}, err
}

func (s *journalServer) ListEvents(ctx context.Context, req *pb.ListEventsRequest) (*pb.ListEventsResponse, error) {
	res, err := s.svc.Events(ctx, journal.EventsRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, err
	}
	out := &pb.ListEventsResponse{NextPageToken: res.NextPageToken}
	for _, e := range res.Events {
		out.Events = append(out.Events, &pb.Event{
			Id: e.ID, At: timestamppb.New(e.At), FromStatus: statusPB[e.From], ToStatus: statusPB[e.To],
			Attempt: int32(e.Attempt), Actor: e.Actor, Reason: e.Reason, ExternalId: e.ExternalID, StatedActor: e.StatedActor, ActorLabel: e.ActorLabel,
		})
	}
	return out, nil
}
