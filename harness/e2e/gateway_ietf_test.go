package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The HTTP door against draft-ietf-httpapi-idempotency-key-header, point
// by point, with the real binaries (`opjournal serve`, `opjournal-gateway`)
// and the shipped policy's POST /payments route. Each test is a row of
// the table in docs/gateway.md ("The Idempotency-Key draft, point by
// point").

// heldUpstream is a provider that counts the requests it receives and
// answers each with a fixed status and body; with hold set it keeps the
// first request until release is called.
type heldUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	n       int
	keys    []string // the Idempotency-Key each request carried (forward_key_header)
	arrived chan struct{}
	hold    chan struct{}
	once    sync.Once
	status  int
	body    string
}

func newHeldUpstream(t *testing.T, status int, body string, hold bool) *heldUpstream {
	t.Helper()
	u := &heldUpstream{arrived: make(chan struct{}, 16), status: status, body: body}
	if hold {
		u.hold = make(chan struct{})
	}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		u.mu.Lock()
		u.n++
		u.keys = append(u.keys, r.Header.Get("Idempotency-Key"))
		u.mu.Unlock()
		u.arrived <- struct{}{}
		if u.hold != nil {
			<-u.hold
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(u.status)
		_, _ = io.WriteString(w, u.body)
	}))
	t.Cleanup(func() { u.release(); u.srv.Close() })
	return u
}

// release lets every held request answer.
func (u *heldUpstream) release() {
	u.once.Do(func() {
		if u.hold != nil {
			close(u.hold)
		}
	})
}

func (u *heldUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

// postKeyLines posts a payment with the Idempotency-Key field lines given
// exactly (none, one, or several).
func postKeyLines(t *testing.T, base, token, body string, lines ...string) gatewayAnswer {
	t.Helper()
	return doGateway(t, keyRequest(base, token, body, lines...))
}

func keyRequest(base, token, body string, lines ...string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for _, l := range lines {
		req.Header.Add("Idempotency-Key", l)
	}
	return req
}

// wantKeyProblem fails unless a is the problem typed name with the
// status, linked to the published specification, and quoting none of
// secrets (the key, a payload value) outside its operation_key.
func wantKeyProblem(t *testing.T, a gatewayAnswer, status int, name string, secrets ...string) map[string]any {
	t.Helper()
	p := a.problem(t)
	if a.status != status || p["type"] != "urn:opjournal:problem:"+name || p["status"] != float64(status) {
		t.Fatalf("%d %s, want %d %s", a.status, a.body, status, name)
	}
	if l := a.header.Get("Link"); l != `</.well-known/opjournal-idempotency>; rel="describedby"; type="application/json"` {
		t.Fatalf("%s: Link %q, want the published specification", name, l)
	}
	// operation_key names the operation (the client's key is part of it,
	// as in Opjournal-Operation-Key); nothing else may quote the request.
	rest := map[string]any{}
	for k, v := range p {
		if k != "operation_key" {
			rest[k] = v
		}
	}
	b, _ := json.Marshal(rest)
	for _, s := range secrets {
		if bytes.Contains(b, []byte(s)) {
			t.Fatalf("%s quotes %q from the request: %s", name, s, a.body)
		}
	}
	return p
}

// waitRecorded waits until the journal holds the outcome of key (the
// gateway records an answered call just after answering it).
func (s *stack) waitRecorded(t *testing.T, key string) {
	t.Helper()
	s.waitFor(t, key, "recorded", func(op *pb.Operation) bool {
		return op.GetStatus() == pb.Status_STATUS_SUCCEEDED || op.GetStatus() == pb.Status_STATUS_FAILED_FINAL
	})
}

const ietfBody = `{"order_id":"ietf-1","amount_minor":4200,"currency":"EUR"}`

// TestGatewayIETFKeySyntax: the key as the draft's sf-string and as a
// bare value (Stripe-style clients), each its own key; every value that
// starts with a quote but is no sf-string, or is sent twice, is 400
// idempotency-key-invalid and nothing is sent.
func TestGatewayIETFKeySyntax(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newHeldUpstream(t, http.StatusCreated, `{"id":"pay_1"}`, false)
	gw := s.startGatewayFor(t, "gateway-ietf-syntax", up.srv.URL, "")
	agent := s.callers.AgentA
	scope := s.callers.ScopeA()

	// The draft's form: the operation key holds the field as sent.
	a := postKeyLines(t, gw, agent, ietfBody, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	quoted := "http:create_payment:" + scope + `:"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	if a.status != http.StatusCreated || a.header.Get("Opjournal-Operation-Key") != quoted {
		t.Fatalf("sf-string key: %d %v %s", a.status, a.header, a.body)
	}
	if a = postKeyLines(t, gw, agent, ietfBody, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("sf-string key again: %d %v", a.status, a.header)
	}
	// The bare form (stripe-node's): its own key.
	a = postKeyLines(t, gw, agent, ietfBody, `8e03978e-40d5-43e8-bc93-6894a57f9324`)
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" ||
		a.header.Get("Opjournal-Operation-Key") != "http:create_payment:"+scope+":8e03978e-40d5-43e8-bc93-6894a57f9324" {
		t.Fatalf("bare key: %d %v", a.status, a.header)
	}
	// An sf-string may hold a space, which the journal's keys never do:
	// it is kept as a hash of the key.
	a = postKeyLines(t, gw, agent, ietfBody, `"order 817"`)
	if a.status != http.StatusCreated || !strings.HasPrefix(a.header.Get("Opjournal-Operation-Key"), "http:create_payment:"+scope+":h:") {
		t.Fatalf("sf-string with a space: %d %v %s", a.status, a.header, a.body)
	}
	if a = postKeyLines(t, gw, agent, ietfBody, `"order 817"`); a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("sf-string with a space again: %d %v", a.status, a.header)
	}
	sent := up.count()
	if sent != 3 {
		t.Fatalf("%d requests reached the provider, want 3", sent)
	}
	for _, lines := range [][]string{
		{`"secret-unterminated`},               // an sf-string or nothing
		{`"secret-escape\n"`},                  // only \" and \\ escape
		{`"secret-params";expires=1`},          // no parameters
		{`"secret-after" more`},                // nothing after the string
		{`"secret-one", "secret-two"`},         // a list is not an item
		{`""`},                                 // empty
		{`"` + strings.Repeat("k", 256) + `"`}, // over 255 characters
		{`secret-bare key`},                    // a bare key has no space
		{`"secret-twice"`, `"secret-twice"`},   // the field sent twice
	} {
		a := postKeyLines(t, gw, agent, ietfBody, lines...)
		p := wantKeyProblem(t, a, http.StatusBadRequest, "idempotency-key-invalid", "secret-")
		if !strings.Contains(p["detail"].(string), "nothing was sent") || a.header.Get("Opjournal-Operation-Key") != "" {
			t.Fatalf("%q: %s %v", lines, a.body, a.header)
		}
	}
	if n := up.count(); n != sent {
		t.Fatalf("an invalid key reached the provider: %d requests, want %d", n, sent)
	}
}

// TestGatewayIETFMissingKey: no Idempotency-Key on the route that requires
// one is 400 idempotency-key-missing, linked to the specification; nothing
// is sent.
func TestGatewayIETFMissingKey(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newHeldUpstream(t, http.StatusCreated, `{"id":"pay_1"}`, false)
	gw := s.startGatewayFor(t, "gateway-ietf-missing", up.srv.URL, "")
	wantKeyProblem(t, postKeyLines(t, gw, s.callers.AgentA, ietfBody), http.StatusBadRequest, "idempotency-key-missing")
	if n := up.count(); n != 0 {
		t.Fatalf("%d requests reached the provider", n)
	}
}

// TestGatewayIETFConcurrentIs409: two requests with one key race while the
// provider holds the first: the other is 409 request-in-progress with a
// Retry-After, the provider sees one request, and the retry after the
// first answered is its replay.
func TestGatewayIETFConcurrentIs409(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newHeldUpstream(t, http.StatusCreated, `{"id":"pay_held"}`, true)
	gw := s.startGatewayFor(t, "gateway-ietf-409", up.srv.URL, "")
	agent := s.callers.AgentA
	answers := make(chan gatewayAnswer, 2)
	gate := make(chan struct{})
	for range 2 {
		go func() {
			<-gate
			// Not doGateway: t.Fatal belongs to the test's goroutine.
			a := gatewayAnswer{}
			if res, err := httpClient.Do(keyRequest(gw, agent, ietfBody, `"race-1"`)); err == nil {
				a.status, a.header = res.StatusCode, res.Header
				a.body, _ = io.ReadAll(res.Body)
				res.Body.Close()
			}
			answers <- a
		}()
	}
	close(gate)
	// The provider holds the winner until the loser has its answer.
	var loser gatewayAnswer
	select {
	case loser = <-answers:
	case <-time.After(30 * time.Second):
		t.Fatal("neither request was answered while the provider held one")
	}
	p := wantKeyProblem(t, loser, http.StatusConflict, "request-in-progress", "race-1")
	ra, err := strconv.Atoi(loser.header.Get("Retry-After"))
	if err != nil || ra < 1 || p["retry_after_seconds"] != float64(ra) {
		t.Fatalf("409 Retry-After %q, retry_after_seconds %v", loser.header.Get("Retry-After"), p["retry_after_seconds"])
	}
	up.release()
	winner := <-answers
	if winner.status != http.StatusCreated || string(winner.body) != `{"id":"pay_held"}` {
		t.Fatalf("the held request: %d %s", winner.status, winner.body)
	}
	// The winner's record is written just after its answer (until then a
	// retry is still told to wait): the retry once it is.
	s.waitRecorded(t, winner.header.Get("Opjournal-Operation-Key"))
	again := postKeyLines(t, gw, agent, ietfBody, `"race-1"`)
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != `{"id":"pay_held"}` {
		t.Fatalf("the retry: %d %v %s", again.status, again.header, again.body)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("%d requests reached the provider, want 1", n)
	}
}

// TestGatewayIETFReuseIs422: the same key with another body is 422
// idempotency-key-reused, nothing sent, and the first request's replay is
// unchanged.
func TestGatewayIETFReuseIs422(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newHeldUpstream(t, http.StatusCreated, `{"id":"pay_1"}`, false)
	gw := s.startGatewayFor(t, "gateway-ietf-422", up.srv.URL, "")
	agent := s.callers.AgentA
	if a := postKeyLines(t, gw, agent, ietfBody, `"reuse-1"`); a.status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	s.waitRecorded(t, "http:create_payment:"+s.callers.ScopeA()+`:"reuse-1"`)
	other := strings.Replace(ietfBody, "4200", "4300", 1)
	p := wantKeyProblem(t, postKeyLines(t, gw, agent, other, `"reuse-1"`), http.StatusUnprocessableEntity, "idempotency-key-reused", "4300")
	if !strings.Contains(p["detail"].(string), "nothing was sent") {
		t.Fatalf("422 detail %q", p["detail"])
	}
	if a := postKeyLines(t, gw, agent, ietfBody, `"reuse-1"`); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the first request again: %d %v", a.status, a.header)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("%d requests reached the provider, want 1", n)
	}
}

// TestGatewayIETFRefusalReplayed: a completed request's definite refusal
// (a 4xx) is the retry's answer too, as its success would be; the
// provider is asked once.
func TestGatewayIETFRefusalReplayed(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	up := newHeldUpstream(t, http.StatusPaymentRequired, `{"error":"card_declined"}`, false)
	gw := s.startGatewayFor(t, "gateway-ietf-4xx", up.srv.URL, "")
	agent := s.callers.AgentA
	first := postKeyLines(t, gw, agent, ietfBody, `"declined-1"`)
	s.waitRecorded(t, first.header.Get("Opjournal-Operation-Key"))
	again := postKeyLines(t, gw, agent, ietfBody, `"declined-1"`)
	if first.status != http.StatusPaymentRequired || again.status != http.StatusPaymentRequired || !bytes.Equal(first.body, again.body) ||
		again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, again %d %v %s", first.status, first.body, again.status, again.header, again.body)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("%d requests reached the provider, want 1", n)
	}
}

// TestGatewayIETFPublishedPolicy: the expiry policy and the rest of the
// idempotency specification are published per route at
// /.well-known/opjournal-idempotency, from the policy the gateway runs
// (the action's retention), to authenticated callers.
func TestGatewayIETFPublishedPolicy(t *testing.T) {
	t.Parallel()
	pol := strings.Replace(testPolicy(), "    retention: 720h\n    integer_fields: [amount_minor]\n", "    retention: 48h\n    integer_fields: [amount_minor]\n", 1)
	if pol == testPolicy() {
		t.Fatal("the policy edit did not apply")
	}
	s := startStack(t, stackOpts{policy: pol, callers: true})
	gw := s.startGatewayFor(t, "gateway-ietf-policy", s.providerURL, "")
	get := func(token string) gatewayAnswer {
		req, _ := http.NewRequest(http.MethodGet, gw+"/.well-known/opjournal-idempotency", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return doGateway(t, req)
	}
	if a := get(""); a.status != http.StatusUnauthorized {
		t.Fatalf("without a credential: %d %s", a.status, a.body)
	}
	a := get(s.callers.AgentA)
	var doc struct {
		Specification string `json:"specification"`
		Routes        []struct {
			Route        string `json:"route"`
			Action       string `json:"action"`
			KeyHeader    string `json:"key_header"`
			KeyRequired  bool   `json:"key_required"`
			KeyMaxLength int    `json:"key_max_length"`
			ExpiresAfter int64  `json:"key_expires_after_seconds"`
			KeyExpiry    string `json:"key_expiry"`
			KeySyntax    string `json:"key_syntax"`
			Fingerprint  string `json:"fingerprint"`
		}
	}
	if a.status != http.StatusOK || a.header.Get("Content-Type") != "application/json" || json.Unmarshal(a.body, &doc) != nil {
		t.Fatalf("the specification: %d %v %s", a.status, a.header, a.body)
	}
	if doc.Specification != "draft-ietf-httpapi-idempotency-key-header-09" || len(doc.Routes) != 2 {
		t.Fatalf("the specification: %s", a.body)
	}
	var found bool
	for _, r := range doc.Routes {
		if r.Route != "POST /payments" {
			continue
		}
		found = true
		if r.Action != "create_payment" || r.KeyHeader != "Idempotency-Key" || !r.KeyRequired || r.KeyMaxLength != 255 ||
			r.ExpiresAfter != 48*3600 || !strings.Contains(r.KeyExpiry, "never forgotten") || !strings.Contains(r.KeySyntax, "structured-field string") ||
			!strings.Contains(r.Fingerprint, "RFC 8785") {
			t.Fatalf("POST /payments: %+v", r)
		}
	}
	if !found {
		t.Fatalf("no POST /payments in %s", a.body)
	}
	req, _ := http.NewRequest(http.MethodPost, gw+"/.well-known/opjournal-idempotency", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+s.callers.AgentA)
	if a := doGateway(t, req); a.status != http.StatusMethodNotAllowed || a.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST to the specification: %d %v", a.status, a.header)
	}
}

// TestGatewayIETFShippedRouteReplaysProviderBytes: the shipped POST
// /payments route (an action with redact_fields) replays the provider's
// answer byte for byte when it holds no redacted member, as any route
// does; an answer that holds one is replayed as canonical JSON with the
// value redacted, never with it.
func TestGatewayIETFShippedRouteReplaysProviderBytes(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	agent := s.callers.AgentA
	// opjournal-fakeprovider, the shipped policy's upstream.
	gw := s.startGatewayFor(t, "gateway-ietf-bytes", s.providerURL, "")
	first := postKeyLines(t, gw, agent, ietfBody, `"bytes-1"`)
	s.waitRecorded(t, first.header.Get("Opjournal-Operation-Key"))
	again := postKeyLines(t, gw, agent, ietfBody, `"bytes-1"`)
	if first.status != http.StatusCreated || again.status != first.status || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay %d %q\nfirst  %d %q", again.status, again.body, first.status, first.body)
	}
	// A provider that echoes a card number, spelled its own way (spaces,
	// member order): the replay holds the redacted value, not the number.
	echo := newHeldUpstream(t, http.StatusCreated, "{ \"id\": \"pay_c\",\n  \"card_number\": \"4242424242424242\" }\n", false)
	gw2 := s.startGatewayFor(t, "gateway-ietf-card", echo.srv.URL, "")
	first = postKeyLines(t, gw2, agent, ietfBody, `"bytes-card"`)
	s.waitRecorded(t, first.header.Get("Opjournal-Operation-Key"))
	again = postKeyLines(t, gw2, agent, ietfBody, `"bytes-card"`)
	if !bytes.Contains(first.body, []byte("4242424242424242")) || again.header.Get("Idempotent-Replayed") != "true" ||
		string(again.body) != `{"card_number":"[redacted]","id":"pay_c"}` {
		t.Fatalf("card replay %d %q (first %q)", again.status, again.body, first.body)
	}
}
