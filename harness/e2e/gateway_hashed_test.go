package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/harness/demo"
	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// What the provider receives is what was hashed, with the real binaries:
// `opjournal serve`, `opjournal-gateway`, and a stand-in provider written
// the ordinary way in Go (encoding/json into a struct, as a provider's
// handler would), which records every request it receives.

// standIn is the stand-in provider.
type standIn struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []standInRequest
}

// standInRequest is one request the stand-in received, and what its
// handler read from it.
type standInRequest struct {
	method, uri string
	header      http.Header
	body        []byte
	// What encoding/json makes of the body: it matches member names to
	// fields case-insensitively and keeps the last.
	payment struct {
		OrderID     string `json:"order_id"`
		AmountMinor int64  `json:"amount_minor"`
		Destination string `json:"destination"`
	}
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	s := &standIn{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := standInRequest{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: b}
		_ = json.Unmarshal(b, &req.payment)
		s.mu.Lock()
		s.got = append(s.got, req)
		n := len(s.got)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"balance":1}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "pay_" + string(rune('0'+n%10)), "amount_minor": req.payment.AmountMinor})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) requests() []standInRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]standInRequest(nil), s.got...)
}

// startGatewayFor runs an opjournal-gateway of the stack whose routes'
// upstream (PROVIDER_URL) is up, with the policy file given (the stack's
// when "") and more flags.
func (s *stack) startGatewayFor(t *testing.T, name, up, policyFile string, args ...string) string {
	t.Helper()
	pol := s.policyArgs
	if policyFile != "" {
		pol = []string{"--policy", policyFile}
	}
	g := s.start(procs.Spec{Name: name, Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env:  []string{"PROVIDER_URL=" + up},
		Args: append(append([]string{"--journal-addr", s.grpcAddr, "--http-addr", "127.0.0.1:0", "--worker-id", name}, pol...), args...)})
	return "http://" + g.Field("http_addr")
}

// postPayment posts body to the gateway's /payments as token with the
// key and the headers given in pairs.
func postPayment(t *testing.T, base, token, key, body string, headers ...string) gatewayAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return doGateway(t, req)
}

func doGateway(t *testing.T, req *http.Request) gatewayAnswer {
	t.Helper()
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return gatewayAnswer{status: res.StatusCode, header: res.Header, body: b}
}

// wantRefused fails unless a is the problem typed name with the status,
// saying nothing was sent.
func wantRefused(t *testing.T, a gatewayAnswer, status int, name string) {
	t.Helper()
	p := a.problem(t)
	if a.status != status || p["type"] != "urn:opjournal:problem:"+name || !strings.Contains(p["detail"].(string), "nothing was sent") {
		t.Fatalf("%d %s, want %d %s saying nothing was sent", a.status, a.body, status, name)
	}
}

// TestGatewayForwardsOnlyHashedHeaders: a payment held for approval with
// Stripe-Account acct_1 (a header the route forwards, so part of the
// request hash) is approved; its retry with another Stripe-Account is
// another request (422, nothing sent), never the approved one sent to
// another account; the approved retry is sent once with acct_1 and
// without the X-HTTP-Method-Override the client added, which the route
// does not forward; a later retry with another Stripe-Account is 422,
// not a replay.
func TestGatewayForwardsOnlyHashedHeaders(t *testing.T) {
	t.Parallel()
	pol := gatewayApprovalPolicy(t)
	withHeaders := strings.Replace(pol, "        route: POST /payments\n", "        route: POST /payments\n        forward_headers: [Stripe-Account]\n", 1)
	if withHeaders == pol {
		t.Fatal("the policy edit did not apply")
	}
	s := startStack(t, stackOpts{policy: withHeaders, callers: true})
	up := newStandIn(t)
	gw := s.startGatewayFor(t, "gateway-headers", up.srv.URL, "")
	agent := s.callers.AgentA
	key := "http:create_payment:" + s.callers.ScopeA() + ":hdr-1"
	body := `{"order_id":"hdr-1","amount_minor":250000,"currency":"RUB"}`

	wantApprovalPending(t, postPayment(t, gw, agent, "hdr-1", body, "Stripe-Account", "acct_1"), key, 250000)
	if r := s.decide(t, "approve", s.callers.Operator, key, s.awaiting(t, key)); r.Status != http.StatusOK {
		t.Fatalf("the operator's approval: %d %s", r.Status, r.Body)
	}
	// The approved request with another account and a method override.
	a := postPayment(t, gw, agent, "hdr-1", body, "Stripe-Account", "acct_attacker", "X-HTTP-Method-Override", "PUT")
	wantRefused(t, a, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the approved payment reached the provider with another Stripe-Account: %v", up.requests())
	}
	// The approved request itself, with an override it does not forward.
	a = postPayment(t, gw, agent, "hdr-1", body, "Stripe-Account", "acct_1", "X-HTTP-Method-Override", "PUT", "X-Other", "x")
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the approved request: %d %v %s", a.status, a.header, a.body)
	}
	got := up.requests()
	if len(got) != 1 || got[0].method != http.MethodPost || got[0].uri != "/payments" || got[0].header.Get("Stripe-Account") != "acct_1" ||
		got[0].header.Get("X-HTTP-Method-Override") != "" || got[0].header.Get("X-Other") != "" || got[0].payment.AmountMinor != 250000 {
		t.Fatalf("the provider received %+v", got)
	}
	// Later retries: another account is another request; the same one is
	// replayed.
	wantRefused(t, postPayment(t, gw, agent, "hdr-1", body, "Stripe-Account", "acct_attacker"), http.StatusUnprocessableEntity, "idempotency-key-reused")
	wantRefused(t, postPayment(t, gw, agent, "hdr-1", body), http.StatusUnprocessableEntity, "idempotency-key-reused")
	if a := postPayment(t, gw, agent, "hdr-1", body, "stripe-account", "acct_1"); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same request again: %d %v %s", a.status, a.header, a.body)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d requests reached the provider, want 1", n)
	}
}

// TestGatewayRefusesCaseFoldedMembers: a body whose member names are
// equal under case folding (which the provider's encoding/json reads as
// one member, the last) is refused before anything is sent: the
// journal's hash and the approval's when would read amount_minor 100,
// the provider 99,999,999. The journal refuses such a payload too, from
// any client.
func TestGatewayRefusesCaseFoldedMembers(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: gatewayApprovalPolicy(t), callers: true})
	up := newStandIn(t)
	gw := s.startGatewayFor(t, "gateway-fold", up.srv.URL, "")
	for i, body := range []string{
		`{"order_id":"cf-1","amount_minor":100,"currency":"RUB","Amount_Minor":99999999}`,
		`{"order_id":"cf-2","amount_minor":100,"currency":"RUB","AMOUNT_MINOR":99999999}`,
		`{"order_id":"cf-3","amount_minor":100,"currency":"RUB","meta":{"k":"a","\u212a":"b"}}`, // the Kelvin sign folds to K
		`{"order_id":"cf-4","amount_minor":100,"currency":"RUB","Amount_Minor":null}`,
	} {
		wantRefused(t, postPayment(t, gw, s.callers.AgentA, "cf-"+string(rune('1'+i)), body), http.StatusBadRequest, "duplicate-member")
	}
	if got := up.requests(); len(got) != 0 {
		t.Fatalf("the provider received %+v", got)
	}
	// The journal itself, from an SDK: InvalidArgument, nothing run.
	ran := false
	_, err := s.sdk.Execute(ctxFor(t), client.Op{Key: "cf-sdk", Action: "create_payment",
		Payload: map[string]any{"order_id": "cf-sdk", "amount_minor": 100, "Amount_Minor": 99999999, "currency": "RUB"}},
		func(context.Context, client.Attempt) (client.Effect, error) { ran = true; return client.Effect{}, nil })
	if client.CodeOf(err) != opjournal.CodeInvalidArgument || ran {
		t.Fatalf("the journal took a payload with amount_minor and Amount_Minor: %v (ran %v)", err, ran)
	}
	// One spelling of each member is a payment as usual.
	if a := postPayment(t, gw, s.callers.AgentA, "cf-ok", `{"order_id":"cf-ok","amount_minor":100,"currency":"RUB"}`); a.status != http.StatusCreated {
		t.Fatalf("a plain payment: %d %s", a.status, a.body)
	}
}

// TestGatewayRefusesPayloadFieldsAtLoad: payload_fields would make the
// hash (and an approval) cover some members while the gateway sends the
// whole body, so a policy with it is refused at load, with its line, by
// the gateway and the journal alike.
func TestGatewayRefusesPayloadFieldsAtLoad(t *testing.T) {
	t.Parallel()
	pol := strings.Replace(testPolicy(), "        route: POST /payments\n", "        route: POST /payments\n        payload_fields: [order_id, amount_minor, currency]\n", 1)
	if pol == testPolicy() {
		t.Fatal("the policy edit did not apply")
	}
	line := 1 + strings.Count(pol[:strings.Index(pol, "payload_fields:")], "\n")
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "policy.yaml:" + itoa(line) + ": actions.create_payment.gateway.http.payload_fields: is not accepted"
	for _, args := range [][]string{
		{filepath.Join(binDir, "opjournal-gateway"), "--journal-addr", "127.0.0.1:1", "--http-addr", "127.0.0.1:0", "--anonymous", "--policy", path},
		{binary, "serve", "--database-url", sqliteURL(t), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--policy", path},
	} {
		// A process that took the policy serves until it is killed.
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = childEnv(nil)
		out, err := cmd.CombinedOutput()
		served := ctx.Err() != nil
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || served || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v\n%s\nwant a refusal with %q", filepath.Base(args[0]), err, out, want)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestGatewayRefusesBytesItCannotHash: invalid UTF-8 (which a JSON
// decoder reads as U+FFFD, so two addresses would be one key and the
// second never sent), data after the JSON value, and invalid UTF-8 in a
// form or a query are refused; nothing reaches the provider.
func TestGatewayRefusesBytesItCannotHash(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newStandIn(t)
	gw := s.startGatewayFor(t, "gateway-bytes", up.srv.URL, "")
	post := func(path, ctype, body string) gatewayAnswer {
		req, _ := http.NewRequest(http.MethodPost, gw+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+s.callers.AgentA)
		return doGateway(t, req)
	}
	const js, form = "application/json", "application/x-www-form-urlencoded"
	for _, c := range []struct{ path, ctype, body, problem string }{
		{"/emails", js, "{\"to\":\"a\xffb@example.com\",\"subject\":\"s\"}", "body-not-json-object"},
		{"/emails", js, "{\"to\":\"a\xfeb@example.com\",\"subject\":\"s\"}", "body-not-json-object"},
		{"/emails", js, `{"to":"c@example.com","subject":"s"}]`, "body-not-json-object"},
		{"/emails", js, `{"to":"c@example.com","subject":"s"} {}`, "body-not-json-object"},
		{"/emails", form, "to=a%FFb%40example.com&subject=s", "body-not-form"},
		{"/emails?to=a%FEb", js, `{"to":"c@example.com","subject":"s"}`, "query-invalid"},
	} {
		wantRefused(t, post(c.path, c.ctype, c.body), http.StatusBadRequest, c.problem)
	}
	if got := up.requests(); len(got) != 0 {
		t.Fatalf("the provider received %+v", got)
	}
	// Two spellings of one email are one email, sent as one canonical body.
	if a := post("/emails", js, `{"to":"c@example.com","subject":"s"}`); a.status != http.StatusCreated {
		t.Fatalf("an email: %d %s", a.status, a.body)
	}
	if a := post("/emails", js, "{ \"subject\" : \"\\u0073\", \"to\" : \"c@example.com\" }"); a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same email spelled otherwise: %d %v %s", a.status, a.header, a.body)
	}
	if got := up.requests(); len(got) != 1 || !bytes.HasPrefix(got[0].body, []byte(`{"reference":"http:send_email:`)) {
		t.Fatalf("the provider received %+v", got)
	}
}

// TestGatewayDropsRevokedCredential: once a token is removed from the
// journal's tokens file (and the journal restarted), a protected request
// with it is refused 401 at once (the journal refuses the credential, and
// the gateway drops its cached identity, so the pass-through refuses it
// too); a token that made no protected request since is refused by the
// pass-through within its 5 s bound, never lent the provider's
// credential for 30 s.
func TestGatewayDropsRevokedCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	callers, err := demo.WriteGatewayCallers(dir)
	if err != nil {
		t.Fatal(err)
	}
	polPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(polPath, []byte(testPolicy()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The journal's gRPC address must survive its restart.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := ln.Addr().String()
	ln.Close()
	db := sqliteURL(t)
	startJournal := func(name string) *procs.Proc {
		p, err := procs.Start(context.Background(), procs.Spec{Name: name, Path: binary, Ready: "serving", Env: []string{testHashKeys},
			Args: []string{"serve", "--database-url", db, "--grpc-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--policy", polPath, "--auth-file", callers.TokensFile}}, startTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = p.Stop(stopTimeout)
			if t.Failed() {
				t.Logf("%s output:\n%s", name, p.Output())
			}
		})
		return p
	}
	journal := startJournal("journal")
	up := newStandIn(t)
	g, err := procs.Start(context.Background(), procs.Spec{Name: "gateway", Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env: []string{"PROVIDER_URL=" + up.srv.URL, "PROVIDER_KEY=sk_provider"},
		Args: []string{"--journal-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--policy", polPath, "--http-upstream", up.srv.URL,
			"--upstream-header", "Authorization: Bearer ${PROVIDER_KEY}"}}, startTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Stop(stopTimeout)
		if t.Failed() {
			t.Logf("gateway output:\n%s", g.Output())
		}
	})
	gw := "http://" + g.Field("http_addr")
	balance := func(token string) gatewayAnswer {
		req, _ := http.NewRequest(http.MethodGet, gw+"/v1/balance", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return doGateway(t, req)
	}
	payBody := `{"order_id":"rv-1","amount_minor":100,"currency":"RUB"}`
	if a := postPayment(t, gw, callers.AgentA, "rv-0", `{"order_id":"rv-0","amount_minor":100,"currency":"RUB"}`); a.status != http.StatusCreated {
		t.Fatalf("a payment before the revocation: %d %s", a.status, a.body)
	}
	for _, tok := range []string{callers.AgentA, callers.AgentARotated} {
		if a := balance(tok); a.status != http.StatusOK {
			t.Fatalf("a pass-through before the revocation: %d %s", a.status, a.body)
		}
	}
	cached := time.Now() // both identities are cached from here at the latest
	if got := up.requests(); len(got) != 3 || got[2].header.Get("Authorization") != "Bearer sk_provider" {
		t.Fatalf("the provider received %+v", got)
	}

	// Revoke both of agent A's tokens and restart the journal.
	b, err := os.ReadFile(callers.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, block := range strings.Split(string(b), "\n  - ") {
		if !strings.Contains(block, `principal: "agent-a"`) {
			kept = append(kept, block)
		}
	}
	revoked := strings.Join(kept, "\n  - ")
	if revoked == string(b) {
		t.Fatal("the tokens file edit did not apply")
	}
	if err := os.WriteFile(callers.TokensFile, []byte(revoked), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := journal.Stop(stopTimeout); err != nil {
		t.Fatal(err)
	}
	startJournal("journal-restarted")

	// A protected request: 401 at once, never "Gateway misconfigured".
	var a gatewayAnswer
	eventually(t, 30*time.Second, func() (bool, string) {
		a = postPayment(t, gw, callers.AgentA, "rv-1", payBody)
		return a.status != http.StatusServiceUnavailable, "the gateway reaches the restarted journal"
	})
	if a.status != http.StatusUnauthorized || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("a revoked token's payment: %d %v %s, want 401 with WWW-Authenticate", a.status, a.header, a.body)
	}
	wantRefused(t, a, http.StatusUnauthorized, "unauthenticated")
	// Its cached identity is gone: the pass-through refuses it too.
	wantRefused(t, balance(callers.AgentA), http.StatusUnauthorized, "unauthenticated")
	// The rotated token made no protected call since: the pass-through
	// refuses it once its identity is older than the 5 s bound (the wait
	// is the bound under test).
	time.Sleep(time.Until(cached.Add(6500 * time.Millisecond)))
	wantRefused(t, balance(callers.AgentARotated), http.StatusUnauthorized, "unauthenticated")
	if got := up.requests(); len(got) != 3 {
		t.Fatalf("after the revocation the provider received %+v", got[3:])
	}
	// Another agent is unaffected.
	if a := balance(callers.AgentB); a.status != http.StatusOK {
		t.Fatalf("agent B's pass-through: %d %s", a.status, a.body)
	}
}
