package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The console's decision routes attacked over HTTP against the real
// binary, as another site's page (or a stolen form) would attack them:
// without the CSRF token, with another session's token, with a signed-out
// session's token, from another origin; and by a signed-in operator
// aiming a bulk rejection at what is not theirs to reject. Each attack is
// followed by a check that the operations are exactly as they were.

// csrfAgentB is team-b's agent (consoleServer's tokens list it), so that
// team-b has operations to aim at.
const csrfAgentB = "tok-csrf-agent-b-61f0a9d2c4"

// consoleUser is one browser's cookies on the console: it follows no
// redirect, so each answer is seen.
type consoleUser struct {
	t    *testing.T
	base string
	jar  *cookiejar.Jar
	hc   *http.Client
}

func newConsoleUser(t *testing.T, p *proc) *consoleUser {
	jar, _ := cookiejar.New(nil)
	return &consoleUser{t: t, base: p.BaseURL, jar: jar, hc: &http.Client{Jar: jar, Timeout: callTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// consolePage is one answer of the console.
type consolePage struct {
	status int
	header http.Header
	body   string
}

func (u *consoleUser) get(path string) consolePage {
	u.t.Helper()
	return u.send(http.MethodGet, path, nil)
}

// post sends form to path with extra headers (name, value, …).
func (u *consoleUser) post(path string, form url.Values, headers ...string) consolePage {
	u.t.Helper()
	return u.send(http.MethodPost, path, form, headers...)
}

func (u *consoleUser) send(method, path string, form url.Values, headers ...string) consolePage {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u.base+path, body)
	if err != nil {
		u.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		u.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		u.t.Fatal(err)
	}
	return consolePage{resp.StatusCode, resp.Header, string(b)}
}

var consoleCSRFRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfIn(t *testing.T, p consolePage) string {
	t.Helper()
	m := consoleCSRFRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token in the page (%d): %.400s", p.status, p.body)
	}
	return m[1]
}

// signIn signs u in with token and returns the session's CSRF token, or
// fails the test.
func (u *consoleUser) signIn(token string) string {
	u.t.Helper()
	res := u.post("/console/signin", url.Values{"csrf": {csrfIn(u.t, u.get("/console/signin"))}, "token": {token}})
	if res.status != http.StatusSeeOther {
		u.t.Fatalf("sign-in: %d %.400s", res.status, res.body)
	}
	return csrfIn(u.t, u.get("/console/queues"))
}

// sessionCookie is u's console session cookie ("" for none).
func (u *consoleUser) sessionCookie() string {
	pu, _ := url.Parse(u.base + "/console/")
	for _, c := range u.jar.Cookies(pu) {
		if c.Name == "opjournal_console" {
			return c.Value
		}
	}
	return ""
}

// setSessionCookie replaces u's session cookie (an attacker replaying an
// old one).
func (u *consoleUser) setSessionCookie(v string) {
	pu, _ := url.Parse(u.base + "/console/")
	u.jar.SetCookies(pu, []*http.Cookie{{Name: "opjournal_console", Value: v, Path: "/console/"}})
}

// snapshot reads every operation of keys in full, by tenant client.
func snapshot(t *testing.T, c pb.JournalServiceClient, keys ...string) map[string]*pb.Operation {
	t.Helper()
	m := map[string]*pb.Operation{}
	for _, k := range keys {
		m[k] = lookup(t, ctxFor(t), c, k)
	}
	return m
}

// unchanged fails if any operation differs from its snapshot (status,
// review, attempts, note, updated_at: the whole record).
func unchanged(t *testing.T, what string, c pb.JournalServiceClient, before map[string]*pb.Operation) {
	t.Helper()
	for k, was := range before {
		if now := lookup(t, ctxFor(t), c, k); !proto.Equal(now, was) {
			t.Fatalf("%s changed %s:\nbefore %v\nafter  %v", what, k, was, now)
		}
	}
}

// TestConsoleCSRFEveryDecisionRoute: every POST route of the console that
// changes something (each verdict of /decide, /bulk, /approvals/reject,
// /signout), forged five ways, is refused with 403 (401 for a signed-out
// cookie) and changes nothing; the same forms with the session's own
// token then work, so the refusals were the CSRF defence's. The REST note
// route, which the console's cookie never reaches, answers a cookie-only
// POST with 401.
func TestConsoleCSRFEveryDecisionRoute(t *testing.T) {
	t.Parallel()
	p := consoleServer(t)
	agent := as(t, p, consoleAgentA)
	ctx := ctxFor(t)
	unknownPayment(t, agent, "csrf-unknown", nil)
	// A terminal operation under review (a duplicate effect), for
	// acknowledge.
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: "csrf-review", ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "o-1", "amount_minor": 4900, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}}); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"pay_1", "pay_2"} {
		if _, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "csrf-review", Attempt: 1, ExternalId: ext}); err != nil {
			t.Fatal(err)
		}
	}
	await := awaitingPayment(t, agent, "csrf-await", 250000)
	keys := []string{"csrf-unknown", "csrf-review", "csrf-await"}
	before := snapshot(t, agent, keys...)
	if !before["csrf-review"].GetNeedsReview() {
		t.Fatalf("csrf-review is not under review: %v", before["csrf-review"])
	}

	forms := map[string]struct {
		path string
		form url.Values
	}{
		"resolve succeeded": {"/console/decide", url.Values{"key": {"csrf-unknown"}, "verdict": {"succeeded"}, "external_id": {"pay_forged"}, "reason": {"forged"}, "step": {"apply"}}},
		"resolve failed":    {"/console/decide", url.Values{"key": {"csrf-unknown"}, "verdict": {"failed_final"}, "reason": {"forged"}, "step": {"apply"}}},
		"release":           {"/console/decide", url.Values{"key": {"csrf-unknown"}, "verdict": {"release"}, "attempt": {"1"}, "reason": {"forged"}, "step": {"apply"}}},
		"acknowledge":       {"/console/decide", url.Values{"key": {"csrf-review"}, "verdict": {"acknowledge"}, "reason": {"forged"}, "step": {"apply"}}},
		"approve":           {"/console/decide", url.Values{"key": {"csrf-await"}, "verdict": {"approve"}, "request_hash": {await.RequestHash}, "reason": {"forged"}, "step": {"apply"}}},
		"reject":            {"/console/decide", url.Values{"key": {"csrf-await"}, "verdict": {"reject"}, "request_hash": {await.RequestHash}, "reason": {"forged"}, "step": {"apply"}}},
		"bulk failed":       {"/console/bulk", url.Values{"queue": {"all"}, "verdict": {"failed_final"}, "reason": {"forged"}, "step": {"apply"}}},
		"bulk reject":       {"/console/approvals/reject", url.Values{"verdict": {"reject"}, "op": {"csrf-await " + await.RequestHash}, "reason": {"forged"}, "step": {"apply"}}},
		"sign out":          {"/console/signout", url.Values{}},
	}

	alice := newConsoleUser(t, p)
	// A session alice signed out of: its CSRF token and its cookie.
	oldCSRF := alice.signIn(consoleOperA)
	oldCookie := alice.sessionCookie()
	if res := alice.post("/console/signout", url.Values{"csrf": {oldCSRF}}); res.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", res.status)
	}
	csrf := alice.signIn(consoleOperA)
	cookie := alice.sessionCookie()
	// Another session of the same person, and bob's (another tenant).
	otherCSRF := newConsoleUser(t, p).signIn(consoleOperA)
	bobCSRF := newConsoleUser(t, p).signIn(consoleOperB)
	if otherCSRF == csrf || bobCSRF == csrf || oldCSRF == csrf {
		t.Fatal("two sessions share a CSRF token")
	}

	attacks := []struct {
		name    string
		csrf    string
		cookie  string // "" keeps alice's live session
		headers []string
		status  int
	}{
		{"no CSRF token", "", "", nil, http.StatusForbidden},
		{"a made-up token", strings.Repeat("0", 64), "", nil, http.StatusForbidden},
		{"another session's token (same person)", otherCSRF, "", nil, http.StatusForbidden},
		{"another tenant's session's token", bobCSRF, "", nil, http.StatusForbidden},
		{"the token of a signed-out session", oldCSRF, "", nil, http.StatusForbidden},
		{"a signed-out session's cookie and token", oldCSRF, oldCookie, nil, http.StatusUnauthorized},
		{"the right token, Origin of another site", csrf, "", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"the right token, Origin of another port", csrf, "", []string{"Origin", "http://127.0.0.1:1"}, http.StatusForbidden},
		{"the right token, Sec-Fetch-Site cross-site", csrf, "", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"the right token, Sec-Fetch-Site same-site", csrf, "", []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
	}
	for _, a := range attacks {
		for name, f := range forms {
			form := url.Values{}
			for k, v := range f.form {
				form[k] = v
			}
			if a.csrf != "" {
				form.Set("csrf", a.csrf)
			}
			if a.cookie != "" {
				alice.setSessionCookie(a.cookie)
			}
			res := alice.post(f.path, form, a.headers...)
			if a.cookie != "" {
				alice.setSessionCookie(cookie)
			}
			if res.status != a.status {
				t.Errorf("%s, %s (%s): %d, want %d: %.300s", a.name, name, f.path, res.status, a.status, res.body)
			}
			if !strings.Contains(res.body, "nothing was changed") {
				t.Errorf("%s, %s: the answer does not say nothing was changed: %.300s", a.name, name, res.body)
			}
		}
	}
	unchanged(t, "a forged form", agent, before)
	// The forged sign-outs did not end alice's session.
	if res := alice.get("/console/queues"); res.status != http.StatusOK {
		t.Fatalf("alice's session after the forged sign-outs: %d", res.status)
	}

	// A note is not a console decision: the console has no note route,
	// and the REST route needs a bearer token, which no page can add to a
	// cross-site form (the console's cookie is not sent to /v1/ anyway).
	if res := alice.post("/console/note", url.Values{"csrf": {csrf}, "key": {"csrf-unknown"}, "note": {"forged"}}); res.status != http.StatusNotFound {
		t.Errorf("POST /console/note: %d", res.status)
	}
	if res := alice.send(http.MethodPost, "/v1/operations:note", nil, "Content-Type", "text/plain", "Origin", "http://evil.example"); res.status != http.StatusUnauthorized {
		t.Errorf("a cookie-only POST to the REST note route: %d %s", res.status, res.body)
	}
	unchanged(t, "a forged note", agent, before)

	// The same forms with alice's own token and no foreign origin work:
	// the refusals above were the CSRF defence, not bad forms.
	for _, name := range []string{"reject", "acknowledge", "resolve failed"} {
		f := forms[name]
		form := url.Values{}
		for k, v := range f.form {
			form[k] = v
		}
		form.Set("csrf", csrf)
		if res := alice.post(f.path, form, "Origin", p.BaseURL, "Sec-Fetch-Site", "same-origin"); res.status != http.StatusSeeOther {
			t.Fatalf("%s with the session's token: %d %.400s", name, res.status, res.body)
		}
	}
	after := snapshot(t, agent, keys...)
	if after["csrf-await"].GetStatus() != pb.Status_STATUS_FAILED_FINAL || after["csrf-review"].GetNeedsReview() || after["csrf-unknown"].GetStatus() != pb.Status_STATUS_FAILED_FINAL {
		t.Fatalf("the genuine decisions did not apply: %v", after)
	}
}

// TestConsoleBulkRejectTakesOnlyWhatIsYours: a signed-in operator's bulk
// rejection aimed at another tenant's operation (by its key, and by a key
// both tenants use, with the other tenant's hash), at an operation not
// awaiting approval, with a duplicate, and lists too long: only the
// caller's own awaiting operation is rejected, once; the answer counts
// it and names each refusal; nothing of team-b changes. A reconciler's
// session and an agent's token reach no decision route.
func TestConsoleBulkRejectTakesOnlyWhatIsYours(t *testing.T) {
	t.Parallel()
	p := consoleServer(t)
	agentA, agentB := as(t, p, consoleAgentA), as(t, p, csrfAgentB)
	mine := awaitingPayment(t, agentA, "bulk-mine", 250000)
	sharedA := awaitingPayment(t, agentA, "bulk-shared", 300000)
	sharedB := awaitingPayment(t, agentB, "bulk-shared", 310000)
	theirs := awaitingPayment(t, agentB, "bulk-theirs", 250000)
	unknownPayment(t, agentA, "bulk-unknown", nil)
	if sharedA.RequestHash == sharedB.RequestHash {
		t.Fatal("the two tenants' bulk-shared have one hash")
	}
	teamA := snapshot(t, agentA, "bulk-shared", "bulk-unknown")
	teamB := snapshot(t, agentB, "bulk-shared", "bulk-theirs")
	unknownHash := teamA["bulk-unknown"].GetRequestHash()

	alice := newConsoleUser(t, p)
	csrf := alice.signIn(consoleOperA)
	reject := func(ops []string, step string) consolePage {
		return alice.post("/console/approvals/reject", url.Values{"csrf": {csrf}, "verdict": {"reject"}, "reason": {"looping agent"}, "step": {step}, "op": ops})
	}
	// Too many: 201 (one over the bound) and 5,000; and a form over the
	// console's 1 MiB bound. Refused whole, nothing changed.
	for _, n := range []int{201, 5000} {
		ops := make([]string, n)
		for i := range ops {
			ops[i] = fmt.Sprintf("bulk-mine-%d %s", i, mine.RequestHash)
		}
		ops[0] = "bulk-mine " + mine.RequestHash
		if res := reject(ops, "apply"); res.status != http.StatusBadRequest || !strings.Contains(res.body, "at most 200") {
			t.Fatalf("a list of %d: %d %.300s", n, res.status, res.body)
		}
	}
	huge := make([]string, 9000)
	for i := range huge {
		huge[i] = fmt.Sprintf("bulk-mine %s%0120d", mine.RequestHash, i)
	}
	if res := reject(huge, "apply"); res.status < 400 || res.status > 499 {
		t.Fatalf("a form over 1 MiB: %d %.300s", res.status, res.body)
	}
	if op := lookup(t, ctxFor(t), agentA, "bulk-mine"); op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("a refused list changed bulk-mine: %s", op.GetStatus())
	}

	ops := []string{
		"bulk-mine " + mine.RequestHash,
		"bulk-mine " + mine.RequestHash, // a duplicate
		"bulk-theirs " + theirs.RequestHash,
		"bulk-shared " + sharedB.RequestHash,
		"bulk-unknown " + unknownHash,
	}
	// The review step lists what would be rejected, and changes nothing.
	review := reject(ops, "review")
	if review.status != http.StatusOK || !strings.Contains(review.body, "Confirm: reject 1 operation") {
		t.Fatalf("review: %d %.1500s", review.status, review.body)
	}
	if op := lookup(t, ctxFor(t), agentA, "bulk-mine"); op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("the review step changed bulk-mine: %s", op.GetStatus())
	}
	done := reject(ops, "apply")
	if done.status != http.StatusOK || !strings.Contains(done.body, `<strong id="decided">1</strong>`) {
		t.Fatalf("apply: %d %.1500s", done.status, done.body)
	}
	for _, k := range []string{"bulk-theirs", "bulk-shared", "bulk-unknown"} {
		if !regexp.MustCompile(`>` + k + `</a>: \S`).MatchString(done.body) {
			t.Errorf("the answer does not name the refusal of %s: %.2000s", k, done.body)
		}
	}
	if op := lookup(t, ctxFor(t), agentA, "bulk-mine"); op.GetStatus() != pb.Status_STATUS_FAILED_FINAL || op.GetErrorCode() != "approval_rejected" {
		t.Fatalf("bulk-mine after the rejection: %s %s", op.GetStatus(), op.GetErrorCode())
	}
	res, err := as(t, p, consoleReconA).ListEvents(ctxFor(t), &pb.ListEventsRequest{OperationKey: "bulk-mine"})
	if err != nil {
		t.Fatal(err)
	}
	rejections := 0
	for _, e := range res.GetEvents() {
		if e.GetToStatus() == pb.Status_STATUS_FAILED_FINAL {
			rejections++
		}
	}
	if rejections != 1 {
		t.Fatalf("bulk-mine has %d rejection events, want 1 (the duplicate counted twice?)", rejections)
	}
	unchanged(t, "alice's bulk rejection", agentB, teamB)
	unchanged(t, "alice's bulk rejection", agentA, teamA)

	// A reconciler's session: every decision route 403, nothing changed.
	theirsBefore := snapshot(t, agentA, "bulk-shared", "bulk-unknown")
	recon := newConsoleUser(t, p)
	rcsrf := recon.signIn(consoleReconA)
	for name, f := range map[string]struct {
		path string
		form url.Values
	}{
		"reject":      {"/console/decide", url.Values{"key": {"bulk-shared"}, "verdict": {"reject"}, "request_hash": {sharedA.RequestHash}, "reason": {"x"}, "step": {"apply"}}},
		"approve":     {"/console/decide", url.Values{"key": {"bulk-shared"}, "verdict": {"approve"}, "request_hash": {sharedA.RequestHash}, "reason": {"x"}, "step": {"apply"}}},
		"resolve":     {"/console/decide", url.Values{"key": {"bulk-unknown"}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}}},
		"release":     {"/console/decide", url.Values{"key": {"bulk-unknown"}, "verdict": {"release"}, "attempt": {"1"}, "reason": {"x"}, "step": {"apply"}}},
		"bulk":        {"/console/bulk", url.Values{"queue": {"all"}, "verdict": {"failed_final"}, "reason": {"x"}, "step": {"apply"}}},
		"bulk reject": {"/console/approvals/reject", url.Values{"verdict": {"reject"}, "op": {"bulk-shared " + sharedA.RequestHash}, "reason": {"x"}, "step": {"apply"}}},
	} {
		f.form.Set("csrf", rcsrf)
		if res := recon.post(f.path, f.form); res.status != http.StatusForbidden {
			t.Errorf("the reconciler's %s: %d %.300s", name, res.status, res.body)
		}
	}
	unchanged(t, "the reconciler's session", agentA, theirsBefore)

	// An agent's token: no console sign-in, and as a bearer token it is no
	// session.
	agentUser := newConsoleUser(t, p)
	if res := agentUser.post("/console/signin", url.Values{"csrf": {csrfIn(t, agentUser.get("/console/signin"))}, "token": {consoleAgentA}}); res.status != http.StatusForbidden || agentUser.sessionCookie() != "" {
		t.Fatalf("an agent's sign-in: %d cookie %q", res.status, agentUser.sessionCookie())
	}
	for _, path := range []string{"/console/decide", "/console/bulk", "/console/approvals/reject"} {
		status, _, body := doAs(t, consoleAgentA, http.MethodPost, p.BaseURL+path, "key=bulk-unknown&verdict=failed_final&reason=x&step=apply&queue=all")
		if status != http.StatusUnauthorized {
			t.Errorf("an agent's bearer token on %s: %d %.300s", path, status, body)
		}
	}
	unchanged(t, "the agent's token", agentA, theirsBefore)
}
