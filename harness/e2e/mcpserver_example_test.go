package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// TestGoMCPServerExample runs the program docs/integrations/go-mcp-server.md
// shows (examples/mcp-server, the page holds its code, compared here): an
// MCP server of the Go SDK whose create_payment is protected in-process by
// gateway.MCPMiddleware, started by a local agent over stdio. The answer of
// the first call is lost after the payment; the agent's retry is not sent;
// the reconciler settles it; one payment.
func TestGoMCPServerExample(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/integrations/go-mcp-server.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile("../../examples/mcp-server/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```go\n"+string(code)+"```") {
		t.Fatal("docs/integrations/go-mcp-server.md does not show examples/mcp-server/main.go as it is")
	}
	s := startStack(t, stackOpts{})
	cmd := exec.Command(filepath.Join(binDir, "mcp-server"), "--journal", s.grpcAddr, "--provider", s.providerURL, "--policy", s.policyArgs[1])
	cmd.Env = childEnv(nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "local-agent", Version: "1"}, nil).Connect(ctxFor(t), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"order_id": "950", "amount_minor": 300, "currency": "EUR"}
	call := func() *mcp.CallToolResult {
		res, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: "create_payment", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		var parts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		return strings.Join(parts, " ")
	}
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.DropConnectionAfterCommit, Count: 1})
	if first := call(); !first.IsError || !strings.Contains(text(first), "UNKNOWN") {
		t.Fatalf("first: %q", text(first))
	}
	var last *mcp.CallToolResult
	eventually(t, 30*time.Second, func() (bool, string) {
		last = call()
		return !last.IsError, "the reconciler to settle the payment"
	})
	m, _ := last.Meta["opjournal/operation"].(map[string]any)
	key, _ := m["operation_key"].(string)
	if !strings.HasPrefix(key, "mcp:create_payment:stdio:f:") || s.effects(t, key) != 1 {
		t.Fatalf("key %q, payments %d, want 1", key, s.effects(t, key))
	}
	if c, _ := s.provider.Effects(ctxFor(t)); c.Total != 1 {
		t.Fatalf("the provider holds %d payments, want 1", c.Total)
	}
}
