package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Approvals behind the gateway, with the real binaries: the journal asks
// a person to approve a payment over 1,000.00 (approval.when); the
// gateway holds such a request (HTTP 409 approval-pending, the MCP text
// awaiting_approval) and sends nothing until an operator approves it at
// the journal, then sends it exactly once; a rejection is replayed as the
// refusal. Callers retry on their own throughout.

// gatewayApprovalPolicy is the test policy with an approval for large payments.
func gatewayApprovalPolicy(t *testing.T) string {
	t.Helper()
	const head = "  create_payment:\n    operation_key: required\n    lease_seconds: 30\n"
	pol := strings.Replace(testPolicy(), head, head+"    approval:\n      when: \"payload.amount_minor > 100000\"\n", 1)
	if pol == testPolicy() {
		t.Fatal("the policy edit did not apply")
	}
	return pol
}

// gatewayAnswer is one answer of the gateway's HTTP door.
type gatewayAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a gatewayAnswer) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d with Content-Type %q, want a problem document: %s", a.status, ct, a.body)
	}
	var p map[string]any
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("%d: %v: %s", a.status, err, a.body)
	}
	return p
}

// pay posts a payment to the gateway's HTTP door as a caller.
func pay(t *testing.T, base, token, key string, amount int) gatewayAnswer {
	t.Helper()
	a, err := payErr(base, token, key, amount)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func payErr(base, token, key string, amount int) (gatewayAnswer, error) {
	body, _ := json.Marshal(map[string]any{"order_id": key, "amount_minor": amount, "currency": "RUB"})
	req, _ := http.NewRequest(http.MethodPost, base+"/payments", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := httpClient.Do(req)
	if err != nil {
		return gatewayAnswer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return gatewayAnswer{status: res.StatusCode, header: res.Header, body: b}, err
}

// wantApprovalPending checks a 409 approval-pending answer and returns its
// problem document.
func wantApprovalPending(t *testing.T, a gatewayAnswer, key string, amount int) map[string]any {
	t.Helper()
	if a.status != http.StatusConflict {
		t.Fatalf("status %d, want 409 approval-pending: %s", a.status, a.body)
	}
	p := a.problem(t)
	if p["type"] != "urn:opjournal:problem:approval-pending" || p["status"] != float64(409) || p["operation_key"] != key {
		t.Fatalf("problem %s, want approval-pending of %s", a.body, key)
	}
	if h, _ := p["request_hash"].(string); h == "" {
		t.Fatalf("no request_hash: %s", a.body)
	}
	if d, _ := p["detail"].(string); !strings.Contains(d, "a person must approve this exact request") {
		t.Fatalf("detail %q", d)
	}
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || secs < 1 || p["retry_after_seconds"] != float64(secs) {
		t.Fatalf("Retry-After %q, retry_after_seconds %v", a.header.Get("Retry-After"), p["retry_after_seconds"])
	}
	// The request's values stay out of the answer: the hash names it.
	if bytes.Contains(a.body, []byte(strconv.Itoa(amount))) {
		t.Fatalf("the answer quotes the payload: %s", a.body)
	}
	return p
}

// decide posts an approval decision to the journal's REST API as token.
func (s *stack) decide(t *testing.T, verb, token, key, hash string) restResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"operation_key": key, "request_hash": hash, "reason": "checked with the customer"})
	req, _ := http.NewRequest(http.MethodPost, s.journalURL+"/v1/operations:"+verb, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return restResponse{Status: res.StatusCode, Body: b}
}

// awaiting looks key up and fails unless it awaits approval; it returns
// the request hash the approver sees.
func (s *stack) awaiting(t *testing.T, key string) string {
	t.Helper()
	op := lookup(t, ctxFor(t), s.rpc, key)
	if op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || op.GetAttemptCount() != 0 {
		t.Fatalf("%s is %s with %d attempts, want awaiting_approval and none", key, op.GetStatus(), op.GetAttemptCount())
	}
	return op.GetRequestHash()
}

// TestGatewayApprovalHTTP: through the HTTP door, a small payment is sent
// at once; a large one is held (409, Retry-After, nothing sent) however
// often it is retried, is sent exactly once after an operator approves it,
// and is replayed after that; another large one, rejected, is answered
// with the refusal and never sent.
func TestGatewayApprovalHTTP(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: gatewayApprovalPolicy(t), callers: true})
	gw, _ := s.startGateway(t, "gateway-1")
	agent, scope := s.callers.AgentA, s.callers.ScopeA()
	keyOf := func(k string) string { return "http:create_payment:" + scope + ":" + k }

	if a := pay(t, gw, agent, "small-1", 5000); a.status != http.StatusCreated || s.effects(t, keyOf("small-1")) != 1 {
		t.Fatalf("a payment under the threshold: %d %s, %d payments", a.status, a.body, s.effects(t, keyOf("small-1")))
	}

	key := keyOf("large-1")
	first := wantApprovalPending(t, pay(t, gw, agent, "large-1", 250000), key, 250000)
	checkApprovalExample(t, first)
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("held, yet the provider holds %d payments", n)
	}
	again := wantApprovalPending(t, pay(t, gw, agent, "large-1", 250000), key, 250000)
	hash := s.awaiting(t, key)
	if first["request_hash"] != hash || again["request_hash"] != hash {
		t.Fatalf("the 409s name %v and %v, the journal %s", first["request_hash"], again["request_hash"], hash)
	}
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("retried while held: %d payments", n)
	}

	// The agent cannot approve its own request, and the journal says so.
	if r := s.decide(t, "approve", agent, key, hash); r.Status < 400 {
		t.Fatalf("an agent's approval: %d %s", r.Status, r.Body)
	}
	if r := s.decide(t, "approve", s.callers.Operator, key, hash); r.Status != http.StatusOK {
		t.Fatalf("the operator's approval: %d %s", r.Status, r.Body)
	}
	a := pay(t, gw, agent, "large-1", 250000)
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after the approval: %d %v %s, want the provider's fresh 201", a.status, a.header, a.body)
	}
	if n := s.effects(t, key); n != 1 {
		t.Fatalf("after the approval: %d payments, want 1", n)
	}
	a = pay(t, gw, agent, "large-1", 250000)
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" || s.effects(t, key) != 1 {
		t.Fatalf("a retry after the payment: %d %v, %d payments", a.status, a.header, s.effects(t, key))
	}

	// Rejected: the retry gets the replayed refusal; nothing is sent.
	key = keyOf("large-2")
	wantApprovalPending(t, pay(t, gw, agent, "large-2", 300000), key, 300000)
	if r := s.decide(t, "reject", s.callers.Operator, key, s.awaiting(t, key)); r.Status != http.StatusOK {
		t.Fatalf("the operator's rejection: %d %s", r.Status, r.Body)
	}
	for range 2 {
		a := pay(t, gw, agent, "large-2", 300000)
		p := a.problem(t)
		if a.status != http.StatusUnprocessableEntity || p["type"] != "urn:opjournal:problem:rejected-earlier" || p["error_code"] != "approval_rejected" ||
			!strings.Contains(fmt.Sprint(p["detail"]), "a person rejected this request") {
			t.Fatalf("after the rejection: %d %s", a.status, a.body)
		}
	}
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("rejected, yet %d payments", n)
	}
}

// TestGatewayApprovalConcurrentRetries: a client that retries on its own,
// 16 requests at once with one key, while the payment awaits approval:
// every one is held and nothing is sent; after the approval 16 at once
// again: the provider is called exactly once.
func TestGatewayApprovalConcurrentRetries(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: gatewayApprovalPolicy(t), callers: true})
	gw, _ := s.startGateway(t, "gateway-1")
	gw2, _ := s.startGateway(t, "gateway-2")
	key := "http:create_payment:" + s.callers.ScopeA() + ":storm-1"
	storm := func() []gatewayAnswer {
		out := make([]gatewayAnswer, 16)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				token := []string{s.callers.AgentA, s.callers.AgentARotated}[i%2]
				a, err := payErr([]string{gw, gw2}[i/2%2], token, "storm-1", 500000)
				if err != nil {
					t.Error(err)
				}
				out[i] = a
			}()
		}
		close(gate)
		wg.Wait()
		return out
	}
	for _, a := range storm() {
		wantApprovalPending(t, a, key, 500000)
	}
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("16 retries while held: %d payments", n)
	}
	if r := s.decide(t, "approve", s.callers.Operator, key, s.awaiting(t, key)); r.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	created := 0
	for _, a := range storm() {
		switch {
		case a.status == http.StatusCreated:
			created++
		case a.status == http.StatusConflict && a.problem(t)["type"] == "urn:opjournal:problem:request-in-progress":
		default:
			t.Fatalf("after the approval: %d %s", a.status, a.body)
		}
	}
	if n := s.effects(t, key); n != 1 || created < 1 {
		t.Fatalf("after the approval: %d payments, %d answered 201", n, created)
	}
}

// TestGatewayNeverForwardsADecision: a gateway whose pass-through upstream
// is (by mistake) the journal's own REST API does not carry an approval or
// a rejection there, in any spelling and whoever sends it: the operation
// still awaits approval, and the journal itself takes the operator's.
func TestGatewayNeverForwardsADecision(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: gatewayApprovalPolicy(t), callers: true})
	g := s.start(procs.Spec{Name: "gateway-misconfigured", Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env:  []string{"PROVIDER_URL=" + s.providerURL},
		Args: append([]string{"--journal-addr", s.grpcAddr, "--http-addr", "127.0.0.1:0", "--http-upstream", s.journalURL}, s.policyArgs...)})
	gw := "http://" + g.Field("http_addr")
	key := "http:create_payment:" + s.callers.ScopeA() + ":fwd-1"
	wantApprovalPending(t, pay(t, gw, s.callers.AgentA, "fwd-1", 400000), key, 400000)
	hash := s.awaiting(t, key)
	body, _ := json.Marshal(map[string]any{"operation_key": key, "request_hash": hash, "reason": "via the gateway"})
	for _, path := range []string{"/v1/operations:approve", "/v1/operations%3Aapprove", "/V1/operations:approve", "//v1/operations:approve/", "/v1/operations:reject",
		"/opjournal.v1.JournalService/Approve"} {
		for _, token := range []string{s.callers.Operator, s.callers.AgentA, ""} {
			req, _ := http.NewRequest(http.MethodPost, gw+path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden || !bytes.Contains(b, []byte("urn:opjournal:problem:approval-decision-not-here")) {
				t.Fatalf("%s through the gateway: %d %s", path, res.StatusCode, b)
			}
		}
	}
	s.awaiting(t, key) // unchanged
	// Everything else still passes through to that upstream.
	req, _ := http.NewRequest(http.MethodGet, gw+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+s.callers.AgentA)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a pass-through GET: %d", res.StatusCode)
	}
	if r := s.decide(t, "approve", s.callers.Operator, key, hash); r.Status != http.StatusOK {
		t.Fatalf("the operator's approval at the journal: %d %s", r.Status, r.Body)
	}
	if a := pay(t, gw, s.callers.AgentA, "fwd-1", 400000); a.status != http.StatusCreated || s.effects(t, key) != 1 {
		t.Fatalf("after the approval: %d %s", a.status, a.body)
	}
}

// TestGatewayApprovalMCP: an mcp-go client calls the protected tool for a
// large payment: it is told, in the shared awaiting_approval text, that a
// person must approve it, and nothing is called, however often it calls;
// once an operator approved it, the call runs once and is replayed after.
// A rejected one is told approval_rejected.
func TestGatewayApprovalMCP(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: gatewayApprovalPolicy(t), callers: true})
	_, mcpURL := s.startGateway(t, "gateway-1")
	session := mcpgoSession(t, mcpURL, s.callers.AgentA)
	texts := readModelTexts(t)
	call := func(orderID string) *mcpgo.CallToolResult {
		t.Helper()
		res, err := mcpgoCall(ctxFor(t), session, "create_payment", map[string]any{"order_id": orderID, "amount_minor": 700000, "currency": "RUB"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	held := strings.NewReplacer("{tool}", "create_payment", "{ids}", "order_id").Replace(texts["awaiting_approval"])
	var key string
	for i := range 2 {
		res := call("mcp-large-1")
		if !res.IsError || mcpgoText(res) != held {
			t.Fatalf("call %d: isError %v, %q\nwant %q", i, res.IsError, mcpgoText(res), held)
		}
		key, _ = mcpgoMeta(res)
		if n := s.effects(t, key); n != 0 {
			t.Fatalf("call %d held, yet %d payments", i, n)
		}
	}
	if r := s.decide(t, "approve", s.callers.Operator, key, s.awaiting(t, key)); r.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	for i := range 2 {
		res := call("mcp-large-1")
		if _, replayed := mcpgoMeta(res); res.IsError || replayed != (i == 1) {
			t.Fatalf("call %d after the approval: isError %v replayed %v %q", i, res.IsError, replayed, mcpgoText(res))
		}
		if n := s.effects(t, key); n != 1 {
			t.Fatalf("call %d after the approval: %d payments, want 1", i, n)
		}
	}

	res := call("mcp-large-2")
	key, _ = mcpgoMeta(res)
	if !res.IsError || mcpgoText(res) != held {
		t.Fatalf("the second: %q", mcpgoText(res))
	}
	if r := s.decide(t, "reject", s.callers.Operator, key, s.awaiting(t, key)); r.Status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.Status, r.Body)
	}
	rejected := strings.NewReplacer("{tool}", "create_payment", "{ids}", "order_id", "{error_code}", "approval_rejected").Replace(texts["approval_rejected"])
	if res := call("mcp-large-2"); !res.IsError || mcpgoText(res) != rejected {
		t.Fatalf("after the rejection: %q\nwant %q", mcpgoText(res), rejected)
	}
	if n := s.effects(t, key); n != 0 {
		t.Fatalf("rejected, yet %d payments", n)
	}
}

// readModelTexts reads protocol/testdata/model_texts.json's texts.
func readModelTexts(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../protocol/testdata/model_texts.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts map[string]string `json:"texts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Texts
}

// approvalExample is the 409 body docs/gateway.md shows, between its
// marker and the end of the code block.
var approvalExample = regexp.MustCompile("(?s)<!-- approval-pending example: checked by TestGatewayApprovalHTTP -->\\s*```json\\n(.*?)```")

// checkApprovalExample compares the example of docs/gateway.md with a
// real answer: the same members, the same type, title, status and detail;
// the key, hash and seconds by their shape.
func checkApprovalExample(t *testing.T, got map[string]any) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	m := approvalExample.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/gateway.md has no approval-pending example")
	}
	var want map[string]any
	if err := json.Unmarshal(m[1], &want); err != nil {
		t.Fatalf("docs/gateway.md's approval-pending example: %v", err)
	}
	if len(want) != len(got) {
		t.Fatalf("docs/gateway.md shows the members %v, the gateway answers %v", want, got)
	}
	for k, w := range want {
		g, ok := got[k]
		switch k {
		case "operation_key":
			ok = ok && regexp.MustCompile(`^http:create_payment:p[0-9a-f]{16}:`).MatchString(fmt.Sprint(g)) &&
				regexp.MustCompile(`^http:create_payment:p[0-9a-f]{16}:`).MatchString(fmt.Sprint(w))
		case "request_hash":
			hashLike := regexp.MustCompile(`^[0-9a-z:_-]{16,}$`)
			ok = ok && hashLike.MatchString(fmt.Sprint(g)) && hashLike.MatchString(fmt.Sprint(w))
		case "retry_after_seconds":
			_, ok = g.(float64)
		default:
			ok = ok && g == w
		}
		if !ok {
			t.Errorf("docs/gateway.md's approval-pending example: %s is %v, the gateway answers %v", k, w, g)
		}
	}
}
