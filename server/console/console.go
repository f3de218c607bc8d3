// Package console is the operators' web console, served by `opjournal
// serve` under /console/ on its HTTP listener: the queues of operations
// that need a person (under review, outcome unknown, expired leases), one
// operation with everything known about it, the audited decisions
// (resolve, release for retry, acknowledge; one by one or over a filtered
// selection after a dry-run count), the approvals, the budgets' counters
// and an overview with small charts.
//
// It is server-rendered html/template with one embedded stylesheet and no
// JavaScript at all: every page reads and every decision works in any
// browser, with a keyboard, at any zoom, and the Content-Security-Policy
// can forbid scripts outright. Confirmation is a server-rendered step, the
// charts are server-rendered SVG, and auto-refresh is a meta refresh.
//
// Identity comes from the journal's tokens (auth.Authenticator): an
// operator signs in with its bearer token, and the console keeps a
// server-side session (session.go) whose random id is the HttpOnly,
// SameSite=Strict cookie scoped to /console/ (Secure when the console is
// served over https). The cookie holds nothing of the token and is no
// bearer token; sign-out, expiry, a restart or the token's removal from
// the tokens file ends the session. Every form carries a CSRF token bound
// to that cookie. The principal's tenant scopes every read and write; its roles
// decide what it may do (auth.Principal.MayUseConsole, MayDecide). Without
// an authenticator (a journal on loopback without --auth-file) every
// visitor is the local admin of the default tenant, and each page says so.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/server/auth"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// LocalAdmin is the principal of every visitor of a console without
// authentication; the history records it as the actor.
const LocalAdmin = "local-admin"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Console.
type Config struct {
	// Service is the journal the console reads and changes.
	Service *journal.Service
	// Auth authenticates the tokens operators sign in with; nil serves
	// every visitor as LocalAdmin of the default tenant.
	Auth *auth.Authenticator
	// Allow applies the principal's rate limit (nil: no limit), as every
	// API call does.
	Allow func(auth.Principal) bool
	// Audit records one successful decision as the API records its calls:
	// the audit line (method, key, principal, tenant, status after) and,
	// for Approve and Reject, the approval decision metrics; op is the
	// operation after the decision. nil records nothing.
	Audit func(ctx context.Context, method string, c journal.Caller, op *opjournal.Operation)
	// HTTPStatus maps an error code to its HTTP status: the server's one
	// table (server.HTTPStatus), so a page answers as the API does.
	HTTPStatus func(opjournal.Code) int
	// Purges returns the server's recent purge passes, newest first (nil:
	// none). Shown to admins only: they count every tenant's rows.
	Purges func() []journal.PurgePass
	// Logger receives warnings (failed sign-ins, refusals); never a token,
	// payload or result.
	Logger *slog.Logger
	// Now is the clock of ages and charts, and of session expiry (default
	// time.Now).
	Now func() time.Time
	// PublicURL is the console's external URL (scheme and host) when a
	// proxy in front serves it: an https one marks the session cookie
	// Secure, and a form's Origin may be it.
	PublicURL string
	// TrustProxyHeaders lets X-Forwarded-Proto: https mark the cookie
	// Secure. Only for a console behind a proxy that sets the header
	// itself: otherwise any client could.
	TrustProxyHeaders bool
	// SessionIdle ends a session unused this long (default
	// DefaultSessionIdle); SessionLifetime ends any session this long
	// after its sign-in (default DefaultSessionLifetime); MaxSessions
	// bounds how many are held (default DefaultMaxSessions).
	SessionIdle     time.Duration
	SessionLifetime time.Duration
	MaxSessions     int
}

// Console is the console's http.Handler. Mount it at Prefix.
type Console struct {
	cfg    Config
	svc    *journal.Service
	log    *slog.Logger
	pages  map[string]*template.Template
	static http.Handler
	// secret keys the CSRF tokens: random per process, so a form from
	// before a restart is refused and must be reloaded.
	secret []byte
	mux    *http.ServeMux
	// sessions are the signed-in sessions (with Auth).
	sessions *sessions
	// publicOrigin is PublicURL's scheme://host ("" without one), and
	// publicHTTPS whether it is https.
	publicOrigin string
	publicHTTPS  bool
}

// New returns a Console.
func New(cfg Config) (*Console, error) {
	if cfg.Service == nil || cfg.HTTPStatus == nil {
		return nil, errors.New("console: a journal service and its HTTP status table are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionLifetime <= 0 {
		cfg.SessionLifetime = DefaultSessionLifetime
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	c := &Console{cfg: cfg, svc: cfg.Service, log: cfg.Logger, secret: make([]byte, 32),
		sessions: &sessions{by: map[string]*heldSession{}, idle: cfg.SessionIdle, lifetime: cfg.SessionLifetime, max: cfg.MaxSessions, now: cfg.Now}}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("console: the public URL %q is not an http:// or https:// URL with a host", cfg.PublicURL)
		}
		c.publicOrigin, c.publicHTTPS = u.Scheme+"://"+u.Host, u.Scheme == "https"
	}
	if _, err := rand.Read(c.secret); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	var err error
	if c.pages, err = parseTemplates(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))
	m := http.NewServeMux()
	m.HandleFunc("GET "+Prefix+"{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"queues", http.StatusSeeOther)
	})
	m.HandleFunc("GET "+Prefix+"static/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		c.static.ServeHTTP(w, r)
	})
	m.HandleFunc("GET "+Prefix+"signin", c.signInPage)
	m.HandleFunc("POST "+Prefix+"signin", c.signIn)
	m.HandleFunc("POST "+Prefix+"signout", c.signedIn(c.signOut))
	m.HandleFunc("GET "+Prefix+"queues", c.signedIn(c.queues))
	m.HandleFunc("GET "+Prefix+"operation", c.signedIn(c.operation))
	m.HandleFunc("POST "+Prefix+"decide", c.signedIn(c.decide))
	m.HandleFunc("GET "+Prefix+"bulk", c.signedIn(c.bulkForm))
	m.HandleFunc("POST "+Prefix+"bulk", c.signedIn(c.bulk))
	m.HandleFunc("GET "+Prefix+"overview", c.signedIn(c.overview))
	m.HandleFunc("GET "+Prefix+"approvals", c.signedIn(c.approvals))
	m.HandleFunc("POST "+Prefix+"approvals/reject", c.signedIn(c.bulkReject))
	m.HandleFunc("GET "+Prefix+"budgets", c.signedIn(c.budgets))
	m.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "There is no console page "+r.URL.Path+".")
	})
	c.mux = m
	return c, nil
}

// ServeHTTP serves the console with its security headers on every answer.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script may run, no style or image from elsewhere, no framing,
	// forms post only back here.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// Operation keys are in the URLs: never send them to another site.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	// Pages show payloads, results and decisions: never cached, by the
	// browser or anyone between. The stylesheet overrides this.
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// session is the signed-in visitor of one request.
type session struct {
	Principal auth.Principal
	// Local: no authentication, the visitor is LocalAdmin.
	Local bool
	// CSRF is the token every form of this session carries.
	CSRF string
	// id is the server-side session's (none in local mode).
	id string
}

// caller is the journal caller the session acts as.
func (s *session) caller() journal.Caller {
	c := journal.Caller{Tenant: s.Principal.Tenant, Principal: s.Principal.ID, Label: s.Principal.Name, FormerNames: s.Principal.FormerNames}
	if !s.Local {
		// The journal checks roles where the policy reserves a decision
		// to some (an approval's approvers), as the API's callers are
		// checked; the local admin, like the API without
		// authentication, has none to check.
		for _, r := range s.Principal.Roles {
			c.Roles = append(c.Roles, string(r))
		}
	}
	return c
}

// mayDecide reports whether the session may call the decision method.
func (s *session) mayDecide(method string) bool { return s.Principal.MayDecide(method) }

const (
	sessionCookie = "opjournal_console"
	signInCookie  = "opjournal_console_signin"
)

// csrfFor returns the CSRF token of a cookie value: an HMAC under the
// process's secret, so it cannot be made without the cookie, nor the
// cookie (the bearer token) learnt from it.
func (c *Console) csrfFor(purpose, cookie string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(cookie))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.https(r)})
}

// https reports whether the browser reaches the console over https: this
// listener's TLS, an https PublicURL, or (only when the proxy is trusted)
// the proxy's X-Forwarded-Proto. A client's own header counts for nothing
// by default: it could otherwise make the cookie travel over plain http.
func (c *Console) https(r *http.Request) bool {
	if r.TLS != nil || c.publicHTTPS {
		return true
	}
	if c.cfg.TrustProxyHeaders {
		proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
		return strings.EqualFold(strings.TrimSpace(proto), "https")
	}
	return false
}

// sessionOf returns the request's session, or why there is none.
func (c *Console) sessionOf(w http.ResponseWriter, r *http.Request) (*session, error) {
	ck, err := r.Cookie(sessionCookie)
	if c.cfg.Auth == nil {
		// Local mode: the cookie is only a random value that binds the
		// CSRF tokens to this browser.
		if err != nil || !strings.HasPrefix(ck.Value, "local.") {
			v := "local." + randomHex()
			c.setCookie(w, r, sessionCookie, v, 0)
			ck = &http.Cookie{Value: v}
		}
		return &session{Principal: auth.Principal{ID: LocalAdmin, Name: LocalAdmin, Roles: []auth.Role{auth.RoleAdmin}},
			Local: true, CSRF: c.csrfFor("session", ck.Value)}, nil
	}
	if err != nil || ck.Value == "" {
		return nil, errNotSignedIn
	}
	// The cookie is the id of a session this server holds; each sign-in
	// makes a new one, with its own CSRF token.
	si := c.sessions.get(ck.Value)
	if si == nil {
		// Signed out, expired, or from before a restart.
		c.setCookie(w, r, sessionCookie, "", -1)
		return nil, errNotSignedIn
	}
	p, err := c.cfg.Auth.AuthenticateDigest(si.digest)
	if err != nil || p.Name != si.name || !p.MayUseConsole() {
		// The tokens file no longer lists the token (or lists it under
		// another name or without a console role): the session ends.
		c.sessions.end(ck.Value)
		c.setCookie(w, r, sessionCookie, "", -1)
		return nil, errNotSignedIn
	}
	return &session{Principal: p, CSRF: c.csrfFor("session", ck.Value), id: ck.Value}, nil
}

var errNotSignedIn = errors.New("not signed in")

// signedIn wraps a page: the visitor must be signed in (else it goes to
// the sign-in page), within its tenant's rate, and a POST must carry the
// session's CSRF token and come from this origin.
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(w, r)
		if err != nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, http.StatusUnauthorized, "You are not signed in (or your token is no longer valid); nothing was changed. Sign in and try again.")
			return
		}
		if c.cfg.Allow != nil && !c.cfg.Allow(s.Principal) {
			w.Header().Set("Retry-After", "1")
			c.fail(w, r, s, http.StatusTooManyRequests, "You are over your rate limit; try again in a second. Nothing was changed.")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if !c.sameOrigin(r) || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) {
				c.log.Warn("console: form refused: no valid CSRF token", "path", r.URL.Path, "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "peer", r.RemoteAddr)
				c.fail(w, r, s, http.StatusForbidden, "This form did not come from your console session (its CSRF token is missing or stale); nothing was changed. Reload the page and try again.")
				return
			}
		}
		h(w, r, s)
	}
}

// maxFormBytes bounds a form: a decision carries at most a result object.
const maxFormBytes = 1 << 20

// sameOrigin refuses a POST that a browser says came from another site
// (Sec-Fetch-Site, Origin); the CSRF token is the main defence, this the
// second.
func (c *Console) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		scheme := "http://"
		if c.https(r) {
			scheme = "https://"
		}
		return o == scheme+r.Host || (c.publicOrigin != "" && o == c.publicOrigin)
	}
	return true
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// signInPage shows the sign-in form (or, without authentication, goes
// straight to the queues).
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth == nil {
		http.Redirect(w, r, Prefix+"queues", http.StatusSeeOther)
		return
	}
	c.renderSignIn(w, r, http.StatusOK, "")
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, problem string) {
	// The sign-in form has its own CSRF pair (a login CSRF would sign the
	// victim in as the attacker).
	v := ""
	if ck, err := r.Cookie(signInCookie); err == nil && len(ck.Value) == 32 {
		v = ck.Value
	} else {
		v = randomHex()
		c.setCookie(w, r, signInCookie, v, 600)
	}
	c.render(w, r, status, "signin", nil, map[string]any{"CSRF": c.csrfFor("signin", v), "Problem": problem})
}

// signIn checks the token and keeps it in the session cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth == nil {
		http.Redirect(w, r, Prefix+"queues", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ck, err := r.Cookie(signInCookie)
	if err != nil || !c.sameOrigin(r) || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.csrfFor("signin", ck.Value))) {
		c.renderSignIn(w, r, http.StatusForbidden, "This sign-in form is stale or did not come from this console. Try again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	p, err := c.cfg.Auth.Authenticate(token)
	switch {
	case err != nil:
		c.log.Warn("console: sign-in failed", "reason", err.Error(), "peer", r.RemoteAddr)
		c.renderSignIn(w, r, http.StatusUnauthorized, "That token is not valid.")
		return
	case !p.MayUseConsole():
		c.log.Warn("console: sign-in refused", "principal", p.ID, "label", p.Name, "tenant", p.Tenant, "roles", p.Roles, "peer", r.RemoteAddr)
		c.renderSignIn(w, r, http.StatusForbidden, fmt.Sprintf("Token %q (roles %v) cannot sign in to the console: it is for %s. Use an operator token (or a reconciler token to look without acting).", p.Name, p.Roles, rolePurpose(p)))
		return
	}
	id, err := c.sessions.create(auth.DigestOf(token), p.Name)
	if err != nil {
		c.log.Error("console: cannot start a session", "err", err)
		c.renderSignIn(w, r, http.StatusServiceUnavailable, "The console could not start a session; try again.")
		return
	}
	c.setCookie(w, r, signInCookie, "", -1)
	c.setCookie(w, r, sessionCookie, id, int(c.cfg.SessionLifetime/time.Second))
	c.log.Info("console: signed in", "principal", p.ID, "label", p.Name, "tenant", p.Tenant, "peer", r.RemoteAddr)
	http.Redirect(w, r, Prefix+"queues", http.StatusSeeOther)
}

func rolePurpose(p auth.Principal) string {
	for _, r := range p.Roles {
		if r == auth.RoleAgent {
			return "an agent, which runs actions and never reviews them"
		}
	}
	return "a machine that does not review operations"
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if s.id != "" {
		c.sessions.end(s.id)
		c.log.Info("console: signed out", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "peer", r.RemoteAddr)
	}
	c.setCookie(w, r, sessionCookie, "", -1)
	if s.Local {
		http.Redirect(w, r, Prefix+"queues", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// status returns the HTTP status of an error from the journal.
func (c *Console) status(err error) int {
	code := opjournal.ErrorCode(err)
	if code == "" {
		return http.StatusInternalServerError
	}
	return c.cfg.HTTPStatus(code)
}

// message returns what to tell the operator about err: the journal's own
// words for a refusal, nothing of an internal cause (logged instead).
func (c *Console) message(r *http.Request, err error) string {
	var e *opjournal.Error
	if errors.As(err, &e) && e.Code != opjournal.CodeInternal {
		if e.Field != "" {
			return e.Field + ": " + e.Message
		}
		return e.Message
	}
	c.log.Error("console: journal call failed", "path", r.URL.Path, "err", err)
	return "The journal could not answer (an internal error, logged by the server). Nothing was changed by this page; try again."
}
