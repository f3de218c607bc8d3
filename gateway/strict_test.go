package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/protocol/policy"
)

// What a protected request is bound to, and what a replay may say: the
// transport never re-sends, keys and hashes read numbers, queries, forms
// and paths canonically, and a replay is the provider's bytes or a plain
// problem, never a made-up resource or a planted redirect.

// strictPolicy is the journal's policy of these tests: the fixture's
// actions and those the tests' own gateways route to (each test starts a
// gateway with its own routes for them).
const strictPolicy = testPolicy + `  create_thing: {}
  send_receipt: {}
  create_charge: {}
  save_card:
    redact_fields: [card]
  create_card_payment:
    redact_fields: [card]
`

// upstreamRecord is one request an upstream received.
type upstreamRecord struct {
	method, path, rawPath string
	header                http.Header
	body                  []byte
}

// recorder is a real HTTP upstream with a lenient router (any method, any
// path) that records what it receives and answers a fixed response.
type recorder struct {
	mu     sync.Mutex
	got    []upstreamRecord
	status int
	ctype  string
	body   string
	srv    *httptest.Server
}

func newRecorder(t *testing.T, status int, ctype, body string) *recorder {
	rc := &recorder{status: status, ctype: ctype, body: body}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, upstreamRecord{r.Method, r.URL.Path, r.URL.RawPath, r.Header.Clone(), b})
		rc.mu.Unlock()
		w.Header().Set("Content-Type", rc.ctype)
		if rc.status/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(rc.status)
		_, _ = io.WriteString(w, rc.body)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *recorder) requests() []upstreamRecord {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]upstreamRecord(nil), rc.got...)
}

// gatewayFor starts a gateway on e's journal with doc's policy, UPSTREAM
// and TEST_PROVIDER expanded, and a default upstream.
func (e *env) gatewayFor(doc, upstream, fallback string) (string, *gateway.Gateway) {
	e.t.Helper()
	pol, err := policy.Parse([]byte(doc), "strict-test.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{
		Journal: client.New(e.journal.Conn, client.WithWorkerID("gateway-strict")), Policy: pol,
		LookupEnv: func(name string) (string, bool) {
			switch name {
			case "UPSTREAM":
				return upstream, true
			case "TEST_PROVIDER":
				return e.provURL, true
			}
			return "", false
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultUpstream: fallback,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(g.Wait)
	return httptestServer(e.t, g), g
}

// postRaw sends body as it is, with the headers given in pairs.
func postRaw(t *testing.T, url, body string, headers ...string) response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokenA) // agent A, unless headers say otherwise
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: rb}
}

// rawRequest writes one HTTP/1.1 request line and headers as given (a
// path no client library would send unchanged) and reads the answer.
func rawRequest(t *testing.T, base, method, target, body string, headers ...string) response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\nAuthorization: Bearer %s\r\n", method, target, strings.TrimPrefix(base, "http://"), len(body), tokenA)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: rb}
}

// TestHTTPTransportNeverResends: a client's X-Idempotency-Key, were it
// forwarded, would make net/http's Transport treat the POST as replayable
// and re-send it by itself when the reused connection dropped after the
// provider committed: two emails, one success in the journal. The
// provider must hold one email, and the client be told the outcome is unknown.
func TestHTTPTransportNeverResends(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"X-Idempotency-Key", "Idempotency-Key"} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, strictPolicy)
			// The route's key header is another one, so the client's
			// header is just a header (net/http reads either as "safe to
			// re-send").
			front, _ := e.gatewayFor(`actions:
  send_email:
    gateway:
      http:
        route: POST /emails
        upstream: "${TEST_PROVIDER}"
        key_header: X-Request-Key
        key_fields: [to, subject]
        forward_key_field: reference
`, "", "")
			// A first email leaves an idle connection to the provider.
			if r := postRaw(t, front+"/emails", `{"to":"warm@example.com","subject":"warm"}`, "Content-Type", "application/json"); r.status != http.StatusAccepted {
				t.Fatalf("warm-up: %d %s", r.status, r.body)
			}
			e.fault(fakeprovider.Fault{Path: "/emails", Kind: fakeprovider.DropConnectionAfterCommit, Count: 1})
			r := postRaw(t, front+"/emails", `{"to":"c-1@example.com","subject":"dropped"}`, "Content-Type", "application/json", header, "client-key-1")
			key := r.header.Get("Opjournal-Operation-Key")
			if n := e.effects(key); n != 1 {
				t.Fatalf("emails under %s: %d, want 1 (answer %d %s)", key, n, r.status, r.body)
			}
			wantProblem(t, r, http.StatusConflict, "outcome-unknown")
		})
	}
}

// TestHTTPKeyHeadersNotForwarded: the client's own key header, and any
// idempotency key header, never reach the provider unless the route
// forwards the operation key in it; nor does any header the route does
// not list in forward_headers. A listed one is forwarded, and is part of
// the request: the same key with another value is 422.
func TestHTTPKeyHeadersNotForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	up := newRecorder(t, http.StatusCreated, "application/json", `{"id":"x_1"}`)
	front, gw := e.gatewayFor(`actions:
  create_thing:
    gateway:
      http:
        route: POST /things
        upstream: "${UPSTREAM}"
        key_header: X-Client-Key
        forward_headers: [X-Trace]
`, up.srv.URL, "")
	r := postRaw(t, front+"/things", `{"a":1}`, "Content-Type", "application/json", "X-Client-Key", "ck-1",
		"X-Idempotency-Key", "other-1", "Idempotency-Key", "other-2", "X-Trace", "kept", "X-Other", "dropped", "User-Agent", "agent/1")
	if r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	got := up.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests upstream", len(got))
	}
	for _, h := range []string{"X-Client-Key", "X-Idempotency-Key", "Idempotency-Key", "X-Other"} {
		if v := got[0].header.Get(h); v != "" {
			t.Errorf("%s: %q reached the upstream", h, v)
		}
	}
	if got[0].header.Get("X-Trace") != "kept" || got[0].header.Get("User-Agent") == "agent/1" {
		t.Errorf("forwarded headers %v, want X-Trace only", got[0].header)
	}
	gw.Wait()
	wantProblem(t, postRaw(t, front+"/things", `{"a":1}`, "Content-Type", "application/json", "X-Client-Key", "ck-1", "X-Trace", "other"),
		http.StatusUnprocessableEntity, "idempotency-key-reused")
	if r := postRaw(t, front+"/things", `{"a":1}`, "Content-Type", "application/json", "X-Client-Key", "ck-1", "X-Trace", "kept", "X-Other", "x"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same request with another unlisted header: %d %v %s", r.status, r.header, r.body)
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d requests upstream", n)
	}
}

// TestHTTPRedirectNotFollowed: a provider's redirect is not followed:
// net/http would follow a 303 with a GET to another URL, whose answer
// would then be taken (and stored) as the effect's.
func TestHTTPRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	up := newRecorder(t, http.StatusSeeOther, "application/json", `{}`)
	front, _ := e.gatewayFor(`actions:
  create_thing:
    gateway:
      http:
        route: POST /things
        upstream: "${UPSTREAM}"
`, up.srv.URL, "")
	r := postRaw(t, front+"/things", `{"a":1}`, "Content-Type", "application/json", "Idempotency-Key", "k-redirect")
	if got := up.requests(); len(got) != 1 || got[0].path != "/things" {
		t.Fatalf("the upstream got %+v (the client got %d %s)", got, r.status, r.body)
	}
}

// TestHTTPKeyFieldsReadNumbersCanonically: 817, 817.0 and 8.17e2 are one
// number, so one derived key and one email.
func TestHTTPKeyFieldsReadNumbersCanonically(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	front, _ := e.gatewayFor(`actions:
  send_receipt:
    gateway:
      http:
        route: POST /emails
        upstream: "${TEST_PROVIDER}"
        key_fields: [to, order]
        forward_key_field: reference
`, "", "")
	var keys []string
	for _, n := range []string{"817", "817.0", "8.17e2"} {
		r := postRaw(t, front+"/emails", `{"to":"c@example.com","order":`+n+`}`, "Content-Type", "application/json")
		if r.status != http.StatusAccepted {
			t.Fatalf("order %s: %d %s", n, r.status, r.body)
		}
		keys = append(keys, r.header.Get("Opjournal-Operation-Key"))
	}
	if keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("three spellings of 817 gave keys %v", keys)
	}
	if n := e.allEffects(); n != 1 {
		t.Fatalf("%d emails, want 1", n)
	}
}

// TestHTTPPathVariantsNeverPassThrough: every spelling of the protected
// route that a lenient router could take for it is refused (400, naming
// the route), never passed to the default upstream; the exact route is
// journaled and forwarded to the route's own path.
func TestHTTPPathVariantsNeverPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	lenient := newRecorder(t, http.StatusCreated, "application/json", `{"id":"pay_lenient"}`)
	doc := strings.Replace(testPolicy, "upstream: \"${TEST_PROVIDER:-http://127.0.0.1:1}\"\n        forward_key_header", "upstream: \"${UPSTREAM}\"\n        forward_key_header", 1)
	front, _ := e.gatewayFor(doc, lenient.srv.URL, lenient.srv.URL)
	body := `{"order_id":"817","amount_minor":490000,"currency":"RUB"}`
	for _, v := range []struct{ method, target string }{
		{"POST", "/payments/"}, {"POST", "/Payments"}, {"POST", "/PAYMENTS"}, {"POST", "//payments"},
		{"POST", "/payments;v=1"}, {"POST", "/./payments"}, {"POST", "/x/../payments"}, {"POST", "/payments%2F"},
		{"POST", "/%70ayments"}, {"POST", "/payments%252F"}, {"POST", `/payments\`}, {"POST", `\payments`},
		{"post", "/payments"}, {"Post", "/payments/"}, {"POST", "/payments/."},
	} {
		r := rawRequest(t, front, v.method, v.target, body, "Content-Type", "application/json", "Idempotency-Key", "k-variant")
		if r.status == http.StatusBadRequest && r.header.Get("Content-Type") != "application/problem+json" {
			continue // net/http's server refused the request line itself
		}
		p := wantProblem(t, r, http.StatusBadRequest, "non-canonical-path")
		if !strings.Contains(p["detail"].(string), "POST /payments") {
			t.Errorf("%s %s: the problem does not name the route: %v", v.method, v.target, p)
		}
	}
	if n := len(lenient.requests()); n != 0 {
		t.Fatalf("%d variants reached the upstream unjournaled: %+v", n, lenient.requests())
	}
	r := rawRequest(t, front, "POST", "/payments?x=1", body, "Content-Type", "application/json", "Idempotency-Key", "k-exact")
	if r.status != http.StatusCreated || r.header.Get("Opjournal-Operation-Key") == "" {
		t.Fatalf("exact route: %d %v %s", r.status, r.header, r.body)
	}
	got := lenient.requests()
	if len(got) != 1 || got[0].path != "/payments" || got[0].rawPath != "" {
		t.Fatalf("upstream got %+v", got)
	}
	// Other paths still pass through.
	if r := rawRequest(t, front, "POST", "/refunds", body, "Content-Type", "application/json"); r.status != http.StatusCreated || len(lenient.requests()) != 2 {
		t.Fatalf("pass-through: %d %s", r.status, r.body)
	}
}

// TestHTTPReplayIsByteExact: the replay is the provider's bytes, trailing
// newline and all.
func TestHTTPReplayIsByteExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	first := e.post("/payments", "k-bytes", payment)
	e.gw.Wait()
	again := e.post("/payments", "k-bytes", payment)
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) || !bytes.HasSuffix(first.body, []byte("\n")) {
		t.Fatalf("replay %q\nfirst  %q", again.body, first.body)
	}
	if again.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("replay headers %v", again.header)
	}
}

// TestHTTPReplayKeepsLargeIntegers: an answer with an integer beyond 2^53
// is stored as the provider's bytes and replayed as they were (it used to
// be dropped, and the replay was a made-up 200).
func TestHTTPReplayKeepsLargeIntegers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	answer := "{\"id\":\"r_1\",\"n\":9007199254740993}\n"
	up := newRecorder(t, http.StatusCreated, "application/json", answer)
	front, gw := e.gatewayFor(`actions:
  create_thing:
    gateway:
      http:
        route: POST /things
        upstream: "${UPSTREAM}"
`, up.srv.URL, "")
	for i := range 2 {
		r := postRaw(t, front+"/things", `{"a":1}`, "Content-Type", "application/json", "Idempotency-Key", "k-big")
		if r.status != http.StatusCreated || string(r.body) != answer || (r.header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("answer %d: %d %v %q", i, r.status, r.header, r.body)
		}
		gw.Wait() // the record of an answered call is written in the background
	}
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d requests upstream", n)
	}
}

// TestHTTPReplayOfRedactedAction: an action with redact_fields keeps the
// provider's JSON answer as JSON, so the journal redacts it: the replay
// never carries the redacted value. A text answer naming a redacted
// field is not stored at all (the replay says its body was omitted).
func TestHTTPReplayOfRedactedAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	front, gw := e.gatewayFor(`actions:
  create_card_payment:
    redact_fields: [card]
    gateway:
      http:
        route: POST /payments
        upstream: "${TEST_PROVIDER}"
        forward_key_header: Idempotency-Key
`, "", "")
	body := `{"order_id":"1","amount_minor":100,"currency":"RUB","card":"4242424242424242"}`
	first := postRaw(t, front+"/payments", body, "Content-Type", "application/json", "Idempotency-Key", "k-card")
	if first.status != http.StatusCreated || !strings.Contains(string(first.body), "4242424242424242") {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	gw.Wait()
	again := postRaw(t, front+"/payments", body, "Content-Type", "application/json", "Idempotency-Key", "k-card")
	if again.status != http.StatusCreated || strings.Contains(string(again.body), "4242") || !strings.Contains(string(again.body), "[redacted]") {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}

	up := newRecorder(t, http.StatusOK, "text/plain", "card=4242424242424242\n")
	front2, gw2 := e.gatewayFor(`actions:
  save_card:
    redact_fields: [card]
    gateway:
      http:
        route: POST /cards
        upstream: "${UPSTREAM}"
`, up.srv.URL, "")
	postRaw(t, front2+"/cards", `{"a":1}`, "Content-Type", "application/json", "Idempotency-Key", "k-text")
	gw2.Wait()
	r := postRaw(t, front2+"/cards", `{"a":1}`, "Content-Type", "application/json", "Idempotency-Key", "k-text")
	if r.status != http.StatusOK || len(r.body) != 0 || r.header.Get("Opjournal-Body-Omitted") == "" {
		t.Fatalf("text replay: %d %v %q", r.status, r.header, r.body)
	}
}

// plant records a success for key directly in the journal (as any agent
// of the tenant could: agent B, for a key of agent A's scope, which is
// not secret), with result as its stored result.
func (e *env) plant(key string, payload, result any) {
	e.t.Helper()
	c := client.New(e.journal.Conn, client.WithWorkerID("planter"), client.WithToken(tokenB))
	_, err := c.Execute(context.Background(), client.Op{Key: key, Action: "create_payment", Payload: payload},
		func(context.Context, client.Attempt) (client.Effect, error) {
			return client.Effect{ExternalID: "pay_planted", Result: result}, nil
		})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestHTTPPlantedAnswerNotReplayedVerbatim: a stored result is replayed
// only as the gateway would have stored it: a 2xx (a planted 302 is not
// replayed), the route's store_headers only (no Set-Cookie, nothing
// else), with nosniff.
func TestHTTPPlantedAnswerNotReplayedVerbatim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.plant("http:create_payment:"+scopeOf("agent-a")+":k-302", payment, map[string]any{"http_response": map[string]any{
		"status": 302, "headers": map[string]any{"Location": []any{"https://evil.example/"}, "Set-Cookie": []any{"s=1"}},
		"body_text": "<html>",
	}})
	r := e.post("/payments", "k-302", payment)
	p := wantProblem(t, r, http.StatusConflict, "succeeded-answer-not-stored")
	if r.header.Get("Location") != "" || r.header.Get("Set-Cookie") != "" || p["external_id"] != "pay_planted" {
		t.Fatalf("planted redirect: %d %v %s", r.status, r.header, r.body)
	}
	e.plant("http:create_payment:"+scopeOf("agent-a")+":k-cookie", payment, map[string]any{"http_response": map[string]any{
		"status": 200, "headers": map[string]any{"set-cookie": []any{"s=1"}, "X-Frame-Options": []any{"ALLOW"}, "Refresh": []any{"0;url=https://evil.example/"}},
		"body_text": "<script>alert(1)</script>",
	}})
	r = e.post("/payments", "k-cookie", payment)
	if r.status != http.StatusOK || r.header.Get("Set-Cookie") != "" || r.header.Get("X-Frame-Options") != "" || r.header.Get("Refresh") != "" ||
		r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("planted headers: %d %v", r.status, r.header)
	}
}

// TestHTTPSettledWithoutAnswer: a success recorded without the
// provider's answer (by a person, say) is not replayed as a made-up
// resource: the client gets a problem that says it succeeded, with the
// external id, and that the answer was not stored.
func TestHTTPSettledWithoutAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.plant("http:create_payment:"+scopeOf("agent-a")+":k-settled", payment, map[string]any{"external_id": "pay_planted", "resolved_by": "a person"})
	r := e.post("/payments", "k-settled", payment)
	p := wantProblem(t, r, http.StatusConflict, "succeeded-answer-not-stored")
	if p["external_id"] != "pay_planted" || r.header.Get("Retry-After") != "" || !strings.Contains(p["detail"].(string), "not stored") {
		t.Fatalf("problem %v %v", p, r.header)
	}
}

// TestHTTPQueryIsBound: the query is part of the request: the same key
// with another query is another request (422), not a replay.
func TestHTTPQueryIsBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	if r := e.post("/payments?amount=1", "k-query", payment); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	e.gw.Wait()
	wantProblem(t, e.post("/payments?amount=1000000", "k-query", payment), http.StatusUnprocessableEntity, "idempotency-key-reused")
	if r := e.post("/payments?amount=1", "k-query", payment); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same query: %d %v", r.status, r.header)
	}
	if e.allEffects() != 1 {
		t.Fatalf("%d effects", e.allEffects())
	}
}

// TestHTTPStrictBodies: duplicate members (400), a body that is not JSON
// or a form (415), and a browser's cross-site request (403) are refused
// before anything is sent.
func TestHTTPStrictBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	u := e.front.URL + "/payments"
	body := `{"order_id":"1","amount_minor":1,"currency":"RUB"}`
	wantProblem(t, postRaw(t, u, `{"order_id":"1","amount_minor":1,"amount_minor":100000,"currency":"RUB"}`, "Content-Type", "application/json", "Idempotency-Key", "k-dup"),
		http.StatusBadRequest, "duplicate-member")
	wantProblem(t, postRaw(t, u, body, "Content-Type", "text/plain", "Idempotency-Key", "k-text"), http.StatusUnsupportedMediaType, "unsupported-media-type")
	wantProblem(t, postRaw(t, u, body, "Idempotency-Key", "k-none"), http.StatusUnsupportedMediaType, "unsupported-media-type")
	wantProblem(t, postRaw(t, u, body, "Content-Type", "application/json", "Idempotency-Key", "k-site", "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-site-request")
	wantProblem(t, postRaw(t, u, body, "Content-Type", "application/json", "Idempotency-Key", "k-origin", "Origin", "https://evil.example"), http.StatusForbidden, "cross-site-request")
	if e.allEffects() != 0 {
		t.Fatalf("%d effects after refusals", e.allEffects())
	}
	own := "http://" + strings.TrimPrefix(e.front.URL, "http://")
	if r := postRaw(t, u, body, "Content-Type", "application/merge-patch+json; charset=utf-8", "Idempotency-Key", "k-ok", "Origin", own, "Sec-Fetch-Site", "same-origin"); r.status != http.StatusCreated {
		t.Fatalf("same-origin +json: %d %s", r.status, r.body)
	}
}

// TestHTTPFormBodies: a form body is journaled like JSON: its decoded
// pairs are the payload and the key fields (order of names does not
// matter, a repeated name keeps its values in order), and the provider
// receives those pairs in canonical order with the reference field.
func TestHTTPFormBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	up := newRecorder(t, http.StatusOK, "application/json", `{"id":"ch_1"}`)
	front, gw := e.gatewayFor(`actions:
  create_charge:
    gateway:
      http:
        route: POST /v1/charges
        upstream: "${UPSTREAM}"
        key_fields: ["metadata[order]"]
        forward_key_field: "metadata[reference]"
`, up.srv.URL, "")
	form := "amount=100&currency=usd&metadata%5Border%5D=817&expand[]=a&expand[]=b"
	ct := "application/x-www-form-urlencoded"
	first := postRaw(t, front+"/v1/charges", form, "Content-Type", ct)
	key := first.header.Get("Opjournal-Operation-Key")
	if first.status != http.StatusOK || !strings.Contains(key, ":f:") {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	got := up.requests()
	// The provider receives the hashed pairs, re-encoded in one canonical
	// order (names sorted, a repeated name's values in order), with the
	// reference among them.
	want := "amount=100&currency=usd&expand%5B%5D=a&expand%5B%5D=b&metadata%5Border%5D=817&metadata%5Breference%5D=" + strings.ReplaceAll(key, ":", "%3A")
	if len(got) != 1 || string(got[0].body) != want || got[0].header.Get("Content-Type") != ct {
		t.Fatalf("forwarded %q %v", got[0].body, got[0].header)
	}
	gw.Wait()
	// The same pairs in another order: the same request, replayed.
	r := postRaw(t, front+"/v1/charges", "metadata[order]=817&expand[]=a&currency=usd&expand[]=b&amount=100", "Content-Type", ct)
	if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Opjournal-Operation-Key") != key {
		t.Fatalf("reordered: %d %v %s", r.status, r.header, r.body)
	}
	// Another amount under the same key fields: 422; the repeated name's
	// order matters too.
	wantProblem(t, postRaw(t, front+"/v1/charges", "amount=200&currency=usd&metadata[order]=817&expand[]=a&expand[]=b", "Content-Type", ct), http.StatusUnprocessableEntity, "idempotency-key-reused")
	wantProblem(t, postRaw(t, front+"/v1/charges", "amount=100&currency=usd&metadata[order]=817&expand[]=b&expand[]=a", "Content-Type", ct), http.StatusUnprocessableEntity, "idempotency-key-reused")
	wantProblem(t, postRaw(t, front+"/v1/charges", "amount=%zz&metadata[order]=1", "Content-Type", ct), http.StatusBadRequest, "body-not-form")
	if n := len(up.requests()); n != 1 {
		t.Fatalf("%d requests upstream", n)
	}
}

// droppingUpstream is a real HTTP/1.1 server that answers the first
// request of each connection and closes the connection after reading the
// second, without answering: a provider that committed and then lost the
// answer on a reused connection. It counts the requests it read.
func droppingUpstream(t *testing.T) (url string, requests func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					mu.Lock()
					n++
					mu.Unlock()
					if i == 1 {
						return // the second request on this connection: committed, no answer
					}
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestHTTPPassThroughNeverResent: a request the gateway only passes
// through (no route) is not re-sent by the transport either: a bodyless
// POST with an idempotency header is what net/http would replay on a
// reused connection that drops.
func TestHTTPPassThroughNeverResent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strictPolicy)
	up, requests := droppingUpstream(t)
	front, _ := e.gatewayFor("actions:\n  create_thing: {}\n", "", up)
	if r := postRaw(t, front+"/refunds", "", "X-Idempotency-Key", "r-1"); r.status != http.StatusOK {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	r := postRaw(t, front+"/refunds", "", "X-Idempotency-Key", "r-2")
	if n := requests(); n != 2 || r.status != http.StatusBadGateway {
		t.Fatalf("the upstream read %d requests (want 2: none re-sent); the client got %d %s", n, r.status, r.body)
	}
}
