package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// The gateway knows who calls: keys are scoped by the principal the
// journal authenticates, never by the bytes of a credential.

// TestRotatedTokenIsTheSameIntent: after an unknown outcome the caller
// retries, as told, with the same key, but with its new token (a
// rotation): the journal's answer for that intent, not a second payment.
func TestRotatedTokenIsTheSameIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second})
	first := e.post("/payments", "intent-rot", payment)
	wantProblem(t, first, http.StatusConflict, "outcome-unknown")
	key := first.header.Get("Opjournal-Operation-Key")
	again := e.post("/payments", "intent-rot", payment, "Authorization", "Bearer "+tokenA2)
	wantProblem(t, again, http.StatusConflict, "outcome-unknown")
	if got := again.header.Get("Opjournal-Operation-Key"); got != key {
		t.Fatalf("the rotated token's key %q, the first's %q", got, key)
	}
	e.reconcile(func() bool {
		// Settled: replayed from the journal (what exactly a settled replay
		// answers is the HTTP door's business), never sent again.
		r := e.post("/payments", "intent-rot", payment, "Authorization", "Bearer "+tokenA2)
		return r.status != http.StatusConflict && r.header.Get("Idempotent-Replayed") == "true"
	})
	if n := e.allEffects(); n != 1 {
		t.Fatalf("the provider holds %d payments, want 1", n)
	}
}

// TestRefreshedJWTIsTheSameIntent: an OAuth access token refreshed
// between the call and its retry (another token, the same subject).
func TestRefreshedJWTIsTheSameIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second})
	first := e.post("/payments", "intent-jwt", payment, "Authorization", "Bearer "+e.jwt("agent-7", time.Now().Add(time.Hour)))
	wantProblem(t, first, http.StatusConflict, "outcome-unknown")
	refreshed := "Bearer " + e.jwt("agent-7", time.Now().Add(2*time.Hour))
	again := e.post("/payments", "intent-jwt", payment, "Authorization", refreshed)
	wantProblem(t, again, http.StatusConflict, "outcome-unknown")
	if again.header.Get("Opjournal-Operation-Key") != first.header.Get("Opjournal-Operation-Key") {
		t.Fatal("a refreshed access token made another key")
	}
	if want := "http:create_payment:" + scopeOf("jwt:"+testIssuer+"#agent-7") + ":intent-jwt"; first.header.Get("Opjournal-Operation-Key") != want {
		t.Fatalf("key %q, want %q", first.header.Get("Opjournal-Operation-Key"), want)
	}
	// Another subject of the same issuer is another caller.
	other := e.post("/payments", "intent-jwt", payment, "Authorization", "Bearer "+e.jwt("agent-8", time.Now().Add(time.Hour)))
	if other.status != http.StatusCreated {
		t.Fatalf("another subject: %d %s", other.status, other.body)
	}
	if n := e.allEffects(); n != 2 { // the first (committed, answer lost) and agent-8's
		t.Fatalf("the provider holds %d payments, want 2", n)
	}
}

// TestCallersAreNeverShared: without a credential nothing is read or
// sent; one caller's stored answer is never another's; a credential that
// may not run actions is refused.
func TestCallersAreNeverShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	noAuth := e.post("/payments", "intent-1", payment, "Authorization", "")
	wantProblem(t, noAuth, http.StatusUnauthorized, "unauthenticated")
	if !strings.HasPrefix(noAuth.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no WWW-Authenticate: %v", noAuth.header)
	}
	wantProblem(t, e.post("/payments", "intent-1", payment, "Authorization", "Bearer not-a-token"), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, e.post("/payments", "intent-1", payment, "Authorization", "Basic "+tokenA), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, e.post("/payments", "intent-1", payment, "Authorization", "Bearer "+strings.Repeat("x", 64<<10)), http.StatusUnauthorized, "unauthenticated")
	wantProblem(t, e.post("/payments", "intent-1", payment, "Authorization", "Bearer "+tokenOpOnly), http.StatusForbidden, "forbidden")
	expired := e.jwt("agent-7", time.Now().Add(-time.Minute))
	wantProblem(t, e.post("/payments", "intent-1", payment, "Authorization", "Bearer "+expired), http.StatusUnauthorized, "unauthenticated")
	// Unprotected routes need a caller too: the gateway holds the
	// upstream's credentials.
	req, _ := http.NewRequest(http.MethodGet, e.front.URL+"/payments", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unauthenticated pass-through: %v %v", res, err)
	}
	if n := e.allEffects(); n != 0 {
		t.Fatalf("%d effects from refused callers", n)
	}

	a := e.post("/payments", "intent-1", payment)
	b := e.post("/payments", "intent-1", map[string]any{"amount_minor": 999, "currency": "EUR", "customer": "cus_b"}, "Authorization", "Bearer "+tokenB)
	if a.status != http.StatusCreated || b.status != http.StatusCreated || b.header.Get("Idempotent-Replayed") != "" || b.json(t)["id"] == a.json(t)["id"] {
		t.Fatalf("A %d %s; B %d %s: B must get its own payment", a.status, a.body, b.status, b.body)
	}
	// A credential's hash is in no key.
	for _, tok := range []string{tokenA, "Bearer " + tokenA} {
		sum := sha256.Sum256([]byte(tok))
		if h := hex.EncodeToString(sum[:]); strings.Contains(a.header.Get("Opjournal-Operation-Key"), h[:16]) {
			t.Fatal("the key holds the credential's hash")
		}
	}
}

// TestRateLimitPerCaller: one caller over its rate does not starve
// another.
func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	g := e.newGateway(e.lookupEnv, func(c *gateway.Config) { c.RateLimit, c.RateBurst = 0.01, 1 })
	front := httptest.NewServer(g)
	t.Cleanup(front.Close)
	if r := postTo(t, front.URL, "/payments", "r1", payment); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	over := postTo(t, front.URL, "/payments", "r2", payment)
	wantProblem(t, over, http.StatusTooManyRequests, "rate-limited")
	if over.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	if r := postTo(t, front.URL, "/payments", "r2", payment, "Authorization", "Bearer "+tokenB); r.status != http.StatusCreated {
		t.Fatalf("another caller: %d %s", r.status, r.body)
	}
	if n := e.allEffects(); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}

// TestMCPIdentity: the MCP door needs a bearer credential (the SDK's
// middleware, with the protected-resource metadata MCP clients read), two
// agents naming the same order are two intents, and one agent's refreshed
// token continues its session and its intents.
func TestMCPIdentity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	ctx := context.Background()
	// No credential: refused at initialize, with the metadata's address.
	up := fakeprovider.NewMCPServer(e.provURL, nil)
	ups := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(ups.Close)
	upc, err := mcp.NewClient(gateway.Implementation, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ups.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upc.Close() })
	srv, err := e.gw.MCPServer(ctx, upc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	gws := &httptest.Server{Listener: ln, Config: &http.Server{Handler: e.gw.MCPHandler(srv, gateway.MCPHTTPOptions{Resource: base + "/mcp", AuthorizationServers: []string{testIssuer}})}}
	gws.Start()
	t.Cleanup(gws.Close)
	res, err := http.Post(gws.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(res.Header.Get("WWW-Authenticate"), "/.well-known/oauth-protected-resource/mcp") {
		t.Fatalf("no credential: %d %v", res.StatusCode, res.Header)
	}
	mres, err := http.Get(gws.URL + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]any
	_ = json.NewDecoder(mres.Body).Decode(&md)
	mres.Body.Close()
	if md["resource"] != gws.URL+"/mcp" || md["authorization_servers"].([]any)[0] != testIssuer {
		t.Fatalf("protected-resource metadata %v", md)
	}

	// One agent whose access token is refreshed between two calls.
	var current = "Bearer " + e.jwt("agent-7", time.Now().Add(time.Hour))
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", current)
		return http.DefaultTransport.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent-7", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: gws.URL + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second})
	first := call(t, cs, "create_payment", paymentArgs)
	key, _ := meta(t, first)
	if !first.IsError || !strings.Contains(text(first), "UNKNOWN") {
		t.Fatalf("first: %q", text(first))
	}
	current = "Bearer " + e.jwt("agent-7", time.Now().Add(2*time.Hour))
	again := call(t, cs, "create_payment", paymentArgs)
	if k, _ := meta(t, again); k != key || !again.IsError {
		t.Fatalf("after the refresh: key %q (first %q): %q", k, key, text(again))
	}
	// Another agent naming the same order is another intent.
	other := e.mcpClient("Bearer " + tokenB)
	r := call(t, other, "create_payment", paymentArgs)
	if k, _ := meta(t, r); r.IsError || k == key {
		t.Fatalf("agent B: key %q error %v %q", k, r.IsError, text(r))
	}
	if n := e.allEffects(); n != 2 {
		t.Fatalf("%d effects, want 2 (agent-7's lost answer, agent B's)", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAnonymousIsOneSharedScope: --anonymous is one key space (local
// development), documented as such.
func TestAnonymousIsOneSharedScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	g := e.newGateway(e.lookupEnv, func(c *gateway.Config) { c.Identity, c.OwnToken = gateway.IdentityAnonymous, tokenA })
	front := httptest.NewServer(g)
	t.Cleanup(front.Close)
	r := postTo(t, front.URL, "/payments", "anon-1", payment, "Authorization", "")
	if r.status != http.StatusCreated || r.header.Get("Opjournal-Operation-Key") != "http:create_payment:anon:anon-1" {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	io.Discard.Write(nil)
}
