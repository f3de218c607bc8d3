package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// How an operation whose outcome is unknown, or that is under review, is
// settled: by the reconciler (ReleaseForRetry, RecordCheck, Escalate) or a
// person (Resolve, Acknowledge, SetNote).

// Limits of the reconciliation and review calls.
const (
	MaxPageSize     = opjournal.MaxPageSize
	DefaultPageSize = opjournal.DefaultPageSize
	MaxReasonLen    = opjournal.MaxReasonLen
	MaxNoteLen      = opjournal.MaxNoteLen
	MaxNextCheck    = opjournal.MaxNextCheckSeconds * time.Second
)

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
	// ResultCanonical and ResultRefused are as in MarkSucceededRequest.
	ResultCanonical bool
	ResultRefused   error
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
		if req.ExternalID != "" || req.Result != nil || req.ResultRefused != nil {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "external_id", "a failed_final resolution has no external_id or result")
		}
	default:
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "resolution", "must be SUCCEEDED or FAILED_FINAL")
	}
	if err := firstError(checkText("external_id", req.ExternalID, MaxExternalIDLen), checkText("error_code", req.ErrorCode, MaxErrorCodeLen)); err != nil {
		return nil, err
	}
	result, err := s.checkedResult(req.Result, req.ResultCanonical, req.ResultRefused)
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

// canonicalResult validates and canonicalises an optional result object.
func (s *Service) canonicalResult(raw json.RawMessage) (json.RawMessage, error) {
	if raw == nil {
		return nil, nil
	}
	c, err := canonjson.Canonicalize(raw, canonjson.Options{})
	if err != nil {
		return nil, JSONError("result", err)
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
