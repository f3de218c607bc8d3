package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/tracing"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Op is one business intent to execute.
type Op struct {
	// Key names the intent: made ONCE per intent by orchestrator code,
	// never by the model, stored with the intent, and the same for every
	// retry of it. In production make it opaque and random (NewKey) and put
	// the business links in Refs; a side effect of another operation gets
	// a key derived from its parent's (ChildKey). 1–200 visible ASCII
	// characters; no secrets.
	Key string
	// Action is an action type defined in the journal's policy
	// ("create_payment"); its policy decides how retries are handled.
	Action string
	// Payload is the request parameters: anything that encodes as a JSON
	// object (a map, a struct, a json.RawMessage). The journal binds its
	// hash to Key: the same Key with another payload is a Conflict. Money
	// travels as integers in minor units; numbers beyond ±(2^53−1) are refused.
	Payload any
	// Refs are business references stored beside the key and searchable
	// (ListOperations refs[order_id]=817): at most 16, names of
	// [a-z0-9_.-], short values, nothing secret. Part of neither the key
	// nor the request hash, and fixed at registration: a retry must send
	// the same ones (other refs are a Conflict).
	Refs map[string]string
	// ParentKey is the key of the operation this one is a side effect of
	// (the payment whose receipt email this is); "" for none.
	ParentKey string
	// ApprovalWait is how long Execute waits for a person's decision when
	// the action's policy says this request needs an approval
	// (NEXT_STEP_AWAIT_APPROVAL); 0 (the default) does not wait: the
	// outcome is AwaitingApproval at once. It is not sent to the journal
	// and is part of neither the key nor the request hash.
	ApprovalWait time.Duration
}

// NewKey returns a new opaque operation key ("op_" and 128 random bits).
// Make it once per business intent and store it with the intent: every
// retry must send the same key, so never call NewKey for a retry.
func NewKey() string { return opjournal.NewKey() }

// ChildKey derives the key of a side effect of the operation parent (its
// receipt email, a webhook): the same parent and name always give the
// same key, so a retried handler finds its child instead of sending it
// twice. name is 1–64 characters of [a-z0-9_.-]. Set the child's
// ParentKey to parent.
func ChildKey(parent, name string) (string, error) { return opjournal.ChildKey(parent, name) }

// Attempt is what fn gets: the key to pass on to the provider (for example
// as an Idempotency-Key header, or in a searchable reference field), the
// attempt number, the journal's fencing token (1 for the first attempt),
// and the lease the journal granted.
//
// fn's context is canceled when Execute gives up on the attempt: at the end
// of the lease (measured on this process's monotonic clock from when the
// claim was sent), less a safety margin (opjournal.LeaseSafetyMargin).
// While fn runs, Execute extends the lease by heartbeats (ExtendLease),
// up to the policy's max_attempt_seconds, so a long call keeps it; fn
// should pass its ctx to the provider call so that it ends when the lease
// cannot be kept.
type Attempt struct {
	Key    string
	Number int
	// Lease is the lease granted at the claim.
	Lease time.Duration
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
	// FailedFinal: the provider confirmed a rejection (ErrorCode), or a
	// person rejected the request before it ran (ErrorCode
	// "approval_rejected", or "approval_timeout" when nobody decided in
	// time); no retry of this key will call fn again.
	FailedFinal
	// AwaitingApproval: the action's policy says a person must approve this
	// exact request (Operation.RequestHash) first, and no decision came
	// within Op.ApprovalWait; fn was not called. Ask again with the same
	// key and payload after RetryAfter (or with a longer ApprovalWait):
	// once it is approved, that Execute calls fn.
	AwaitingApproval
	// BudgetExceeded: the operation would pass a budget of its action
	// whose on_exceed is reject (Budget says which, its limit and use);
	// nothing was registered and fn was not called. The same request may
	// fit after RetryAfter (0: never, it alone is over the limit); it must
	// not be split or rephrased to get around the limit.
	BudgetExceeded
)

// String returns the snake_case name ("succeeded", "in_progress_elsewhere",
// "verification_required", "conflict", "failed_final", "awaiting_approval",
// "budget_exceeded").
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
	case AwaitingApproval:
		return "awaiting_approval"
	case BudgetExceeded:
		return "budget_exceeded"
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
	// Result is the stored result as compact JSON (Succeeded; nil if
	// none), or the stored refusal (FailedFinal, RejectedWith). When this
	// Execute recorded the outcome itself, it is the result (or refusal)
	// fn gave, as sent: the journal's answer leaves it out (the BASIC
	// view), and what it stores differs only where the policy says so
	// (redact_fields blanked, null members dropped), which a replay then
	// returns. After a duplicate effect it is the first effect's stored
	// result, read with Lookup (nil if that read failed).
	Result json.RawMessage
	// ErrorCode is the provider's rejection for FailedFinal, and what was
	// last observed ("timeout", "http_503", "panic") for VerificationRequired.
	ErrorCode string
	// RetryAfter is how long the other worker's lease still runs
	// (InProgressElsewhere), or when to ask again about an approval
	// (AwaitingApproval); at least one second.
	RetryAfter time.Duration
	// NeedsReview is true when a person must look at the operation, for
	// example after a duplicate effect (see Operation.ReviewReason).
	NeedsReview bool
	// Cause is fn's error when this Execute called fn and it failed
	// (FailedFinal or VerificationRequired). It is not stored in the journal.
	Cause error
	// Budget is the budget that refused the operation (BudgetExceeded).
	Budget *BudgetRefusal
	// Operation is the journal's record after the call (nil for Conflict
	// and BudgetExceeded).
	// For AwaitingApproval its OperationKey and RequestHash name what waits:
	// the approver approves that hash.
	Operation *opjournalv1.Operation
}

// Err returns nil for Succeeded and otherwise an error matching one of
// ErrInProgressElsewhere, ErrVerificationRequired, ErrConflict,
// ErrFailedFinal or ErrAwaitingApproval (and Cause), for tool code that
// reports anything but a success as an error.
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
	case AwaitingApproval:
		err = fmt.Errorf("%w; nothing was called; ask again with the same key and payload in %s", ErrAwaitingApproval, o.RetryAfter)
	case BudgetExceeded:
		err = fmt.Errorf("%w: %s; nothing was registered or called", ErrBudgetExceeded, o.Budget)
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
//  2. The journal decides the next step (RegisterResponse.next) and
//     Execute only acts on it: a terminal answer is returned without
//     calling fn (Succeeded with Replayed and the stored result, or
//     FailedFinal); a live lease elsewhere is InProgressElsewhere; an
//     unknown outcome, or an operation under review, is
//     VerificationRequired; the same key with another payload is a
//     Conflict. A step it does not know is an error, never a call.
//     When a person must approve the request first (the action's policy
//     says so: NEXT_STEP_AWAIT_APPROVAL), Execute calls nothing: it waits
//     for the decision up to op.ApprovalWait (and while ctx lasts) with
//     Lookup's long poll, never a tight loop. Approved in time, it
//     registers again and goes on as below (claim, fn once); rejected,
//     the outcome is FailedFinal ("approval_rejected" or
//     "approval_timeout"); otherwise AwaitingApproval, and a later Execute
//     with the same key and payload asks again. When ctx ends during that
//     wait, the AwaitingApproval outcome comes with ctx's error.
//  3. Having claimed it, it calls fn(ctx, Attempt{Key, Number, Lease}) in
//     its own goroutine and waits for it at most until the lease ends,
//     less a safety margin (opjournal.LeaseSafetyMargin), counted on this
//     process's monotonic clock from before the claim was sent. While fn
//     runs, heartbeats (ExtendLease, every third of the lease) keep the
//     lease, up to the policy's max_attempt_seconds (WithHeartbeat turns
//     them off). When the lease cannot be kept, fn's ctx is canceled and
//     the outcome is recorded as unknown ("lease_expired"): the provider
//     may still act on the request, so only reconciliation decides. If fn
//     still returns an effect later, it is recorded then.
//  4. It records fn's outcome: success → MarkSucceeded → Succeeded; an
//     error wrapped with Rejected → MarkFailedFinal → FailedFinal; any other
//     error (timeouts, a canceled ctx, 5xx, transport errors) →
//     MarkUnknown → VerificationRequired. A panic in fn is recorded as
//     unknown ("panic") and then raised again in the caller's goroutine.
//     The outcome is recorded with a fresh context (10 s) even if ctx is
//     canceled.
//
// Tracing: when the program installed an OpenTelemetry TracerProvider
// (otel.SetTracerProvider), Execute is a span ("opjournal.Execute"), each
// journal call a client span whose W3C trace context travels in its
// metadata (the journal's server spans join the trace), and fn runs in a
// child span ("opjournal.provider_call") that its ctx carries: make the
// provider request with that ctx through otelhttp.NewTransport, or inject
// the context yourself, and the provider receives the same trace's
// traceparent. Spans carry the key, the action type and the outcome,
// never the payload or the result. Without a TracerProvider nothing of
// this happens.
//
// The error is non-nil when op is invalid (opjournal.ErrInvalidArgument),
// when the journal is unreachable or refuses the request (for example
// opjournal.ErrUnknownAction), or when fn ran but its outcome could not be
// recorded (*NotRecordedError). In one case both are set: the effect was
// recorded as Succeeded but Effect.Result could not be stored (not a JSON
// object, too large); the outcome is then returned with an error saying so.
func (c *Client) Execute(ctx context.Context, op Op, fn func(ctx context.Context, a Attempt) (Effect, error)) (out Outcome, err error) {
	if tracing.Enabled() {
		var span trace.Span
		ctx, span = tracing.Start(ctx, "opjournal.Execute", trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(tracing.KeyOperationKey.String(op.Key), tracing.KeyActionType.String(op.Action)))
		defer func() { endExecute(span, out, err) }()
	}
	return c.execute(ctx, op, fn)
}

// endExecute ends Execute's span with the outcome (its kind, the error
// code recorded), never the result or the error's message.
func endExecute(span trace.Span, out Outcome, err error) {
	if out.Kind != 0 {
		span.SetAttributes(tracing.KeyOutcome.String(out.Kind.String()), attribute.Bool("opjournal.replayed", out.Replayed))
	}
	if out.ErrorCode != "" {
		span.SetAttributes(tracing.KeyErrorCode.String(out.ErrorCode))
	}
	if err != nil {
		code := string(codeOf(err))
		if code == "" {
			code = "error"
		}
		tracing.Fail(span, code)
	}
	span.End()
}

func (c *Client) execute(ctx context.Context, op Op, fn func(ctx context.Context, a Attempt) (Effect, error)) (Outcome, error) {
	payload, err := op.validate()
	if err == nil && fn == nil {
		err = errors.New("fn is nil")
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("opjournal: execute %q: %w", op.Key, err)
	}
	req := &opjournalv1.RegisterRequest{
		OperationKey: op.Key,
		ActionType:   op.Action,
		Payload:      payload,
		Refs:         op.Refs,
		ParentKey:    op.ParentKey,
		Claim:        &opjournalv1.ClaimOptions{WorkerId: c.workerID, LeaseSeconds: c.leaseSeconds},
		// The lean answer whatever the server's default: no payload (fn
		// works from op's own), the stored result when there is one to
		// replay.
		View: basic,
	}
	d, err := c.register(ctx, req)
	if err == nil && d.out.Kind == AwaitingApproval && op.ApprovalWait > 0 {
		d, err = c.awaitApproval(ctx, req, op.ApprovalWait, d)
	}
	if err != nil || !d.call {
		return d.out, err
	}
	lease := time.Duration(d.resp.GetLeaseSeconds()) * time.Second
	return c.attempt(ctx, Attempt{Key: op.Key, Number: int(d.resp.GetAttempt()), Lease: lease}, d.sent, fn)
}

// decision is the journal's answer to a Register with claim, as Execute
// acts on it: call fn (call, with the lease of resp counted from sent),
// or return out.
type decision struct {
	out  Outcome
	call bool
	resp *opjournalv1.RegisterResponse
	sent time.Time
}

// register sends req (a Register with claim) and reads the journal's
// decision; the same key with another payload is a Conflict.
func (c *Client) register(ctx context.Context, req *opjournalv1.RegisterRequest) (decision, error) {
	// The lease is counted from before the claim is sent: the journal's
	// lease started after that, so network delay only shortens ours.
	sent := time.Now()
	resp, err := c.rpc.Register(ctx, req)
	if err != nil {
		err = journalError(ctx, "register", req.GetOperationKey(), err)
		switch codeOf(err) {
		case opjournal.CodePayloadMismatch:
			return decision{out: Outcome{Kind: Conflict}}, nil
		case opjournal.CodeBudgetExceeded:
			return decision{out: budgetOutcome(err)}, nil
		}
		return decision{}, err
	}
	out, call, err := outcomeOf(resp)
	return decision{out: out, call: call, resp: resp, sent: sent}, err
}

// maxLookupWait is the longest long poll Lookup takes (wait_seconds ≤ 60).
const maxLookupWait = 60 * time.Second

// minApprovalPoll is the least time between two Lookups of one wait for
// an approval: a journal that answers at once (one without the long poll,
// or a first approval of two under two_person) is not asked in a tight
// loop.
const minApprovalPoll = time.Second

// awaitApproval waits for a person's decision on an operation awaiting
// approval, at most wait and while ctx lasts, with Lookup's long poll
// (wait_seconds, in slices of at most a minute): it calls nothing. Once
// the operation is no longer awaiting approval it sends req again (the
// same key, payload and claim) and the journal's answer decides as usual:
// approved, it is claimed and fn is called; rejected, the refusal is
// replayed (FailedFinal). When wait passes first the outcome is
// AwaitingApproval with the latest record. When ctx ends first, the
// outcome is AwaitingApproval too, with an error wrapping ctx.Err().
func (c *Client) awaitApproval(ctx context.Context, req *opjournalv1.RegisterRequest, wait time.Duration, d decision) (decision, error) {
	key := req.GetOperationKey()
	end := time.Now().Add(wait)
	stopped := func() (decision, error) {
		return d, fmt.Errorf("opjournal: execute %q: waiting for an approval: %w", key, ctx.Err())
	}
	for {
		left := time.Until(end)
		if left <= 0 {
			return d, nil
		}
		if ctx.Err() != nil {
			return stopped()
		}
		slice := min(left, maxLookupWait)
		// The journal holds the answer up to whole seconds; this call's own
		// deadline ends it at the caller's bound.
		lctx, cancel := context.WithTimeout(ctx, slice)
		asked := time.Now()
		rec, err := c.rpc.Lookup(lctx, &opjournalv1.LookupRequest{
			OperationKey: key, View: basic, WaitSeconds: int32((slice + time.Second - 1) / time.Second),
		})
		cancel()
		switch {
		case ctx.Err() != nil:
			return stopped()
		case err != nil && lctx.Err() != nil:
			continue // the slice ran out while the journal held the answer
		case err != nil:
			jerr := journalError(ctx, "lookup", key, err)
			if codeOf(jerr) != opjournal.CodeUnavailable {
				return d, jerr
			}
		case rec.GetOperation().GetStatus() != opjournalv1.Status_STATUS_AWAITING_APPROVAL:
			// Decided (or changed otherwise): the journal's answer to the
			// same request says what happens now.
			next, err := c.register(ctx, req)
			if err != nil || next.out.Kind != AwaitingApproval {
				return next, err
			}
			d = next
		default:
			d.out.Operation, d.out.NeedsReview = rec.GetOperation(), rec.GetOperation().GetNeedsReview()
		}
		if pause := minApprovalPoll - time.Since(asked); pause > 0 {
			t := time.NewTimer(min(pause, max(time.Until(end), 0)))
			select {
			case <-ctx.Done():
				t.Stop()
				return stopped()
			case <-t.C:
			}
		}
	}
}

// outcomeOf acts on the journal's decision (RegisterResponse.next): call
// the provider, or the outcome to return without calling it. A step this
// SDK does not know is an error, never leave to call.
func outcomeOf(resp *opjournalv1.RegisterResponse) (out Outcome, call bool, err error) {
	op := resp.GetOperation()
	out = Outcome{Operation: op, NeedsReview: op.GetNeedsReview()}
	switch resp.GetNext() {
	case opjournalv1.NextStep_NEXT_STEP_CALL_PROVIDER:
		if !resp.GetClaimed() || resp.GetAttempt() < 1 || resp.GetLeaseSeconds() < 1 {
			return Outcome{}, false, fmt.Errorf("opjournal: operation %q: the journal said to call the provider without granting a lease (claimed=%v attempt=%d lease=%ds)",
				op.GetOperationKey(), resp.GetClaimed(), resp.GetAttempt(), resp.GetLeaseSeconds())
		}
		return Outcome{}, true, nil
	case opjournalv1.NextStep_NEXT_STEP_REPLAY:
		out.Kind, out.Replayed = Succeeded, true
		out.ExternalID, out.Result = op.GetExternalId(), decodeObject(op.GetResult())
	case opjournalv1.NextStep_NEXT_STEP_FAILED_FINAL:
		out.Kind, out.Replayed, out.ErrorCode = FailedFinal, true, op.GetErrorCode()
		out.Result = decodeObject(op.GetResult()) // the stored refusal, if any
	case opjournalv1.NextStep_NEXT_STEP_WAIT:
		out.Kind = InProgressElsewhere
		out.RetryAfter = max(time.Duration(resp.GetRetryAfterSeconds())*time.Second, time.Second)
	case opjournalv1.NextStep_NEXT_STEP_VERIFICATION_REQUIRED:
		out.Kind, out.ErrorCode = VerificationRequired, op.GetErrorCode()
	case opjournalv1.NextStep_NEXT_STEP_AWAIT_APPROVAL:
		out.Kind = AwaitingApproval
		out.RetryAfter = max(time.Duration(resp.GetRetryAfterSeconds())*time.Second, time.Second)
	default:
		return Outcome{}, false, fmt.Errorf("opjournal: operation %q: the journal answered next step %s, which this SDK does not know; nothing was called (upgrade the SDK)",
			op.GetOperationKey(), resp.GetNext())
	}
	return out, false, nil
}

// basic is the view the SDK asks for in the agent's calls (AIP-157): their
// answers leave the payload out (and, for the marks, the result, which is
// the one sent), whatever the server's default.
const basic = opjournalv1.OperationView_OPERATION_VIEW_BASIC

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

// fnResult is how fn ended.
type fnResult struct {
	eff      Effect
	err      error
	panicked bool
	panicVal any
}

// errLeaseExpired is the cause of an attempt Execute gave up on.
var errLeaseExpired = errors.New("the lease ran out while the provider call ran (it could not be extended); the call was canceled and its outcome is unknown")

// attempt calls fn under the claimed lease and records its outcome. fn
// runs in its own goroutine, so that Execute can stop waiting for it at
// the end of the lease; heartbeats extend the lease while it runs.
func (c *Client) attempt(ctx context.Context, a Attempt, sent time.Time, fn func(context.Context, Attempt) (Effect, error)) (Outcome, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan fnResult, 1)
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			// fn panicked (or called runtime.Goexit): hand it over, to be
			// recorded as unknown and re-raised in Execute's goroutine.
			done <- fnResult{panicked: true, panicVal: recover()}
		}()
		eff, err := callProvider(fctx, a, fn)
		returned = true
		done <- fnResult{eff: eff, err: err}
	}()

	lease := newLeaseClock(a.Lease, sent)
	giveUp := time.NewTimer(time.Until(lease.deadline()))
	defer giveUp.Stop()
	var beats <-chan time.Time
	if c.heartbeat {
		t := time.NewTicker(opjournal.HeartbeatInterval(a.Lease))
		defer t.Stop()
		beats = t.C
	}
	for {
		select {
		case r := <-done:
			if r.panicked {
				c.recordPanic(ctx, a)
				if r.panicVal == nil {
					runtime.Goexit()
				}
				panic(r.panicVal)
			}
			return c.record(ctx, a, r.eff, r.err)
		case <-beats:
			if !c.extend(ctx, a, lease) {
				beats = nil // refused: the lease ends as it is
			}
			giveUp.Reset(time.Until(lease.deadline()))
		case <-giveUp.C:
			if time.Now().Before(lease.deadline()) { // a heartbeat moved it
				giveUp.Reset(time.Until(lease.deadline()))
				continue
			}
			cancel()
			go c.recordLate(ctx, a, done)
			return c.giveUp(ctx, a)
		}
	}
}

// callProvider calls fn, in a span of its own ("opjournal.provider_call",
// a child of Execute's) while tracing is on: fn's ctx carries it, so a
// provider request made with an OpenTelemetry-instrumented HTTP client
// (otelhttp.NewTransport) or injected explicitly
// (otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header)))
// sends its traceparent, and the provider's trace joins the agent's.
func callProvider(ctx context.Context, a Attempt, fn func(context.Context, Attempt) (Effect, error)) (eff Effect, err error) {
	if !tracing.Enabled() {
		return fn(ctx, a)
	}
	ctx, span := tracing.Start(ctx, "opjournal.provider_call", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(tracing.KeyOperationKey.String(a.Key), tracing.KeyAttempt.Int(a.Number)))
	ended := false
	defer func() {
		if !ended { // fn panicked
			tracing.Fail(span, "panic")
			span.End()
		}
	}()
	eff, err = fn(ctx, a)
	if err != nil {
		final, code := classify(err)
		if final {
			span.SetAttributes(attribute.Bool("opjournal.rejected", true))
		}
		tracing.Fail(span, code)
	}
	ended = true
	span.End()
	return eff, err
}

// leaseClock is the end of an attempt's lease on this process's monotonic
// clock: from the moment the claim (or the last heartbeat that extended
// it) was sent, plus the lease the journal granted, minus the safety margin.
type leaseClock struct {
	mu  sync.Mutex
	end time.Time
}

func newLeaseClock(lease time.Duration, sent time.Time) *leaseClock {
	return &leaseClock{end: sent.Add(lease - opjournal.LeaseSafetyMargin(lease))}
}

func (l *leaseClock) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// extended records a heartbeat sent at sent that was granted lease.
func (l *leaseClock) extended(sent time.Time, lease time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if end := sent.Add(lease - opjournal.LeaseSafetyMargin(lease)); end.After(l.end) {
		l.end = end
	}
}

// extend sends one heartbeat. It returns false when the journal refused
// it (the lease expired, the attempt was superseded, max_attempt_seconds
// was reached): heartbeats stop and the lease ends as it stands. A
// journal that does not answer is tried again at the next beat.
func (c *Client) extend(ctx context.Context, a Attempt, lease *leaseClock) bool {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(opjournal.HeartbeatInterval(a.Lease), time.Second))
	defer cancel()
	sent := time.Now()
	resp, err := c.rpc.ExtendLease(bctx, &opjournalv1.ExtendLeaseRequest{OperationKey: a.Key, Attempt: int32(a.Number), View: basic})
	if err != nil {
		switch codeOf(journalError(bctx, "extend lease", a.Key, err)) {
		case opjournal.CodeStaleAttempt, opjournal.CodeInvalidState, opjournal.CodeNotFound, opjournal.CodeInvalidArgument:
			return false
		}
		return true
	}
	lease.extended(sent, time.Duration(resp.GetLeaseSeconds())*time.Second)
	return true
}

// giveUp records an attempt whose lease ran out while fn ran: unknown
// ("lease_expired"). A refusal because the lease already ended changes
// nothing: the journal reads an expired lease as unknown anyway.
func (c *Client) giveUp(ctx context.Context, a Attempt) (Outcome, error) {
	rctx, cancel := recordContext(ctx)
	defer cancel()
	resp, err := c.rpc.MarkUnknown(rctx, &opjournalv1.MarkUnknownRequest{OperationKey: a.Key, Attempt: int32(a.Number), ErrorCode: "lease_expired", View: basic})
	var op *opjournalv1.Operation
	if err != nil {
		jerr := journalError(rctx, "mark unknown", a.Key, err)
		if codeOf(jerr) != opjournal.CodeStaleAttempt {
			return Outcome{}, &NotRecordedError{Key: a.Key, Attempt: a.Number, Observed: VerificationRequired, Err: jerr}
		}
	} else {
		op = resp.GetOperation()
	}
	return Outcome{Kind: VerificationRequired, ErrorCode: "lease_expired", NeedsReview: op.GetNeedsReview(), Cause: errLeaseExpired, Operation: op}, nil
}

// recordLate waits for an fn Execute gave up on and records a success it
// still reports: a confirmed effect is a fact (the journal accepts it from
// a stale attempt). Failures change nothing: the outcome is unknown already.
func (c *Client) recordLate(ctx context.Context, a Attempt, done <-chan fnResult) {
	r := <-done
	if r.panicked || r.err != nil {
		return
	}
	_, _ = c.record(ctx, a, r.eff, nil)
}

// recordPanic records an attempt whose fn panicked as unknown ("panic").
func (c *Client) recordPanic(ctx context.Context, a Attempt) {
	rctx, cancel := recordContext(ctx)
	defer cancel()
	_, _ = c.rpc.MarkUnknown(rctx, &opjournalv1.MarkUnknownRequest{
		OperationKey: a.Key, Attempt: int32(a.Number), ErrorCode: "panic", View: basic,
	})
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
		req := &opjournalv1.MarkFailedFinalRequest{OperationKey: key, Attempt: n, ErrorCode: code, View: basic}
		var re *RejectedError
		if errors.As(ferr, &re) && re.Refusal != nil {
			// A refusal that does not encode is left out: the rejection
			// is the fact to record.
			req.Result, _ = encodeObject("refusal", re.Refusal)
		}
		resp, err := c.rpc.MarkFailedFinal(rctx, req)
		if err != nil && req.Result != nil && refusedResult(journalError(rctx, "mark failed_final", key, err)) {
			// The refusal cannot be stored (too large, not an object): the
			// rejection is still a fact; record it without.
			req.Result = nil
			resp, err = c.rpc.MarkFailedFinal(rctx, req)
		}
		if err != nil {
			return Outcome{}, &NotRecordedError{Key: key, Attempt: a.Number, Observed: FailedFinal,
				Err: journalError(rctx, "mark failed_final", key, err)}
		}
		op := resp.GetOperation()
		// The answer (BASIC) leaves the refusal out: it is the one sent.
		return Outcome{Kind: FailedFinal, ErrorCode: code, NeedsReview: op.GetNeedsReview(), Cause: ferr, Operation: op,
			Result: decodeObject(req.GetResult())}, nil
	}
	resp, err := c.rpc.MarkUnknown(rctx, &opjournalv1.MarkUnknownRequest{OperationKey: key, Attempt: n, ErrorCode: code, View: basic})
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
	req := &opjournalv1.MarkSucceededRequest{OperationKey: a.Key, Attempt: int32(a.Number), ExternalId: eff.ExternalID, View: basic}
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
		NeedsReview: op.GetNeedsReview(),
		Operation:   op,
	}
	if op.GetExternalId() == eff.ExternalID {
		// The answer (BASIC) leaves the result out: it is the one sent.
		out.Result = decodeObject(req.GetResult())
	} else {
		// The journal holds another effect (a duplicate, now under
		// review): the stored result is that one's. Best effort: the
		// effect is recorded whether or not it can be read.
		if rec, lerr := c.rpc.Lookup(ctx, &opjournalv1.LookupRequest{OperationKey: a.Key, View: opjournalv1.OperationView_OPERATION_VIEW_FULL}); lerr == nil {
			out.Result = decodeObject(rec.GetOperation().GetResult())
		}
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

// BudgetRefusal is what the journal said of the budget a registration
// would pass: its name, the action whose policy defines it, its limit and
// what is used within its window (no payload value).
type BudgetRefusal struct {
	Budget, Action string
	Limit, Used    int64
	// Window is the budget's rolling window.
	Window time.Duration
	// Message is the journal's words for people.
	Message string
}

// String says which budget and how much of it is used.
func (b *BudgetRefusal) String() string {
	if b == nil {
		return "a budget"
	}
	return fmt.Sprintf("budget %q of %s: %d of %d used", b.Budget, b.Action, b.Used, b.Limit)
}

// budgetOutcome is the BudgetExceeded outcome of a BUDGET_EXCEEDED
// refusal.
func budgetOutcome(err error) Outcome {
	out := Outcome{Kind: BudgetExceeded, Budget: &BudgetRefusal{}}
	var e *opjournal.Error
	if errors.As(err, &e) {
		d := e.Details
		out.Budget.Budget, out.Budget.Action, out.Budget.Message = d["budget"], d["action"], e.Message
		out.Budget.Limit, _ = strconv.ParseInt(d["limit"], 10, 64)
		out.Budget.Used, _ = strconv.ParseInt(d["used"], 10, 64)
		w, _ := strconv.ParseInt(d["window_seconds"], 10, 64)
		out.Budget.Window = time.Duration(w) * time.Second
		out.RetryAfter = e.RetryAfter
	}
	return out
}
