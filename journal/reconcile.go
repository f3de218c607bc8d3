package journal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/canonjson"
	"github.com/opjournal/opjournal/internal/protocol"
	"github.com/opjournal/opjournal/store"
)

// Limits of the reconciliation and review calls.
const (
	MaxPageSize     = opjournal.MaxPageSize
	DefaultPageSize = opjournal.DefaultPageSize
	MaxReasonLen    = opjournal.MaxReasonLen
	MaxNoteLen      = opjournal.MaxNoteLen
	MaxNextCheck    = opjournal.MaxNextCheckSeconds * time.Second
)

// ListRequest filters and pages ListOperations.
type ListRequest struct {
	Caller
	Statuses    []opjournal.Status
	NeedsReview *bool
	Action      string
	// Refs keeps the operations that have every one of these refs.
	Refs map[string]string
	// ParentKey keeps the children of this operation.
	ParentKey   string
	DueForCheck bool
	// KeyPrefix keeps the operations whose key starts with it, byte for
	// byte (no wildcards); visible ASCII, at most MaxKeyLen.
	KeyPrefix string
	// UpdatedAfter and UpdatedBefore keep the operations whose updated_at
	// is >= UpdatedAfter and < UpdatedBefore; zero means unbounded.
	UpdatedAfter, UpdatedBefore time.Time
	// LeaseExpired keeps the in_progress operations whose lease has
	// expired (their effective status is unknown).
	LeaseExpired bool
	PageSize     int    // 0: DefaultPageSize; above MaxPageSize is capped
	PageToken    string // from a previous ListResponse
	// Full returns payloads and results too (AIP-157's FULL view); the
	// default BASIC view leaves them out, so a page stays small whatever
	// the operations carry.
	Full bool
	// MaxBytes cuts the page before the operations' approximate size
	// (Size) would exceed it; 0 means opjournal.MaxPageBytes. The first
	// operation is always returned.
	MaxBytes int
}

// ListResponse is one page.
type ListResponse struct {
	Operations    []*opjournal.Operation
	NextPageToken string
}

// List pages through operations in key order. It returns
// CodeInvalidArgument for a malformed page token, page size, status or
// key prefix, and for an updated_at range that ends before it starts.
func (s *Service) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	size, err := pageSize(req.PageSize)
	if err != nil {
		return ListResponse{}, err
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
	if err := opjournal.CheckRefs(req.Refs); err != nil {
		return ListResponse{}, err
	}
	if req.ParentKey != "" {
		if err := checkToken("parent_key", req.ParentKey, MaxKeyLen); err != nil {
			return ListResponse{}, err
		}
	}
	// A prefix is a fragment of a key, so the key's rules apply: a byte no
	// key may hold would only ever match nothing.
	if req.KeyPrefix != "" {
		if err := checkToken("key_prefix", req.KeyPrefix, MaxKeyLen); err != nil {
			return ListResponse{}, err
		}
	}
	if !req.UpdatedAfter.IsZero() && !req.UpdatedBefore.IsZero() && req.UpdatedAfter.After(req.UpdatedBefore) {
		return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "updated_before",
			"%s is before updated_after %s", req.UpdatedBefore.UTC().Format(time.RFC3339Nano), req.UpdatedAfter.UTC().Format(time.RFC3339Nano))
	}
	ops, next, err := s.store.List(ctx, store.ListParams{
		Tenant: req.Tenant, Statuses: req.Statuses, NeedsReview: req.NeedsReview, Action: req.Action,
		Refs: req.Refs, ParentKey: req.ParentKey,
		DueForCheck: req.DueForCheck, KeyPrefix: req.KeyPrefix,
		UpdatedAfter: req.UpdatedAfter, UpdatedBefore: req.UpdatedBefore, LeaseExpired: req.LeaseExpired,
		After: after, Limit: size, Basic: !req.Full,
	})
	if err != nil {
		return ListResponse{}, fmt.Errorf("list operations: %w", err)
	}
	// Bound the page by bytes as well as by count: one tenant's large
	// payloads must never make a page exceed what a client accepts (gRPC's
	// default 4 MiB), or the reconciler could not list that tenant at all.
	budget := req.MaxBytes
	if budget <= 0 {
		budget = opjournal.MaxPageBytes
	}
	total := 0
	for i, op := range ops {
		if total += Size(op); total > budget && i > 0 {
			ops, next = ops[:i], ops[i-1].Key
			break
		}
	}
	res := ListResponse{Operations: ops}
	if next != "" {
		// Opaque to clients: a version byte, then the last key.
		res.NextPageToken = base64.RawURLEncoding.EncodeToString(append([]byte{'k'}, next...))
	}
	return res, nil
}

// Size approximates the encoded size of an operation in an answer: its
// payload, result and text fields plus a fixed allowance for the rest.
func Size(op *opjournal.Operation) int {
	n := 256 + len(op.Payload) + len(op.Result) + len(op.Key) + len(op.Action) + len(op.RequestHash) +
		len(op.ExternalID) + len(op.ErrorCode) + len(op.ReviewReason) + len(op.LeaseOwner)
	for _, id := range op.DuplicateExternalIDs {
		n += len(id) + 2
	}
	for k, v := range op.Refs {
		n += len(k) + len(v) + 4
	}
	return n + len(op.ParentKey)
}

// ReleaseRequest releases an unknown operation for retry.
type ReleaseRequest struct {
	Caller
	Key     string
	Attempt int
	Actor   string
	Reason  string
}

// ReleaseForRetry moves an unknown operation back to pending after the
// provider definitively reported absence. The action's policy decides
// whether absence can be proven at all (reconcile.definitive_absence) and
// how long after the attempt ended it may be (reconcile.visibility_lag
// plus reconcile.in_flight_window: the provider may still carry out the
// request, then its search may lag); the protocol table enforces both, on
// the database clock, whatever the caller believes. It returns
// CodeInvalidState when the policy or the operation's state forbids the
// release, CodeStaleAttempt when attempt is not the latest.
func (s *Service) ReleaseForRetry(ctx context.Context, req ReleaseRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), checkAttempt(req.Attempt), req.checkActor(req.Actor), checkText("reason", req.Reason, MaxReasonLen)); err != nil {
		return nil, err
	}
	act, err := s.actionOf(ctx, req.Tenant, req.Key)
	if err != nil {
		return nil, fmt.Errorf("release %q: %w", req.Key, err)
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: req.Key, Attempt: req.Attempt,
		Reason: req.Reason, Policy: protocol.CommandPolicy{DefinitiveAbsence: act.Reconcile.DefinitiveAbsence, ReleaseAfter: act.ReleaseAfter()}})
}

// RecordCheckRequest records an inconclusive check.
type RecordCheckRequest struct {
	Caller
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
	if err := firstError(checkKey(req.Key), checkAttempt(req.Attempt), req.checkActor(req.Actor), checkText("note", req.Note, MaxReasonLen)); err != nil {
		return nil, err
	}
	if req.NextCheckAfter < time.Second || req.NextCheckAfter > MaxNextCheck {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "next_check_after_seconds", "must be 1 … %d", int(MaxNextCheck.Seconds()))
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: req.Key, Attempt: req.Attempt,
		Reason: req.Note, NextCheckAfter: req.NextCheckAfter})
}

// EscalateRequest hands an operation to a person.
type EscalateRequest struct {
	Caller
	Key    string
	Actor  string // stated; required without authentication
	Reason string // required
}

// Escalate hands a non-terminal operation to a person. Escalating one
// already under review returns it unchanged; a terminal one is
// CodeInvalidState.
func (s *Service) Escalate(ctx context.Context, req EscalateRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), req.checkActor(req.Actor), checkReason(req.Reason)); err != nil {
		return nil, err
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdEscalate, Key: req.Key, Reason: req.Reason})
}

// ResolveRequest is an operator's verdict.
type ResolveRequest struct {
	Caller
	Key        string
	To         opjournal.Status // StatusSucceeded or StatusFailedFinal
	ExternalID string           // required with StatusSucceeded
	Result     json.RawMessage  // optional, with StatusSucceeded
	ErrorCode  string           // optional, with StatusFailedFinal
	Actor      string           // stated; required without authentication
	Reason     string           // required
	// ResultCanonical says Result is already canonical JSON, as in
	// MarkSucceededRequest.
	ResultCanonical bool
}

// Resolve applies an operator's verdict to a non-terminal operation that
// is unknown or under review. The reason is required and goes to the
// history with the principal as actor. It returns CodeInvalidState for
// any other operation: a terminal one is never resolved again (see
// Acknowledge).
func (s *Service) Resolve(ctx context.Context, req ResolveRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), req.checkActor(req.Actor), checkReason(req.Reason)); err != nil {
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
	if err := firstError(checkText("external_id", req.ExternalID, MaxExternalIDLen), checkText("error_code", req.ErrorCode, MaxErrorCodeLen)); err != nil {
		return nil, err
	}
	result, err := s.checkedResult(req.Result, req.ResultCanonical)
	if err != nil {
		return nil, err
	}
	if result, err = s.redactResult(ctx, req.Tenant, req.Key, result); err != nil {
		return nil, fmt.Errorf("resolve %q: %w", req.Key, err)
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdResolve, Key: req.Key, Resolution: req.To,
		ExternalID: req.ExternalID, Result: result, ErrorCode: req.ErrorCode, Reason: req.Reason})
}

// AcknowledgeRequest ends the review of a terminal operation.
type AcknowledgeRequest struct {
	Caller
	Key    string
	Actor  string // stated; required without authentication
	Reason string // required
}

// Acknowledge is an operator's decision on a terminal operation under
// review (a detected duplicate effect, an effect after failed_final): the
// review ends and the status stays, since terminal states never change.
// It returns CodeInvalidState for an operation that is not terminal (use
// Resolve) or not under review.
func (s *Service) Acknowledge(ctx context.Context, req AcknowledgeRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), req.checkActor(req.Actor), checkReason(req.Reason)); err != nil {
		return nil, err
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdAcknowledge, Key: req.Key, Reason: req.Reason})
}

// SetNoteRequest sets or clears an operator's note on an operation.
type SetNoteRequest struct {
	Caller
	Key   string
	Note  string // "" clears the note
	Actor string // stated; required without authentication
}

// SetNote sets an operation's note (an empty one clears it), in any
// status: the note is prose for people and changes nothing the protocol
// decides. The history records it with reason "note" and the principal as
// the actor. A note longer than MaxNoteLen characters, not UTF-8, or with
// a control character other than newline is CodeInvalidArgument and
// changes nothing.
func (s *Service) SetNote(ctx context.Context, req SetNoteRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), req.checkActor(req.Actor), checkNote(req.Note)); err != nil {
		return nil, err
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdSetNote, Key: req.Key, Note: req.Note})
}

// checkNote validates a note: newlines are allowed (a note may have
// paragraphs), every other control character is not, since it could
// rewrite what a terminal or a log viewer shows. The limit counts
// characters, as a person typing the note does.
func checkNote(note string) error {
	if !utf8.ValidString(note) {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "note", "is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(note); n > MaxNoteLen {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "note", "is %d characters; the limit is %d", n, MaxNoteLen)
	}
	for i, r := range note {
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "note", "has a control character at offset %d (only newlines are allowed)", i)
		}
	}
	return nil
}

// EventsRequest asks for one page of an operation's history.
type EventsRequest struct {
	Caller
	Key       string
	PageSize  int    // 0: DefaultPageSize; above MaxPageSize is capped
	PageToken string // from a previous EventsResponse
}

// EventsResponse is one page of a history, oldest first.
type EventsResponse struct {
	Events        []opjournal.Event
	NextPageToken string
}

// Events returns one page of an operation's history, oldest first: every
// event is reachable, however long the history.
func (s *Service) Events(ctx context.Context, req EventsRequest) (EventsResponse, error) {
	if err := checkKey(req.Key); err != nil {
		return EventsResponse{}, err
	}
	size, err := pageSize(req.PageSize)
	if err != nil {
		return EventsResponse{}, err
	}
	var after int64
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil || len(b) < 2 || b[0] != 'e' {
			return EventsResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
		if after, err = strconv.ParseInt(string(b[1:]), 10, 64); err != nil || after < 0 {
			return EventsResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
	}
	evs, next, err := s.store.Events(ctx, store.EventsParams{Tenant: req.Tenant, Key: req.Key, After: after, Limit: size})
	if err != nil {
		return EventsResponse{}, fmt.Errorf("events %q: %w", req.Key, err)
	}
	res := EventsResponse{Events: evs}
	if next != 0 {
		res.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte("e" + strconv.FormatInt(next, 10)))
	}
	return res, nil
}

// pageSize applies the default and the cap of a page size.
func pageSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_size", "must not be negative")
	case n == 0:
		return DefaultPageSize, nil
	}
	return min(n, MaxPageSize), nil
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

// checkActor validates what the caller states about who it acts for:
// required without authentication (it is then the history's only name
// for the actor), optional with it (the principal is the actor).
func (c Caller) checkActor(actor string) error {
	if actor == "" && c.Principal != "" {
		return nil
	}
	return checkToken("actor", actor, MaxWorkerIDLen)
}

// checkReason validates a required reason.
func checkReason(reason string) error {
	if reason == "" {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "reason", "is required: say why, for the history")
	}
	return checkText("reason", reason, MaxReasonLen)
}
