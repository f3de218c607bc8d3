package gateway_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/reconciler"
	"github.com/opjournal/opjournal/server/auth"
)

// The gateway against real parts: a real journal (testserver), the test
// provider over HTTP with its faults, its MCP server as the upstream, a
// real MCP client, and the reconciler.

const testPolicy = `actions:
  create_payment:
    lease_seconds: 2
    max_attempt_seconds: 3
    integer_fields: [amount_minor]
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      visibility_lag: 0s
      in_flight_window: 1s
      definitive_absence: true
      verifier:
        http:
          url: "${TEST_PROVIDER:-http://127.0.0.1:1}/payments?idempotency_key={operation_key}"
          list: /data
          found: /id
          completed: /status
          completed_values: [succeeded]
          external_id: /id
    gateway:
      http:
        route: POST /payments
        upstream: "${TEST_PROVIDER:-http://127.0.0.1:1}"
        forward_key_header: Idempotency-Key
        external_id: /id
      mcp:
        tool: create_payment
        key_fields: [order_id]
        forward_key_argument: idempotency_key
        external_id: /id
        # The test provider's MCP server answers isError only for a 4xx.
        tool_errors: failed_final
  send_email:
    lease_seconds: 2
    max_attempt_seconds: 3
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      visibility_lag: 0s
      in_flight_window: 1s
      definitive_absence: true
      verifier:
        http:
          url: "${TEST_PROVIDER:-http://127.0.0.1:1}/emails?reference={operation_key}"
          list: /data
          found: /id
          completed: /status
          completed_values: [sent]
          external_id: /id
    gateway:
      http:
        route: POST /emails
        upstream: "${TEST_PROVIDER:-http://127.0.0.1:1}"
        key_fields: [to, subject]
        forward_key_field: reference
        external_id: /id
`

// The callers: agent A holds two tokens (a rotation: one principal), agent
// B one, in the same tenant; the reconciler and an admin (the fixture's
// own reads) have theirs.
const (
	tokenA      = "agent-a-token-2026-11-0123456789"
	tokenA2     = "agent-a-token-2026-12-0123456789"
	tokenB      = "agent-b-token-0123456789abcdef"
	tokenRec    = "reconciler-token-0123456789abc"
	tokenAdmin  = "admin-token-0123456789abcdefgh"
	tokenOpOnly = "operator-token-0123456789abcde"
)

// testIssuer is the OAuth issuer the fixture's journal trusts for agents
// of its tenant; jwtFor mints its access tokens.
const testIssuer = "https://auth.example.test/"

func testAuth(t testing.TB) (*auth.Authenticator, func(sub string, exp time.Time) string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(x []byte) string { return base64.RawURLEncoding.EncodeToString(x) }
	pub, err := key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k1",
		"x": b64(pub[1:33]), "y": b64(pub[33:])}}})
	jwksPath := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwksPath, set, 0o600); err != nil {
		t.Fatal(err)
	}
	mint := func(sub string, exp time.Time) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": testIssuer, "aud": "opjournal-gateway", "sub": sub,
			"iat": time.Now().Unix(), "exp": exp.Unix(), "jti": fmt.Sprint(time.Now().UnixNano())})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	src := "issuers:\n  - issuer: " + testIssuer + "\n    audience: opjournal-gateway\n    jwks_file: " + jwksPath + "\n    tenant: acme\n    roles: [agent]\n" + auth.FileHeader +
		auth.Entry{Name: "agent-a-2026-11", Principal: "agent-a", SHA256: auth.Digest(tokenA), Tenant: "acme", Roles: []auth.Role{auth.RoleAgent}}.YAML() +
		auth.Entry{Name: "agent-a-2026-12", Principal: "agent-a", SHA256: auth.Digest(tokenA2), Tenant: "acme", Roles: []auth.Role{auth.RoleAgent}}.YAML() +
		auth.NewEntry("agent-b", tokenB, "acme", []auth.Role{auth.RoleAgent}).YAML() +
		auth.NewEntry("rec", tokenRec, "acme", []auth.Role{auth.RoleReconciler}).YAML() +
		auth.NewEntry("admin", tokenAdmin, "acme", []auth.Role{auth.RoleAdmin}).YAML() +
		auth.NewEntry("alice", tokenOpOnly, "acme", []auth.Role{auth.RoleOperator}).YAML()
	a, err := auth.Parse([]byte(src), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return a, mint
}

// scopeOf is the key scope of a principal of the fixture's tenant.
func scopeOf(principal string) string { return gateway.ScopeOfPrincipal("acme", principal) }

// env is the fixture's environment.
type env struct {
	t        *testing.T
	journal  *testserver.Journal
	provider *fakeprovider.Provider
	provURL  string
	pol      *policy.Policy
	gw       *gateway.Gateway
	front    *httptest.Server // the gateway's HTTP front door
	rec      *reconciler.Reconciler
	// jwt mints an access token of testIssuer for a subject.
	jwt func(sub string, exp time.Time) string
}

func newEnv(t *testing.T, doc string) *env {
	t.Helper()
	return newEnvWith(t, doc)
}

// newEnvWith is newEnv with options of the journal (its clock, say).
func newEnvWith(t *testing.T, doc string, opts ...testserver.Option) *env {
	t.Helper()
	p := fakeprovider.New(fakeprovider.Options{})
	ps := httptest.NewServer(p)
	t.Cleanup(func() { p.Close(); ps.Close() })
	lookup := func(name string) (string, bool) {
		if name == "TEST_PROVIDER" {
			return ps.URL, true
		}
		return "", false
	}
	pol, err := policy.Parse([]byte(doc), "gateway-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, mint := testAuth(t)
	j := testserver.Start(t, pol, append([]testserver.Option{testserver.WithAuth(a, tokenAdmin)}, opts...)...)
	e := &env{t: t, journal: j, provider: p, provURL: ps.URL, pol: pol, jwt: mint}
	e.gw = e.newGateway(lookup)
	e.front = httptest.NewServer(e.gw)
	t.Cleanup(e.front.Close)
	recClient := pb.NewJournalServiceClient(client.BearerConn(j.Conn, tokenRec))
	e.rec, err = reconciler.New(reconciler.Config{Journal: recClient, Policy: pol, ID: "rec", LookupEnv: lookup,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(), Rand: mrand.New(mrand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newGateway makes a gateway on the same journal (another process would
// be no different: all it shares is the journal).
func (e *env) newGateway(lookup func(string) (string, bool), edits ...func(*gateway.Config)) *gateway.Gateway {
	e.t.Helper()
	cfg := gateway.Config{
		Journal: client.New(e.journal.Conn, client.WithWorkerID("gateway-test")), Policy: e.pol, LookupEnv: lookup,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

// lookupEnv is the fixture's environment, for a second gateway.
func (e *env) lookupEnv(name string) (string, bool) {
	if name == "TEST_PROVIDER" {
		return e.provURL, true
	}
	return "", false
}

// response is one answer of the front door.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("%d %s: not JSON: %v", r.status, r.body, err)
	}
	return m
}

// post sends a JSON body through the front door.
func (e *env) post(path, key string, body any, headers ...string) response {
	e.t.Helper()
	return postTo(e.t, e.front.URL, path, key, body, headers...)
}

func postTo(t *testing.T, base, path, key string, body any, headers ...string) response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA) // agent A, unless headers say otherwise
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: rb}
}

// wantProblem fails unless r is the problem typed name with the status.
func wantProblem(t *testing.T, r response, status int, name string) map[string]any {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s, want %d problem %s", r.status, r.header.Get("Content-Type"), r.body, status, name)
	}
	p := r.json(t)
	if p["type"] != "urn:opjournal:problem:"+name || p["status"] != float64(status) || p["detail"] == "" {
		t.Fatalf("problem %s, want type %s", r.body, name)
	}
	return p
}

// effects is how many effects the provider holds under the effect key.
func (e *env) effects(effectKey string) int { return e.provider.Count(effectKey) }

// allEffects counts every effect the provider stored.
func (e *env) allEffects() int {
	c := e.provider.Effects()
	return c.Total
}

// fault adds a provider fault.
func (e *env) fault(f fakeprovider.Fault) {
	e.t.Helper()
	if _, err := e.provider.AddFault(f); err != nil {
		e.t.Fatal(err)
	}
}

// reconcile runs reconciliation passes until cond holds (the clock is
// real: releases wait the policy's 1 s in-flight window).
func (e *env) reconcile(cond func() bool) {
	e.t.Helper()
	await.Within(e.t, 20*time.Second, "reconciliation to settle the operation", func() bool {
		if _, err := e.rec.RunOnce(context.Background()); err != nil {
			e.t.Fatal(err)
		}
		return cond()
	})
}

// --- MCP ---

// mcpClient starts the provider's MCP server as the upstream, the
// gateway's MCP server in front of it, and a client session to the
// gateway with the Authorization value (agent A's token when "").
func (e *env) mcpClient(authorization string) *mcp.ClientSession {
	e.t.Helper()
	return e.mcpClientOf(authorization, fakeprovider.NewMCPServer(e.provURL, nil))
}

// mcpDoor serves the gateway's MCP door in front of the test provider's
// MCP server and returns its URL (…/mcp).
func (e *env) mcpDoor() string {
	e.t.Helper()
	return e.mcpDoorOf(fakeprovider.NewMCPServer(e.provURL, nil))
}

// mcpDoorOf is mcpDoor with up as the upstream MCP server.
func (e *env) mcpDoorOf(up *mcp.Server) string {
	e.t.Helper()
	ctx := context.Background()
	ups := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	e.t.Cleanup(ups.Close)
	upc, err := mcp.NewClient(gateway.Implementation, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ups.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { upc.Close() })
	srv, err := e.gw.MCPServer(ctx, upc)
	if err != nil {
		e.t.Fatal(err)
	}
	var door http.Handler // set once the address is known: it is the door's resource identifier
	gws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { door.ServeHTTP(w, r) }))
	e.t.Cleanup(gws.Close)
	door = e.gw.MCPHandler(srv, gateway.MCPHTTPOptions{Resource: gws.URL + "/mcp"})
	return gws.URL + "/mcp"
}

// mcpClientOf is mcpClient with up as the upstream MCP server.
func (e *env) mcpClientOf(authorization string, up *mcp.Server) *mcp.ClientSession {
	e.t.Helper()
	ctx := context.Background()
	door := e.mcpDoorOf(up)
	if authorization == "" {
		authorization = "Bearer " + tokenA
	}
	hc := &http.Client{Transport: headerTransport{"Authorization", authorization}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: door, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

func meta(t *testing.T, res *mcp.CallToolResult) (key string, replayed bool) {
	t.Helper()
	m, ok := res.Meta[gateway.MetaKey].(map[string]any)
	if !ok {
		t.Fatalf("no %s in the result's _meta: %+v", gateway.MetaKey, res.Meta)
	}
	k, _ := m["operation_key"].(string)
	r, _ := m["replayed"].(bool)
	return k, r
}

func newServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }
