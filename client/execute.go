package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	opjournalv1 "github.com/opjournal/opjournal/gen/opjournal/v1"
)

// Op is one business intent to execute.
type Op struct {
	// Key names the intent ("payment:order-817:intent-01"): made by
	// orchestrator code, never by the model, and the same for every retry
	// of the intent. 1–200 visible ASCII characters; no secrets.
	Key string
	// Action is an action type defined in the journal's policy
	// ("create_payment"); its policy decides how retries are handled.
	Action string
	// Payload is the request parameters: anything that encodes as a JSON
	// object (a map, a struct, a json.RawMessage). The journal binds its
	// hash to Key: the same Key with another payload is a Conflict. Money
	// travels as integers in minor units; numbers beyond ±(2^53−1) are refused.
	Payload any
}

// Attempt is what fn gets: the key to pass on to the provider (for example
// as an Idempotency-Key header, or in a searchable reference field) and the
// attempt number, the journal's fencing token (1 for the first attempt).
type Attempt struct {
	Key    string
	Number int
}

// Effect is what fn returns when the provider confirmed the effect.
type Effect struct {
	// ExternalID is the provider's identifier of the effect ("pay_5f2c"),
	// ≤ 200 characters; it lets the journal detect a duplicate effect.
	ExternalID string
	// Result is stored and returned on every replay: anything that encodes
	// as a JSON object, or nil for none. Store only what a retry needs
	// (sanitized: no secrets, no card data).
	Result any
}

// OutcomeKind classifies an Outcome.
type OutcomeKind int

// The outcomes of Execute.
const (
	// Succeeded: the effect is confirmed and recorded; Result holds the
	// stored result.
	Succeeded OutcomeKind = iota + 1
	// InProgressElsewhere: another worker holds a live lease; fn was not
	// called. Ask again after RetryAfter.
	InProgressElsewhere
	// VerificationRequired: the outcome is unknown (a timeout, a 5xx, a
	// panic, a vanished worker); the effect may have happened. fn is not
	// called again until reconciliation or a person settles it (or, for a
	// retry_same_key action, until the next Execute claims a new attempt).
	VerificationRequired
	// Conflict: the key is registered with other parameters; fn was not
	// called and nothing changed. A new intent needs a new key.
	Conflict
	// FailedFinal: the provider confirmed a rejection (ErrorCode); no
	// retry of this key will call fn again.
	FailedFinal
)

// String returns the snake_case name ("succeeded", "in_progress_elsewhere",
// "verification_required", "conflict", "failed_final").
func (k OutcomeKind) String() string {
	switch k {
	case Succeeded:
		return "succeeded"
	case InProgressElsewhere:
		return "in_progress_elsewhere"
	case VerificationRequired:
		return "verification_required"
	case Conflict:
		return "conflict"
	case FailedFinal:
		return "failed_final"
	}
	return fmt.Sprintf("OutcomeKind(%d)", int(k))
}

// Outcome is what Execute established about an operation.
type Outcome struct {
	// Kind is the outcome.
	Kind OutcomeKind
	// Replayed is true when the answer is the journal's stored terminal
	// state (Succeeded or FailedFinal) and fn was not called in this Execute.
	Replayed bool
	// ExternalID is the provider's identifier of the effect (Succeeded). With
	// NeedsReview after a duplicate effect it is the first effect's, and
	// Operation.DuplicateExternalId holds the later one.
	ExternalID string
	// Result is the stored result as compact JSON (Succeeded; nil if none).
	Result json.RawMessage
	// ErrorCode is the provider's rejection for FailedFinal, and what was
	// last observed ("timeout", "http_503", "panic") for VerificationRequired.
	ErrorCode string
	// RetryAfter is how long the other worker's lease still runs
	// (InProgressElsewhere; at least one second).
	RetryAfter time.Duration
	// NeedsReview is true when a person must look at the operation, for
	// example after a duplicate effect (see Operation.ReviewReason).
	NeedsReview bool
	// Cause is fn's error when this Execute called fn and it failed
	// (FailedFinal or VerificationRequired). It is not stored in the journal.
	Cause error
	// Operation is the journal's record after the call (nil for Conflict).
	Operation *opjournalv1.Operation
}

// Err returns nil for Succeeded and otherwise an error matching one of
// ErrInProgressElsewhere, ErrVerificationRequired, ErrConflict or
// ErrFailedFinal (and Cause), for tool code that reports anything but a
// success as an error.
func (o Outcome) Err() error {
	var err error
	switch o.Kind {
	case Succeeded:
		return nil
	case InProgressElsewhere:
		err = fmt.Errorf("%w; ask again in %s", ErrInProgressElsewhere, o.RetryAfter)
	case VerificationRequired:
		err = fmt.Errorf("%w (last observed: %s)", ErrVerificationRequired, o.ErrorCode)
	case Conflict:
		err = fmt.Errorf("%w; nothing was called; use a new operation key for a new intent", ErrConflict)
	case FailedFinal:
		err = fmt.Errorf("%w (%s)", ErrFailedFinal, o.ErrorCode)
	default:
		return fmt.Errorf("opjournal: no outcome (%s)", o.Kind)
	}
	if o.Operation != nil {
		err = fmt.Errorf("operation %q: %w", o.Operation.GetOperationKey(), err)
	}
	if o.Cause != nil {
		err = fmt.Errorf("%w: %w", err, o.Cause)
	}
	return err
}

// Execute runs fn at most once per attempt the journal grants, and never
// again once the outcome is recorded:
//
//  1. It registers op and claims it in one round trip.
//  2. If the journal holds a terminal answer, it returns it without calling
//     fn: Succeeded with Replayed (the stored result) or FailedFinal. The
//     same key with another payload is a Conflict. A live lease elsewhere is
//     InProgressElsewhere; an unknown outcome (or an expired lease of a
//     reconcile_before_retry action) is VerificationRequired.
//  3. Having claimed it, it calls fn(ctx, Attempt{Key, Number}).
//  4. It records fn's outcome: success → MarkSucceeded → Succeeded; an
//     error wrapped with Rejected → MarkFailedFinal → FailedFinal; any other
//     error (timeouts, a canceled ctx, 5xx, transport errors) →
//     MarkUnknown → VerificationRequired. A panic in fn is recorded as
//     unknown ("panic") and then continues unwinding. The outcome is
//     recorded with a fresh context (10 s) even if ctx is canceled.
//
// The error is non-nil when op is invalid (opjournal.ErrInvalidArgument),
// when the journal is unreachable or refuses the request (for example
// opjournal.ErrUnknownAction), or when fn ran but its outcome could not be
// recorded (*NotRecordedError). In one case both are set: the effect was
// recorded as Succeeded but Effect.Result could not be stored (not a JSON
// object, too large); the outcome is then returned with an error saying so.
func (c *Client) Execute(ctx context.Context, op Op, fn func(ctx context.Context, a Attempt) (Effect, error)) (Outcome, error) {
	payload, err := op.validate()
	if err == nil && fn == nil {
		err = errors.New("fn is nil")
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("opjournal: execute %q: %w", op.Key, err)
	}
	resp, err := c.rpc.Register(ctx, &opjournalv1.RegisterRequest{
		OperationKey: op.Key,
		ActionType:   op.Action,
		Payload:      payload,
		Claim:        &opjournalv1.ClaimOptions{WorkerId: c.workerID, LeaseSeconds: c.leaseSeconds},
	})
	if err != nil {
		err = journalError(ctx, "register", op.Key, err)
		if codeOf(err) == opjournal.CodePayloadMismatch {
			return Outcome{Kind: Conflict}, nil
		}
		return Outcome{}, err
	}
	if !resp.GetClaimed() {
		return journalAnswer(resp.GetOperation(), resp.GetRetryAfterSeconds()), nil
	}
	return c.attempt(ctx, Attempt{Key: op.Key, Number: int(resp.GetAttempt())}, fn)
}

// validate checks op on the client and encodes its payload.
func (op Op) validate() (*structpb.Struct, error) {
	if op.Key == "" {
		return nil, invalid("operation_key", "is required")
	}
	if len(op.Key) > 200 {
		return nil, invalid("operation_key", "is %d characters; the limit is 200", len(op.Key))
	}
	for i := 0; i < len(op.Key); i++ {
		if op.Key[i] < 0x21 || op.Key[i] > 0x7e {
			return nil, invalid("operation_key", "has a byte 0x%02x at offset %d; only visible ASCII characters (0x21–0x7e) are allowed", op.Key[i], i)
		}
	}
	if op.Action == "" {
		return nil, invalid("action_type", "is required")
	}
	if op.Payload == nil {
		return nil, invalid("payload", "is required (a JSON object; map[string]any{} for none)")
	}
	return encodeObject("payload", op.Payload)
}

// journalAnswer is the outcome of a lost claim: the journal's state decides.
func journalAnswer(op *opjournalv1.Operation, retryAfterSeconds int32) Outcome {
	out := Outcome{Operation: op, NeedsReview: op.GetNeedsReview()}
	switch op.GetStatus() {
	case opjournalv1.Status_STATUS_SUCCEEDED:
		out.Kind, out.Replayed = Succeeded, true
		out.ExternalID, out.Result = op.GetExternalId(), decodeObject(op.GetResult())
	case opjournalv1.Status_STATUS_FAILED_FINAL:
		out.Kind, out.Replayed, out.ErrorCode = FailedFinal, true, op.GetErrorCode()
	case opjournalv1.Status_STATUS_IN_PROGRESS:
		out.Kind = InProgressElsewhere
		out.RetryAfter = max(time.Duration(retryAfterSeconds)*time.Second, time.Second)
	case opjournalv1.Status_STATUS_PENDING:
		if op.GetNeedsReview() { // a person holds it
			out.Kind, out.ErrorCode = VerificationRequired, op.GetErrorCode()
		} else { // it changed hands between our claim and our read: ask again
			out.Kind, out.RetryAfter = InProgressElsewhere, time.Second
		}
	default: // unknown, including an expired lease
		out.Kind, out.ErrorCode = VerificationRequired, op.GetErrorCode()
	}
	return out
}

// attempt calls fn under the claimed lease and records its outcome.
func (c *Client) attempt(ctx context.Context, a Attempt, fn func(context.Context, Attempt) (Effect, error)) (Outcome, error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit). Record the attempt as
		// unknown without recovering, so the panic goes on unwinding with
		// its original stack once this returns.
		rctx, cancel := recordContext(ctx)
		defer cancel()
		_, _ = c.rpc.MarkUnknown(rctx, &opjournalv1.MarkUnknownRequest{
			OperationKey: a.Key, Attempt: int32(a.Number), ErrorCode: "panic",
		})
	}()
	eff, err := fn(ctx, a)
	returned = true
	return c.record(ctx, a, eff, err)
}

// recordContext detaches from ctx's cancellation (keeping its values, such
// as outgoing metadata) and bounds the Mark* call.
func recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// record writes fn's outcome to the journal.
func (c *Client) record(ctx context.Context, a Attempt, eff Effect, ferr error) (Outcome, error) {
	rctx, cancel := recordContext(ctx)
	defer cancel()
	key, n := a.Key, int32(a.Number)
	if ferr == nil {
		return c.markSucceeded(rctx, a, eff)
	}
	final, code := classify(ferr)
	if final {
		resp, err := c.rpc.MarkFailedFinal(rctx, &opjournalv1.MarkFailedFinalRequest{OperationKey: key, Attempt: n, ErrorCode: code})
		if err != nil {
			return Outcome{}, &NotRecordedError{Key: key, Attempt: a.Number, Observed: FailedFinal,
				Err: journalError(rctx, "mark failed_final", key, err)}
		}
		op := resp.GetOperation()
		return Outcome{Kind: FailedFinal, ErrorCode: code, NeedsReview: op.GetNeedsReview(), Cause: ferr, Operation: op}, nil
	}
	resp, err := c.rpc.MarkUnknown(rctx, &opjournalv1.MarkUnknownRequest{OperationKey: key, Attempt: n, ErrorCode: code})
	if err != nil {
		return Outcome{}, &NotRecordedError{Key: key, Attempt: a.Number, Observed: VerificationRequired,
			Err: journalError(rctx, "mark unknown", key, err)}
	}
	op := resp.GetOperation()
	return Outcome{Kind: VerificationRequired, ErrorCode: code, NeedsReview: op.GetNeedsReview(), Cause: ferr, Operation: op}, nil
}

// markSucceeded records a confirmed effect. A result the journal cannot
// store does not lose the effect: it is recorded without the result, and
// the outcome comes with an error saying so.
func (c *Client) markSucceeded(ctx context.Context, a Attempt, eff Effect) (Outcome, error) {
	req := &opjournalv1.MarkSucceededRequest{OperationKey: a.Key, Attempt: int32(a.Number), ExternalId: eff.ExternalID}
	var resultErr error
	if eff.Result != nil {
		req.Result, resultErr = encodeObject("result", eff.Result)
	}
	resp, err := c.rpc.MarkSucceeded(ctx, req)
	if err != nil {
		err = journalError(ctx, "mark succeeded", a.Key, err)
		if req.Result != nil && refusedResult(err) {
			resultErr, req.Result = err, nil
			resp, err = c.rpc.MarkSucceeded(ctx, req)
			if err != nil {
				err = journalError(ctx, "mark succeeded", a.Key, err)
			}
		}
	}
	if err != nil {
		return Outcome{}, &NotRecordedError{Key: a.Key, Attempt: a.Number, Observed: Succeeded, ExternalID: eff.ExternalID, Err: err}
	}
	op := resp.GetOperation()
	out := Outcome{
		Kind:        Succeeded,
		ExternalID:  op.GetExternalId(),
		Result:      decodeObject(op.GetResult()),
		NeedsReview: op.GetNeedsReview(),
		Operation:   op,
	}
	if resultErr != nil {
		return out, fmt.Errorf("opjournal: operation %q succeeded and is recorded, but its result was not stored: %w", a.Key, resultErr)
	}
	return out, nil
}

// refusedResult reports whether the journal refused MarkSucceeded because
// of the result alone.
func refusedResult(err error) bool {
	var e *opjournal.Error
	if !errors.As(err, &e) || (e.Code != opjournal.CodeInvalidArgument && e.Code != opjournal.CodeTooLarge) {
		return false
	}
	return e.Field == "result" || strings.HasPrefix(e.Field, "result/")
}
