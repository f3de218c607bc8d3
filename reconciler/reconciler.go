package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/tracing"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Defaults of Config.
const (
	// DefaultPollInterval is the default pause between passes.
	DefaultPollInterval = time.Second
	// DefaultConcurrency is the default number of operations handled at once.
	DefaultConcurrency = 4
	// DefaultPageSize is the default page size of ListOperations.
	DefaultPageSize = 100
	// DefaultRPCTimeout is the default bound on one journal call.
	DefaultRPCTimeout = 10 * time.Second
	// defaultFindTimeout bounds Find of a verifier that is not an
	// HTTPVerifier (which has its own timeout from the policy).
	defaultFindTimeout = 30 * time.Second
)

// Limits of the journal's API.
const (
	maxTextLen        = 200   // note, reason
	maxActorLen       = 200   // actor
	maxNextCheckAfter = 86400 // next_check_after_seconds
)

// Config configures a Reconciler. Journal and Policy are required.
type Config struct {
	// Journal is the journal's gRPC client; the reconciler uses nothing else
	// to read or change operations.
	Journal opjournalv1.JournalServiceClient
	// Policy is the policy the journal enforces (the same file): it gives
	// each action's reconcile settings and unknown_after_seconds.
	Policy *policy.Policy
	// Verifiers overrides the verifier of an action by name. A nil value
	// removes the action's verifier. Actions not listed use an
	// HTTPVerifier built from their policy, if it configures one.
	Verifiers map[string]Verifier
	// HTTPClient is used by the HTTPVerifiers built from the policy
	// (default: a new client with the default transport).
	HTTPClient *http.Client
	// LookupEnv reads the ${VAR} references of the verifiers built from
	// the policy, at request time (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// ID names this reconciler in the journal's history (the actor of its
	// transitions); 1–200 visible ASCII characters. Default
	// "reconciler-<hostname>-<pid>".
	ID string
	// PollInterval is the pause between passes of Run (default 1 s).
	PollInterval time.Duration
	// Concurrency bounds the operations handled at once (default 4).
	Concurrency int
	// PageSize is the page size of ListOperations (default 100, at most 1000).
	PageSize int
	// RPCTimeout bounds each journal call (default 10 s).
	RPCTimeout time.Duration
	// Logger receives one line per pass and one per decision; never
	// payloads, results or header values (default slog.Default()).
	Logger *slog.Logger
	// Registerer, if set, registers the reconciler's Prometheus metrics.
	Registerer prometheus.Registerer
	// Now is the clock that measures how long an operation has been
	// unknown (default time.Now). The journal's own checks use the
	// database's clock.
	Now func() time.Time
	// Rand draws the backoff jitter (default: seeded from the time and
	// the pid). It is used under a lock.
	Rand *rand.Rand
}

// Decision is what the reconciler did with one operation in a pass.
type Decision string

// The decisions, also the "decision" label of
// opjournal_reconciler_decisions_total.
const (
	// DecisionSucceeded: the provider holds the completed effect; it was
	// recorded with MarkSucceeded.
	DecisionSucceeded Decision = "succeeded"
	// DecisionReleased: the provider definitively reported absence after
	// the visibility lag; the operation went back to pending for a retry.
	DecisionReleased Decision = "released"
	// DecisionRechecked: nothing definite; a check was recorded and the
	// next one scheduled.
	DecisionRechecked Decision = "rechecked"
	// DecisionEscalated: handed to a person (needs_review).
	DecisionEscalated Decision = "escalated"
	// DecisionSkipped: someone else moved the operation first (another
	// reconciler, a retry, an operator); nothing to do.
	DecisionSkipped Decision = "skipped"
	// DecisionDeferred: within the initial delay; looked at again in a
	// later pass, without any call.
	DecisionDeferred Decision = "deferred"
	// DecisionError: the journal could not be told (unavailable, timeout);
	// the operation is still due and is retried in the next pass.
	DecisionError Decision = "error"
)

// Stats counts the outcomes of passes. Checked is the number of operations
// looked at; each of them ends in exactly one of the other counts.
type Stats struct {
	// Checked counts the operations looked at.
	Checked int `json:"checked"`
	// Succeeded counts confirmed effects recorded (reconciled).
	Succeeded int `json:"succeeded"`
	// Released counts proven absences released for retry.
	Released int `json:"released"`
	// Rechecked counts inconclusive checks recorded.
	Rechecked int `json:"rechecked"`
	// Escalated counts operations handed to a person.
	Escalated int `json:"escalated"`
	// Skipped counts operations someone else moved first.
	Skipped int `json:"skipped"`
	// Deferred counts operations left alone within their initial delay.
	Deferred int `json:"deferred"`
	// Errors counts decisions the journal could not be told; those
	// operations are retried in the next pass.
	Errors int `json:"errors"`
}

// String formats s as "checked=N succeeded=N ...".
func (s Stats) String() string {
	return fmt.Sprintf("checked=%d succeeded=%d released=%d rechecked=%d escalated=%d skipped=%d deferred=%d errors=%d",
		s.Checked, s.Succeeded, s.Released, s.Rechecked, s.Escalated, s.Skipped, s.Deferred, s.Errors)
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Checked: s.Checked + o.Checked, Succeeded: s.Succeeded + o.Succeeded, Released: s.Released + o.Released,
		Rechecked: s.Rechecked + o.Rechecked, Escalated: s.Escalated + o.Escalated, Skipped: s.Skipped + o.Skipped,
		Deferred: s.Deferred + o.Deferred, Errors: s.Errors + o.Errors,
	}
}

func (s *Stats) count(d Decision) {
	s.Checked++
	switch d {
	case DecisionSucceeded:
		s.Succeeded++
	case DecisionReleased:
		s.Released++
	case DecisionRechecked:
		s.Rechecked++
	case DecisionEscalated:
		s.Escalated++
	case DecisionSkipped:
		s.Skipped++
	case DecisionDeferred:
		s.Deferred++
	default:
		s.Errors++
	}
}

// Reconciler settles operations whose outcome is unknown. It is safe for
// concurrent use, and any number of reconcilers may run against one
// journal: every transition is conditional on the server.
type Reconciler struct {
	cfg       Config
	log       *slog.Logger
	verifiers map[string]Verifier
	metrics   *metrics

	randMu sync.Mutex

	policyMu        sync.Mutex
	policyCheckedAt time.Time
}

// New checks cfg, fills in its defaults, builds the verifiers the policy
// configures and registers the metrics.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Journal == nil {
		return nil, errors.New("reconciler: Config.Journal is required")
	}
	if cfg.Policy == nil {
		return nil, errors.New("reconciler: Config.Policy is required")
	}
	if cfg.ID == "" {
		cfg.ID = defaultID()
	}
	if err := checkActor(cfg.ID); err != nil {
		return nil, fmt.Errorf("reconciler: Config.ID: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	cfg.PageSize = min(cfg.PageSize, 1000)
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		seed := uint64(time.Now().UnixNano())
		cfg.Rand = rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	}
	r := &Reconciler{cfg: cfg, log: cfg.Logger, verifiers: map[string]Verifier{}}
	for _, name := range cfg.Policy.Names() {
		if v, ok := cfg.Verifiers[name]; ok {
			if v != nil {
				r.verifiers[name] = v
			}
			continue
		}
		act, _ := cfg.Policy.Action(name)
		if act.Reconcile.Verifier == nil || act.Reconcile.Verifier.HTTP == nil {
			continue
		}
		v, err := NewHTTPVerifier(act.Reconcile.Verifier.HTTP, WithHTTPClient(cfg.HTTPClient), WithLookupEnv(cfg.LookupEnv))
		if err != nil {
			return nil, fmt.Errorf("reconciler: action %s: %w", name, err)
		}
		r.verifiers[name] = v
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("reconciler: metrics: %w", err)
	}
	r.metrics = m
	return r, nil
}

// ID returns the reconciler's actor name.
func (r *Reconciler) ID() string { return r.cfg.ID }

// VerifiedActions returns the actions that have a verifier, sorted.
func (r *Reconciler) VerifiedActions() []string {
	var out []string
	for _, name := range r.cfg.Policy.Names() {
		if r.verifiers[name] != nil {
			out = append(out, name)
		}
	}
	return out
}

// Run runs a pass (RunOnce) every PollInterval until ctx is done. A failed
// pass is logged and the next one is tried. On cancellation it stops
// taking operations, lets the ones in flight finish (their journal calls
// are not canceled), and returns nil.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reconcile pass failed", "error", err)
		}
		t.Reset(r.cfg.PollInterval)
	}
}

// RunOnce pages through the operations due for a check and handles each,
// at most Concurrency at a time. It returns when all of them are handled.
// It returns an error (with the counts so far) if the journal cannot list
// operations; errors on single operations are counted in Stats.Errors and
// those operations are retried in the next pass. If ctx is canceled,
// RunOnce stops taking operations but completes the ones in flight.
func (r *Reconciler) RunOnce(ctx context.Context) (Stats, error) {
	start := time.Now()
	var (
		mu    sync.Mutex
		stats Stats
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, r.cfg.Concurrency)
	// In-flight operations finish even if ctx is canceled: a journal call
	// cut off halfway would only leave work for the next pass, and a
	// confirmed effect is worth recording.
	work := context.WithoutCancel(ctx)
	var listErr error
	token := ""
	r.checkPolicy(ctx)
	pageSize := r.cfg.PageSize
pages:
	for {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
		// The BASIC view: a check needs the key, action, attempt and
		// times, never the payload, and a page of large payloads must not
		// exceed what a message may carry.
		resp, err := r.cfg.Journal.ListOperations(lctx, &opjournalv1.ListOperationsRequest{
			DueForCheck: true, PageSize: int32(pageSize), PageToken: token, View: opjournalv1.OperationView_OPERATION_VIEW_BASIC,
		})
		cancel()
		if status.Code(err) == codes.ResourceExhausted && pageSize > 1 {
			// The page was too large to receive (an older journal that
			// does not bound pages by bytes): ask for smaller ones rather
			// than give up on the whole tenant.
			pageSize = max(pageSize/2, 1)
			r.log.Warn("a page of operations was too large; asking for smaller pages", "page_size", pageSize)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				listErr = fmt.Errorf("list operations due for a check: %w", err)
			}
			break
		}
		for _, op := range resp.GetOperations() {
			if ctx.Err() != nil {
				break pages
			}
			select {
			case <-ctx.Done():
				break pages
			case sem <- struct{}{}:
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				d := r.handleSafely(work, op)
				r.metrics.decisions.WithLabelValues(op.GetActionType(), string(d)).Inc()
				mu.Lock()
				stats.count(d)
				mu.Unlock()
			}()
		}
		token = resp.GetNextPageToken()
		if token == "" {
			break
		}
	}
	wg.Wait()
	r.metrics.passes.Inc()
	level := slog.LevelInfo
	if stats.Checked == 0 && listErr == nil {
		level = slog.LevelDebug
	}
	r.log.Log(ctx, level, "reconcile pass",
		"checked", stats.Checked, "succeeded", stats.Succeeded, "released", stats.Released,
		"rechecked", stats.Rechecked, "escalated", stats.Escalated, "skipped", stats.Skipped,
		"deferred", stats.Deferred, "errors", stats.Errors, "duration", time.Since(start).Round(time.Millisecond).String())
	return stats, listErr
}

// handleSafely is handle that survives a bug: one operation that makes it
// panic is counted as an error and never stops the pass for the others.
//
// While tracing is on, each operation handled is a trace of its own
// ("opjournal.reconcile", with the key, the action type and the
// decision), holding the verifier's HTTP request (tracing.Transport,
// which sends its traceparent to the provider) and the journal calls.
func (r *Reconciler) handleSafely(ctx context.Context, op *opjournalv1.Operation) (d Decision) {
	if tracing.Enabled() {
		var span trace.Span
		ctx, span = tracing.Start(ctx, "opjournal.reconcile", trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(tracing.KeyOperationKey.String(op.GetOperationKey()), tracing.KeyActionType.String(op.GetActionType())))
		defer func() {
			span.SetAttributes(attribute.String("opjournal.decision", string(d)))
			if d == DecisionError {
				tracing.Fail(span, string(d))
			}
			span.End()
		}()
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("reconciler bug: handling an operation panicked", "key", op.GetOperationKey(), "action", op.GetActionType(), "panic", fmt.Sprint(p))
			d = DecisionError
		}
	}()
	return r.handle(ctx, op)
}

// policyCheckInterval is how often a reconciler asks the journal for its
// policy to compare with its own.
const policyCheckInterval = time.Minute

// checkPolicy compares the journal's policy (GetPolicy) with the
// reconciler's, at most once per policyCheckInterval, and says so loudly
// when they differ: the journal enforces its own (it refuses a release
// its policy forbids), and this reconciler decides by another. Every
// unsettled operation still reaches a person after unknown_after_seconds.
func (r *Reconciler) checkPolicy(ctx context.Context) {
	r.policyMu.Lock()
	defer r.policyMu.Unlock()
	if !r.policyCheckedAt.IsZero() && time.Since(r.policyCheckedAt) < policyCheckInterval {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	resp, err := r.cfg.Journal.GetPolicy(cctx, &opjournalv1.GetPolicyRequest{})
	if err != nil {
		if status.Code(err) == codes.Unimplemented || status.Code(err) == codes.PermissionDenied {
			r.policyCheckedAt = time.Now() // an older journal, or a token without the right: do not ask every pass
		}
		r.log.Debug("could not compare policies with the journal", "error", grpcMessage(err))
		return
	}
	r.policyCheckedAt = time.Now()
	if resp.GetFingerprint() == r.cfg.Policy.Fingerprint() {
		r.metrics.policyMismatch.Set(0)
		return
	}
	r.metrics.policyMismatch.Set(1)
	var diffs []string
	if theirs, err := policy.Parse([]byte(resp.GetSource()), "the journal's policy"); err == nil {
		diffs = r.cfg.Policy.Diff(theirs)
	}
	r.log.Error("the journal enforces another policy than this reconciler's: decisions may be refused by the journal; give both the same policy file",
		"journal_fingerprint", resp.GetFingerprint(), "reconciler_fingerprint", r.cfg.Policy.Fingerprint(), "differences", diffs)
}

// handle decides about one operation and tells the journal.
func (r *Reconciler) handle(ctx context.Context, op *opjournalv1.Operation) Decision {
	action := op.GetActionType()
	act, ok := r.cfg.Policy.Action(action)
	if !ok {
		// The journal refuses actions without a policy, so the two
		// policies differ: a person must look.
		return r.escalate(ctx, op, fmt.Sprintf("action %s is not in the reconciler's policy", action))
	}
	rc := act.Reconcile
	unknownFor := r.cfg.Now().Sub(unknownSince(op))

	// 1. Give the attempt time to settle before the first check.
	if op.GetCheckCount() == 0 && unknownFor < rc.InitialDelay {
		r.decided(op, DecisionDeferred, "within the initial delay", slog.LevelDebug)
		return DecisionDeferred
	}

	// 2. Nobody can ask the provider.
	v := r.verifiers[action]
	if v == nil {
		now := r.cfg.Now()
		first := op.GetFirstAttemptAt().AsTime()
		remembers := op.GetFirstAttemptAt() == nil || protocol.WithinProviderWindow(first, act.ProviderDedupWindow, now)
		if act.AllowsRetryAfterUnknown() && unknownFor < act.UnknownAfter && remembers {
			// The caller retries with the same key, which the provider
			// deduplicates; only an operation nobody retries needs a
			// person, and one the provider may have forgotten.
			wait := act.UnknownAfter - unknownFor
			if w := act.ProviderDedupWindow; w > 0 {
				wait = min(wait, first.Add(w).Sub(now))
			}
			return r.recheck(ctx, op, "no verifier; waiting for a retry with the same key", ceilSeconds(wait))
		}
		if act.AllowsRetryAfterUnknown() && !remembers {
			return r.escalate(ctx, op, fmt.Sprintf("no verifier, and the provider's dedup window (%s) since the first attempt has passed: a retry with the same key could repeat the effect",
				formatDuration(act.ProviderDedupWindow)))
		}
		return r.escalate(ctx, op, "no verifier configured for "+action)
	}

	// 3. Ask the provider.
	fctx, cancel := context.WithTimeout(ctx, findTimeout(v))
	obs, err := v.Find(fctx, op)
	cancel()
	pastDeadline := unknownFor >= act.UnknownAfter

	switch {
	// 4. An unclear answer is never absence.
	case err != nil:
		r.metrics.verifierErrors.WithLabelValues(action).Inc()
		short := shorten(err.Error(), 120)
		if pastDeadline {
			return r.escalate(ctx, op, fmt.Sprintf("verifier cannot answer after %s: %s", formatDuration(unknownFor), short))
		}
		return r.recheck(ctx, op, "verifier error: "+short, r.backoff(rc, op.GetCheckCount()))

	// 5. The effect happened.
	case obs.Found && obs.Completed:
		return r.markSucceeded(ctx, op, obs.ExternalID, obs.Resource)

	// 6. The effect exists but is not complete yet.
	case obs.Found:
		if pastDeadline {
			return r.escalate(ctx, op, fmt.Sprintf("found at provider but not completed after %s", formatDuration(unknownFor)))
		}
		return r.recheck(ctx, op, "found, not completed", r.backoff(rc, op.GetCheckCount()))

	// 7. Not found.
	case !rc.DefinitiveAbsence:
		if pastDeadline {
			return r.escalate(ctx, op, fmt.Sprintf("not found at provider, whose search is not definitive; unresolved after %s", formatDuration(unknownFor)))
		}
		return r.recheck(ctx, op, "not found; provider search is not definitive", r.backoff(rc, op.GetCheckCount()))
	case unknownFor < act.ReleaseAfter():
		if pastDeadline {
			return r.escalate(ctx, op, fmt.Sprintf("not found at provider, but still within visibility_lag + in_flight_window (%s) after %s unknown",
				formatDuration(act.ReleaseAfter()), formatDuration(unknownFor)))
		}
		return r.recheck(ctx, op, "not found yet; within visibility lag and the provider's in-flight window", ceilSeconds(act.ReleaseAfter()-unknownFor))
	default:
		return r.release(ctx, op, rc, pastDeadline)
	}
}

// markSucceeded records the confirmed effect, with the provider's
// resource when the verifier found one that the journal can hold (JSON
// numbers within ±(2^53−1)); without it otherwise, which is logged.
func (r *Reconciler) markSucceeded(ctx context.Context, op *opjournalv1.Operation, externalID string, resource map[string]any) Decision {
	fields := map[string]any{"external_id": externalID, "reconciled_by": r.cfg.ID}
	if resource != nil {
		if rv, err := resourceValue(resource); err != nil {
			r.log.Warn("the provider's resource is not stored with the success", "operation_key", op.GetOperationKey(), "reason", err.Error())
		} else if b, _ := json.Marshal(rv); len(b) > maxResourceBytes {
			// A journal refuses a result beyond its limit: the success
			// itself must never depend on the resource's size.
			r.log.Warn("the provider's resource is not stored with the success", "operation_key", op.GetOperationKey(), "reason", "larger than the result limit", "bytes", len(b))
		} else {
			fields["resource"] = rv
		}
	}
	result, err := structpb.NewStruct(fields)
	if err != nil {
		return r.failed(op, DecisionSucceeded, err)
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	// The FULL view: whether ours is the stored effect shows in the stored
	// result (reconciled_by), which the default (BASIC) answer leaves out.
	resp, err := r.cfg.Journal.MarkSucceeded(cctx, &opjournalv1.MarkSucceededRequest{
		OperationKey: op.GetOperationKey(), Attempt: op.GetAttemptCount(),
		ExternalId: externalID, Result: result, Actor: r.cfg.ID, View: opjournalv1.OperationView_OPERATION_VIEW_FULL,
	})
	if err != nil {
		return r.failed(op, DecisionSucceeded, err)
	}
	got := resp.GetOperation()
	switch {
	case got.GetExternalId() != externalID:
		// The journal already held another effect: the server kept it,
		// recorded ours and set needs_review.
		r.decided(op, DecisionEscalated, "provider reports a different external id than the journal holds; flagged for review", slog.LevelWarn)
		return DecisionEscalated
	case got.GetResult().GetFields()["reconciled_by"].GetStringValue() != r.cfg.ID:
		// Someone else (another reconciler, the worker) recorded the same
		// effect first; ours was a no-op.
		return r.skipped(op, "already recorded by someone else")
	}
	r.decided(op, DecisionSucceeded, "", slog.LevelInfo, "external_id", externalID)
	return DecisionSucceeded
}

// release returns an operation whose effect is proven absent to pending.
// If the journal refuses, its policy or clock disagrees with ours (or the
// operation moved on): the operation is checked again later, and handed
// to a person once past its deadline, so a refusal never loops forever.
func (r *Reconciler) release(ctx context.Context, op *opjournalv1.Operation, rc policy.Reconcile, pastDeadline bool) Decision {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	_, err := r.cfg.Journal.ReleaseForRetry(cctx, &opjournalv1.ReleaseForRetryRequest{
		OperationKey: op.GetOperationKey(), Attempt: op.GetAttemptCount(), Actor: r.cfg.ID,
		Reason: "absent at provider after visibility lag",
	})
	if err == nil {
		r.decided(op, DecisionReleased, "", slog.LevelInfo)
		return DecisionReleased
	}
	if client.CodeOf(err) == opjournal.CodeInvalidState {
		// Either the operation moved on (another reconciler released it,
		// an agent or a person settled it), or the journal's policy or
		// clock disagrees with ours. Read it again to tell which: one that
		// moved on is not ours any more (escalating it would put a pending
		// operation under review, and its agent would stop asking). For a
		// disagreement, record a check, so that the operation is not asked
		// about on every pass and eventually goes to a person.
		if moved, why := r.movedOn(ctx, op); moved {
			return r.skipped(op, "release refused: "+why)
		}
		r.log.Info("release refused by the journal", "key", op.GetOperationKey(), "action", op.GetActionType(),
			"attempt", op.GetAttemptCount(), "error", grpcMessage(err))
		if pastDeadline {
			return r.escalate(ctx, op, "absent at provider, but the journal refuses the release: "+shorten(grpcMessage(err), 120))
		}
		return r.recheck(ctx, op, "absent at provider, but the journal refused the release: "+shorten(grpcMessage(err), 100), r.backoff(rc, op.GetCheckCount()))
	}
	return r.failed(op, DecisionReleased, err)
}

// movedOn reads op again and reports whether someone else changed it
// since it was listed: not unknown any more, another attempt, or under
// review. A read that fails reports false (the caller goes on as before).
func (r *Reconciler) movedOn(ctx context.Context, op *opjournalv1.Operation) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	resp, err := r.cfg.Journal.Lookup(cctx, &opjournalv1.LookupRequest{OperationKey: op.GetOperationKey()})
	if err != nil {
		return client.CodeOf(err) == opjournal.CodeNotFound, "the operation is gone"
	}
	now := resp.GetOperation()
	switch {
	case now.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN:
		return true, "the operation is " + strings.TrimPrefix(now.GetStatus().String(), "STATUS_") + " now"
	case now.GetAttemptCount() != op.GetAttemptCount():
		return true, fmt.Sprintf("attempt %d superseded by %d", op.GetAttemptCount(), now.GetAttemptCount())
	case now.GetNeedsReview():
		return true, "the operation is under review now"
	}
	return false, ""
}

// recheck records an inconclusive check; the next is due after next.
func (r *Reconciler) recheck(ctx context.Context, op *opjournalv1.Operation, note string, next time.Duration) Decision {
	secs := min(max(int64((next+time.Second/2)/time.Second), 1), maxNextCheckAfter)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	_, err := r.cfg.Journal.RecordCheck(cctx, &opjournalv1.RecordCheckRequest{
		OperationKey: op.GetOperationKey(), Attempt: op.GetAttemptCount(), Actor: r.cfg.ID,
		Note: clean(note), NextCheckAfterSeconds: int32(secs),
	})
	if err != nil {
		return r.failed(op, DecisionRechecked, err)
	}
	r.decided(op, DecisionRechecked, note, slog.LevelInfo, "next_check_after_seconds", secs)
	return DecisionRechecked
}

// escalate hands an operation to a person.
func (r *Reconciler) escalate(ctx context.Context, op *opjournalv1.Operation, reason string) Decision {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	_, err := r.cfg.Journal.Escalate(cctx, &opjournalv1.EscalateRequest{
		OperationKey: op.GetOperationKey(), Actor: r.cfg.ID, Reason: clean(reason),
	})
	if err != nil {
		return r.failed(op, DecisionEscalated, err)
	}
	r.decided(op, DecisionEscalated, reason, slog.LevelInfo)
	return DecisionEscalated
}

// failed classifies a journal error on the way to decision want: a lost
// race is DecisionSkipped, anything else DecisionError (retried next pass).
func (r *Reconciler) failed(op *opjournalv1.Operation, want Decision, err error) Decision {
	switch client.CodeOf(err) {
	case opjournal.CodeStaleAttempt, opjournal.CodeInvalidState, opjournal.CodeNotFound:
		return r.skipped(op, fmt.Sprintf("%s refused (%s): the operation moved on", want, client.CodeOf(err)))
	}
	r.decided(op, DecisionError, fmt.Sprintf("could not record %s; retrying in the next pass", want), slog.LevelWarn,
		"code", grpcCode(err), "error", shorten(grpcMessage(err), 300))
	return DecisionError
}

func (r *Reconciler) skipped(op *opjournalv1.Operation, why string) Decision {
	r.decided(op, DecisionSkipped, why, slog.LevelInfo)
	return DecisionSkipped
}

// decided logs one decision: key, action, decision, attempt and a note in
// our own words (never payloads, results or header values).
func (r *Reconciler) decided(op *opjournalv1.Operation, d Decision, note string, level slog.Level, extra ...any) {
	args := []any{"key", op.GetOperationKey(), "action", op.GetActionType(), "decision", string(d), "attempt", op.GetAttemptCount()}
	if note != "" {
		args = append(args, "note", note)
	}
	r.log.Log(context.Background(), level, "reconcile decision", append(args, extra...)...)
}

// backoff is the wait after the checkCount-th inconclusive check:
// Interval × 2^checkCount capped at MaxInterval, ±20 % jitter, at least 1 s.
func (r *Reconciler) backoff(rc policy.Reconcile, checkCount int32) time.Duration {
	d := rc.Interval
	for i := int32(0); i < checkCount && d < rc.MaxInterval; i++ {
		d *= 2
	}
	d = min(d, rc.MaxInterval)
	r.randMu.Lock()
	f := 0.8 + 0.4*r.cfg.Rand.Float64()
	r.randMu.Unlock()
	d = time.Duration(float64(d) * f)
	return max(d, time.Second)
}

// unknownSince is when op's outcome became unknown, as the journal says.
// It falls back to the lease's end and the last update for a journal that
// does not say.
func unknownSince(op *opjournalv1.Operation) time.Time {
	for _, ts := range []*timestamppb.Timestamp{op.GetUnknownSince(), op.GetLeaseUntil(), op.GetUpdatedAt()} {
		if ts != nil && ts.IsValid() {
			return ts.AsTime()
		}
	}
	return time.Time{}
}

// findTimeout bounds one Find.
func findTimeout(v Verifier) time.Duration {
	if h, ok := v.(interface{ Timeout() time.Duration }); ok && h.Timeout() > 0 {
		return h.Timeout()
	}
	return defaultFindTimeout
}

// ceilSeconds rounds d up to whole seconds, at least 1 s.
func ceilSeconds(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}

// formatDuration rounds d to seconds for messages.
func formatDuration(d time.Duration) string {
	return d.Round(time.Second).String()
}

// shorten cuts s to at most n bytes at a rune boundary.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// clean makes s a valid note or reason: no control characters, at most
// 200 bytes.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	return shorten(s, maxTextLen)
}

// checkActor checks the journal's rule for actors: 1–200 visible ASCII
// characters.
func checkActor(s string) error {
	if s == "" || len(s) > maxActorLen {
		return fmt.Errorf("%q must be 1-%d characters", s, maxActorLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("%q must be visible ASCII characters only", s)
		}
	}
	return nil
}

// defaultID is "reconciler-<hostname>-<pid>", made a valid actor.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '-'
		}
		return r
	}, host)
	if len(host) > 150 {
		host = host[:150]
	}
	return fmt.Sprintf("reconciler-%s-%d", host, os.Getpid())
}

func grpcCode(err error) string {
	if c := client.CodeOf(err); c != "" {
		return string(c)
	}
	return status.Code(err).String()
}

func grpcMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// maxResourceBytes bounds the resource stored with a success: half the
// journal's default result limit (opjournal.DefaultMaxResultBytes), so
// that a large record at the provider never makes MarkSucceeded fail.
const maxResourceBytes = 32 << 10

// resourceValue converts a resource decoded with json.Number into what
// structpb holds, refusing numbers it would round.
func resourceValue(m map[string]any) (any, error) {
	var conv func(any) (any, error)
	conv = func(v any) (any, error) {
		switch x := v.(type) {
		case json.Number:
			f, err := x.Float64()
			if err != nil || f > 1<<53-1 || f < -(1<<53-1) {
				return nil, errors.New("it holds a number beyond ±(2^53−1)")
			}
			return f, nil
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				c, err := conv(e)
				if err != nil {
					return nil, err
				}
				out[k] = c
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				c, err := conv(e)
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		}
		return v, nil
	}
	return conv(m)
}
