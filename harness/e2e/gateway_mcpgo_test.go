package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// The gateway's MCP door with a client of another implementation,
// mark3labs/mcp-go, over streamable HTTP, against the real binaries.

// startGatewayAt runs an opjournal-gateway whose MCP door listens on addr
// and returns its process.
func (s *stack) startGatewayAt(t *testing.T, name, addr string) *procs.Proc {
	t.Helper()
	return s.start(procs.Spec{Name: name, Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env: []string{"PROVIDER_URL=" + s.providerURL},
		Args: append([]string{"--journal-addr", s.grpcAddr, "--mcp-addr", addr,
			"--mcp-upstream", s.providerURL + "/mcp", "--worker-id", name}, s.policyArgs...)})
}

// mcpgoSession opens a new mcp-go session to the gateway's MCP door.
func mcpgoSession(t *testing.T, url, token string) *mcpgoclient.Client {
	t.Helper()
	c, err := mcpgoclient.NewStreamableHttpClient(url, mcpgotransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxFor(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	// The sessionful revision: these tests hold that its flow (initialize,
	// Mcp-Session-Id) works as it always did beside the stateless one,
	// which TestGatewayMCPTypeScriptStateless holds with the TypeScript
	// client of 2026-07-28.
	init.Params.ProtocolVersion = mcpgo.ProtocolVersion20251125
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-agent", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize with mcp-go: %v", err)
	}
	return c
}

// mcpgoCall calls a tool through an mcp-go session.
func mcpgoCall(ctx context.Context, c *mcpgoclient.Client, tool string, args map[string]any) (*mcpgo.CallToolResult, error) {
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	return c.CallTool(ctx, req)
}

func mcpgoText(res *mcpgo.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcpgo.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

// mcpgoMeta reads what the gateway says it did (_meta "opjournal/operation").
func mcpgoMeta(res *mcpgo.CallToolResult) (key string, replayed bool) {
	if res.Meta == nil {
		return "", false
	}
	m, _ := res.Meta.AdditionalFields["opjournal/operation"].(map[string]any)
	key, _ = m["operation_key"].(string)
	replayed, _ = m["replayed"].(bool)
	return key, replayed
}

// TestGatewayMCPGoClientGatewayKilled: an mcp-go client calls the
// protected tool create_payment; the provider commits the payment and
// holds its answer, and the gateway is killed (SIGKILL) with the call in
// flight, its outcome unrecorded. A new gateway starts on the same
// address; the client connects again in a new session and calls with the
// same arguments: it is told the call is in progress, then that its
// outcome is unknown, until the stack's opjournal-reconciler (one runs
// beside every stack) finds the payment by its key at the provider; then
// the call is answered, replayed, with the provider's payment. The
// provider holds exactly one payment.
func TestGatewayMCPGoClientGatewayKilled(t *testing.T) {
	t.Parallel()
	// A 3 s lease: the dead gateway's claim expires soon, so the
	// reconciler may look (the shipped 30 s would only make this slower).
	pol := strings.Replace(testPolicy(), "  create_payment:\n    operation_key: required\n    lease_seconds: 30\n",
		"  create_payment:\n    operation_key: required\n    lease_seconds: 3\n", 1)
	if pol == testPolicy() {
		t.Fatal("the policy edit did not apply")
	}
	s := startStack(t, stackOpts{policy: pol, callers: true})
	gw := s.startGatewayAt(t, "gateway-1", "127.0.0.1:0")
	addr := gw.Field("mcp_addr")
	url := "http://" + addr + "/mcp"
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: time.Minute})
	args := map[string]any{"order_id": "mcp-go-1", "amount_minor": 2500, "currency": "EUR"}

	first := mcpgoSession(t, url, s.callers.AgentA)
	lost := make(chan error, 1)
	go func() {
		res, err := mcpgoCall(ctxFor(t), first, "create_payment", args)
		if err == nil {
			err = errors.New("answered: " + mcpgoText(res))
		}
		lost <- err
	}()
	eventually(t, 20*time.Second, func() (bool, string) {
		c, err := s.provider.Effects(ctxFor(t))
		return err == nil && c.Total == 1, "the provider to commit the payment"
	})
	gw.Kill()
	if err := <-lost; strings.HasPrefix(err.Error(), "answered: ") {
		t.Fatalf("the call survived the gateway's death: %v", err)
	}

	// The agent comes back with a refreshed token (its principal's new
	// one, as after a rotation): the same caller, so the same intent.
	s.startGatewayAt(t, "gateway-2", addr)
	again := mcpgoSession(t, url, s.callers.AgentARotated)
	var res *mcpgo.CallToolResult
	var seen []string
	eventually(t, 60*time.Second, func() (bool, string) {
		var err error
		if res, err = mcpgoCall(ctxFor(t), again, "create_payment", args); err != nil {
			t.Fatalf("the call after the restart: %v", err)
		}
		if !res.IsError {
			return true, ""
		}
		switch txt := mcpgoText(res); {
		case strings.Contains(txt, "already in progress"):
			seen = appendOnce(seen, "in progress")
		case strings.Contains(txt, "UNKNOWN"):
			seen = appendOnce(seen, "unknown")
		default:
			t.Fatalf("unexpected tool error: %q", txt)
		}
		return false, "the reconciler to settle the payment"
	})
	key, replayed := mcpgoMeta(res)
	if !replayed || !strings.HasPrefix(key, "mcp:create_payment:"+s.callers.ScopeA()+":f:") || !strings.Contains(mcpgoText(res), `"pay_000001"`) {
		t.Fatalf("final answer %q (_meta key %q, replayed %v), want the replayed success of pay_000001", mcpgoText(res), key, replayed)
	}
	if n := s.effects(t, key); n != 1 {
		t.Fatalf("the provider holds %d payments under %s, want 1", n, key)
	}
	if c, _ := s.provider.Effects(ctxFor(t)); c.Total != 1 {
		t.Fatalf("the provider holds %d payments in all, want 1", c.Total)
	}
	t.Logf("after the gateway was killed, the new session was told %v, then got %q", seen, mcpgoText(res))
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
