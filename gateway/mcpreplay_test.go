package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// resultPolicy protects the tool "report" of an upstream the test writes.
const resultPolicy = `actions:
  report:
    lease_seconds: 2
    gateway:
      mcp:
        tool: report
        key_fields: [report_id]
        tool_errors: failed_final
`

// reportServer is an upstream whose tool "report" answers res, counting
// its calls.
func reportServer(res *mcp.CallToolResult, calls *int) *mcp.Server {
	up := mcp.NewServer(&mcp.Implementation{Name: "reports", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "report", InputSchema: map[string]any{"type": "object"},
		OutputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			*calls++
			return res, nil
		})
	return up
}

// withoutMeta is a result's JSON without its _meta, the part a replay
// must repeat exactly.
func withoutMeta(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	c := *res
	c.Meta = nil
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMCPReplayEqualsOriginal: the replay of a stored tool result is the
// original (content, structuredContent, isError), also when the
// structured content holds numbers beyond ±(2^53−1), which the journal
// does not store as numbers, and for a refusal.
func TestMCPReplayEqualsOriginal(t *testing.T) {
	t.Parallel()
	for name, res := range map[string]*mcp.CallToolResult{
		"plain": {Content: []mcp.Content{&mcp.TextContent{Text: "report r-1 ready"}},
			StructuredContent: map[string]any{"id": "r-1", "pages": 12, "tags": []any{"a", nil, 1.5}, "empty": map[string]any{}}},
		"big numbers": {Content: []mcp.Content{&mcp.TextContent{Text: "report r-2 ready"}},
			StructuredContent: map[string]any{"id": "r-2", "created_ns": json.Number("1733000000123456789"), "ratio": 1e300,
				"rows": []any{map[string]any{"a/b~c": json.Number("-9007199254740993")}, 7}}},
		"array": {Content: []mcp.Content{&mcp.TextContent{Text: "three"}}, StructuredContent: []any{1, json.Number("18446744073709551615"), "x"}},
		"refusal": {IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "quota exceeded"}},
			StructuredContent: map[string]any{"code": "quota", "limit_bytes": json.Number("90071992547409930")}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, resultPolicy)
			calls := 0
			cs := e.mcpClientOf("", reportServer(res, &calls))
			args := map[string]any{"report_id": "r"}
			first := call(t, cs, "report", args)
			again := call(t, cs, "report", args)
			if _, replayed := meta(t, again); !replayed || calls != 1 {
				t.Fatalf("replayed %v, upstream calls %d, want a replay of one call", replayed, calls)
			}
			if a, b := withoutMeta(t, first), withoutMeta(t, again); a != b || strings.Contains(b, "already made") {
				t.Fatalf("the replay differs from the original:\n%s\n%s", a, b)
			}
		})
	}
}

// TestMCPHidesForwardedKeyArgument: the argument the gateway fills with
// the operation key is not in the tool's schema; a value the model writes
// there anyway is ignored, so its genuine retry with another value is the
// same call, and the provider gets the gateway's key.
func TestMCPHidesForwardedKeyArgument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	cs := e.mcpClient("")
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name != "create_payment" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		if _, shown := schema.Properties["idempotency_key"]; shown || schema.Properties["order_id"] == nil || len(schema.Required) != 3 {
			t.Fatalf("create_payment's input schema: %s", b)
		}
	}
	args := func(modelKey string) map[string]any {
		return map[string]any{"order_id": "h-1", "amount_minor": 100, "currency": "RUB", "idempotency_key": modelKey}
	}
	first := call(t, cs, "create_payment", args("model-made-up-1"))
	again := call(t, cs, "create_payment", args("model-made-up-2"))
	key, _ := meta(t, first)
	if _, replayed := meta(t, again); first.IsError || again.IsError || !replayed {
		t.Fatalf("first %q, retry %q (replayed %v)", text(first), text(again), replayed)
	}
	if e.effects(key) != 1 || e.allEffects() != 1 || e.effects("model-made-up-1") != 0 {
		t.Fatalf("payments under the gateway's key %d (total %d, under the model's %d), want 1", e.effects(key), e.allEffects(), e.effects("model-made-up-1"))
	}
	// A call without it at all is the same call too.
	plain := call(t, cs, "create_payment", map[string]any{"order_id": "h-1", "amount_minor": 100, "currency": "RUB"})
	if _, replayed := meta(t, plain); plain.IsError || !replayed {
		t.Fatalf("without the argument: %q", text(plain))
	}
}

// TestMCPRefusalsNameKeyFields: every refusal the model reads names the
// identifying arguments.
func TestMCPRefusalsNameKeyFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mcpEmailPolicy)
	cs := e.mcpClient("")
	mail := map[string]any{"to": "k@example.com", "subject": "names", "body": "one"}
	if r := call(t, cs, "send_email", mail); r.IsError {
		t.Fatal(text(r))
	}
	mail["body"] = "two"
	conflict := call(t, cs, "send_email", mail)
	missing := call(t, cs, "send_email", map[string]any{"to": "k@example.com"})
	for what, r := range map[string]*mcp.CallToolResult{"conflict": conflict, "missing": missing} {
		if !r.IsError || !strings.Contains(text(r), "(to, subject)") {
			t.Errorf("%s: %q does not name the identifying arguments", what, text(r))
		}
	}
	if !strings.Contains(text(conflict), "refused and nothing was sent") || !strings.Contains(text(missing), `"subject"`) {
		t.Errorf("conflict %q, missing %q", text(conflict), text(missing))
	}
	// The provider commits the next email and never answers: while the
	// first call waits, a second is told it is in progress; then the
	// first is told the outcome is unknown.
	e.fault(fakeprovider.Fault{Path: "/emails", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 5 * time.Second})
	held := map[string]any{"to": "k@example.com", "subject": "held"}
	unknown := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_email", Arguments: held})
		if err != nil {
			t.Error(err)
			res = &mcp.CallToolResult{}
		}
		unknown <- res
	}()
	await.Within(t, 5*time.Second, "the provider to commit the held email", func() bool { return e.provider.Effects().Total == 2 })
	inProgress := call(t, e.mcpClient(""), "send_email", held)
	for what, r := range map[string]*mcp.CallToolResult{"in progress": inProgress, "unknown": <-unknown} {
		if !r.IsError || !strings.Contains(text(r), "to, subject)") {
			t.Errorf("%s: %q does not name the identifying arguments", what, text(r))
		}
	}
	if !strings.Contains(text(inProgress), "already in progress") {
		t.Errorf("in progress: %q", text(inProgress))
	}
}

// TestMCPToolErrorUnknownByDefault: without tool_errors, a tool's isError
// result is an unknown outcome, not a refusal to replay: the model is told
// so, its retry is not sent, and the reconciler settles it.
func TestMCPToolErrorUnknownByDefault(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(testPolicy, "        tool_errors: failed_final\n", "", 1)
	if doc == testPolicy {
		t.Fatal("the policy edit did not apply")
	}
	e := newEnv(t, doc)
	cs := e.mcpClient("")
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Reject, Count: 1})
	first := call(t, cs, "create_payment", paymentArgs)
	again := call(t, cs, "create_payment", paymentArgs)
	for what, r := range map[string]*mcp.CallToolResult{"first": first, "retry": again} {
		if _, replayed := meta(t, r); !r.IsError || replayed || !strings.Contains(text(r), "UNKNOWN") {
			t.Fatalf("%s: %q (replayed %v), want the unknown outcome", what, text(r), replayed)
		}
	}
	// Nothing was charged: the reconciler proves the absence and the
	// payment is made on the next call, once.
	var last *mcp.CallToolResult
	e.reconcile(func() bool { last = call(t, cs, "create_payment", paymentArgs); return !last.IsError })
	if key, _ := meta(t, last); e.effects(key) != 1 || e.allEffects() != 1 {
		t.Fatalf("payments %d, want 1", e.allEffects())
	}
}
