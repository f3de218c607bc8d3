package gateway_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// The MCP front door, with a real MCP client, the gateway's MCP server and
// the test provider's MCP server as the upstream.

var paymentArgs = map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}

// TestMCPToolsPassThroughAndReplay: tools/list shows the upstream's tools;
// a protected call is sent once, its retry is the stored result; an
// unprotected tool is called every time.
func TestMCPToolsPassThroughAndReplay(t *testing.T) {
	t.Parallel()
	// send_email has no mcp gateway in this policy: it passes through.
	e := newEnv(t, testPolicy)
	cs := e.mcpClient("")
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"create_payment", "send_email"}) {
		t.Fatalf("tools %v", names)
	}
	first := call(t, cs, "create_payment", paymentArgs)
	key, replayed := meta(t, first)
	if first.IsError || replayed || !strings.HasPrefix(key, "mcp:create_payment:"+scopeOf("agent-a")+":f:") {
		t.Fatalf("first: %s %+v", text(first), first.Meta)
	}
	again := call(t, cs, "create_payment", paymentArgs)
	if k, r := meta(t, again); again.IsError || !r || k != key || text(again) != text(first) {
		t.Fatalf("retry: %q %+v, first %q", text(again), again.Meta, text(first))
	}
	if sc, ok := again.StructuredContent.(map[string]any); !ok || sc["id"] != "pay_000001" {
		t.Fatalf("replayed structured content %#v", again.StructuredContent)
	}
	if e.effects(key) != 1 {
		t.Fatalf("charges under %s: %d, want 1", key, e.effects(key))
	}
	// The model rephrases nothing but the amount: same order, other
	// arguments: refused, not sent.
	conflict := call(t, cs, "create_payment", map[string]any{"order_id": "817", "amount_minor": 1, "currency": "RUB"})
	if !conflict.IsError || !strings.Contains(text(conflict), "refused and nothing was sent") {
		t.Fatalf("conflict: %q", text(conflict))
	}
	// A missing key field is said, not guessed.
	if r := call(t, cs, "create_payment", map[string]any{"amount_minor": 1, "currency": "RUB"}); !r.IsError || !strings.Contains(text(r), `"order_id"`) {
		t.Fatalf("missing key field: %q", text(r))
	}
	// The unprotected tool is called each time.
	mail := map[string]any{"to": "c@example.com", "subject": "hi", "reference": "r-1"}
	call(t, cs, "send_email", mail)
	call(t, cs, "send_email", mail)
	if e.effects("r-1") != 2 || e.effects(key) != 1 {
		t.Fatalf("emails %d (unprotected: 2), charges %d", e.effects("r-1"), e.effects(key))
	}
}

// TestMCPUnknownThenSettled: the tool's answer is lost after the charge.
// The model is told the outcome is unknown and must not rephrase; its
// retry is not sent; once reconciled, the retry gets the settled result.
func TestMCPUnknownThenSettled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	cs := e.mcpClient("Bearer " + tokenB)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second})
	first := call(t, cs, "create_payment", paymentArgs)
	key, _ := meta(t, first)
	if !first.IsError || !strings.Contains(text(first), "UNKNOWN") || !strings.Contains(text(first), "Do not call it again with changed or rephrased arguments") {
		t.Fatalf("first: %q", text(first))
	}
	if !strings.HasPrefix(key, "mcp:create_payment:"+scopeOf("agent-b")+":") {
		t.Fatalf("the caller's scope is not in the key: %q", key)
	}
	if r := call(t, cs, "create_payment", paymentArgs); !r.IsError || !strings.Contains(text(r), "UNKNOWN") {
		t.Fatalf("retry while unknown: %q", text(r))
	}
	if e.effects(key) != 1 {
		t.Fatalf("charges %d, want 1", e.effects(key))
	}
	e.reconcile(func() bool { return !call(t, cs, "create_payment", paymentArgs).IsError })
	settled := call(t, cs, "create_payment", paymentArgs)
	if _, replayed := meta(t, settled); settled.IsError || !replayed || !strings.Contains(text(settled), "succeeded") {
		t.Fatalf("settled: %q %+v", text(settled), settled.Meta)
	}
	// The provider's resource, as the reconciler found it, not only a text.
	if sc, _ := settled.StructuredContent.(map[string]any); sc["id"] != "pay_000001" || sc["status"] != "succeeded" {
		t.Fatalf("settled structuredContent %+v", settled.StructuredContent)
	}
	if e.effects(key) != 1 {
		t.Fatalf("charges %d, want 1", e.effects(key))
	}
}

// TestMCPRefusalReplayed: the provider's definite refusal is the tool's
// error, stored and replayed.
func TestMCPRefusalReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	cs := e.mcpClient("")
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Reject, Count: 1})
	first := call(t, cs, "create_payment", paymentArgs)
	again := call(t, cs, "create_payment", paymentArgs)
	if _, r := meta(t, again); !first.IsError || !again.IsError || !r || text(again) != text(first) {
		t.Fatalf("first %q, replay %q (%+v)", text(first), text(again), again.Meta)
	}
	if e.allEffects() != 0 {
		t.Fatalf("effects %d", e.allEffects())
	}
}

// TestMCPConcurrentSameKey: 32 agents call the same payment at once: one
// charge; the others are told it is in progress, or get the result.
func TestMCPConcurrentSameKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 300 * time.Millisecond})
	sessions := []*mcp.ClientSession{e.mcpClient(""), e.mcpClient("")}
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 32)
	gate := make(chan struct{})
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			res, err := sessions[i%2].CallTool(context.Background(), &mcp.CallToolParams{Name: "create_payment", Arguments: paymentArgs})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res
		}()
	}
	close(gate)
	wg.Wait()
	ok, waiting := 0, 0
	for _, r := range results {
		switch {
		case r == nil:
		case !r.IsError:
			ok++
		case strings.Contains(text(r), "already in progress"):
			waiting++
		default:
			t.Fatalf("unexpected: %q", text(r))
		}
	}
	if ok < 1 || ok+waiting != 32 || e.allEffects() != 1 {
		t.Fatalf("ok %d, waiting %d, charges %d", ok, waiting, e.allEffects())
	}
}

// mcpEmailPolicy also protects the send_email tool, an endpoint that does
// not deduplicate: the key goes in as its reference.
var mcpEmailPolicy = strings.Replace(testPolicy, `        key_fields: [to, subject]
        forward_key_field: reference
        external_id: /id
`, `        key_fields: [to, subject]
        forward_key_field: reference
        external_id: /id
      mcp:
        tool: send_email
        key_fields: [to, subject]
        forward_key_argument: reference
        external_id: /id
        tool_errors: failed_final
`, 1)

// TestMCPEveryFaultOneEffect: a model that calls the tool again after
// every unclear answer, against every fault kind of the test provider:
// exactly one email per intent, counted at the provider (none after a
// definite refusal).
func TestMCPEveryFaultOneEffect(t *testing.T) {
	t.Parallel()
	if !strings.Contains(mcpEmailPolicy, "tool: send_email") {
		t.Fatal("the policy edit did not apply")
	}
	for _, kind := range []fakeprovider.FaultKind{fakeprovider.CommitThenTimeout, fakeprovider.TimeoutBeforeCommit, fakeprovider.Reject,
		fakeprovider.ErrorAfterCommit, fakeprovider.DropConnectionAfterCommit, fakeprovider.Slow, fakeprovider.Error} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, mcpEmailPolicy)
			cs := e.mcpClient("")
			f := fakeprovider.Fault{Path: "/emails", Kind: kind, Count: 1}
			switch kind {
			case fakeprovider.CommitThenTimeout, fakeprovider.TimeoutBeforeCommit, fakeprovider.Slow:
				f.Delay = 5 * time.Second
			}
			e.fault(f)
			mail := map[string]any{"to": "c@example.com", "subject": "fault " + string(kind)}
			var key string
			var last *mcp.CallToolResult
			e.reconcile(func() bool {
				last = call(t, cs, "send_email", mail)
				key, _ = meta(t, last)
				return !last.IsError || !strings.Contains(text(last), "UNKNOWN") && !strings.Contains(text(last), "in progress")
			})
			want := 1
			if kind == fakeprovider.Reject {
				want = 0
				if !last.IsError {
					t.Fatalf("a refusal answered %q", text(last))
				}
			}
			if n := e.effects(key); n != want || e.allEffects() != want {
				t.Fatalf("emails under %s: %d (total %d), want %d; last %q", key, n, e.allEffects(), want, text(last))
			}
		})
	}
}
