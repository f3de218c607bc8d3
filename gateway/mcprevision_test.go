package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// The MCP door serves the sessionful revision (2025-11-25) and the
// stateless one (2026-07-28) at one URL, and nothing of the journal
// depends on a session.

// mcpSession connects the Go SDK's client to the door as the token's
// caller, speaking the revision version ("" for the SDK's newest).
func (e *env) mcpSession(url, token, version string) *mcp.ClientSession {
	e.t.Helper()
	hc := &http.Client{Transport: headerTransport{"Authorization", "Bearer " + token}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		e.t.Fatalf("connect (%q): %v", version, err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// outcome reads the outcome the door names in a result's _meta.
func outcome(res *mcp.CallToolResult) string {
	m, _ := res.Meta[gateway.MetaKey].(map[string]any)
	o, _ := m["outcome"].(string)
	return o
}

// TestMCPBothRevisionsOneKey: two sessions of the 2025-11-25 revision and
// a stateless client of 2026-07-28 make the same tool call. Each
// negotiated its own revision (the old ones hold distinct session ids,
// the stateless one none); the call has one key, the provider one
// payment, and the two later calls are replays. Both revisions read the
// journal extension from the door's capabilities.
func TestMCPBothRevisionsOneKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	url := e.mcpDoor()
	old1 := e.mcpSession(url, tokenA, "2025-11-25")
	old2 := e.mcpSession(url, tokenA, "2025-11-25")
	modern := e.mcpSession(url, tokenA, "")
	for name, cs := range map[string]*mcp.ClientSession{"old1": old1, "old2": old2, "modern": modern} {
		caps := cs.InitializeResult().Capabilities
		ext, _ := caps.Extensions[gateway.JournalExtension].(map[string]any)
		tools, _ := ext["tools"].(map[string]any)
		cp, _ := tools["create_payment"].(map[string]any)
		if cp == nil || fmt.Sprint(cp["keyFields"]) != "[order_id]" || cp["filledArgument"] != "idempotency_key" || caps.Experimental[gateway.JournalExtension] == nil {
			t.Fatalf("%s: the journal extension in the capabilities: %+v", name, caps)
		}
	}
	if v := old1.InitializeResult().ProtocolVersion; v != "2025-11-25" || old1.ID() == "" || old1.ID() == old2.ID() {
		t.Fatalf("old sessions: version %q, ids %q %q", v, old1.ID(), old2.ID())
	}
	if v := modern.InitializeResult().ProtocolVersion; v != gateway.StatelessProtocolVersion || modern.ID() != "" {
		t.Fatalf("the stateless client: version %q, session id %q", v, modern.ID())
	}
	first := call(t, old1, "create_payment", paymentArgs)
	key, replayed := meta(t, first)
	if first.IsError || replayed || outcome(first) != gateway.OutcomeSucceeded {
		t.Fatalf("first: %q %+v", text(first), first.Meta)
	}
	for name, cs := range map[string]*mcp.ClientSession{"another session": old2, "no session": modern} {
		res := call(t, cs, "create_payment", paymentArgs)
		if k, r := meta(t, res); res.IsError || !r || k != key || text(res) != text(first) {
			t.Fatalf("%s: key %q replayed %v %q; first key %q", name, k, r, text(res), key)
		}
	}
	if e.effects(key) != 1 || e.allEffects() != 1 {
		t.Fatalf("payments under %s: %d (all %d), want 1", key, e.effects(key), e.allEffects())
	}
	// The pass-through tool works without a session too: the client's
	// reserved _meta (its revision) is not forwarded to the upstream's session.
	call(t, modern, "send_email", map[string]any{"to": "c@example.com", "subject": "hi", "reference": "r-9"})
	if e.effects("r-9") != 1 {
		t.Fatalf("emails %d, want 1", e.effects("r-9"))
	}
	// The model is not told about the argument the door fills.
	for tool, err := range modern.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "create_payment" && strings.Contains(tool.Description+fmt.Sprint(tool.InputSchema), "idempotency_key") {
			t.Fatalf("create_payment still names idempotency_key: %q %v", tool.Description, tool.InputSchema)
		}
	}
}

// rpc is one raw JSON-RPC answer of the door.
type rpc struct {
	status int
	header http.Header
	raw    []byte
	msg    struct {
		Result *mcp.CallToolResult `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
}

// statelessCall posts one stateless (2026-07-28) tools/call, as the
// revision lays it out: the version, client info and capabilities in
// _meta, the version and method in headers, no session. edit changes the
// request before it is sent.
func statelessCall(t *testing.T, ctx context.Context, url, token string, args map[string]any, edit func(body map[string]any, h http.Header)) (rpc, error) {
	t.Helper()
	params := map[string]any{"name": "create_payment", "arguments": args, "_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}
	body := map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", "tools/call")
	h.Set("Mcp-Name", "create_payment")
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if edit != nil {
		edit(body, h)
	}
	var b []byte
	if raw, ok := body["raw"].([]byte); ok {
		b = raw
	} else {
		b, _ = json.Marshal(body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header = h
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return rpc{}, err
	}
	defer res.Body.Close()
	r := rpc{status: res.StatusCode, header: res.Header}
	r.raw, err = io.ReadAll(res.Body)
	if err != nil {
		return r, err
	}
	data := r.raw
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(r.raw))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(d)
			}
		}
	}
	_ = json.Unmarshal(data, &r.msg)
	return r, nil
}

// TestMCPStatelessDoorRefusesBadRequests attacks the stateless door: no
// token, a wrong token, a huge body, malformed _meta, a header that
// disagrees with _meta, unknown revisions. Each is refused with a 4xx or
// a JSON-RPC error and nothing reaches the provider; then the same raw
// request done right is answered, under the caller's key.
func TestMCPStatelessDoorRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	url := e.mcpDoor()
	ctx := context.Background()
	args := map[string]any{"order_id": "s-1", "amount_minor": 100, "currency": "RUB"}
	cases := []struct {
		name   string
		token  string
		edit   func(map[string]any, http.Header)
		status int // 0: any 4xx
		code   int // the JSON-RPC error code docs/gateway.md names (0: none named)
	}{
		{"no token", "", nil, http.StatusUnauthorized, 0},
		{"wrong token", "not-a-token", nil, http.StatusUnauthorized, 0},
		{"huge body", tokenA, func(b map[string]any, _ http.Header) {
			b["raw"] = append([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_payment","arguments":{"order_id":"s-1","pad":"`), bytes.Repeat([]byte("x"), 5<<20)...)
		}, http.StatusRequestEntityTooLarge, 0},
		{"_meta not an object", tokenA, func(b map[string]any, _ http.Header) { b["params"].(map[string]any)["_meta"] = "2026-07-28" }, http.StatusBadRequest, -32602},
		{"_meta version a number", tokenA, func(b map[string]any, _ http.Header) {
			b["params"].(map[string]any)["_meta"].(map[string]any)["io.modelcontextprotocol/protocolVersion"] = 20260728
		}, http.StatusBadRequest, -32602},
		{"_meta without a version", tokenA, func(b map[string]any, _ http.Header) {
			delete(b["params"].(map[string]any)["_meta"].(map[string]any), "io.modelcontextprotocol/protocolVersion")
		}, http.StatusBadRequest, -32602},
		{"header and _meta disagree", tokenA, func(b map[string]any, _ http.Header) {
			b["params"].(map[string]any)["_meta"].(map[string]any)["io.modelcontextprotocol/protocolVersion"] = "2025-11-25"
		}, http.StatusBadRequest, -32020},
		{"an unknown later revision", tokenA, func(b map[string]any, h http.Header) {
			h.Set("MCP-Protocol-Version", "2099-01-01")
			b["params"].(map[string]any)["_meta"].(map[string]any)["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
		}, http.StatusBadRequest, -32022},
		{"a version that is no date", tokenA, func(b map[string]any, h http.Header) { h.Set("MCP-Protocol-Version", "latest") }, http.StatusBadRequest, -32022},
		{"an old revision without initialize", tokenA, func(b map[string]any, h http.Header) {
			h.Set("MCP-Protocol-Version", "2025-11-25")
			delete(b["params"].(map[string]any), "_meta")
		}, 0, 0},
		{"a session that does not exist", tokenA, func(_ map[string]any, h http.Header) { h.Set("Mcp-Session-Id", "made-up") }, http.StatusNotFound, 0},
	}
	for _, c := range cases {
		r, err := statelessCall(t, ctx, url, c.token, args, c.edit)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		refused := r.status >= 400 && r.status < 500 || r.status == http.StatusOK && r.msg.Error != nil
		if !refused || c.status != 0 && r.status != c.status || r.msg.Result != nil {
			t.Fatalf("%s: %d %s, want a refusal (%d)", c.name, r.status, shortBody(r.raw), c.status)
		}
		if c.code != 0 && (r.msg.Error == nil || r.msg.Error.Code != c.code) {
			t.Fatalf("%s: %s, want the JSON-RPC error %d", c.name, shortBody(r.raw), c.code)
		}
		if c.status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s: no WWW-Authenticate: %v", c.name, r.header)
		}
		if strings.Contains(string(r.raw), tokenA) {
			t.Fatalf("%s: the answer holds the caller's token", c.name)
		}
		t.Logf("%s: %d %s", c.name, r.status, shortBody(r.raw))
	}
	if n := e.allEffects(); n != 0 {
		t.Fatalf("the provider holds %d effects after refused requests, want 0", n)
	}
	r, err := statelessCall(t, ctx, url, tokenA, args, nil)
	if err != nil || r.status != http.StatusOK || r.msg.Result == nil || r.msg.Result.IsError {
		t.Fatalf("the request done right: %d %s (%v)", r.status, shortBody(r.raw), err)
	}
	if key, _ := meta(t, r.msg.Result); !strings.HasPrefix(key, "mcp:create_payment:"+scopeOf("agent-a")+":f:") || e.effects(key) != 1 || r.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("key %q, payments %d, session %q", key, e.effects(key), r.header.Get("Mcp-Session-Id"))
	}
}

func shortBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// TestMCPStatelessConcurrentDuplicatesAndLostAnswer: eight stateless
// requests of one call at once while the provider is slow make one
// payment (the others are told it is in progress); then a client whose
// HTTP answer is lost (it gives up before the provider answers) retries
// on its own with the same arguments and gets the one payment, replayed.
func TestMCPStatelessConcurrentDuplicatesAndLostAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	url := e.mcpDoor()
	ctx := context.Background()
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 2 * time.Second})
	args := map[string]any{"order_id": "c-1", "amount_minor": 100, "currency": "RUB"}
	var wg sync.WaitGroup
	results := make([]rpc, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := statelessCall(t, ctx, url, tokenA, args, nil)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	counts := map[string]int{}
	var key string
	for _, r := range results {
		if r.msg.Result == nil {
			t.Fatalf("%d %s", r.status, shortBody(r.raw))
		}
		// 2026-07-28 requires resultType on every result, the door's own
		// answers (in progress) as much as the tool's.
		if !bytes.Contains(r.raw, []byte(`"resultType":"complete"`)) {
			t.Fatalf("no resultType: %s", shortBody(r.raw))
		}
		counts[outcome(r.msg.Result)]++
		key, _ = meta(t, r.msg.Result)
	}
	if counts[gateway.OutcomeSucceeded] < 1 || counts[gateway.OutcomeSucceeded]+counts[gateway.OutcomeInProgress] != 8 || e.effects(key) != 1 || e.allEffects() != 1 {
		t.Fatalf("outcomes %v, payments %d (all %d), want one payment", counts, e.effects(key), e.allEffects())
	}

	// The lost answer: the client gives up after 300 ms, the provider
	// answers after 2 s; the gateway finishes the call detached.
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 2 * time.Second})
	lostArgs := map[string]any{"order_id": "c-2", "amount_minor": 100, "currency": "RUB"}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := statelessCall(t, short, url, tokenA, lostArgs, nil)
	cancel()
	if err == nil {
		t.Fatal("the first request was answered; want its answer lost")
	}
	var last rpc
	await.Within(t, 20*time.Second, "the detached call to finish", func() bool {
		var err error
		last, err = statelessCall(t, ctx, url, tokenA, lostArgs, nil)
		if err != nil || last.msg.Result == nil {
			t.Fatalf("retry: %v %s", err, shortBody(last.raw))
		}
		return outcome(last.msg.Result) != gateway.OutcomeInProgress
	})
	k, replayed := meta(t, last.msg.Result)
	if last.msg.Result.IsError || !replayed || outcome(last.msg.Result) != gateway.OutcomeSucceeded || e.effects(k) != 1 || e.allEffects() != 2 {
		t.Fatalf("after the lost answer: %s; payments %d (all %d)", shortBody(last.raw), e.effects(k), e.allEffects())
	}
}
