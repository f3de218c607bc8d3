package e2etest

import (
	"context"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	"github.com/opjournal/opjournal/protocol/policy"
)

const mcpPolicy = `actions:
  create_payment:
    lease_seconds: 5
    integer_fields: [amount_minor]
    gateway:
      mcp:
        tool: create_payment
        key_fields: [order_id]
        external_id: /id
`

// TestMCPGatewayTrace: the MCP door continues the trace context the agent
// put in the tools/call's _meta, and puts its own upstream call's in the
// upstream request's _meta.
func TestMCPGatewayTrace(t *testing.T) {
	pol, err := policy.Parse([]byte(mcpPolicy), "mcp-trace-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := testserver.Start(t, pol)
	ctx := context.Background()

	var mu sync.Mutex
	var seen []string
	up := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "create_payment", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tp, _ := req.Params.Meta["traceparent"].(string)
			mu.Lock()
			seen = append(seen, tp)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"id":"pay_1"}`}},
				StructuredContent: map[string]any{"id": "pay_1"}}, nil
		})
	upT, upC := mcp.NewInMemoryTransports()
	if _, err := up.Connect(ctx, upT, nil); err != nil {
		t.Fatal(err)
	}
	upstream, err := mcp.NewClient(gateway.Implementation, nil).Connect(ctx, upC, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()

	g, err := gateway.New(gateway.Config{Journal: client.New(j.Conn), Policy: pol, Identity: gateway.IdentityAnonymous})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Wait()
	srv, err := g.MCPServer(ctx, upstream)
	if err != nil {
		t.Fatal(err)
	}
	gwT, agentT := mcp.NewInMemoryTransports()
	if _, err := srv.Connect(ctx, gwT, nil); err != nil {
		t.Fatal(err)
	}
	agentSession, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, agentT, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agentSession.Close()

	actx, agent := otel.Tracer("agent").Start(ctx, "agent mcp call")
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(actx, carrier)
	m := mcp.Meta{}
	for k, v := range carrier {
		m[k] = v
	}
	res, err := agentSession.CallTool(actx, &mcp.CallToolParams{Meta: m, Name: "create_payment",
		Arguments: map[string]any{"order_id": "817", "amount_minor": 4900, "card": secret}})
	agent.End()
	if err != nil || res.IsError {
		t.Fatalf("tools/call: %v %+v", err, res)
	}
	g.Wait()

	id := agent.SpanContext().TraceID()
	spans := spansOf(id)
	t.Logf("the trace:\n%s", describe(spans))
	door := find(t, spans, "tools/call create_payment", trace.SpanKindServer)
	wantChild(t, door, find(t, spans, "agent mcp call", trace.SpanKindInternal))
	wantAttr(t, door, "opjournal.action_type", "create_payment")
	wantChild(t, find(t, spans, "opjournal.Execute", trace.SpanKindInternal), door)
	upCall := find(t, spans, "tools/call create_payment", trace.SpanKindClient)
	wantChild(t, upCall, find(t, spans, "opjournal.provider_call", trace.SpanKindInternal))
	find(t, spans, "opjournal.v1.JournalService/Register", trace.SpanKindServer)

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("the upstream saw %d calls", len(seen))
	}
	tid, sid := traceIDOf(t, seen[0])
	if tid != id || sid != upCall.SpanContext.SpanID() {
		t.Errorf("the upstream's _meta.traceparent %q is not the gateway's upstream call's", seen[0])
	}
	noSecrets(t, spans)
}
