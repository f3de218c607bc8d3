package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/await"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
)

// approvalPolicyYAML asks a person to approve every payment above 1,000.00
// (an operator or an admin, never the agent that registered it).
const approvalPolicyYAML = `actions:
  create_payment:
    approval:
      when: "payload.amount_minor > 100000"
      approvers: [operator, admin]
`

// approvalEnv is a journal with approvalPolicyYAML and authentication: an
// agent's Client (whose Lookups are counted and announced), an operator's
// raw JournalService client, and a counting provider.
type approvalEnv struct {
	agent    *client.Client
	operator opjournalv1.JournalServiceClient
	provider *provider
	// lookups counts the agent's Lookup calls; lookupSent receives one
	// value as each is sent (dropped when nobody listens).
	lookups    atomic.Int32
	lookupSent chan struct{}
}

func newToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "opj_" + hex.EncodeToString(b)
}

// approvalJournal is a running journal with approvalPolicyYAML and a
// tokens file: an agent's token and an operator's JournalService client.
type approvalJournal struct {
	addr, agentToken string
	operator         opjournalv1.JournalServiceClient
	stop             func()
}

// startApprovalJournal starts an approvalJournal (it panics when it cannot:
// examples have no *testing.T).
func startApprovalJournal() approvalJournal {
	pol, err := policy.Parse([]byte(approvalPolicyYAML), "approval.yaml")
	if err != nil {
		panic(err)
	}
	agentTok, opTok := newToken(), newToken()
	authn, err := auth.Parse([]byte(auth.FileHeader+
		auth.NewEntry("agent-1", agentTok, "acme", []auth.Role{auth.RoleAgent}).YAML()+
		auth.NewEntry("alice", opTok, "acme", []auth.Role{auth.RoleOperator}).YAML()), "tokens.yaml")
	if err != nil {
		panic(err)
	}
	addr, stop := startJournalAuth(pol, authn)
	opConn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		panic(err)
	}
	return approvalJournal{addr: addr, agentToken: agentTok,
		operator: opjournalv1.NewJournalServiceClient(client.BearerConn(opConn, opTok)),
		stop:     func() { opConn.Close(); stop() }}
}

// approveWhenAsked is a person who approves key, with the request hash
// they were shown, once it awaits approval (for at most 10 s).
func approveWhenAsked(operator opjournalv1.JournalServiceClient, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		r, err := operator.Lookup(ctx, &opjournalv1.LookupRequest{OperationKey: key})
		if op := r.GetOperation(); err == nil && op.GetStatus() == opjournalv1.Status_STATUS_AWAITING_APPROVAL {
			_, err = operator.Approve(ctx, &opjournalv1.ApproveRequest{OperationKey: key, RequestHash: op.GetRequestHash(), Reason: "checked the invoice"})
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ctx.Err()
}

func setupApproval(t *testing.T) *approvalEnv {
	t.Helper()
	j := startApprovalJournal()
	t.Cleanup(j.stop)
	e := &approvalEnv{lookupSent: make(chan struct{}, 1), provider: newProvider("pay", "captured"), operator: j.operator}
	t.Cleanup(e.provider.Close)
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Lookup") {
			e.lookups.Add(1)
			select {
			case e.lookupSent <- struct{}{}:
			default:
			}
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	agentConn, err := grpc.NewClient(j.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentConn.Close() })
	e.agent = client.New(agentConn, client.WithToken(j.agentToken))
	return e
}

// bigPayment is a create_payment of amount minor units for order.
func bigPayment(key, order string, amount int, wait time.Duration) client.Op {
	return client.Op{Key: key, Action: "create_payment", ApprovalWait: wait,
		Payload: map[string]any{"order_id": order, "amount_minor": amount, "currency": "RUB"}}
}

// pay is fn: one POST to the provider with the key as Idempotency-Key.
func (e *approvalEnv) pay(op client.Op) func(context.Context, client.Attempt) (client.Effect, error) {
	return func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		return call(ctx, http.DefaultClient, e.provider.URL+"/payments", a, op.Payload)
	}
}

// awaiting returns the operator's view of key once it exists and awaits
// approval.
func (e *approvalEnv) awaiting(t *testing.T, key string) *opjournalv1.Operation {
	t.Helper()
	var op *opjournalv1.Operation
	await.Until(t, key+" awaiting approval", func() bool {
		r, err := e.operator.Lookup(context.Background(), &opjournalv1.LookupRequest{OperationKey: key})
		op = r.GetOperation()
		return err == nil && op.GetStatus() == opjournalv1.Status_STATUS_AWAITING_APPROVAL
	})
	return op
}

func (e *approvalEnv) approve(t *testing.T, key, hash string) {
	t.Helper()
	if _, err := e.operator.Approve(context.Background(), &opjournalv1.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "checked the invoice"}); err != nil {
		t.Fatalf("approve %s: %v", key, err)
	}
}

// executeAsync runs Execute in a goroutine, and waits until its wait for
// the decision has begun (its first Lookup is sent).
func (e *approvalEnv) executeAsync(t *testing.T, ctx context.Context, op client.Op) <-chan result {
	t.Helper()
	done := make(chan result, 1)
	go func() {
		out, err := e.agent.Execute(ctx, op, e.pay(op))
		done <- result{out, err}
	}()
	select {
	case <-e.lookupSent:
	case r := <-done:
		t.Fatalf("Execute returned before it waited for the approval: %v, %v", r.out.Kind, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Execute sent no Lookup within 10s")
	}
	return done
}

type result struct {
	out client.Outcome
	err error
}

func receive(t *testing.T, done <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(within):
		t.Fatalf("Execute did not return within %s", within)
		return result{}
	}
}

// TestApprovalBelowTheThresholdRunsAtOnce: a payment the policy's `when`
// does not hold for needs nobody: one call, no wait.
func TestApprovalBelowTheThresholdRunsAtOnce(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:small:intent-01", "101", 50000, time.Minute)
	out, err := e.agent.Execute(context.Background(), op, e.pay(op))
	if err != nil || out.Kind != client.Succeeded || out.Replayed {
		t.Fatalf("Execute = %v (replayed %v), %v; want a fresh success", out.Kind, out.Replayed, err)
	}
	if got := e.provider.Effects(); got != 1 {
		t.Fatalf("provider effects = %d, want 1", got)
	}
	if got := e.lookups.Load(); got != 0 {
		t.Fatalf("Lookups = %d, want 0: nothing to wait for", got)
	}
}

// TestApprovalNotDecidedInTimeCallsNothing: above the threshold, an
// Execute whose ApprovalWait passes returns AwaitingApproval with what a
// person must approve (key, request hash) and when to ask again; the
// provider saw nothing, and a retry while it still waits calls nothing.
func TestApprovalNotDecidedInTimeCallsNothing(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:big-late:intent-01", "102", 250000, 1500*time.Millisecond)
	start := time.Now()
	out, err := e.agent.Execute(context.Background(), op, e.pay(op))
	took := time.Since(start)
	if err != nil || out.Kind != client.AwaitingApproval {
		t.Fatalf("Execute = %v, %v; want awaiting_approval", out.Kind, err)
	}
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Execute took %s; want the ApprovalWait of 1.5s (and not much more)", took)
	}
	if out.Kind.String() != "awaiting_approval" || !errors.Is(out.Err(), client.ErrAwaitingApproval) || out.RetryAfter < time.Second {
		t.Fatalf("outcome %s, Err %v, RetryAfter %s", out.Kind, out.Err(), out.RetryAfter)
	}
	rec := e.awaiting(t, op.Key)
	if out.Operation.GetOperationKey() != op.Key || out.Operation.GetRequestHash() == "" || out.Operation.GetRequestHash() != rec.GetRequestHash() {
		t.Fatalf("outcome names %q / %q; want the key and request hash %q", out.Operation.GetOperationKey(), out.Operation.GetRequestHash(), rec.GetRequestHash())
	}
	// A long poll, not a tight loop: one Lookup that the journal held for
	// the whole wait.
	if n := e.lookups.Load(); n != 1 {
		t.Fatalf("Lookups during a 1.5s wait = %d, want 1", n)
	}
	again, err := e.agent.Execute(context.Background(), bigPayment(op.Key, "102", 250000, 0), e.pay(op))
	if err != nil || again.Kind != client.AwaitingApproval {
		t.Fatalf("retry = %v, %v; want awaiting_approval", again.Kind, err)
	}
	if got := e.provider.Requests(); got != 0 {
		t.Fatalf("provider requests = %d, want 0", got)
	}
}

// TestApprovalWhileExecuteWaits: Execute waits; an operator approves the
// exact request hash on another connection; Execute claims and calls the
// provider exactly once, and a retry replays it.
func TestApprovalWhileExecuteWaits(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:big-approved:intent-01", "103", 490000, 30*time.Second)
	done := e.executeAsync(t, context.Background(), op)
	rec := e.awaiting(t, op.Key)
	// The hash the approver saw, and no other: another is refused.
	if _, err := e.operator.Approve(context.Background(), &opjournalv1.ApproveRequest{OperationKey: op.Key, RequestHash: strings.Repeat("0", 64), Reason: "wrong"}); err == nil {
		t.Fatal("Approve with another request hash succeeded")
	}
	e.approve(t, op.Key, rec.GetRequestHash())
	r := receive(t, done, 10*time.Second)
	if r.err != nil || r.out.Kind != client.Succeeded || r.out.Replayed {
		t.Fatalf("Execute = %v (replayed %v), %v; want a fresh success", r.out.Kind, r.out.Replayed, r.err)
	}
	if got := e.provider.Effects(); got != 1 {
		t.Fatalf("provider effects = %d, want 1", got)
	}
	again, err := e.agent.Execute(context.Background(), op, e.pay(op))
	if err != nil || again.Kind != client.Succeeded || !again.Replayed || again.ExternalID != r.out.ExternalID {
		t.Fatalf("retry = %v (replayed %v) %q, %v; want the replay of %q", again.Kind, again.Replayed, again.ExternalID, err, r.out.ExternalID)
	}
	if got := e.provider.Requests(); got != 1 {
		t.Fatalf("provider requests = %d, want 1", got)
	}
}

// TestApprovalThenALaterExecute: nobody waits; an operator approves; the
// next Execute of the same key and payload calls the provider once.
func TestApprovalThenALaterExecute(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:big-later:intent-01", "104", 300000, 0)
	out, err := e.agent.Execute(context.Background(), op, e.pay(op))
	if err != nil || out.Kind != client.AwaitingApproval {
		t.Fatalf("Execute = %v, %v; want awaiting_approval", out.Kind, err)
	}
	if n := e.lookups.Load(); n != 0 {
		t.Fatalf("Lookups with ApprovalWait 0 = %d, want 0", n)
	}
	e.approve(t, op.Key, out.Operation.GetRequestHash())
	later, err := e.agent.Execute(context.Background(), op, e.pay(op))
	if err != nil || later.Kind != client.Succeeded || later.Replayed {
		t.Fatalf("Execute after the approval = %v (replayed %v), %v", later.Kind, later.Replayed, err)
	}
	if got := e.provider.Effects(); got != 1 {
		t.Fatalf("provider effects = %d, want 1", got)
	}
}

// TestApprovalRejected: a rejection while Execute waits is the usual
// refusal (FailedFinal, approval_rejected), replayed by every retry; the
// provider never saw the request.
func TestApprovalRejected(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:big-rejected:intent-01", "105", 990000, 30*time.Second)
	done := e.executeAsync(t, context.Background(), op)
	rec := e.awaiting(t, op.Key)
	if _, err := e.operator.Reject(context.Background(), &opjournalv1.RejectRequest{OperationKey: op.Key, RequestHash: rec.GetRequestHash(), Reason: "not ordered"}); err != nil {
		t.Fatal(err)
	}
	r := receive(t, done, 10*time.Second)
	if r.err != nil || r.out.Kind != client.FailedFinal || r.out.ErrorCode != "approval_rejected" {
		t.Fatalf("Execute = %v %q, %v; want failed_final approval_rejected", r.out.Kind, r.out.ErrorCode, r.err)
	}
	again, err := e.agent.Execute(context.Background(), op, e.pay(op))
	if err != nil || again.Kind != client.FailedFinal || !again.Replayed || again.ErrorCode != "approval_rejected" {
		t.Fatalf("retry = %v (replayed %v) %q, %v", again.Kind, again.Replayed, again.ErrorCode, err)
	}
	if got := e.provider.Requests(); got != 0 {
		t.Fatalf("provider requests = %d, want 0", got)
	}
}

// TestApprovalWaitEndsWithTheContext: canceling ctx ends the wait at once
// (the long poll in flight too), with the AwaitingApproval outcome and
// ctx's error; nothing was called.
func TestApprovalWaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	e := setupApproval(t)
	op := bigPayment("payment:big-canceled:intent-01", "106", 500000, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := e.executeAsync(t, ctx, op)
	canceled := time.Now()
	cancel()
	r := receive(t, done, 5*time.Second)
	if took := time.Since(canceled); took > time.Second {
		t.Fatalf("Execute returned %s after the cancel; want promptly", took)
	}
	if !errors.Is(r.err, context.Canceled) || r.out.Kind != client.AwaitingApproval || r.out.Operation.GetOperationKey() != op.Key {
		t.Fatalf("Execute = %v, %v; want awaiting_approval with context.Canceled", r.out.Kind, r.err)
	}
	if got := e.provider.Requests(); got != 0 {
		t.Fatalf("provider requests = %d, want 0", got)
	}
}

// TestTheSDKsPageShowsTheApprovalExample: the Go block of docs/sdks.md's
// "Waiting for an approval" is ExampleOp_approvalWait's, which runs.
func TestTheSDKsPageShowsTheApprovalExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/sdks.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- test: approval \\(the body of ExampleOp_approvalWait in client/example_test.go\\) -->\n```go\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/sdks.md has no Go block for ExampleOp_approvalWait")
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)[strings.Index(string(src), "func ExampleOp_approvalWait()"):]
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if !strings.Contains(body, strings.TrimSpace(line)) {
			t.Errorf("ExampleOp_approvalWait does not have the line of docs/sdks.md %q", line)
		}
	}
	if !strings.Contains(body, strings.ReplaceAll(strings.TrimSpace(string(m[1])), "\n", "\n\t")) {
		t.Error("ExampleOp_approvalWait does not have docs/sdks.md's block as one piece")
	}
}

// eagerConn is a journal without the long poll: Register says to await an
// approval and every Lookup answers at once that it still waits. It
// counts the Lookups.
type eagerConn struct{ lookups *atomic.Int32 }

func (c eagerConn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	op := &opjournalv1.Operation{OperationKey: "k", Status: opjournalv1.Status_STATUS_AWAITING_APPROVAL, RequestHash: "ab12"}
	switch {
	case strings.HasSuffix(method, "/Register"):
		*reply.(*opjournalv1.RegisterResponse) = opjournalv1.RegisterResponse{Operation: op, Next: opjournalv1.NextStep_NEXT_STEP_AWAIT_APPROVAL}
	case strings.HasSuffix(method, "/Lookup"):
		c.lookups.Add(1)
		*reply.(*opjournalv1.LookupResponse) = opjournalv1.LookupResponse{Operation: op}
	}
	return nil
}

func (eagerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

// TestApprovalWaitIsNoTightLoopWithoutTheLongPoll: a journal that answers
// every Lookup at once is asked at most once a second, and the wait still
// ends at its bound, calling nothing.
func TestApprovalWaitIsNoTightLoopWithoutTheLongPoll(t *testing.T) {
	t.Parallel()
	var lookups atomic.Int32
	c := client.New(eagerConn{&lookups})
	start := time.Now()
	out, err := c.Execute(context.Background(), client.Op{Key: "k", Action: "create_payment", Payload: map[string]any{}, ApprovalWait: 2500 * time.Millisecond},
		func(context.Context, client.Attempt) (client.Effect, error) {
			t.Error("fn was called")
			return client.Effect{}, nil
		})
	took := time.Since(start)
	if err != nil || out.Kind != client.AwaitingApproval || out.Operation.GetRequestHash() != "ab12" || out.RetryAfter != time.Second {
		t.Fatalf("Execute = %v (%v, retry after %s), %v", out.Kind, out.Operation, out.RetryAfter, err)
	}
	if took < 2500*time.Millisecond || took > 4*time.Second {
		t.Fatalf("Execute took %s, want the 2.5s bound", took)
	}
	if n := lookups.Load(); n < 2 || n > 3 {
		t.Fatalf("Lookups in 2.5s = %d, want 2 or 3 (one a second)", n)
	}
}
