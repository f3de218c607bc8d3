package server

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
	"github.com/opjournal/opjournal/journal"
)

// The reconciler's and operators' RPCs.

var statusFromPB = map[pb.Status]opjournal.Status{
	pb.Status_STATUS_PENDING:      opjournal.StatusPending,
	pb.Status_STATUS_IN_PROGRESS:  opjournal.StatusInProgress,
	pb.Status_STATUS_UNKNOWN:      opjournal.StatusUnknown,
	pb.Status_STATUS_SUCCEEDED:    opjournal.StatusSucceeded,
	pb.Status_STATUS_FAILED_FINAL: opjournal.StatusFailedFinal,
}

func (s *journalServer) ListOperations(ctx context.Context, req *pb.ListOperationsRequest) (*pb.ListOperationsResponse, error) {
	lr := journal.ListRequest{
		Tenant: tenantOf(ctx), NeedsReview: req.NeedsReview, Action: req.GetActionType(),
		DueForCheck: req.GetDueForCheck(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(),
	}
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
		Tenant: tenantOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), Actor: req.GetActor(), Reason: req.GetReason(),
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
		Tenant: tenantOf(ctx), Key: req.GetOperationKey(), Attempt: int(req.GetAttempt()), Actor: req.GetActor(),
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
	op, err := s.svc.Escalate(ctx, tenantOf(ctx), req.GetOperationKey(), req.GetActor(), req.GetReason())
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
	var result json.RawMessage
	if req.GetResult() != nil {
		r, err := structJSON("result", req.GetResult())
		if err != nil {
			return nil, err
		}
		result = r
	}
	op, err := s.svc.Resolve(ctx, journal.ResolveRequest{
		Tenant: tenantOf(ctx), Key: req.GetOperationKey(), To: to, ExternalID: req.GetExternalId(), Result: result,
		ErrorCode: req.GetErrorCode(), Actor: req.GetActor(), Reason: req.GetReason(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.outcome(op.Action, "resolved")
	pop, err := operationPB(op)
	return &pb.ResolveResponse{Operation: pop}, err
}

func (s *journalServer) ListEvents(ctx context.Context, req *pb.ListEventsRequest) (*pb.ListEventsResponse, error) {
	evs, err := s.svc.Events(ctx, tenantOf(ctx), req.GetOperationKey())
	if err != nil {
		return nil, err
	}
	out := &pb.ListEventsResponse{}
	for _, e := range evs {
		out.Events = append(out.Events, &pb.Event{
			Id: e.ID, At: timestamppb.New(e.At), FromStatus: statusPB[e.From], ToStatus: statusPB[e.To],
			Attempt: int32(e.Attempt), Actor: e.Actor, Reason: e.Reason, ExternalId: e.ExternalID,
		})
	}
	return out, nil
}
