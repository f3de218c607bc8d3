package console_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/console"
)

// sessionCookieOf returns the browser's console session cookie value.
func (b *browser) sessionCookieOf() string {
	b.t.Helper()
	u, _ := url.Parse(b.url + "/console/")
	for _, ck := range b.hc.Jar.Cookies(u) {
		if ck.Name == "opjournal_console" {
			return ck.Value
		}
	}
	return ""
}

// withCookie is a fresh browser that carries only the session cookie v,
// as someone who copied it would.
func (e *env) withCookie(v string) *browser {
	b := e.browser()
	u, _ := url.Parse(e.srv.URL + "/console/")
	b.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "opjournal_console", Value: v, Path: "/console/"}})
	return b
}

// signedOut reports whether b is sent to the sign-in page.
func signedOut(b *browser) bool {
	q := b.get("/console/queues")
	return q.status == http.StatusSeeOther && q.header.Get("Location") == "/console/signin"
}

func TestSignOutEndsTheSessionOnTheServer(t *testing.T) {
	e := newEnv(t, true)
	e.unknownOp("team-a", "payment:order-1:intent-01", nil)
	b := e.browser()
	if _, csrf := b.signIn(operA); csrf == "" {
		t.Fatal("sign-in failed")
	}
	cookie := b.sessionCookieOf()
	// A copy of the cookie works while the session lives...
	copied := e.withCookie(cookie)
	q := copied.get("/console/queues")
	if q.status != http.StatusOK {
		t.Fatalf("the session's cookie in another browser: %d", q.status)
	}
	csrf := csrfOf(t, q)
	if res := b.post("/console/signout", url.Values{"csrf": {csrf}}); res.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", res.status)
	}
	// ...and is worth nothing once its session signed out: pages go to
	// the sign-in, and a decision with the session's CSRF token is
	// refused and changes nothing.
	copied = e.withCookie(cookie)
	if !signedOut(copied) {
		t.Fatal("the cookie of a signed-out session still opens the console")
	}
	res := copied.post("/console/decide", url.Values{"csrf": {csrf}, "key": {"payment:order-1:intent-01"}, "verdict": {"failed_final"},
		"reason": {"replayed cookie"}, "confirm": {"yes"}, "attempt": {"1"}})
	if res.status != http.StatusUnauthorized {
		t.Fatalf("a decision with the cookie of a signed-out session: %d", res.status)
	}
	if op := e.op("team-a", "payment:order-1:intent-01"); op.Status != "unknown" {
		t.Fatalf("the operation changed to %s", op.Status)
	}
}

func TestSessionCookieHoldsNothingOfTheToken(t *testing.T) {
	e := newEnv(t, true)
	b := e.browser()
	b.signIn(operA)
	v := b.sessionCookieOf()
	if _, err := hex.DecodeString(v); err != nil || len(v) < 32 {
		t.Fatalf("session cookie %q is not a random id of at least 128 bits", v)
	}
	d := sha256.Sum256([]byte(operA))
	for _, form := range []string{operA, base64.RawURLEncoding.EncodeToString([]byte(operA)), base64.StdEncoding.EncodeToString([]byte(operA)),
		hex.EncodeToString(d[:]), hex.EncodeToString([]byte(operA))} {
		if strings.Contains(v, form) {
			t.Fatalf("the session cookie contains the token (as %q)", form)
		}
	}
	// Two sign-ins with the same token are two sessions.
	b2 := e.browser()
	b2.signIn(operA)
	if b2.sessionCookieOf() == v {
		t.Fatal("two sign-ins got the same session id")
	}
}

func TestSessionsExpireWhenIdleAndAfterTheirLifetime(t *testing.T) {
	clock := testclock.New()
	e := newEnvWith(t, true, func(c *console.Config) {
		c.Now, c.SessionIdle, c.SessionLifetime = clock.Now, 10*time.Minute, time.Hour
	})
	b := e.browser()
	b.signIn(operA)
	for i := range 6 { // used every 9 minutes: never idle for 10
		clock.Advance(9 * time.Minute)
		if signedOut(b) {
			t.Fatalf("a session in use ended at %d minutes", 9*(i+1))
		}
	}
	clock.Advance(7 * time.Minute) // 61 minutes after its sign-in
	if !signedOut(b) {
		t.Fatal("a session outlived its lifetime")
	}
	b = e.browser()
	b.signIn(operA)
	clock.Advance(11 * time.Minute)
	if !signedOut(b) {
		t.Fatal("an idle session did not expire")
	}
}

func TestSessionsAreBounded(t *testing.T) {
	e := newEnvWith(t, true, func(c *console.Config) { c.MaxSessions = 2 })
	first, second, third := e.browser(), e.browser(), e.browser()
	first.signIn(operA)
	second.signIn(operB)
	third.signIn(adminA)
	if !signedOut(first) {
		t.Fatal("a third session over a bound of two kept the least recently used one")
	}
	if signedOut(second) || signedOut(third) {
		t.Fatal("the newer sessions ended")
	}
}

func TestSessionCookieIsSecureOnlyWhenServedOverHTTPS(t *testing.T) {
	for _, c := range []struct {
		name   string
		tune   func(*console.Config)
		header string
		secure bool
	}{
		{"plain http", nil, "", false},
		{"a client's X-Forwarded-Proto is not trusted by default", nil, "https", false},
		{"https public URL", func(c *console.Config) { c.PublicURL = "https://journal.example" }, "", true},
		{"trusted proxy header", func(c *console.Config) { c.TrustProxyHeaders = true }, "https", true},
		{"trusted proxy says http", func(c *console.Config) { c.TrustProxyHeaders = true }, "http", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvWith(t, true, c.tune)
			b := e.browser()
			form := b.get("/console/signin")
			headers := []string{}
			if c.header != "" {
				headers = append(headers, "X-Forwarded-Proto", c.header)
			}
			// The jar would not send a Secure cookie back over http, so
			// the Set-Cookie line is read directly.
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/console/signin", strings.NewReader(url.Values{"csrf": {csrfOf(t, form)}, "token": {operA}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for i := 0; i+1 < len(headers); i += 2 {
				req.Header.Set(headers[i], headers[i+1])
			}
			u, _ := url.Parse(e.srv.URL + "/console/")
			for _, ck := range b.hc.Jar.Cookies(u) {
				req.AddCookie(ck)
			}
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var line string
			for _, sc := range resp.Header.Values("Set-Cookie") {
				if strings.HasPrefix(sc, "opjournal_console=") {
					line = sc
				}
			}
			if line == "" {
				t.Fatalf("no session cookie (status %d)", resp.StatusCode)
			}
			if got := strings.Contains(line, "; Secure"); got != c.secure {
				t.Fatalf("session cookie %q: Secure %v, want %v", line, got, c.secure)
			}
			for _, want := range []string{"HttpOnly", "SameSite=Strict"} {
				if !strings.Contains(line, want) {
					t.Fatalf("session cookie %q lacks %s", line, want)
				}
			}
		})
	}
}

func TestPublicURLMustBeHTTP(t *testing.T) {
	for _, bad := range []string{"journal.example", "ftp://journal.example", "https://"} {
		_, err := console.New(console.Config{Service: newEnv(t, false).svc, HTTPStatus: server.HTTPStatus, PublicURL: bad})
		if err == nil {
			t.Errorf("public URL %q accepted", bad)
		}
	}
}
