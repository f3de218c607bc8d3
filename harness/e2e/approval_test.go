package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// approvalPolicy: payments over 1,000.00 need one operator's or admin's
// approval (not the requester's), an hour to decide; transfers need two
// persons; the "quick_*" actions time out after a second (reject, or
// escalate to a person).
const approvalPolicy = `actions:
  create_payment:
    integer_fields: [amount_minor]
    payload_schema:
      type: object
      required: [order_id, amount_minor, currency]
      properties:
        order_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
    approval:
      when: "payload.amount_minor > 100000"
      timeout: 1h
  transfer:
    approval:
      required: true
      two_person: true
  quick_reject:
    approval: {required: true, timeout: 1s, on_timeout: reject}
  quick_escalate:
    approval: {required: true, timeout: 1s, on_timeout: escalate}
`

// approvalStack is a journal with approvalPolicy and the tokens of
// security_test.go, and a test provider whose effects are counted.
type approvalStack struct {
	srv      *proc
	provider *fakeprovider.ControlClient
	provURL  string
}

func startApprovalStack(t *testing.T, dbURL string) *approvalStack {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for tok, p := range tokens {
		fmt.Fprintf(&b, "  - name: %s-%s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", p.tenant, p.roles, auth.Digest(tok), p.tenant, p.roles)
	}
	authFile, policyFile := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	for f, text := range map[string]string{authFile: b.String(), policyFile: approvalPolicy} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	prov, err := procs.Start(context.Background(), procs.Spec{Name: "provider", Path: filepath.Join(binDir, "opjournal-fakeprovider"), Ready: "serving",
		Args: []string{"--addr", "127.0.0.1:0"}}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Stop(10 * time.Second) })
	s := &approvalStack{provURL: "http://" + prov.Field("addr")}
	s.provider = fakeprovider.NewControlClient(s.provURL, &http.Client{Timeout: callTimeout})
	s.srv = startServer(t, "--database-url", dbURL, "--auth-file", authFile, "--policy", policyFile, "--approval-sweep-interval", "100ms")
	return s
}

// agentRun is what an agent does with one intent: Register with a claim,
// and only if told to call the provider, call it once (the key as
// Idempotency-Key) and record the effect. It returns the next step the
// journal gave.
func (s *approvalStack) agentRun(t *testing.T, agent pb.JournalServiceClient, key string, amount int) *pb.RegisterResponse {
	t.Helper()
	ctx := ctxFor(t)
	payload, _ := structpb.NewStruct(map[string]any{"order_id": key, "amount_minor": amount, "currency": "EUR"})
	r, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "agent-1"}})
	if err != nil {
		t.Fatalf("register %s: %v", key, err)
	}
	if r.GetNext() != pb.NextStep_NEXT_STEP_CALL_PROVIDER {
		return r
	}
	body, _ := json.Marshal(map[string]any{"order_id": key, "amount_minor": amount, "currency": "EUR"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.provURL+"/payments", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pay struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pay)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("provider: %d %v", resp.StatusCode, err)
	}
	if _, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: r.GetAttempt(), ExternalId: pay.ID}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (s *approvalStack) effects(t *testing.T, key string) int {
	t.Helper()
	n, err := s.provider.Count(ctxFor(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestApprovals is the approval flow end to end, on both stores and over
// both transports: a payment under the threshold runs at once; one over
// it waits (NEXT_STEP_AWAIT_APPROVAL, retry_after ≥ 1) and a retry while
// it waits calls nothing; an approval by an agent, by the requester or
// for another hash is refused and changes nothing; after the approval
// exactly one effect happens; a rejection ends it failed_final and a
// retry replays that; two persons release a transfer, the same one twice
// does not; the timeout rejects or escalates; Lookup's wait_seconds
// answers soon after a decision made on another connection.
func TestApprovals(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		s := startApprovalStack(t, dbURL)
		t.Run("flow", func(t *testing.T) { testApprovalFlow(t, s) })
		t.Run("reject", func(t *testing.T) { testApprovalReject(t, s) })
		t.Run("two person", func(t *testing.T) { testApprovalTwoPerson(t, s) })
		t.Run("timeout", func(t *testing.T) { testApprovalTimeoutE2E(t, s) })
		t.Run("long poll", func(t *testing.T) { testApprovalLongPoll(t, s) })
		t.Run("bad input", func(t *testing.T) { testApprovalBadInput(t, s) })
	})
}

func testApprovalFlow(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper := as(t, s.srv, agentA), as(t, s.srv, operA)

	// Under the threshold: at once, one effect.
	if r := s.agentRun(t, agent, "small-1", 5000); r.GetNext() != pb.NextStep_NEXT_STEP_CALL_PROVIDER || r.GetOperation().GetApproval() != nil {
		t.Fatalf("a small payment: %v", r)
	}
	if n := s.effects(t, "small-1"); n != 1 {
		t.Fatalf("small payment effects: %d", n)
	}

	// Over it: it waits, and retries call nothing.
	const key = "big-1"
	r := s.agentRun(t, agent, key, 250000)
	op := r.GetOperation()
	if r.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL || r.GetClaimed() || r.GetRetryAfterSeconds() < 1 || r.GetRetryAfterSeconds() > 30 ||
		op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || op.GetApproval().GetRule() != "payload.amount_minor > 100000" ||
		op.GetApproval().GetRequestedBy() != "team-a-agent" || op.GetApproval().GetDeadline() == nil {
		t.Fatalf("a big payment: %v", r)
	}
	for range 3 {
		if r := s.agentRun(t, agent, key, 250000); r.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL || r.GetCreated() {
			t.Fatalf("a retry while waiting: %v", r)
		}
	}
	c, err := agent.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "agent-2"})
	if err != nil || c.GetClaimed() || c.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL || c.GetRetryAfterSeconds() < 1 {
		t.Fatalf("a claim while waiting: %v %v", c, err)
	}
	// A rephrased request (another amount) under the same key is another
	// request: refused, not approved along.
	payload, _ := structpb.NewStruct(map[string]any{"order_id": key, "amount_minor": 99000, "currency": "EUR"})
	_, err = agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload})
	wantGRPCError(t, err, codes.AlreadyExists, "PAYLOAD_MISMATCH", "payload")
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("effects while waiting: %d", n)
	}

	// Refusals change nothing: an agent (the method's roles), another
	// hash, a reason missing; over REST too.
	before := lookup(t, ctx, oper, key)
	hash := before.GetRequestHash()
	_, err = agent.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "me"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("approval by an agent: %v", err)
	}
	_, err = oper.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: strings.Repeat("0", 64), Reason: "looks fine"})
	wantGRPCError(t, err, codes.AlreadyExists, "PAYLOAD_MISMATCH", "request_hash")
	code, _, text := doAs(t, agentA, http.MethodPost, s.srv.BaseURL+"/v1/operations:approve", fmt.Sprintf(`{"operation_key":%q,"request_hash":%q,"reason":"x"}`, key, hash))
	if code != http.StatusForbidden {
		t.Fatalf("REST approval by an agent: %d %s", code, text)
	}
	code, _, text = doAs(t, operA, http.MethodPost, s.srv.BaseURL+"/v1/operations:approve", fmt.Sprintf(`{"operation_key":%q,"request_hash":"abc","reason":"x"}`, key))
	if code != http.StatusUnprocessableEntity || !strings.Contains(text, "PAYLOAD_MISMATCH") {
		t.Fatalf("REST approval of another hash: %d %s", code, text)
	}
	if after := lookup(t, ctx, oper, key); !proto.Equal(before, after) {
		t.Fatalf("a refused approval changed the operation:\n%v\n%v", before, after)
	}

	// The approval, over REST: pending, and the agent's next call runs it once.
	code, _, text = doAs(t, operA, http.MethodPost, s.srv.BaseURL+"/v1/operations:approve", fmt.Sprintf(`{"operation_key":%q,"request_hash":%q,"reason":"agreed with the customer"}`, key, hash))
	if code != http.StatusOK || !strings.Contains(text, `"released":true`) || !strings.Contains(text, `"status":"STATUS_PENDING"`) {
		t.Fatalf("REST approval: %d %s", code, text)
	}
	_, err = oper.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "again"})
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	if r := s.agentRun(t, agent, key, 250000); r.GetNext() != pb.NextStep_NEXT_STEP_CALL_PROVIDER {
		t.Fatalf("after the approval: %v", r)
	}
	for range 2 {
		if r := s.agentRun(t, agent, key, 250000); r.GetNext() != pb.NextStep_NEXT_STEP_REPLAY {
			t.Fatalf("a retry after the effect: %v", r)
		}
	}
	if n := s.effects(t, key); n != 1 {
		t.Fatalf("effects after the approval: %d, want exactly 1", n)
	}
	evs, err := oper.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if e := evs.GetEvents()[1]; e.GetActor() != "team-a-operator" || e.GetReason() != "approved: agreed with the customer" ||
		e.GetFromStatus() != pb.Status_STATUS_AWAITING_APPROVAL || e.GetToStatus() != pb.Status_STATUS_PENDING {
		t.Fatalf("the approval's event: %v", e)
	}

	// The requester may not approve its own request: an admin registers,
	// the same admin is refused, another person approves.
	admin := as(t, s.srv, adminA)
	r = s.agentRun(t, admin, "big-by-admin", 300000)
	if r.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL {
		t.Fatalf("an admin's big payment: %v", r)
	}
	_, err = admin.Approve(ctx, &pb.ApproveRequest{OperationKey: "big-by-admin", RequestHash: r.GetOperation().GetRequestHash(), Reason: "mine"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "may not approve") {
		t.Fatalf("approval by the requester: %v", err)
	}
	if res, err := oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "big-by-admin", RequestHash: r.GetOperation().GetRequestHash(), Reason: "checked"}); err != nil || !res.GetReleased() {
		t.Fatalf("approval by another person: %v %v", res, err)
	}

	// The list of what awaits approval, and the metrics.
	s.agentRun(t, agent, "big-2", 200000)
	l, err := oper.ListOperations(ctx, &pb.ListOperationsRequest{Statuses: []pb.Status{pb.Status_STATUS_AWAITING_APPROVAL}})
	if err != nil || len(l.GetOperations()) != 1 || l.GetOperations()[0].GetOperationKey() != "big-2" {
		t.Fatalf("list awaiting_approval: %v %v", l, err)
	}
	_, _, metrics := doAs(t, adminA, http.MethodGet, s.srv.BaseURL+"/metrics", "")
	for _, want := range []string{`opjournal_approvals_awaiting{action="create_payment"} 1`, `opjournal_approval_decisions_total{action="create_payment",outcome="released"} 2`,
		`opjournal_approval_oldest_age_seconds{action="create_payment"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func testApprovalReject(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper := as(t, s.srv, agentA), as(t, s.srv, operA)
	const key = "big-rejected"
	r := s.agentRun(t, agent, key, 900000)
	hash := r.GetOperation().GetRequestHash()
	res, err := oper.Reject(ctx, &pb.RejectRequest{OperationKey: key, RequestHash: hash, Reason: "not ordered"})
	if err != nil || res.GetOperation().GetStatus() != pb.Status_STATUS_FAILED_FINAL || res.GetOperation().GetErrorCode() != "approval_rejected" {
		t.Fatalf("reject: %v %v", res, err)
	}
	for range 2 {
		if r := s.agentRun(t, agent, key, 900000); r.GetNext() != pb.NextStep_NEXT_STEP_FAILED_FINAL || r.GetOperation().GetErrorCode() != "approval_rejected" {
			t.Fatalf("a retry after the rejection: %v", r)
		}
	}
	_, err = oper.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "changed my mind"})
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("effects of a rejected payment: %d", n)
	}
	// REST, with an error code of its own.
	r = s.agentRun(t, agent, "big-rejected-2", 900000)
	code, _, text := doAs(t, operA, http.MethodPost, s.srv.BaseURL+"/v1/operations:reject",
		fmt.Sprintf(`{"operation_key":"big-rejected-2","request_hash":%q,"reason":"fraud","error_code":"suspected_fraud"}`, r.GetOperation().GetRequestHash()))
	if code != http.StatusOK || !strings.Contains(text, `"errorCode":"suspected_fraud"`) && !strings.Contains(text, `"error_code":"suspected_fraud"`) {
		t.Fatalf("REST reject: %d %s", code, text)
	}
}

// transfer registers a transfer (two persons must approve) as agent A.
func transfer(t *testing.T, agent pb.JournalServiceClient, key string) *pb.Operation {
	t.Helper()
	payload, _ := structpb.NewStruct(map[string]any{"to": "DE02", "amount_minor": 1})
	r, err := agent.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "transfer", Payload: payload})
	if err != nil || r.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL {
		t.Fatalf("register a transfer: %v %v", r, err)
	}
	return r.GetOperation()
}

func testApprovalTwoPerson(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper, admin := as(t, s.srv, agentA), as(t, s.srv, operA), as(t, s.srv, adminA)
	op := transfer(t, agent, "transfer-1")
	first, err := oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-1", RequestHash: op.GetRequestHash(), Reason: "one"})
	if err != nil || first.GetReleased() || first.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || len(first.GetOperation().GetApproval().GetApprovals()) != 1 {
		t.Fatalf("first of two: %v %v", first, err)
	}
	_, err = oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-1", RequestHash: op.GetRequestHash(), Reason: "one again"})
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	if !strings.Contains(err.Error(), "already approved") {
		t.Fatalf("the same person twice: %v", err)
	}
	c, err := agent.Claim(ctx, &pb.ClaimRequest{OperationKey: "transfer-1", WorkerId: "agent-1"})
	if err != nil || c.GetClaimed() {
		t.Fatalf("a claim after one of two: %v %v", c, err)
	}
	second, err := admin.Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-1", RequestHash: op.GetRequestHash(), Reason: "two"})
	if err != nil || !second.GetReleased() || second.GetOperation().GetStatus() != pb.Status_STATUS_PENDING {
		t.Fatalf("second of two: %v %v", second, err)
	}
	evs, _ := oper.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: "transfer-1"})
	if r := evs.GetEvents()[1].GetReason(); r != "approved (1 of 2): one" {
		t.Fatalf("the first approval's event: %q", r)
	}
	if c, err := agent.Claim(ctx, &pb.ClaimRequest{OperationKey: "transfer-1", WorkerId: "agent-1"}); err != nil || !c.GetClaimed() {
		t.Fatalf("a claim after two: %v %v", c, err)
	}
}

func testApprovalTimeoutE2E(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper := as(t, s.srv, agentA), as(t, s.srv, operA)
	reg := func(key, action string) *pb.Operation {
		t.Helper()
		r, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: &structpb.Struct{}})
		if err != nil || r.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
			t.Fatalf("register %s: %v %v", key, r, err)
		}
		return r.GetOperation()
	}
	rej, esc := reg("quick-1", "quick_reject"), reg("quick-2", "quick_escalate")
	// The sweep (every 100 ms) applies each on_timeout once the deadline
	// has passed on the database clock.
	eventually(t, 20*time.Second, func() (bool, string) {
		a, b := lookup(t, ctx, oper, "quick-1"), lookup(t, ctx, oper, "quick-2")
		return a.GetStatus() == pb.Status_STATUS_FAILED_FINAL && b.GetNeedsReview(), fmt.Sprintf("%s %s review=%v", a.GetStatus(), b.GetStatus(), b.GetNeedsReview())
	})
	if a := lookup(t, ctx, oper, "quick-1"); a.GetErrorCode() != "approval_timeout" {
		t.Fatalf("timed out (reject): %v", a)
	}
	_, err := oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "quick-1", RequestHash: rej.GetRequestHash(), Reason: "late"})
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	// Escalated: still awaiting approval, a person decides.
	if b := lookup(t, ctx, oper, "quick-2"); b.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("timed out (escalate): %v", b)
	}
	res, err := oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "quick-2", RequestHash: esc.GetRequestHash(), Reason: "late but fine"})
	if err != nil || !res.GetReleased() || res.GetOperation().GetNeedsReview() {
		t.Fatalf("approval after the escalation: %v %v", res, err)
	}
	_, _, metrics := doAs(t, adminA, http.MethodGet, s.srv.BaseURL+"/metrics", "")
	for _, want := range []string{`opjournal_approval_decisions_total{action="quick_reject",outcome="timed_out"} 1`,
		`opjournal_approval_decisions_total{action="quick_escalate",outcome="timed_out"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func testApprovalLongPoll(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper := as(t, s.srv, agentA), as(t, s.srv, operA)
	op := transfer(t, agent, "transfer-poll")
	// Nothing decides: the wait ends at wait_seconds with the record as it is.
	start := time.Now()
	l, err := agent.Lookup(ctx, &pb.LookupRequest{OperationKey: "transfer-poll", WaitSeconds: 1})
	if err != nil || l.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("a wait without a decision: %v %v after %s", l, err, time.Since(start))
	}
	// A decision on another connection ends the wait at once (well before
	// its 60 s). The decision comes once the server holds the poll: a poll
	// that began after it would rightly wait for the next change.
	done := make(chan *pb.LookupResponse, 1)
	go func() {
		l, err := agent.Lookup(ctx, &pb.LookupRequest{OperationKey: "transfer-poll", WaitSeconds: 60})
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		done <- l
	}()
	await.Until(t, "the server holds the long poll", func() bool {
		_, _, metrics := doAs(t, adminA, http.MethodGet, s.srv.BaseURL+"/metrics", "")
		return strings.Contains(metrics, "\nopjournal_lookup_long_polls 1\n")
	})
	if _, err := oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-poll", RequestHash: op.GetRequestHash(), Reason: "one"}); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-done:
		if n := len(l.GetOperation().GetApproval().GetApprovals()); n != 1 {
			t.Fatalf("the long poll answered with %d approvals: %v", n, l)
		}
		if _, _, metrics := doAs(t, adminA, http.MethodGet, s.srv.BaseURL+"/metrics", ""); !strings.Contains(metrics, "\nopjournal_lookup_long_polls 0\n") {
			t.Errorf("a long poll is still counted as held after it answered")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll did not answer after the approval")
	}
	// REST: more than 60 is INVALID_ARGUMENT.
	code, _, text := doAs(t, agentA, http.MethodGet, s.srv.BaseURL+"/v1/operations:lookup?operation_key=transfer-poll&wait_seconds=61", "")
	if code != http.StatusBadRequest || !strings.Contains(text, `"field":"wait_seconds"`) || !strings.Contains(text, "must be 0") {
		t.Fatalf("wait_seconds 61: %d %s", code, text)
	}
	if code, _, text := doAs(t, agentA, http.MethodGet, s.srv.BaseURL+"/v1/operations:lookup?operation_key=transfer-poll&wait_seconds=1", ""); code != http.StatusOK ||
		!strings.Contains(text, `"status":"STATUS_AWAITING_APPROVAL"`) {
		t.Fatalf("REST wait_seconds 1: %d %s", code, text)
	}
}

func testApprovalBadInput(t *testing.T, s *approvalStack) {
	ctx := ctxFor(t)
	agent, oper := as(t, s.srv, agentA), as(t, s.srv, operA)
	op := transfer(t, agent, "transfer-bad")
	hash := op.GetRequestHash()
	before := lookup(t, ctx, oper, "transfer-bad")
	for name, req := range map[string]*pb.ApproveRequest{
		"no reason":   {OperationKey: "transfer-bad", RequestHash: hash},
		"huge reason": {OperationKey: "transfer-bad", RequestHash: hash, Reason: strings.Repeat("x", 201)},
		"no hash":     {OperationKey: "transfer-bad", Reason: "ok"},
		"no key":      {RequestHash: hash, Reason: "ok"},
	} {
		_, err := oper.Approve(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
		code, _, text := doAs(t, operA, http.MethodPost, s.srv.BaseURL+"/v1/operations:approve",
			fmt.Sprintf(`{"operation_key":%q,"request_hash":%q,"reason":%q}`, req.GetOperationKey(), req.GetRequestHash(), req.GetReason()))
		if code != http.StatusBadRequest || !strings.Contains(text, "INVALID_ARGUMENT") {
			t.Errorf("REST %s: %d %s", name, code, text)
		}
	}
	_, err := oper.Reject(ctx, &pb.RejectRequest{OperationKey: "transfer-bad", RequestHash: hash, Reason: "x", ErrorCode: strings.Repeat("e", 101)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a huge error code: %v", err)
	}
	_, err = oper.Approve(ctx, &pb.ApproveRequest{OperationKey: "nope", RequestHash: hash, Reason: "x"})
	if client.CodeOf(err) != "NOT_FOUND" {
		t.Errorf("unknown key: %v", err)
	}
	_, err = as(t, s.srv, adminB).Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-bad", RequestHash: hash, Reason: "x"})
	if client.CodeOf(err) != "NOT_FOUND" {
		t.Errorf("another tenant's key: %v", err)
	}
	_, err = as(t, s.srv, "").Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-bad", RequestHash: hash, Reason: "x"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no identity: %v", err)
	}
	code, _, _ := doAs(t, "", http.MethodPost, s.srv.BaseURL+"/v1/operations:reject", fmt.Sprintf(`{"operation_key":"transfer-bad","request_hash":%q,"reason":"x"}`, hash))
	if code != http.StatusUnauthorized {
		t.Errorf("REST without identity: %d", code)
	}
	if _, err := as(t, s.srv, metrA).Approve(ctx, &pb.ApproveRequest{OperationKey: "transfer-bad", RequestHash: hash, Reason: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a metrics token: %v", err)
	}
	if _, err := as(t, s.srv, reconA).Reject(ctx, &pb.RejectRequest{OperationKey: "transfer-bad", RequestHash: hash, Reason: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a reconciler: %v", err)
	}
	if after := lookup(t, ctx, oper, "transfer-bad"); !proto.Equal(before, after) {
		t.Fatalf("refused decisions changed the operation:\n%v\n%v", before, after)
	}
}
