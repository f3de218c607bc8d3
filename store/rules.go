package store

import (
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
)

// The rules below are shared by every store: a store applies a transition
// with one conditional UPDATE and, only when no row changed, reads the row
// and asks these functions why. They decide the answer from the row alone,
// so all databases explain a refusal in the same words.

// CheckHash returns CodePayloadMismatch when the existing operation was
// registered with another request hash.
func CheckHash(op *opjournal.Operation, hash string) error {
	if op.RequestHash == hash {
		return nil
	}
	return opjournal.Errorf(opjournal.CodePayloadMismatch, "payload",
		"operation %q is registered with other parameters (request hash %s…, this request %s…); use a new operation key for a new intent",
		op.Key, short(op.RequestHash), short(hash))
}

// CheckAttemptIssued returns CodeInvalidArgument when attempt was never
// handed out for op (a fencing token from nowhere).
func CheckAttemptIssued(op *opjournal.Operation, attempt int) error {
	if attempt >= 1 && attempt <= op.AttemptCount {
		return nil
	}
	return opjournal.Errorf(opjournal.CodeInvalidArgument, "attempt",
		"attempt %d was never issued for operation %q (attempts so far: %d)", attempt, op.Key, op.AttemptCount)
}

// ExplainNotHolder returns why a MarkUnknown or MarkFailedFinal from attempt
// was refused, given the row it was refused against. It always returns an error.
func ExplainNotHolder(op *opjournal.Operation, attempt int) error {
	if err := CheckAttemptIssued(op, attempt); err != nil {
		return err
	}
	var why string
	switch {
	case attempt < op.AttemptCount:
		why = fmt.Sprintf("attempt %d was superseded by attempt %d", attempt, op.AttemptCount)
	case op.Status == opjournal.StatusUnknown:
		why = "the operation is unknown (its lease expired or it was marked unknown) and goes to reconciliation"
	default:
		why = fmt.Sprintf("the operation is %s, not in progress", op.Status)
	}
	return opjournal.Errorf(opjournal.CodeStaleAttempt, "attempt",
		"attempt %d of operation %q no longer holds the lease: %s", attempt, op.Key, why)
}

// DuplicateEffectReason is the review reason recorded when MarkSucceeded
// reports an external_id other than the stored one.
func DuplicateEffectReason(op *opjournal.Operation, externalID string) string {
	if op.Status == opjournal.StatusFailedFinal {
		return fmt.Sprintf("effect %q confirmed after the operation was marked failed_final", externalID)
	}
	return fmt.Sprintf("duplicate effect: external_id %q reported after %q was confirmed", externalID, op.ExternalID)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// ExplainNoRelease returns why ReleaseForRetry was refused against op,
// whose effective status and times were read at dbNow. It always returns
// an error.
func ExplainNoRelease(op *opjournal.Operation, p ReleaseParams, dbNow time.Time) error {
	if err := explainNotLatest(op, p.Attempt); err != nil {
		return err
	}
	switch {
	case op.Status != opjournal.StatusUnknown:
		return opjournal.Errorf(opjournal.CodeInvalidState, "", "operation %q is %s, not unknown: only an unknown outcome is released for retry", op.Key, op.Status)
	case op.NeedsReview:
		return opjournal.Errorf(opjournal.CodeInvalidState, "", "operation %q is under review (%s): a person resolves it", op.Key, op.ReviewReason)
	}
	return opjournal.Errorf(opjournal.CodeInvalidState, "",
		"operation %q has been unknown for %s; absence only counts after the visibility lag of %s (database clock)",
		op.Key, dbNow.Sub(op.UnknownSince).Round(time.Millisecond), p.VisibilityLag)
}

// ExplainNoCheck returns why RecordCheck was refused against op.
func ExplainNoCheck(op *opjournal.Operation, attempt int) error {
	if err := explainNotLatest(op, attempt); err != nil {
		return err
	}
	return opjournal.Errorf(opjournal.CodeInvalidState, "", "operation %q is %s, not unknown: there is nothing to check", op.Key, op.Status)
}

// ExplainNoResolve returns why Resolve was refused against op.
func ExplainNoResolve(op *opjournal.Operation) error {
	return opjournal.Errorf(opjournal.CodeInvalidState, "",
		"operation %q is %s and not under review: an operator resolves only unknown or needs_review operations", op.Key, op.Status)
}

// explainNotLatest refuses an attempt number that is not the latest.
func explainNotLatest(op *opjournal.Operation, attempt int) error {
	if err := CheckAttemptIssued(op, attempt); err != nil {
		return err
	}
	if attempt != op.AttemptCount {
		return opjournal.Errorf(opjournal.CodeStaleAttempt, "attempt",
			"attempt %d of operation %q was superseded by attempt %d", attempt, op.Key, op.AttemptCount)
	}
	return nil
}

// MaxEvents bounds the history one Events call returns.
const MaxEvents = 1000
