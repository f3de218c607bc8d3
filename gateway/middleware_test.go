package gateway_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// TestMCPMiddlewareProtectsAnInProcessServer: an MCP server written with
// the MCP Go SDK (the test provider's own, whose create_payment calls the
// provider's HTTP API) protects its tools in-process with MCPMiddleware,
// served behind the gateway's bearer middleware. The client never sees the
// argument the journal fills (a client of another MCP implementation,
// mcp-go, is harness/e2e/gateway_mcpgo_test.go); its
// call's answer is lost after the payment; its retries with the same
// identifying arguments (and whatever it writes into the hidden argument)
// are not sent, until the reconciler settles the payment: one payment.
func TestMCPMiddlewareProtectsAnInProcessServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	srv := fakeprovider.NewMCPServer(e.provURL, nil)
	srv.AddReceivingMiddleware(e.gw.MCPMiddleware())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: e.gw.MCPHandler(srv, gateway.MCPHTTPOptions{Resource: url})}}
	hs.Start()
	t.Cleanup(hs.Close)

	ctx := context.Background()
	hc := &http.Client{Transport: headerTransport{"Authorization", "Bearer " + tokenA}}
	c, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tools, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		if tool.Name == "create_payment" && strings.Contains(string(schema), "idempotency_key") {
			t.Fatalf("the model is shown the argument the journal fills: %s", schema)
		}
	}

	callWith := func(args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "create_payment", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		var parts []string
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		return strings.Join(parts, " ")
	}
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.DropConnectionAfterCommit, Count: 1})
	first := callWith(map[string]any{"order_id": "mw-1", "amount_minor": 700, "currency": "EUR"})
	if !first.IsError || !strings.Contains(text(first), "UNKNOWN") || !strings.Contains(text(first), "order_id") {
		t.Fatalf("first: %q", text(first))
	}
	// The model retries, and writes something of its own into the hidden
	// argument: the same call all the same, not sent.
	again := callWith(map[string]any{"order_id": "mw-1", "amount_minor": 700, "currency": "EUR", "idempotency_key": "model-made-this-up"})
	if !again.IsError || !strings.Contains(text(again), "UNKNOWN") {
		t.Fatalf("retry: %q", text(again))
	}
	if n := e.allEffects(); n != 1 {
		t.Fatalf("%d payments after the retry, want 1", n)
	}
	e.reconcile(func() bool {
		return !callWith(map[string]any{"order_id": "mw-1", "amount_minor": 700, "currency": "EUR"}).IsError
	})
	settled := callWith(map[string]any{"order_id": "mw-1", "amount_minor": 700, "currency": "EUR"})
	if settled.IsError || !strings.Contains(text(settled), "succeeded") {
		t.Fatalf("settled: %q", text(settled))
	}
	if n := e.allEffects(); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
	// Another order is another intent: sent.
	other := callWith(map[string]any{"order_id": "mw-2", "amount_minor": 5, "currency": "EUR"})
	if other.IsError {
		t.Fatalf("a second intent: %q", text(other))
	}
}
