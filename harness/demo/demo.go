// Package demo is the reproducible check of docs/spec.md, run against real
// processes: the journal, the test provider (opjournal-fakeprovider) and the
// reconciler (opjournal-reconciler). Each scenario prints every step and
// what it observed, counts effects in the provider (not words in an agent's
// answer), and returns an error as soon as an observation differs from what
// docs/spec.md says. `make demo` runs it through harness/cmd/opjournal-demo; the e2e
// tests run the same scenarios.
package demo

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Env is what the scenarios talk to.
type Env struct {
	// Journal is the SDK, connected to the journal's gRPC address.
	Journal *client.Client
	// RPC is a plain client of the same journal (Lookup, ListEvents).
	RPC pb.JournalServiceClient
	// ProviderURL is the test provider's base URL; Provider controls it.
	ProviderURL string
	Provider    *fakeprovider.ControlClient
	// AgentTimeout is how long the agent waits for the provider (default 1 s).
	AgentTimeout time.Duration
	// SettleTimeout bounds each wait for the reconciler (default 60 s, plus
	// the policy's visibility_lag + in_flight_window for a release).
	SettleTimeout time.Duration
	// Policy is the policy the journal and the reconciler run with (default:
	// the shipped one): the narration says what a wait is for, and how long
	// a release takes, by its numbers.
	Policy *policy.Policy
	// Progress is how often a wait for the reconciler prints where it is
	// (default 5 s).
	Progress time.Duration
	// Out receives the narration.
	Out io.Writer
}

// Scenario is one runnable check.
type Scenario struct {
	Name string
	Run  func(ctx context.Context, env Env) error
}

// Scenarios are the checks `make demo` runs, in order.
var Scenarios = []Scenario{
	{"payment: commit, then timeout (the seven steps of docs/spec.md)", Payment},
	{"email: a provider without idempotency, reconciled by its reference search", Email},
	{"payment: timeout before commit, proven absent, released, retried", AbsentThenRetried},
	{"payment: a large payment waits for an operator's approval of the exact request, then runs once", ApprovedPayment},
	{"budgets: an agent's payments stop at its daily limit, and one over its daily spend waits for a person", Budgets},
}

// RunAll runs every scenario, stopping at the first failure.
func RunAll(ctx context.Context, env Env) error {
	for i, s := range Scenarios {
		fmt.Fprintf(env.out(), "\n== scenario %d: %s\n", i+1, s.Name)
		if err := s.Run(ctx, env); err != nil {
			return fmt.Errorf("scenario %d (%s): %w", i+1, s.Name, err)
		}
	}
	return nil
}

func (e Env) out() io.Writer {
	if e.Out == nil {
		return io.Discard
	}
	return e.Out
}

// run narrates one scenario's steps.
type run struct {
	env   Env
	step  int
	calls atomic.Int32 // how many times the agent's tool function ran
}

func (r *run) say(format string, args ...any) {
	r.step++
	fmt.Fprintf(r.env.out(), "  step %d  %s\n", r.step, fmt.Sprintf(format, args...))
}

func (r *run) saw(format string, args ...any) {
	fmt.Fprintf(r.env.out(), "          observed: %s\n", fmt.Sprintf(format, args...))
}

// call is the agent's tool function for this run (counting its calls).
func (r *run) call(path string, body map[string]any, idempotent bool) func(context.Context, client.Attempt) (client.Effect, error) {
	t := r.env.AgentTimeout
	if t == 0 {
		t = time.Second
	}
	return agenttool.Post(r.env.ProviderURL, path, body, idempotent, t, &r.calls)
}

func (r *run) execute(ctx context.Context, op client.Op, fn func(context.Context, client.Attempt) (client.Effect, error)) (client.Outcome, error) {
	out, err := r.env.Journal.Execute(ctx, op, fn)
	if err != nil {
		return out, fmt.Errorf("execute %s: %w", op.Key, err)
	}
	return out, nil
}

func (r *run) lookup(ctx context.Context, key string) (*pb.Operation, error) {
	res, err := r.env.RPC.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", key, err)
	}
	return res.GetOperation(), nil
}

func (r *run) effects(ctx context.Context, key string) (int, error) {
	n, err := r.env.Provider.Count(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("provider effects of %s: %w", key, err)
	}
	return n, nil
}

// expect fails unless cond holds, saying what was seen.
func expect(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	return fmt.Errorf("unexpected: "+format, args...)
}

func (e Env) policy() *policy.Policy {
	if e.Policy == nil {
		return policy.Default()
	}
	return e.Policy
}

// settle waits until the reconciler has moved key (of action) out of
// unknown into want, and returns the operation. It says what it waits for
// (for a release: the policy's visibility_lag + in_flight_window) and,
// every Progress, how long it has waited and what the reconciler last
// recorded, so that a long wait is visibly a wait and not a hang.
func (r *run) settle(ctx context.Context, key, action string, want pb.Status) (*pb.Operation, error) {
	limit := r.env.SettleTimeout
	what := "the reconciler to find the effect at the provider"
	if want == pb.Status_STATUS_PENDING {
		what = "the release: the journal allows it " + describeRelease(r.env.policy(), action)
	}
	if limit == 0 {
		limit = 60 * time.Second
		if a, ok := r.env.policy().Action(action); ok && want == pb.Status_STATUS_PENDING {
			limit += a.ReleaseAfter()
		}
	}
	every := r.env.Progress
	if every <= 0 {
		every = 5 * time.Second
	}
	fmt.Fprintf(r.env.out(), "          waiting for %s (at most %s)\n", what, limit)
	began := time.Now()
	deadline, next := began.Add(limit), began.Add(every)
	for {
		op, err := r.lookup(ctx, key)
		if err != nil {
			return nil, err
		}
		if op.GetStatus() == want {
			fmt.Fprintf(r.env.out(), "          … %s after %s\n", short(want), time.Since(began).Round(100*time.Millisecond))
			return op, nil
		}
		if now := time.Now(); now.After(deadline) {
			return nil, fmt.Errorf("%s is still %s after %s waiting for %s, want %s; last change: %s", key, short(op.GetStatus()), limit, what, short(want), r.lastChange(ctx, key))
		} else if now.After(next) {
			next = now.Add(every)
			fmt.Fprintf(r.env.out(), "          … %s waited: %s, %d provider checks so far; last change: %s\n",
				now.Sub(began).Round(time.Second), short(op.GetStatus()), op.GetCheckCount(), r.lastChange(ctx, key))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lastChange describes the event that moved key into its current status.
func (r *run) lastChange(ctx context.Context, key string) string {
	evs, err := r.env.RPC.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	if err != nil || len(evs.GetEvents()) == 0 {
		return "(no history)"
	}
	e := evs.GetEvents()[len(evs.GetEvents())-1]
	return fmt.Sprintf("%s by %s (%s)", short(e.GetToStatus()), e.GetActor(), e.GetReason())
}

func short(s pb.Status) string { return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_")) }

// Payment is the reproducible check of docs/spec.md, step by step.
func Payment(ctx context.Context, env Env) error {
	r := &run{env: env}
	const key = "payment:order-817:intent-01"
	order := map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
	op := client.Op{Key: key, Action: "create_payment", Payload: order}

	r.say("create the operation %s (4900.00 RUB)", key)
	reg, err := r.env.RPC.Register(ctx, registerRequest(key, "create_payment", order))
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	r.saw("created=%v status=%s request_hash=%s…", reg.GetCreated(), short(reg.GetOperation().GetStatus()), reg.GetOperation().GetRequestHash()[:12])
	if err := expect(reg.GetCreated() && reg.GetOperation().GetStatus() == pb.Status_STATUS_PENDING, "register did not create a pending operation"); err != nil {
		return err
	}

	r.say("configure the provider: commit the next payment, then time out")
	if _, err := r.env.Provider.AddFault(ctx, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second}); err != nil {
		return err
	}
	r.saw("fault armed")

	r.say("execute: the agent calls the provider with Idempotency-Key %s", key)
	out, err := r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	cur, err := r.lookup(ctx, key)
	if err != nil {
		return err
	}
	n, err := r.effects(ctx, key)
	if err != nil {
		return err
	}
	r.saw("outcome=%s (%s), journal status=%s, provider effects=%d", out.Kind, out.ErrorCode, short(cur.GetStatus()), n)
	if err := expect(out.Kind == client.VerificationRequired && cur.GetStatus() == pb.Status_STATUS_UNKNOWN && n == 1,
		"want verification_required, unknown and 1 effect"); err != nil {
		return err
	}

	r.say("repeat the request with the same key and the same parameters")
	out, err = r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s, tool calls so far=%d, provider effects=%d", out.Kind, r.calls.Load(), n)
	if err := expect(out.Kind == client.VerificationRequired && r.calls.Load() == 1 && n == 1,
		"the repeat must wait for reconciliation without calling the provider"); err != nil {
		return err
	}

	r.say("run reconciliation (the reconciler asks the provider by idempotency key)")
	done, err := r.settle(ctx, key, op.Action, pb.Status_STATUS_SUCCEEDED)
	if err != nil {
		return err
	}
	r.saw("status=%s external_id=%s: %s", short(done.GetStatus()), done.GetExternalId(), r.lastChange(ctx, key))
	out, err = r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	r.saw("a retry now replays the stored result: outcome=%s replayed=%v result=%s", out.Kind, out.Replayed, out.Result)
	if err := expect(out.Kind == client.Succeeded && out.Replayed && out.ExternalID == done.GetExternalId(), "the retry must replay"); err != nil {
		return err
	}

	r.say("count the provider's effects for %s", key)
	n, err = r.effects(ctx, key)
	if err != nil {
		return err
	}
	r.saw("effects=%d", n)
	if err := expect(n == 1, "want exactly 1 effect, got %d", n); err != nil {
		return err
	}

	r.say("repeat with the same key and a different amount (5000.00 RUB)")
	other := client.Op{Key: key, Action: "create_payment", Payload: map[string]any{"order_id": "817", "amount_minor": 500000, "currency": "RUB"}}
	out, err = r.execute(ctx, other, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s, tool calls=%d, provider effects=%d", out.Kind, r.calls.Load(), n)
	if err := expect(out.Kind == client.Conflict && r.calls.Load() == 1 && n == 1, "want a conflict and no external call"); err != nil {
		return err
	}
	fmt.Fprintf(r.env.out(), "  result   provider effects for %s: %d (exactly one)\n", key, n)
	return nil
}

// Email is the same flow with a provider that does not deduplicate: the
// key travels in a searchable reference field, and the reconciler finds
// the sent email by it.
func Email(ctx context.Context, env Env) error {
	r := &run{env: env}
	const key = "email:order-817:receipt-01"
	msg := map[string]any{"to": "customer-817@example.com", "subject": "Your receipt for order 817"}
	op := client.Op{Key: key, Action: "send_email", Payload: msg}

	r.say("configure the provider: send the next email, then time out")
	if _, err := r.env.Provider.AddFault(ctx, fakeprovider.Fault{Path: "/emails", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second}); err != nil {
		return err
	}
	r.say("execute: the agent sends the email with reference=%s", key)
	out, err := r.execute(ctx, op, r.call("/emails", msg, false))
	if err != nil {
		return err
	}
	n, _ := r.effects(ctx, key)
	r.saw("outcome=%s, provider effects=%d", out.Kind, n)
	if err := expect(out.Kind == client.VerificationRequired && n == 1, "want verification_required and 1 email sent"); err != nil {
		return err
	}
	r.say("the agent retries; the journal holds it (the provider would send a second email)")
	out, err = r.execute(ctx, op, r.call("/emails", msg, false))
	if err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s, tool calls=%d, emails sent=%d", out.Kind, r.calls.Load(), n)
	if err := expect(out.Kind == client.VerificationRequired && r.calls.Load() == 1 && n == 1, "the retry must not send again"); err != nil {
		return err
	}
	r.say("reconciliation finds the email by its reference")
	done, err := r.settle(ctx, key, op.Action, pb.Status_STATUS_SUCCEEDED)
	if err != nil {
		return err
	}
	r.saw("status=%s external_id=%s: %s", short(done.GetStatus()), done.GetExternalId(), r.lastChange(ctx, key))
	n, _ = r.effects(ctx, key)
	fmt.Fprintf(r.env.out(), "  result   emails sent for %s: %d (exactly one)\n", key, n)
	return expect(n == 1, "want exactly 1 email, got %d", n)
}

// AbsentThenRetried: the provider timed out BEFORE committing. The
// reconciler proves absence (once visibility_lag + in_flight_window have
// passed since the attempt ended), releases the
// operation, and the agent's next retry performs the payment once.
func AbsentThenRetried(ctx context.Context, env Env) error {
	r := &run{env: env}
	const key = "payment:order-818:intent-01"
	order := map[string]any{"order_id": "818", "amount_minor": 125000, "currency": "RUB"}
	op := client.Op{Key: key, Action: "create_payment", Payload: order}

	r.say("configure the provider: time out the next payment before committing it")
	if _, err := r.env.Provider.AddFault(ctx, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.TimeoutBeforeCommit, Count: 1, Delay: 10 * time.Second}); err != nil {
		return err
	}
	r.say("execute")
	out, err := r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	n, _ := r.effects(ctx, key)
	r.saw("outcome=%s, provider effects=%d", out.Kind, n)
	if err := expect(out.Kind == client.VerificationRequired && n == 0, "want verification_required and no effect"); err != nil {
		return err
	}
	r.say("reconciliation: not found, and still not found once visibility_lag + in_flight_window have passed → released")
	if _, err := r.settle(ctx, key, op.Action, pb.Status_STATUS_PENDING); err != nil {
		return err
	}
	r.saw("%s", r.lastChange(ctx, key))
	r.say("the agent retries with the same key")
	out, err = r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s attempt=%d external_id=%s, provider effects=%d", out.Kind, out.Operation.GetAttemptCount(), out.ExternalID, n)
	if err := expect(out.Kind == client.Succeeded && !out.Replayed && out.Operation.GetAttemptCount() == 2 && n == 1,
		"want the retry (attempt 2) to succeed with exactly one effect"); err != nil {
		return err
	}
	fmt.Fprintf(r.env.out(), "  result   provider effects for %s: %d (exactly one)\n", key, n)
	return nil
}

func registerRequest(key, action string, payload map[string]any) *pb.RegisterRequest {
	st, _ := structpb.NewStruct(payload)
	return &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: st}
}

// Approver is the operator who decides the demo's approvals. The demo's
// journal runs without authentication, so the approver is the actor the
// call states; with a tokens file it would be the operator's principal,
// and an agent's token could not decide.
const Approver = "demo-operator"

// ApprovedPayment: a payment above the demo policy's ApprovalThreshold.
// The journal holds it awaiting approval (the agent's tool is never
// called, however often it retries); an approval of another request hash
// is refused and changes nothing; the operator approves the hash they saw
// while the agent waits for the decision, and the payment runs once.
func ApprovedPayment(ctx context.Context, env Env) error {
	r := &run{env: env}
	const key = "payment:order-819:intent-01"
	order := map[string]any{"order_id": "819", "amount_minor": 2500000, "currency": "RUB"}
	op := client.Op{Key: key, Action: "create_payment", Payload: order}

	r.say("execute a payment of 25000.00 RUB (above the policy's approval threshold of %s)", minorUnits(ApprovalThreshold))
	out, err := r.execute(ctx, op, r.call("/payments", order, true))
	if err != nil {
		return err
	}
	cur, err := r.lookup(ctx, key)
	if err != nil {
		return err
	}
	n, err := r.effects(ctx, key)
	if err != nil {
		return err
	}
	r.saw("outcome=%s, journal status=%s (rule %q), tool calls=%d, provider effects=%d", out.Kind, short(cur.GetStatus()), cur.GetApproval().GetRule(), r.calls.Load(), n)
	if err := expect(out.Kind == client.AwaitingApproval && cur.GetStatus() == pb.Status_STATUS_AWAITING_APPROVAL && r.calls.Load() == 0 && n == 0,
		"want awaiting_approval with no call"); err != nil {
		return err
	}

	r.say("the agent retries at once with the same key")
	if out, err = r.execute(ctx, op, r.call("/payments", order, true)); err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s, tool calls=%d, provider effects=%d", out.Kind, r.calls.Load(), n)
	if err := expect(out.Kind == client.AwaitingApproval && r.calls.Load() == 0 && n == 0, "a retry while waiting must call nothing"); err != nil {
		return err
	}

	r.say("an approval of another request hash (a payload the operator did not see) is refused")
	other := strings.Repeat("0", len(cur.GetRequestHash()))
	_, err = r.env.RPC.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: other, Reason: "looks fine", Actor: Approver})
	after, lerr := r.lookup(ctx, key)
	if lerr != nil {
		return lerr
	}
	r.saw("refused with %s; status=%s", errorCode(err), short(after.GetStatus()))
	if err := expect(errorCode(err) == "PAYLOAD_MISMATCH" && after.GetStatus() == pb.Status_STATUS_AWAITING_APPROVAL, "an approval of another hash must be refused and change nothing"); err != nil {
		return err
	}

	r.say("the agent waits for the decision (up to 30 s, a long poll); %s approves request hash %s…", Approver, cur.GetRequestHash()[:12])
	waiting := op
	waiting.ApprovalWait = 30 * time.Second
	type result struct {
		out client.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := r.execute(ctx, waiting, r.call("/payments", order, true))
		done <- result{o, err}
	}()
	res, err := r.env.RPC.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: cur.GetRequestHash(), Reason: "large order, customer verified by phone", Actor: Approver})
	if err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	r.saw("approved: released=%v status=%s", res.GetReleased(), short(res.GetOperation().GetStatus()))
	var got result
	select {
	case got = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if got.err != nil {
		return got.err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s external_id=%s, tool calls=%d, provider effects=%d", got.out.Kind, got.out.ExternalID, r.calls.Load(), n)
	if err := expect(got.out.Kind == client.Succeeded && r.calls.Load() == 1 && n == 1, "want the approved payment to run exactly once"); err != nil {
		return err
	}

	r.say("the agent retries once more")
	if out, err = r.execute(ctx, op, r.call("/payments", order, true)); err != nil {
		return err
	}
	n, _ = r.effects(ctx, key)
	r.saw("outcome=%s replayed=%v, tool calls=%d, provider effects=%d; history: %s", out.Kind, out.Replayed, r.calls.Load(), n, r.approvalEvent(ctx, key))
	if err := expect(out.Kind == client.Succeeded && out.Replayed && n == 1, "the retry must replay"); err != nil {
		return err
	}
	fmt.Fprintf(r.env.out(), "  result   provider effects for %s: %d (exactly one, after the approval)\n", key, n)
	return nil
}

// approvalEvent describes the event that recorded key's approval.
func (r *run) approvalEvent(ctx context.Context, key string) string {
	evs, err := r.env.RPC.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		return "(no history)"
	}
	for _, e := range evs.GetEvents() {
		if e.GetFromStatus() == pb.Status_STATUS_AWAITING_APPROVAL {
			return fmt.Sprintf("%s by %s (%s)", short(e.GetToStatus()), e.GetActor(), e.GetReason())
		}
	}
	return "(no approval recorded)"
}

// errorCode is the journal's error code carried by err (its ErrorInfo's
// reason), "" for none, "accepted" for no error.
func errorCode(err error) string {
	if err == nil {
		return "accepted"
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// minorUnits formats an amount in minor units as major units (1000000 → 10000.00).
func minorUnits(v int) string {
	return strconv.Itoa(v/100) + "." + fmt.Sprintf("%02d", v%100)
}
