package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/metadata"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
)

// Who is calling. Every call of the gateway is made by a caller whose
// key scope is a stable principal id, never the bytes of a credential:
//
//   - IdentityJournal (the default): the caller presents its own
//     credential, `Authorization: Bearer <token>`, over HTTP and MCP
//     alike: a journal token of the tokens file or a JWT of an issuer the
//     journal trusts. The gateway asks the journal who that is (WhoAmI,
//     cached briefly) and makes every journal call of the request with the
//     caller's credential, so tenant, roles, rate limit and the history's
//     actor are the caller's, not the gateway's. Two tokens of one
//     principal (a rotation) and a refreshed JWT of one subject are one
//     scope; the credential is never forwarded to an upstream.
//   - IdentityAnonymous: every caller is the same, "anon": one shared key
//     space, for local development on a loopback listener only. The
//     journal is called with the gateway's own token.
//
// The MCP door over stdio has one local caller, the stdio scope, and uses
// the gateway's own token too.

// Identity says how the gateway tells callers apart.
type Identity int

const (
	// IdentityJournal authenticates every caller by its own journal
	// credential (a token or a JWT the journal verifies).
	IdentityJournal Identity = iota
	// IdentityAnonymous treats every caller as one ("anon"); loopback
	// listeners only.
	IdentityAnonymous
)

// anonScope is the one scope of IdentityAnonymous.
const anonScope = "anon"

// caller is who makes a request.
type caller struct {
	// scope is the key scope: "p" and 16 hex digits of SHA-256 over the
	// tenant and the principal id (not secret, and never a credential);
	// anonScope; or the stdio scope.
	scope string
	// principal is the principal's id, for logs.
	principal string
	// authorization is the credential the journal is called with ("" for
	// the gateway's own connection).
	authorization string
	// expires bounds how long the identity may be cached.
	expires time.Time
}

// ScopeOfPrincipal is the key scope of an authenticated principal of a
// tenant (the SCOPE part of the gateway's keys).
func ScopeOfPrincipal(tenant, id string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + id))
	return "p" + hex.EncodeToString(sum[:8])
}

// withCaller returns ctx for the journal calls made for c: with c's
// credential in the gRPC metadata when it has one.
func withCaller(ctx context.Context, c *caller) context.Context {
	if c.authorization == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", c.authorization)
}

// identityCacheTTL bounds how long a principal is trusted without asking
// the journal again. A protected call is refused at once after a
// revocation (the journal refuses the credential every call carries, and
// refusedByJournal drops the cached identity); a pass-through request,
// which makes no journal call, is refused at most this long after it:
// the gateway lends the provider's --upstream-header credential to every
// pass-through caller, so the bound is a few seconds, at the cost of one
// WhoAmI round trip per credential per interval.
const identityCacheTTL = 5 * time.Second

// maxCredentialBytes bounds a bearer credential (a JWT with many claims
// is a few KiB); a longer one is refused without asking the journal.
const maxCredentialBytes = 16 << 10

// maxCachedIdentities bounds the cache; a full cache is emptied.
const maxCachedIdentities = 10_000

// identities resolves and caches callers.
type identities struct {
	mode    Identity
	own     string // the gateway's own Authorization value ("" for none)
	journal *client.Client
	mu      sync.Mutex
	cache   map[[sha256.Size]byte]*caller // by SHA-256 of the credential
	limits  map[string]*rate.Limiter      // by scope
	rps     rate.Limit
	burst   int
	now     func() time.Time
	anon    *caller
	stdio   *caller
}

// errNoCredential and friends are the reasons a caller is refused.
var (
	errNoCredential  = errors.New("a bearer credential is required: send Authorization: Bearer <your journal token or access token>")
	errBadCredential = errors.New("the bearer credential is not valid (unknown, expired or revoked)")
	errNotAnAgent    = errors.New("the credential may not run actions (it needs the agent role)")
	errJournalNoAuth = errors.New("the journal does not authenticate callers, so the gateway cannot tell them apart: run the journal with --auth-file, or the gateway with --anonymous on a loopback address for local development")
)

func newIdentities(cfg Config) *identities {
	own := ""
	if cfg.OwnToken != "" {
		own = "Bearer " + cfg.OwnToken
	}
	id := &identities{
		mode: cfg.Identity, own: own, journal: cfg.Journal,
		cache: map[[sha256.Size]byte]*caller{}, limits: map[string]*rate.Limiter{},
		rps: rate.Limit(cfg.RateLimit), burst: cfg.RateBurst, now: time.Now,
		anon:  &caller{scope: anonScope, principal: anonScope, authorization: own},
		stdio: &caller{scope: cfg.StdioScope, principal: cfg.StdioScope, authorization: own},
	}
	if id.burst <= 0 {
		id.burst = max(1, int(cfg.RateLimit))
	}
	return id
}

// identify returns the caller of a request from its Authorization value.
// Errors: errNoCredential, errBadCredential, errNotAnAgent (refuse the
// caller), errJournalNoAuth (the gateway is misconfigured), or the
// journal's error (unreachable).
func (ids *identities) identify(ctx context.Context, authorization string) (*caller, error) {
	if ids.mode == IdentityAnonymous {
		return ids.anon, nil
	}
	authorization = strings.TrimSpace(authorization)
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return nil, errNoCredential
	}
	if len(tok) > maxCredentialBytes {
		return nil, errBadCredential // not worth a journal round trip
	}
	authorization = "Bearer " + strings.TrimSpace(tok)
	digest := sha256.Sum256([]byte(authorization))
	now := ids.now()
	ids.mu.Lock()
	c := ids.cache[digest]
	ids.mu.Unlock()
	if c != nil && now.Before(c.expires) {
		return c, nil
	}
	who, err := ids.journal.WhoAmI(metadata.AppendToOutgoingContext(ctx, "authorization", authorization))
	switch client.CodeOf(err) {
	case "":
	case opjournal.CodeUnauthenticated:
		return nil, errBadCredential
	case opjournal.CodePermissionDenied:
		return nil, errNotAnAgent
	default:
		return nil, err
	}
	if !who.GetAuthenticated() {
		return nil, errJournalNoAuth
	}
	if !slices.Contains(who.GetRoles(), "agent") && !slices.Contains(who.GetRoles(), "admin") {
		return nil, errNotAnAgent
	}
	exp := now.Add(identityCacheTTL)
	if e := who.GetExpiresAt(); e != nil && e.AsTime().Before(exp) {
		exp = e.AsTime()
	}
	c = &caller{scope: ScopeOfPrincipal(who.GetTenant(), who.GetPrincipalId()), principal: who.GetPrincipalId(), authorization: authorization, expires: exp}
	ids.mu.Lock()
	if len(ids.cache) >= maxCachedIdentities {
		clear(ids.cache)
	}
	ids.cache[digest] = c
	ids.mu.Unlock()
	return c, nil
}

// forget drops c's cached identity, so that its next request asks the
// journal again.
func (ids *identities) forget(c *caller) {
	if c == nil || c.authorization == "" || ids.mode != IdentityJournal {
		return
	}
	digest := sha256.Sum256([]byte(c.authorization))
	ids.mu.Lock()
	if ids.cache[digest] == c {
		delete(ids.cache, digest)
	}
	ids.mu.Unlock()
}

// refusedByJournal reports whether err is the journal's refusal of c's
// own credential (UNAUTHENTICATED: revoked, or expired, since the gateway
// last asked) on a call made with it, and then drops c's cached identity:
// every door of the gateway refuses the credential from now on, the
// pass-through included. (PERMISSION_DENIED is not the caller's alone:
// the journal also answers it to a gateway that reaches it by a host
// name it does not serve.)
func (ids *identities) refusedByJournal(c *caller, err error) bool {
	if c == nil || c.authorization == "" || ids.mode != IdentityJournal {
		return false // the gateway's own credential: a misconfiguration, not the caller's
	}
	if client.CodeOf(err) != opjournal.CodeUnauthenticated {
		return false
	}
	ids.forget(c)
	return true
}

// allow takes one request from the caller's rate (always true without a
// rate limit).
func (ids *identities) allow(c *caller) bool {
	if ids.rps <= 0 {
		return true
	}
	ids.mu.Lock()
	lim := ids.limits[c.scope]
	if lim == nil {
		if len(ids.limits) >= maxCachedIdentities {
			clear(ids.limits)
		}
		lim = rate.NewLimiter(ids.rps, ids.burst)
		ids.limits[c.scope] = lim
	}
	ids.mu.Unlock()
	return lim.Allow()
}

// CheckJournalAuthenticates returns errJournalNoAuth when the gateway
// identifies callers by their journal credentials but the journal does
// not authenticate anyone, so that a misconfiguration is found at start,
// not by callers sharing one key space.
func (g *Gateway) CheckJournalAuthenticates(ctx context.Context) error {
	if g.ids.mode != IdentityJournal {
		return nil
	}
	who, err := g.cfg.Journal.WhoAmI(ctx)
	switch {
	case client.CodeOf(err) == opjournal.CodeUnauthenticated:
		return nil // it asks for a credential: good
	case err != nil:
		return fmt.Errorf("ask the journal whether it authenticates callers: %w", err)
	case !who.GetAuthenticated():
		return errJournalNoAuth
	}
	return nil
}

// identifyHTTP identifies the caller of an HTTP request, or answers the
// refusal itself and returns nil.
func (g *Gateway) identifyHTTP(w http.ResponseWriter, r *http.Request) *caller {
	c, err := g.ids.identify(r.Context(), r.Header.Get("Authorization"))
	if err == nil && !g.ids.allow(c) {
		g.log.Warn("caller over its rate limit", "door", "http", "principal", c.principal)
		writeProblem(w, http.StatusTooManyRequests, probRateLimited, "Too many requests",
			fmt.Sprintf("this caller is over the gateway's rate limit of %g requests a second; nothing was sent. Retry with the same key", float64(g.ids.rps)), "", time.Second)
		return nil
	}
	switch {
	case err == nil:
		return c
	case errors.Is(err, errNoCredential), errors.Is(err, errBadCredential):
		writeUnauthenticated(w, err)
	case errors.Is(err, errNotAnAgent):
		writeProblem(w, http.StatusForbidden, probForbidden, "Forbidden", err.Error()+"; nothing was sent", "", 0)
	case errors.Is(err, errJournalNoAuth):
		g.log.Error("misconfigured", "err", err)
		writeProblem(w, http.StatusBadGateway, probInternal, "Gateway misconfigured", "the gateway cannot tell callers apart (see its log); nothing was sent", "", 0)
	default:
		g.log.Warn("journal unavailable", "door", "http", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable, "Journal unavailable",
			"the journal that authenticates callers cannot be reached; nothing was sent. Retry with the same key", "", defaultRetry)
	}
	return nil
}

// writeUnauthenticated answers 401 with the reason and the bearer
// challenge.
func writeUnauthenticated(w http.ResponseWriter, why error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="opjournal-gateway"`)
	writeProblem(w, http.StatusUnauthorized, probUnauthenticated, "Authentication required", why.Error()+"; nothing was sent", "", 0)
}

// callerKey is the context key of the request's caller.
type callerKey struct{}

// callerOf returns the caller that ServeHTTP identified.
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	if c == nil {
		// Only a request that bypassed ServeHTTP (a test calling a door's
		// internals) has none; it gets no scope of anyone else's.
		return &caller{scope: "none", principal: "none"}
	}
	return c
}

// upstreamHeaders prepares the headers of a request to an HTTP upstream:
// the caller's credential is the gateway's, not the provider's, so it is
// dropped (IdentityJournal), and the configured upstream headers are set.
func (g *Gateway) upstreamHeaders(h http.Header) {
	if g.ids.mode == IdentityJournal {
		h.Del("Authorization")
	}
	for name, vs := range g.cfg.UpstreamHeaders {
		h[http.CanonicalHeaderKey(name)] = slices.Clone(vs)
	}
}
