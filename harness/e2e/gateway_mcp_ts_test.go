package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// The gateway's MCP door with the official TypeScript client of the
// 2026-07-28 revision (npm @modelcontextprotocol/client 2.x), whose
// requests carry no session: harness/e2e/mcp-ts-client, installed by
// scripts/deps.sh with npm ci from its lock file.

// tsAgentRun is what mcp-ts-client/agent.mjs printed.
type tsAgentRun struct {
	Version     string         `json:"version"`
	SessionID   *string        `json:"sessionId"`
	Extension   map[string]any `json:"extension"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
	Results     []struct {
		IsError bool `json:"isError"`
		Meta    struct {
			Key      string `json:"operation_key"`
			Replayed bool   `json:"replayed"`
			Outcome  string `json:"outcome"`
		} `json:"meta"`
		Text string `json:"text"`
	} `json:"results"`
}

// runTSAgent runs agent.mjs: it connects to url as token's caller
// (mode "auto": the revision the client negotiates; "legacy": the 2025
// handshake) and calls create_payment calls times with args.
func runTSAgent(t *testing.T, url, token string, args map[string]any, calls int, mode string) tsAgentRun {
	t.Helper()
	dir, err := filepath.Abs("mcp-ts-client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "client")); err != nil {
		t.Fatalf("mcp-ts-client is not installed: run scripts/deps.sh (npm ci in harness/e2e/mcp-ts-client): %v", err)
	}
	a, _ := json.Marshal(args)
	cmd := exec.CommandContext(ctxFor(t), "node", "agent.mjs", url, token, string(a), string(rune('0'+calls)), mode)
	cmd.Dir = dir
	cmd.Env = childEnv(nil)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node agent.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var run tsAgentRun
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatalf("agent.mjs printed %q: %v", out, err)
	}
	return run
}

// TestGatewayMCPTypeScriptStateless: the TypeScript 2.x client probes
// the door with server/discover and speaks 2026-07-28 without a session:
// it reads the journal extension the door announces, sees no
// idempotency_key (neither in the schema nor in the description), and
// calls create_payment twice (the second a replay). Then the same
// call from a 2025-11-25 session of another implementation (mark3labs
// mcp-go) and from the TypeScript client in its legacy mode is the same
// call: the same key, replayed; one payment at the provider (and a call
// recorded for the 2025-11-25 session is replayed to the stateless client). A client
// of another principal is another intent. A lost answer comes back as
// the outcome "unknown", and the retry, once reconciled, as the payment.
func TestGatewayMCPTypeScriptStateless(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	gw := s.startGatewayAt(t, "gateway", "127.0.0.1:0")
	url := "http://" + gw.Field("mcp_addr") + "/mcp"
	args := map[string]any{"order_id": "ts-1", "amount_minor": 1200, "currency": "EUR"}

	run := runTSAgent(t, url, s.callers.AgentA, args, 2, "auto")
	if run.Version != "2026-07-28" || run.SessionID != nil {
		t.Fatalf("negotiated %q, session %v: want 2026-07-28 without a session", run.Version, run.SessionID)
	}
	tools, _ := run.Extension["tools"].(map[string]any)
	cp, _ := tools["create_payment"].(map[string]any)
	if key, _ := run.Extension["key"].(map[string]any); cp == nil || key["format"] != "mcp:ACTION:SCOPE:f:HASH" || run.Extension["resultMeta"] != "opjournal/operation" {
		t.Fatalf("the journal extension: %v", run.Extension)
	}
	if schema, _ := json.Marshal(run.InputSchema); strings.Contains(run.Description+string(schema), "idempotency_key") {
		t.Fatalf("the model is told about idempotency_key: %q %s", run.Description, schema)
	}
	first, again := run.Results[0], run.Results[1]
	if first.IsError || first.Meta.Replayed || first.Meta.Outcome != "succeeded" || !strings.HasPrefix(first.Meta.Key, "mcp:create_payment:"+s.callers.ScopeA()+":f:") {
		t.Fatalf("first call: %+v", first)
	}
	if again.IsError || !again.Meta.Replayed || again.Meta.Key != first.Meta.Key || again.Text != first.Text {
		t.Fatalf("second call: %+v, first %+v", again, first)
	}

	old := mcpgoSession(t, url, s.callers.AgentARotated)
	res, err := mcpgoCall(ctxFor(t), old, "create_payment", args)
	if err != nil {
		t.Fatal(err)
	}
	if key, replayed := mcpgoMeta(res); res.IsError || !replayed || key != first.Meta.Key {
		t.Fatalf("the 2025-11-25 session (mcp-go): key %q replayed %v %q", key, replayed, mcpgoText(res))
	}
	// Recorded for the 2025-11-25 session, replayed to the stateless
	// client, framed for its revision (it refuses a result without resultType).
	fromOld := map[string]any{"order_id": "ts-3", "amount_minor": 700, "currency": "EUR"}
	if res, err := mcpgoCall(ctxFor(t), old, "create_payment", fromOld); err != nil || res.IsError {
		t.Fatalf("mcp-go's call: %v", err)
	}
	if r := runTSAgent(t, url, s.callers.AgentA, fromOld, 1, "auto").Results[0]; r.IsError || !r.Meta.Replayed {
		t.Fatalf("the stateless replay of the 2025-11-25 call: %+v", r)
	}
	legacy := runTSAgent(t, url, s.callers.AgentA, args, 1, "legacy")
	if legacy.Version != "2025-11-25" || legacy.SessionID == nil || *legacy.SessionID == "" {
		t.Fatalf("legacy mode: version %q session %v", legacy.Version, legacy.SessionID)
	}
	if r := legacy.Results[0]; r.IsError || !r.Meta.Replayed || r.Meta.Key != first.Meta.Key {
		t.Fatalf("legacy mode: %+v", r)
	}
	if n := s.effects(t, first.Meta.Key); n != 1 {
		t.Fatalf("the provider holds %d payments under %s, want 1", n, first.Meta.Key)
	}
	other := runTSAgent(t, url, s.callers.AgentB, args, 1, "auto")
	if r := other.Results[0]; r.IsError || r.Meta.Replayed || r.Meta.Key == first.Meta.Key {
		t.Fatalf("another principal: %+v", r)
	}
	if c, _ := s.provider.Effects(ctxFor(t)); c.Total != 3 {
		t.Fatalf("the provider holds %d payments, want 3 (ts-1 once per principal, ts-3)", c.Total)
	}

	// A lost answer: the provider commits the payment and answers 500
	// (the upstream tool reports an error, which may hide an effect:
	// tool_errors unknown). The stateless client is told the outcome is unknown
	// (outcome "unknown", a tool error), its retries are not sent, and once
	// the stack's reconciler has found the payment the retry gets it.
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.ErrorAfterCommit, Count: 1})
	lost := map[string]any{"order_id": "ts-2", "amount_minor": 1300, "currency": "EUR"}
	r := runTSAgent(t, url, s.callers.AgentA, lost, 1, "auto").Results[0]
	if !r.IsError || r.Meta.Outcome != "unknown" || !strings.Contains(r.Text, "UNKNOWN") {
		t.Fatalf("the lost answer: %+v", r)
	}
	eventually(t, 60*time.Second, func() (bool, string) {
		r = runTSAgent(t, url, s.callers.AgentA, lost, 1, "auto").Results[0]
		return !r.IsError, "the reconciler to settle the payment (last outcome " + r.Meta.Outcome + ")"
	})
	if !r.Meta.Replayed || r.Meta.Outcome != "succeeded" || s.effects(t, r.Meta.Key) != 1 {
		t.Fatalf("after the reconciler: %+v, payments %d", r, s.effects(t, r.Meta.Key))
	}
	if c, _ := s.provider.Effects(ctxFor(t)); c.Total != 4 {
		t.Fatalf("the provider holds %d payments, want 4", c.Total)
	}
}
