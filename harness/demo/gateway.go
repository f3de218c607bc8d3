package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// GatewayEnv is what the gateway scenarios talk to: an agent that never
// calls an SDK, only the gateway's front doors.
type GatewayEnv struct {
	// HTTPURL is the gateway's HTTP front door; MCPURL its MCP endpoint.
	HTTPURL, MCPURL string
	// Callers are the agents' credentials (the gateway knows who calls).
	Callers GatewayCallers
	// RPC reads the journal (Lookup) to show what it recorded.
	RPC pb.JournalServiceClient
	// Provider controls and counts the test provider.
	Provider *fakeprovider.ControlClient
	// AgentTimeout is how long the agent waits for an answer (default 2 s).
	AgentTimeout time.Duration
	// SettleTimeout bounds the wait for the reconciler (default 60 s).
	SettleTimeout time.Duration
	// Out receives the narration.
	Out io.Writer
}

// GatewayScenarios are the checks `make demo-gateway` runs, in order.
var GatewayScenarios = []struct {
	Name string
	Run  func(ctx context.Context, env GatewayEnv) error
}{
	{"HTTP door: the seven steps of docs/spec.md through the gateway (no SDK in the agent)", GatewayHTTP},
	{"MCP door: the same payment as a tool call (no SDK in the agent)", GatewayMCP},
	{"identity: two callers with one client key are two intents; a rotated token is the same intent", GatewayIdentity},
}

// RunGateway runs every gateway scenario, stopping at the first failure.
func RunGateway(ctx context.Context, env GatewayEnv) error {
	for i, s := range GatewayScenarios {
		fmt.Fprintf(env.out(), "\n== scenario %d: %s\n", i+1, s.Name)
		if err := s.Run(ctx, env); err != nil {
			return fmt.Errorf("scenario %d (%s): %w", i+1, s.Name, err)
		}
	}
	return nil
}

func (e GatewayEnv) out() io.Writer {
	if e.Out == nil {
		return io.Discard
	}
	return e.Out
}

func (e GatewayEnv) agentTimeout() time.Duration {
	if e.AgentTimeout == 0 {
		return 2 * time.Second
	}
	return e.AgentTimeout
}

// gwRun narrates one gateway scenario.
type gwRun struct {
	env  GatewayEnv
	step int
}

func (r *gwRun) say(format string, args ...any) {
	r.step++
	fmt.Fprintf(r.env.out(), "  step %d  %s\n", r.step, fmt.Sprintf(format, args...))
}

func (r *gwRun) saw(format string, args ...any) {
	fmt.Fprintf(r.env.out(), "          observed: %s\n", fmt.Sprintf(format, args...))
}

// post is the agent's plain HTTP call through the gateway; err is the
// agent's own timeout or a lost connection.
func (r *gwRun) post(ctx context.Context, path, key string, body any) (status int, hdr http.Header, resp []byte, err error) {
	return r.postAs(ctx, r.env.Callers.AgentA, path, key, body)
}

// postAs is post with another caller's token.
func (r *gwRun) postAs(ctx context.Context, token, path, key string, body any) (status int, hdr http.Header, resp []byte, err error) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, r.env.agentTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.env.HTTPURL+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	resp, err = io.ReadAll(res.Body)
	return res.StatusCode, res.Header, resp, err
}

func (r *gwRun) status(ctx context.Context, key string) (pb.Status, error) {
	res, err := r.env.RPC.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	if err != nil {
		return 0, err
	}
	return res.GetOperation().GetStatus(), nil
}

// settle waits until the journal's record of key is want.
func (r *gwRun) settle(ctx context.Context, key string, want pb.Status) error {
	limit := r.env.SettleTimeout
	if limit == 0 {
		limit = 60 * time.Second
	}
	deadline := time.Now().Add(limit)
	for {
		st, err := r.status(ctx, key)
		if err != nil {
			return err
		}
		if st == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %s after %s, want %s (is the reconciler running?)", key, st, limit, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return strings.TrimPrefix(p.Type, "urn:opjournal:problem:")
}

// GatewayHTTP is the reproducible check of docs/spec.md through the HTTP door: the
// agent is a plain HTTP client with an Idempotency-Key header.
func GatewayHTTP(ctx context.Context, env GatewayEnv) error {
	r := &gwRun{env: env}
	const clientKey = "payment:order-817:intent-01"
	body := map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
	r.say("the agent POSTs /payments through the gateway with Idempotency-Key: %s", clientKey)
	r.say("the provider is set to commit the payment, then drop the connection before it answers (drop_connection_after_commit)")
	if _, err := env.Provider.AddFault(ctx, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.DropConnectionAfterCommit, Count: 1}); err != nil {
		return err
	}
	code, hdr, resp, err := r.post(ctx, "/payments", clientKey, body)
	if err != nil || code != http.StatusConflict || problemType(resp) != "outcome-unknown" {
		return fmt.Errorf("unexpected: the first call got %d %s (%v), want 409 outcome-unknown", code, resp, err)
	}
	r.say("the provider charged the card, but its answer was lost: the agent gets 409 %s (Retry-After %s): do not retry with a new key", problemType(resp), hdr.Get("Retry-After"))
	// The gateway names the operation on every answer; the key is derived
	// from the client's key and the caller's principal (agent A).
	key := hdr.Get("Opjournal-Operation-Key")
	if want := "http:create_payment:" + env.Callers.ScopeA() + ":" + clientKey; key != want {
		return fmt.Errorf("unexpected: the operation key %q, want %q", key, want)
	}
	st, _ := r.status(ctx, key)
	r.saw("the journal shows %s for %s", short(st), key)

	r.say("the agent repeats the same request with the same key")
	code, hdr, resp, err = r.post(ctx, "/payments", clientKey, body)
	if err != nil {
		return fmt.Errorf("the retry: %w", err)
	}
	switch {
	case code == http.StatusConflict && problemType(resp) == "outcome-unknown":
		r.saw("409 %s, Retry-After %s: not sent again; the agent must not use a new key", problemType(resp), hdr.Get("Retry-After"))
	case code == http.StatusOK && hdr.Get("Idempotent-Replayed") == "true":
		r.saw("the reconciler was quicker: 200, replayed from the journal")
	default:
		return fmt.Errorf("unexpected: the retry got %d %s, want 409 outcome-unknown", code, resp)
	}
	r.say("the reconciler finds the payment at the provider (searched by the key the gateway sent)")
	if err := r.settle(ctx, key, pb.Status_STATUS_SUCCEEDED); err != nil {
		return err
	}
	r.saw("the journal shows succeeded")
	code, hdr, resp, err = r.post(ctx, "/payments", clientKey, body)
	if err != nil || code != http.StatusOK || hdr.Get("Idempotent-Replayed") != "true" {
		return fmt.Errorf("unexpected: the retry after reconciliation got %d %v %s (%v)", code, hdr, resp, err)
	}
	r.saw("the retry now gets %d with Idempotent-Replayed: true: the provider's payment %s, as the reconciler found it", code, shorten(string(resp), 80))
	n, err := env.Provider.Count(ctx, key)
	if err != nil {
		return err
	}
	r.say("the provider's store holds %d payment for the key", n)
	if n != 1 {
		return fmt.Errorf("unexpected: %d payments, want exactly 1", n)
	}
	r.say("the agent sends the same key with another amount")
	code, _, resp, err = r.post(ctx, "/payments", clientKey, map[string]any{"order_id": "817", "amount_minor": 1, "currency": "RUB"})
	if err != nil || code != http.StatusUnprocessableEntity || problemType(resp) != "idempotency-key-reused" {
		return fmt.Errorf("unexpected: %d %s (%v), want 422 idempotency-key-reused", code, resp, err)
	}
	if n, _ := env.Provider.Count(ctx, key); n != 1 {
		return fmt.Errorf("unexpected: %d payments after the conflict", n)
	}
	r.saw("422 %s; still exactly 1 payment: no external call", problemType(resp))
	return nil
}

// GatewayMCP is the same payment as an MCP tool call: the agent is a plain
// MCP client of the gateway, whose upstream is the provider's MCP server.
func GatewayMCP(ctx context.Context, env GatewayEnv) error {
	r := &gwRun{env: env}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "demo-agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: env.MCPURL, HTTPClient: bearerClient(env.Callers.AgentA), DisableStandaloneSSE: true}, nil)
	if err != nil {
		return fmt.Errorf("connect to the gateway's MCP endpoint: %w", err)
	}
	defer cs.Close()
	args := map[string]any{"order_id": "818", "amount_minor": 125000, "currency": "EUR"}
	callTool := func() (*mcp.CallToolResult, error) {
		cctx, cancel := context.WithTimeout(ctx, env.agentTimeout())
		defer cancel()
		return cs.CallTool(cctx, &mcp.CallToolParams{Name: "create_payment", Arguments: args})
	}
	text := func(res *mcp.CallToolResult) string {
		var parts []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				parts = append(parts, t.Text)
			}
		}
		return strings.Join(parts, " ")
	}
	r.say("the model calls the tool create_payment(order_id 818) through the gateway; the provider commits, then the tool's connection to it drops")
	if _, err := env.Provider.AddFault(ctx, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.DropConnectionAfterCommit, Count: 1}); err != nil {
		return err
	}
	res, err := callTool()
	if err != nil {
		return fmt.Errorf("the first call: %w", err)
	}
	r.saw("a tool error for the model: %q", shorten(text(res), 160))
	r.say("the model calls the tool again with the same arguments")
	if res, err = callTool(); err != nil {
		return fmt.Errorf("the retry: %w", err)
	}
	m, _ := res.Meta["opjournal/operation"].(map[string]any)
	key, _ := m["operation_key"].(string)
	if !res.IsError || !strings.Contains(text(res), "UNKNOWN") {
		if res.IsError {
			return fmt.Errorf("unexpected tool error: %s", text(res))
		}
		r.saw("the reconciler had already settled it: %s", text(res))
	} else {
		r.saw("a tool error for the model: %q", shorten(text(res), 160))
	}
	r.say("the reconciler settles it")
	if err := r.settle(ctx, key, pb.Status_STATUS_SUCCEEDED); err != nil {
		return err
	}
	res, err = callTool()
	if err != nil || res.IsError {
		return fmt.Errorf("unexpected: the call after reconciliation: %v %v", res, err)
	}
	r.saw("the same call now succeeds from the journal: %s", shorten(text(res), 120))
	n, err := env.Provider.Count(ctx, key)
	if err != nil {
		return err
	}
	r.say("the provider's store holds %d payment for %s", n, key)
	if n != 1 {
		return fmt.Errorf("unexpected: %d payments, want exactly 1", n)
	}
	return nil
}

// GatewayIdentity shows that the gateway scopes keys by who calls: agent
// B's "1" is not agent A's "1", and agent A's rotated token is still A.
func GatewayIdentity(ctx context.Context, env GatewayEnv) error {
	r := &gwRun{env: env}
	const clientKey = "1"
	body := map[string]any{"order_id": "820", "amount_minor": 5000, "currency": "RUB"}
	r.say("agent A POSTs /payments with Idempotency-Key: %s (its token is agent-a-2026-11)", clientKey)
	code, hdr, _, err := r.postAs(ctx, env.Callers.AgentA, "/payments", clientKey, body)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("unexpected: agent A got %d (%v), want 201", code, err)
	}
	keyA := hdr.Get("Opjournal-Operation-Key")
	r.saw("201, operation %s", keyA)
	r.say("agent B POSTs /payments with the same Idempotency-Key: %s and another body", clientKey)
	code, hdr, _, err = r.postAs(ctx, env.Callers.AgentB, "/payments", clientKey, map[string]any{"order_id": "821", "amount_minor": 7000, "currency": "RUB"})
	if err != nil || code != http.StatusCreated || hdr.Get("Idempotent-Replayed") != "" {
		return fmt.Errorf("unexpected: agent B got %d %v (%v), want its own 201", code, hdr, err)
	}
	keyB := hdr.Get("Opjournal-Operation-Key")
	r.saw("201, its own operation %s: never agent A's stored answer", keyB)
	r.say("agent A's token is rotated (agent-a-2026-12, the same principal); it repeats its request")
	code, hdr, _, err = r.postAs(ctx, env.Callers.AgentARotated, "/payments", clientKey, body)
	if err != nil || hdr.Get("Idempotent-Replayed") != "true" || hdr.Get("Opjournal-Operation-Key") != keyA {
		return fmt.Errorf("unexpected: agent A's rotated token got %d %v (%v), want the replay of %s", code, hdr, err, keyA)
	}
	r.saw("%d with Idempotent-Replayed: true: the same intent", code)
	nA, err := env.Provider.Count(ctx, keyA)
	if err != nil {
		return err
	}
	nB, err := env.Provider.Count(ctx, keyB)
	if err != nil {
		return err
	}
	r.say("the provider's store holds %d payment for A's key and %d for B's", nA, nB)
	if nA != 1 || nB != 1 {
		return fmt.Errorf("unexpected: %d and %d payments, want 1 and 1", nA, nB)
	}
	return nil
}

// bearerClient is an HTTP client that sends the token with every request.
func bearerClient(token string) *http.Client {
	return &http.Client{Transport: bearerTransport{"Bearer " + token}}
}

type bearerTransport struct{ value string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.value)
	return http.DefaultTransport.RoundTrip(r)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
