package journal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/canonjson"
	"github.com/opjournal/opjournal/store"
)

// Limits of the reconciliation and review calls.
const (
	MaxPageSize     = 1000
	DefaultPageSize = 100
	MaxReasonLen    = 200
	MaxNextCheck    = 24 * time.Hour
)

// ListRequest filters and pages ListOperations.
type ListRequest struct {
	Tenant      string
	Statuses    []opjournal.Status
	NeedsReview *bool
	Action      string
	DueForCheck bool
	PageSize    int    // 0: DefaultPageSize; above MaxPageSize is capped
	PageToken   string // from a previous ListResponse
}

// ListResponse is one page.
type ListResponse struct {
	Operations    []*opjournal.Operation
	NextPageToken string
}

// List pages through operations in key order. It returns
// CodeInvalidArgument for a malformed page token, page size or status.
func (s *Service) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	size := req.PageSize
	switch {
	case size < 0:
		return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_size", "must not be negative")
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	after := ""
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil || len(b) < 2 || b[0] != 'k' || checkKey(string(b[1:])) != nil {
			return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
		after = string(b[1:])
	}
	for _, st := range req.Statuses {
		if !st.Valid() {
			return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "statuses", "%q is not a status", st)
		}
	}
	if req.Action != "" && len(req.Action) > MaxActionLen {
		return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "action_type", "is %d bytes; the limit is %d", len(req.Action), MaxActionLen)
	}
	ops, next, err := s.store.List(ctx, store.ListParams{
		Tenant: req.Tenant, Statuses: req.Statuses, NeedsReview: req.NeedsReview, Action: req.Action,
		DueForCheck: req.DueForCheck, After: after, Limit: size,
	})
	if err != nil {
		return ListResponse{}, fmt.Errorf("list operations: %w", err)
	}
	res := ListResponse{Operations: ops}
	if next != "" {
		// Opaque to clients: a version byte, then the last key.
		res.NextPageToken = base64.RawURLEncoding.EncodeToString(append([]byte{'k'}, next...))
	}
	return res, nil
}

// ReleaseRequest releases an unknown operation for retry.
type ReleaseRequest struct {
	Tenant  string
	Key     string
	Attempt int
	Actor   string
	Reason  string
}

// ReleaseForRetry moves an unknown operation back to pending after the
// provider definitively reported absence. The action's policy decides
// whether absence can be proven at all (reconcile.definitive_absence) and
// how long the provider's search may lag (reconcile.visibility_lag); both
// are enforced here, on the database clock, whatever the caller believes.
// It returns CodeInvalidState when the policy or the operation's state
// forbids the release, CodeStaleAttempt when attempt is not the latest.
func (s *Service) ReleaseForRetry(ctx context.Context, req ReleaseRequest) (*opjournal.Operation, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	if err := checkAttempt(req.Attempt); err != nil {
		return nil, err
	}
	if err := checkActorReason(req.Actor, req.Reason, false); err != nil {
		return nil, err
	}
	op, err := s.store.Get(ctx, req.Tenant, req.Key)
	if err != nil {
		return nil, fmt.Errorf("release %q: %w", req.Key, err)
	}
	act, err := s.action(op.Action)
	if err != nil {
		return nil, err
	}
	if !act.Reconcile.DefinitiveAbsence {
		return nil, opjournal.Errorf(opjournal.CodeInvalidState, "",
			"the policy of %s says its provider's search is not definitive (reconcile.definitive_absence: false): absence cannot be proven, so the operation is never released automatically; escalate it", act.Name)
	}
	op, err = s.store.ReleaseForRetry(ctx, store.ReleaseParams{
		Tenant: req.Tenant, Key: req.Key, Attempt: req.Attempt, Actor: req.Actor, Reason: req.Reason,
		VisibilityLag: act.Reconcile.VisibilityLag,
	})
	if err != nil {
		return nil, fmt.Errorf("release %q: %w", req.Key, err)
	}
	return op, nil
}

// RecordCheckRequest records an inconclusive check.
type RecordCheckRequest struct {
	Tenant         string
	Key            string
	Attempt        int
	Actor          string
	Note           string
	NextCheckAfter time.Duration // 1 s … 24 h
}

// RecordCheck counts an inconclusive check and schedules the next one. It
// returns CodeInvalidState unless the operation is unknown, and
// CodeStaleAttempt when attempt is not the latest.
func (s *Service) RecordCheck(ctx context.Context, req RecordCheckRequest) (*opjournal.Operation, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	if err := checkAttempt(req.Attempt); err != nil {
		return nil, err
	}
	if err := checkActorReason(req.Actor, req.Note, false); err != nil {
		return nil, err
	}
	if req.NextCheckAfter < time.Second || req.NextCheckAfter > MaxNextCheck {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "next_check_after_seconds", "must be 1 … %d", int(MaxNextCheck.Seconds()))
	}
	op, err := s.store.RecordCheck(ctx, store.RecordCheckParams{
		Tenant: req.Tenant, Key: req.Key, Attempt: req.Attempt, Actor: req.Actor, Note: req.Note, NextCheckAfter: req.NextCheckAfter,
	})
	if err != nil {
		return nil, fmt.Errorf("record check %q: %w", req.Key, err)
	}
	return op, nil
}

// Escalate hands a non-terminal operation to a person. Escalating one
// already under review returns it unchanged; a terminal one is
// CodeInvalidState.
func (s *Service) Escalate(ctx context.Context, tenant, key, actor, reason string) (*opjournal.Operation, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := checkActorReason(actor, reason, true); err != nil {
		return nil, err
	}
	op, err := s.store.Escalate(ctx, store.EscalateParams{Tenant: tenant, Key: key, Actor: actor, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("escalate %q: %w", key, err)
	}
	return op, nil
}

// ResolveRequest is an operator's verdict.
type ResolveRequest struct {
	Tenant     string
	Key        string
	To         opjournal.Status // StatusSucceeded or StatusFailedFinal
	ExternalID string           // required with StatusSucceeded
	Result     json.RawMessage  // optional, with StatusSucceeded
	ErrorCode  string           // optional, with StatusFailedFinal
	Actor      string           // required
	Reason     string           // required
}

// Resolve applies an operator's verdict to an unknown or needs_review
// operation. Actor and reason are required and go to the history. It
// returns CodeInvalidState for any other operation.
func (s *Service) Resolve(ctx context.Context, req ResolveRequest) (*opjournal.Operation, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	if err := checkActorReason(req.Actor, req.Reason, true); err != nil {
		return nil, err
	}
	switch req.To {
	case opjournal.StatusSucceeded:
		if req.ExternalID == "" {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "external_id", "is required to resolve as succeeded: name the provider's record of the effect")
		}
		if req.ErrorCode != "" {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "error_code", "belongs to a failed_final resolution")
		}
	case opjournal.StatusFailedFinal:
		if req.ExternalID != "" || req.Result != nil {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "external_id", "a failed_final resolution has no external_id or result")
		}
	default:
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "resolution", "must be SUCCEEDED or FAILED_FINAL")
	}
	if err := checkText("external_id", req.ExternalID, MaxExternalIDLen); err != nil {
		return nil, err
	}
	if err := checkText("error_code", req.ErrorCode, MaxErrorCodeLen); err != nil {
		return nil, err
	}
	result, err := s.canonicalResult(req.Result)
	if err != nil {
		return nil, err
	}
	if result, err = s.redactResult(ctx, req.Tenant, req.Key, result); err != nil {
		return nil, fmt.Errorf("resolve %q: %w", req.Key, err)
	}
	op, err := s.store.Resolve(ctx, store.ResolveParams{
		Tenant: req.Tenant, Key: req.Key, To: req.To, ExternalID: req.ExternalID, Result: result,
		ErrorCode: req.ErrorCode, Actor: req.Actor, Reason: req.Reason,
	})
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", req.Key, err)
	}
	return op, nil
}

// Events returns an operation's history, oldest first.
func (s *Service) Events(ctx context.Context, tenant, key string) ([]opjournal.Event, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	evs, err := s.store.Events(ctx, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("events %q: %w", key, err)
	}
	return evs, nil
}

// canonicalResult validates and canonicalises an optional result object.
func (s *Service) canonicalResult(raw json.RawMessage) (json.RawMessage, error) {
	if raw == nil {
		return nil, nil
	}
	c, err := canonjson.Canonicalize(raw, canonjson.Options{})
	if err != nil {
		return nil, jsonError("result", err)
	}
	if len(c) == 0 || c[0] != '{' {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "result", "must be a JSON object")
	}
	if len(c) > s.limits.MaxResultBytes {
		return nil, opjournal.Errorf(opjournal.CodeTooLarge, "result", "is %d bytes as canonical JSON; the limit is %d", len(c), s.limits.MaxResultBytes)
	}
	return c, nil
}

// checkActorReason validates who and why; reason may be optional.
func checkActorReason(actor, reason string, reasonRequired bool) error {
	if err := checkToken("actor", actor, MaxWorkerIDLen); err != nil {
		return err
	}
	if reasonRequired && reason == "" {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "reason", "is required: say why, for the history")
	}
	return checkText("reason", reason, MaxReasonLen)
}
