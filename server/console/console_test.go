package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/server/console"
	"github.com/opjournal/opjournal/store/sqlite"
)

// Tokens of these tests: two tenants, each role.
const (
	operA  = "tok-console-oper-a-8c1f"
	operB  = "tok-console-oper-b-51d0"
	reconA = "tok-console-recon-a-2f7e"
	agentA = "tok-console-agent-a-90ab"
	adminA = "tok-console-admin-a-77c3"
	metrA  = "tok-console-metrics-a-1e2d"
	operA2 = "tok-console-oper-a2-c4b9"
)

const testPolicy = `actions:
  create_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number]
    provider_link: https://dash.example.com/payments/{external_id}
    reconcile: {definitive_absence: true, visibility_lag: 0s, in_flight_window: 1s}
  send_email: {}
  big_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number]
    approval: {when: "payload.amount_minor > 100000", timeout: 24h}
  wire_transfer:
    integer_fields: [amount_minor]
    approval: {required: true, two_person: true}
`

type env struct {
	t      testing.TB
	svc    *journal.Service
	st     *sqlite.Store
	srv    *httptest.Server
	mu     sync.Mutex
	audits []string
}

func newEnv(t testing.TB, withAuth bool) *env {
	t.Helper()
	return newEnvWith(t, withAuth, nil)
}

// newEnvWith is newEnv with the console's config changed by tune first.
func newEnvWith(t testing.TB, withAuth bool, tune func(*console.Config)) *env {
	t.Helper()
	return newEnvPolicy(t, withAuth, testPolicy, tune)
}

// newEnvPolicy is newEnvWith with the policy policyYAML.
func newEnvPolicy(t testing.TB, withAuth bool, policyYAML string, tune func(*console.Config)) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pol, err := policy.Parse([]byte(policyYAML), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, svc: journal.New(st, pol, journal.Limits{})}
	cfg := console.Config{Service: e.svc, HTTPStatus: server.HTTPStatus, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Audit: func(_ context.Context, method string, c journal.Caller, op *opjournal.Operation) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.audits = append(e.audits, fmt.Sprintf("%s %s %s %s %s", method, c.Tenant, c.Principal, op.Key, op.Status))
		}}
	if withAuth {
		var b strings.Builder
		b.WriteString("tokens:\n")
		for _, tk := range []struct{ tok, name, tenant, role string }{
			{operA, "alice", "team-a", "operator"}, {operB, "bob", "team-b", "operator"},
			{reconA, "reconciler-a", "team-a", "reconciler"}, {agentA, "agent-a", "team-a", "agent"},
			{adminA, "root-a", "team-a", "admin"}, {metrA, "scraper", "team-a", "metrics"},
			{operA2, "carol", "team-a", "operator"},
		} {
			fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", tk.name, auth.Digest(tk.tok), tk.tenant, tk.role)
		}
		if cfg.Auth, err = auth.Parse([]byte(b.String()), "tokens.yaml"); err != nil {
			t.Fatal(err)
		}
	}
	if tune != nil {
		tune(&cfg)
	}
	con, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(con)
	t.Cleanup(e.srv.Close)
	return e
}

// unknownOp registers, claims and marks an operation unknown in tenant.
func (e *env) unknownOp(tenant, key string, refs map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	c := journal.Caller{Tenant: tenant, Principal: "agent"}
	if _, err := e.svc.Register(ctx, journal.RegisterRequest{Caller: c, Key: key, Action: "create_payment",
		Payload: json.RawMessage(`{"amount_minor": 4900, "card_number": "4242424242424242"}`), Refs: refs,
		Claim: &journal.ClaimOptions{WorkerID: "w1"}}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.svc.MarkUnknown(ctx, journal.MarkRequest{Caller: c, Key: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) escalate(tenant, key string) {
	e.t.Helper()
	if _, err := e.svc.Escalate(context.Background(), journal.EscalateRequest{Caller: journal.Caller{Tenant: tenant, Principal: "rec"}, Key: key, Reason: "provider search inconclusive"}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) op(tenant, key string) *opjournal.Operation {
	e.t.Helper()
	op, err := e.svc.Lookup(context.Background(), tenant, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so each answer is seen.
type browser struct {
	t   testing.TB
	e   *env
	hc  *http.Client
	url string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, url: e.srv.URL, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) get(path string) page {
	b.t.Helper()
	resp, err := b.hc.Get(b.url + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return read(b.t, resp)
}

func (b *browser) post(path string, form url.Values, headers ...string) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	return read(b.t, resp)
}

func read(t testing.TB, resp *http.Response) page {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{resp.StatusCode, resp.Header, string(body)}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t testing.TB, p page) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token in the page (%d): %.400s", p.status, p.body)
	}
	return m[1]
}

// signIn signs in with token and returns the session's CSRF token.
func (b *browser) signIn(token string) (page, string) {
	b.t.Helper()
	form := b.get("/console/signin")
	res := b.post("/console/signin", url.Values{"csrf": {csrfOf(b.t, form)}, "token": {token}})
	if res.status != http.StatusSeeOther {
		return res, ""
	}
	q := b.get("/console/queues")
	return res, csrfOf(b.t, q)
}

func TestSignInRefusesAgentsAndBadTokens(t *testing.T) {
	e := newEnv(t, true)
	for _, c := range []struct {
		token  string
		status int
		says   string
	}{
		{agentA, http.StatusForbidden, "cannot sign in to the console"},
		{metrA, http.StatusForbidden, "cannot sign in to the console"},
		{"not-a-token", http.StatusUnauthorized, "That token is not valid."},
		{"", http.StatusUnauthorized, "That token is not valid."},
	} {
		b := e.browser()
		res, _ := b.signIn(c.token)
		if res.status != c.status || !strings.Contains(res.body, c.says) {
			t.Fatalf("sign-in with %q: %d, want %d saying %q", c.token, res.status, c.status, c.says)
		}
		if strings.Contains(res.body, c.token) && c.token != "" {
			t.Fatalf("the token is echoed in the page")
		}
		if q := b.get("/console/queues"); q.status != http.StatusSeeOther || q.header.Get("Location") != "/console/signin" {
			t.Fatalf("after a refused sign-in the queues answer %d %s", q.status, q.header.Get("Location"))
		}
	}
	// The session cookie: HttpOnly, SameSite=Strict, the console's path.
	b := e.browser()
	form := b.get("/console/signin")
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/console/signin", strings.NewReader(url.Values{"csrf": {csrfOf(t, form)}, "token": {operA}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	u, _ := url.Parse(e.srv.URL + "/console/")
	for _, ck := range b.hc.Jar.Cookies(u) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session string
	for _, sc := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(sc, "opjournal_console=") {
			session = sc
		}
	}
	for _, want := range []string{"Path=/console/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(session, want) {
			t.Fatalf("session cookie %q lacks %s", session, want)
		}
	}
}

func TestSignInFormNeedsItsCSRFToken(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.get("/console/signin")
	res := b.post("/console/signin", url.Values{"token": {operA}})
	if res.status != http.StatusForbidden {
		t.Fatalf("sign-in without the form's token: %d", res.status)
	}
	if q := b.get("/console/queues"); q.status != http.StatusSeeOther {
		t.Fatalf("signed in by a forged form: %d", q.status)
	}
}

func TestDecideResolvesAsThePrincipal(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	e.escalate("team-a", "pay-1")
	b := e.browser()
	_, csrf := b.signIn(operA)
	q := b.get("/console/queues?queue=review")
	if !strings.Contains(q.body, "pay-1") {
		t.Fatalf("the review queue does not list pay-1")
	}
	op := b.get("/console/operation?key=pay-1")
	if op.status != 200 || strings.Contains(op.body, "4242424242424242") || !strings.Contains(op.body, "[redacted]") {
		t.Fatalf("operation page: %d, redacted card shown as stored? %v", op.status, strings.Contains(op.body, "[redacted]"))
	}
	form := url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"succeeded"}, "external_id": {"pi_77"}, "reason": {"charge pi_77 seen in the dashboard"}}
	confirm := b.post("/console/decide", form)
	if confirm.status != 200 || !strings.Contains(confirm.body, "never call the provider again") {
		t.Fatalf("confirmation: %d %.300s", confirm.status, confirm.body)
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusUnknown {
		t.Fatalf("the confirmation step changed the operation: %s", got.Status)
	}
	form.Set("step", "apply")
	done := b.post("/console/decide", form)
	if done.status != http.StatusSeeOther {
		t.Fatalf("apply: %d %.400s", done.status, done.body)
	}
	got := e.op("team-a", "pay-1")
	if got.Status != opjournal.StatusSucceeded || got.ExternalID != "pi_77" || got.NeedsReview {
		t.Fatalf("after the decision: %+v", got)
	}
	evs, err := e.svc.Events(context.Background(), journal.EventsRequest{Caller: journal.Caller{Tenant: "team-a"}, Key: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	last := evs.Events[len(evs.Events)-1]
	if last.Actor != "alice" || last.StatedActor != "console" || !strings.Contains(last.Reason, "charge pi_77 seen") {
		t.Fatalf("last event %+v", last)
	}
	if len(e.audits) != 1 || e.audits[0] != "Resolve team-a alice pay-1 succeeded" {
		t.Fatalf("audit %q", e.audits)
	}
	// A decision on a terminal operation is refused in the journal's words.
	again := b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {"oops"}, "step": {"apply"}})
	if again.status != http.StatusConflict || e.op("team-a", "pay-1").Status != opjournal.StatusSucceeded {
		t.Fatalf("second decision: %d", again.status)
	}
}

func TestForgedFormsChangeNothing(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	b := e.browser()
	_, csrf := b.signIn(operA)
	form := url.Values{"key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {"forged"}, "step": {"apply"}}
	for name, c := range map[string]struct {
		csrf    string
		headers []string
	}{
		"no token":           {"", nil},
		"wrong token":        {strings.Repeat("0", 64), nil},
		"another site":       {csrf, []string{"Origin", "http://evil.example"}},
		"cross-site request": {csrf, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		if c.csrf != "" {
			f.Set("csrf", c.csrf)
		}
		res := b.post("/console/decide", f, c.headers...)
		if res.status != http.StatusForbidden {
			t.Fatalf("%s: %d", name, res.status)
		}
		for _, path := range []string{"/console/bulk"} {
			f.Set("queue", "unknown")
			if res := b.post(path, f, c.headers...); res.status != http.StatusForbidden {
				t.Fatalf("%s on %s: %d", name, path, res.status)
			}
		}
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusUnknown {
		t.Fatalf("a forged form changed the operation: %s", got.Status)
	}
	// Another session's token is not this one's.
	other := e.browser()
	_, otherCSRF := other.signIn(operA)
	if otherCSRF == csrf {
		t.Fatal("two sessions share a CSRF token")
	}
}

func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-secret-a", nil)
	e.escalate("team-a", "pay-secret-a")
	b := e.browser()
	_, csrf := b.signIn(operB)
	for _, path := range []string{"/console/queues?queue=review", "/console/queues?queue=all", "/console/queues?queue=unknown", "/console/overview", "/console/bulk?queue=all"} {
		p := b.get(path)
		if p.status != 200 || strings.Contains(p.body, "pay-secret-a") {
			t.Fatalf("%s: %d, shows team-a's key: %v", path, p.status, strings.Contains(p.body, "pay-secret-a"))
		}
	}
	if p := b.get("/console/operation?key=pay-secret-a"); p.status != http.StatusNotFound {
		t.Fatalf("team-b reads team-a's operation: %d", p.status)
	}
	res := b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-secret-a"}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}})
	if res.status != http.StatusNotFound || e.op("team-a", "pay-secret-a").Status != opjournal.StatusUnknown {
		t.Fatalf("team-b decides on team-a's operation: %d", res.status)
	}
	res = b.post("/console/bulk", url.Values{"csrf": {csrf}, "queue": {"all"}, "verdict": {"failed_final"}, "reason": {"x"}})
	if !strings.Contains(res.body, "<strong>0</strong> operations match") {
		t.Fatalf("team-b's bulk count sees team-a: %.600s", res.body)
	}
}

func TestReconcilerIsReadOnly(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	b := e.browser()
	_, csrf := b.signIn(reconA)
	op := b.get("/console/operation?key=pay-1")
	if op.status != 200 || strings.Contains(op.body, `action="/console/decide"`) || !strings.Contains(op.body, "Read-only") {
		t.Fatalf("the reconciler's operation page offers decisions (%d)", op.status)
	}
	for _, verdict := range []string{"release", "failed_final"} {
		res := b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {verdict}, "attempt": {"1"}, "reason": {"x"}, "step": {"apply"}})
		if res.status != http.StatusForbidden {
			t.Fatalf("reconciler %s: %d", verdict, res.status)
		}
	}
	res := b.post("/console/bulk", url.Values{"csrf": {csrf}, "queue": {"unknown"}, "verdict": {"release"}, "reason": {"x"}, "step": {"apply"}})
	if res.status != http.StatusForbidden {
		t.Fatalf("reconciler bulk: %d", res.status)
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusUnknown || len(e.audits) != 0 {
		t.Fatalf("a read-only principal changed something: %s %v", got.Status, e.audits)
	}
}

func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	b := e.browser()
	_, csrf := b.signIn(operA)
	check := func(what string, p page, noStore bool) {
		t.Helper()
		csp := p.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Fatalf("%s: CSP %q lacks %s", what, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") {
			t.Fatalf("%s: CSP allows scripts: %q", what, csp)
		}
		if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%s: framing or sniffing headers missing", what)
		}
		if noStore && p.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: Cache-Control %q", what, p.header.Get("Cache-Control"))
		}
		if strings.Contains(p.body, "<script") || strings.Contains(p.body, " style=") || strings.Contains(p.body, " on") && regexp.MustCompile(` on[a-z]+=`).MatchString(p.body) {
			t.Fatalf("%s: the page has a script, an inline style or an event handler", what)
		}
	}
	for _, path := range []string{"/console/queues", "/console/queues?queue=unknown", "/console/operation?key=pay-1", "/console/overview", "/console/bulk?queue=unknown", "/console/nope", "/console/operation?key=missing", "/console/budgets", "/console/budgets?action=nope"} {
		check(path, b.get(path), true)
	}
	check("confirm", b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {"x"}}), true)
	check("forged", b.post("/console/decide", url.Values{"key": {"pay-1"}}), true)
	check("signin", e.browser().get("/console/signin"), true)
	css := b.get("/console/static/console.css")
	if css.status != 200 || !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") {
		t.Fatalf("stylesheet: %d %s", css.status, css.header.Get("Content-Type"))
	}
	check("css", css, false)
}

// TestBadInputIsAClearRefusal: malformed queries and forms get a 4xx page
// that names the problem, never a 5xx, and change nothing.
func TestBadInputIsAClearRefusal(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	b := e.browser()
	_, csrf := b.signIn(operA)
	gets := map[string]string{
		"/console/queues?queue=bogus":                                              "is not a queue",
		"/console/queues?status=weird":                                             "is not a status",
		"/console/queues?queue=unknown&status=succeeded":                           "holds only unknown",
		"/console/queues?refs=nonsense":                                            "is not name=value",
		"/console/queues?after=yesterday":                                          "is not a time",
		"/console/queues?queue=all&after=2026-12-02T00:00&before=2026-12-01T00:00": "updated_before",
		"/console/queues?queue=all&page=notatoken":                                 "page_token",
		"/console/queues?queue=all&key_prefix=" + strings.Repeat("k", 300):         "key_prefix",
		"/console/operation":                                                       "operation_key",
		"/console/operation?key=" + strings.Repeat("x", 500):                       "operation_key",
		"/console/overview?window=1y":                                              "", // an unknown window falls back to 24h
	}
	for path, says := range gets {
		p := b.get(path)
		if p.status >= 500 || (says != "" && (p.status < 400 || !strings.Contains(p.body, says))) {
			t.Fatalf("GET %s: %d, want a 4xx saying %q: %.300s", path, p.status, says, p.body)
		}
	}
	posts := []url.Values{
		{"key": {"pay-1"}, "verdict": {"explode"}, "reason": {"x"}, "step": {"apply"}},
		{"key": {"pay-1"}, "verdict": {"succeeded"}, "reason": {"x"}, "step": {"apply"}},                      // no external_id
		{"key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {""}, "step": {"apply"}},                    // no reason
		{"key": {"pay-1"}, "verdict": {"succeeded"}, "external_id": {"x"}, "result": {"[1"}, "reason": {"x"}}, // bad result
		{"key": {"pay-1"}, "verdict": {"release"}, "attempt": {"7"}, "reason": {"x"}, "step": {"apply"}},      // never issued
		{"key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {strings.Repeat("r", 5000)}, "step": {"apply"}},
		{"key": {""}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}},
	}
	for _, f := range posts {
		f.Set("csrf", csrf)
		p := b.post("/console/decide", f)
		if p.status < 400 || p.status >= 500 {
			t.Fatalf("POST %v: %d", f, p.status)
		}
	}
	bulk := []url.Values{
		{"queue": {"unknown"}, "verdict": {"succeeded"}, "reason": {"x"}},
		{"queue": {"nope"}, "verdict": {"failed_final"}, "reason": {"x"}},
		{"queue": {"unknown"}, "verdict": {"failed_final"}, "reason": {""}},
		{"queue": {"unknown"}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}, "digest": {"forged"}},
	}
	for _, f := range bulk {
		f.Set("csrf", csrf)
		p := b.post("/console/bulk", f)
		if p.status < 400 || p.status >= 500 {
			t.Fatalf("POST bulk %v: %d", f, p.status)
		}
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusUnknown || got.AttemptCount != 1 || len(e.audits) != 0 {
		t.Fatalf("bad input changed the operation: %+v %v", got, e.audits)
	}
}

// TestBulkCountsThenDecides: the dry run changes nothing and says how
// many; the decision covers exactly those; a selection that changed in
// between is refused.
func TestBulkCountsThenDecides(t *testing.T) {
	e := newEnv(t, true)
	for i := range 12 {
		e.unknownOp("team-a", fmt.Sprintf("batch-%02d", i), map[string]string{"batch": "b7"})
	}
	e.unknownOp("team-a", "other-1", map[string]string{"batch": "b8"})
	b := e.browser()
	_, csrf := b.signIn(operA)
	form := url.Values{"csrf": {csrf}, "queue": {"unknown"}, "refs": {"batch=b7"}, "verdict": {"failed_final"}, "error_code": {"not_charged"}, "reason": {"provider confirmed the outage: nothing charged"}}
	count := b.post("/console/bulk", form)
	if count.status != 200 || !strings.Contains(count.body, `<strong>12</strong> operations match; the decision applies to <strong id="applies">12</strong>`) {
		t.Fatalf("dry run: %d %.800s", count.status, count.body)
	}
	digest := regexp.MustCompile(`name="digest" value="([0-9a-f]+)"`).FindStringSubmatch(count.body)
	if digest == nil {
		t.Fatal("no digest in the count page")
	}
	for i := range 12 {
		if e.op("team-a", fmt.Sprintf("batch-%02d", i)).Status != opjournal.StatusUnknown {
			t.Fatal("the dry run changed an operation")
		}
	}
	// One more joins the selection before the confirmation: refused.
	e.unknownOp("team-a", "batch-99", map[string]string{"batch": "b7"})
	form.Set("step", "apply")
	form.Set("digest", digest[1])
	stale := b.post("/console/bulk", form)
	if stale.status != http.StatusConflict || e.op("team-a", "batch-00").Status != opjournal.StatusUnknown {
		t.Fatalf("a changed selection was decided: %d", stale.status)
	}
	form.Del("step")
	form.Del("digest")
	recount := b.post("/console/bulk", form)
	digest = regexp.MustCompile(`name="digest" value="([0-9a-f]+)"`).FindStringSubmatch(recount.body)
	form.Set("step", "apply")
	form.Set("digest", digest[1])
	done := b.post("/console/bulk", form)
	if done.status != 200 || !strings.Contains(done.body, `<strong id="decided">13</strong>`) {
		t.Fatalf("apply: %d %.600s", done.status, done.body)
	}
	for _, k := range []string{"batch-00", "batch-11", "batch-99"} {
		if got := e.op("team-a", k); got.Status != opjournal.StatusFailedFinal || got.ErrorCode != "not_charged" {
			t.Fatalf("%s after the bulk decision: %s %s", k, got.Status, got.ErrorCode)
		}
	}
	if got := e.op("team-a", "other-1"); got.Status != opjournal.StatusUnknown {
		t.Fatalf("an operation outside the selection was decided: %s", got.Status)
	}
	if len(e.audits) != 13 {
		t.Fatalf("%d audit lines, want 13", len(e.audits))
	}
}

func TestLocalModeIsTheLocalAdmin(t *testing.T) {
	e := newEnv(t, false)
	e.unknownOp("", "pay-local", nil)
	b := e.browser()
	if p := b.get("/console/signin"); p.status != http.StatusSeeOther {
		t.Fatalf("sign-in page without authentication: %d", p.status)
	}
	q := b.get("/console/queues?queue=unknown")
	if q.status != 200 || !strings.Contains(q.body, "No authentication.") || !strings.Contains(q.body, "pay-local") {
		t.Fatalf("local queues: %d", q.status)
	}
	csrf := csrfOf(t, b.get("/console/operation?key=pay-local"))
	res := b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-local"}, "verdict": {"failed_final"}, "reason": {"checked by hand"}, "step": {"apply"}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("local decision: %d %.300s", res.status, res.body)
	}
	evs, _ := e.svc.Events(context.Background(), journal.EventsRequest{Key: "pay-local"})
	if last := evs.Events[len(evs.Events)-1]; last.Actor != console.LocalAdmin {
		t.Fatalf("actor %q", last.Actor)
	}
	// Even without authentication a form needs the browser's CSRF token.
	if res := e.browser().post("/console/decide", url.Values{"key": {"pay-local"}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}}); res.status != http.StatusForbidden {
		t.Fatalf("local forged form: %d", res.status)
	}
}

func TestOperationPageShowsEverything(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	c := journal.Caller{Tenant: "team-a", Principal: "agent"}
	e.unknownOp("team-a", "pay-parent", map[string]string{"order_id": "o-1042"})
	if _, err := e.svc.Register(ctx, journal.RegisterRequest{Caller: c, Key: "mail-child", Action: "send_email", Payload: json.RawMessage(`{"to":"x"}`), ParentKey: "pay-parent"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.RecordCheck(ctx, journal.RecordCheckRequest{Caller: c, Key: "pay-parent", Attempt: 1, Note: "GET /payments?idempotency_key=pay-parent: 0 results", NextCheckAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Resolve(ctx, journal.ResolveRequest{Caller: c, Key: "pay-parent", To: opjournal.StatusSucceeded, ExternalID: "pi_1", Reason: "found"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Caller: c, Key: "pay-parent", Attempt: 1, ExternalID: "pi_2"}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(operA)
	p := b.get("/console/operation?key=pay-parent")
	for _, want := range []string{
		"order_id=o-1042", "mail-child", "0 results", "pi_2", "duplicate effect",
		`href="https://dash.example.com/payments/pi_1"`, "Acknowledge", "resolved by operator: found",
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("the operation page lacks %q", want)
		}
	}
	child := b.get("/console/operation?key=mail-child")
	if !strings.Contains(child.body, `href="/console/operation?key=pay-parent"`) {
		t.Fatal("the child does not link to its parent")
	}
}

// TestFormsAreLabelled: every visible form control of every page has a
// label (for= its id, or around it), each page has one h1, a language and
// a skip link, so screen readers and keyboards can use it.
func TestFormsAreLabelled(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "pay-1", nil)
	e.escalate("team-a", "pay-1")
	b := e.browser()
	_, csrf := b.signIn(operA)
	pages := map[string]page{
		"signin":   e.browser().get("/console/signin"),
		"queues":   b.get("/console/queues?queue=unknown"),
		"op":       b.get("/console/operation?key=pay-1"),
		"bulk":     b.get("/console/bulk?queue=unknown"),
		"counted":  b.post("/console/bulk", url.Values{"csrf": {csrf}, "queue": {"unknown"}, "verdict": {"failed_final"}, "reason": {"x"}}),
		"confirm":  b.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"failed_final"}, "reason": {"x"}}),
		"overview": b.get("/console/overview"),
		"budgets":  b.get("/console/budgets"),
		"error":    b.get("/console/nope"),
	}
	for name, p := range pages {
		doc, err := html.Parse(strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		labelFor := map[string]bool{}
		var controls []*html.Node
		h1s, skip, lang := 0, false, false
		var walk func(n *html.Node, inLabel bool)
		walk = func(n *html.Node, inLabel bool) {
			if n.Type == html.ElementNode {
				switch n.Data {
				case "html":
					lang = attr(n, "lang") != ""
				case "label":
					labelFor[attr(n, "for")] = true
					inLabel = true
				case "input", "select", "textarea":
					if typ := attr(n, "type"); typ != "hidden" && typ != "submit" && !inLabel {
						controls = append(controls, n)
					}
				case "h1":
					h1s++
				case "a":
					skip = skip || attr(n, "class") == "skip"
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c, inLabel)
			}
		}
		walk(doc, false)
		for _, c := range controls {
			if id := attr(c, "id"); id == "" || !labelFor[id] {
				t.Errorf("%s: a <%s name=%q> has no label", name, c.Data, attr(c, "name"))
			}
		}
		if h1s != 1 || !skip || !lang {
			t.Errorf("%s: %d h1, skip link %v, lang %v", name, h1s, skip, lang)
		}
	}
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

// TestOperationPageShowsTheNote: an operator's note shows on the operation
// page as text (markup in it is escaped, its line breaks kept by the
// page's style), with its event in the history; a cleared note leaves no
// trace on the state.
func TestOperationPageShowsTheNote(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	e.unknownOp("team-a", "pay-noted", nil)
	note := "customer <b>called</b>\nrefund via ticket 4711"
	if _, err := e.svc.SetNote(ctx, journal.SetNoteRequest{Caller: journal.Caller{Tenant: "team-a", Principal: "oper-a"}, Key: "pay-noted", Note: note}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(operA)
	p := b.get("/console/operation?key=pay-noted")
	for _, want := range []string{
		`<dt>Note</dt><dd class="note">customer &lt;b&gt;called&lt;/b&gt;` + "\nrefund via ticket 4711</dd>",
		"<td>note</td>",
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("the operation page lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, "<b>called</b>") {
		t.Fatal("the note's markup reached the page unescaped")
	}
	if _, err := e.svc.SetNote(ctx, journal.SetNoteRequest{Caller: journal.Caller{Tenant: "team-a", Principal: "oper-a"}, Key: "pay-noted"}); err != nil {
		t.Fatal(err)
	}
	if p := b.get("/console/operation?key=pay-noted"); strings.Contains(p.body, `<dd class="note">`) || strings.Contains(p.body, "ticket 4711") {
		t.Fatal("a cleared note still shows")
	}
}
