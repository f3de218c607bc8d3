package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/hostcheck"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/server/auth"
)

// servicePrefix marks the RPCs that authentication guards. The health
// service stays open for load balancers; reflection (a stream) describes
// only the public schema.
const servicePrefix = "/opjournal.v1.JournalService/"

type principalKey struct{}

// authorizedKey marks a context whose request the HTTP listener has
// already authenticated, authorised and counted against the rate limit
// (before reading its body); the interceptor then does not do it twice.
// A context value: no client can send it.
type authorizedKey struct{}

// tenantOf returns the caller's tenant: the authenticated token's, or ""
// when the server runs without authentication. Every store call is scoped
// by it, so no call can reach another tenant's operations.
func tenantOf(ctx context.Context) string {
	return callerOf(ctx).Tenant
}

// callerOf returns who calls: the authenticated principal and its tenant,
// or the default tenant "" without a principal when the server runs
// without authentication. The history records the principal's id as the
// actor, its label beside it; every rule compares the id.
func callerOf(ctx context.Context) journal.Caller {
	if p, ok := ctx.Value(principalKey{}).(auth.Principal); ok {
		roles := make([]string, len(p.Roles))
		for i, r := range p.Roles {
			roles[i] = string(r)
		}
		return journal.Caller{Tenant: p.Tenant, Principal: p.ID, Label: p.Name, FormerNames: p.FormerNames, Roles: roles}
	}
	return journal.Caller{}
}

// limiters holds one token bucket per principal: all of one person's
// credentials (rotated tokens, refreshed JWTs) share one, and a principal
// over its rate never starves another, of its tenant or any other.
// Without authentication every caller is the one anonymous principal.
type limiters struct {
	rps   rate.Limit
	burst int
	mu    sync.Mutex
	by    map[rateKey]*rate.Limiter
}

// rateKey is whose bucket a request takes from: the principal's id, in
// its tenant.
type rateKey struct{ tenant, principal string }

// maxLimiters bounds the buckets kept; a full map is emptied, which only
// gives every principal a full bucket again.
const maxLimiters = 100_000

// allow takes one request from p's bucket.
func (l *limiters) allow(p auth.Principal) bool {
	if l == nil || l.rps <= 0 {
		return true
	}
	k := rateKey{p.Tenant, p.ID}
	l.mu.Lock()
	lim, ok := l.by[k]
	if !ok {
		if len(l.by) >= maxLimiters {
			clear(l.by)
		}
		lim = rate.NewLimiter(l.rps, l.burst)
		l.by[k] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

// authorize authenticates the caller of a JournalService RPC, checks its
// role for the method and its tenant's rate, and returns the context the
// handler runs with. Failures are logged with the token's name (if known),
// the method and the peer, never with the token.
func (s *Server) authorize(ctx context.Context, fullMethod string) (context.Context, error) {
	method, ours := strings.CutPrefix(fullMethod, servicePrefix)
	if !ours || ctx.Value(authorizedKey{}) != nil {
		return ctx, nil
	}
	var token string
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("authorization")) > 0 {
		token = auth.BearerToken(md.Get("authorization")[0])
	}
	return s.authorizeToken(ctx, method, token, peerAddr(ctx))
}

// authorizeToken authenticates a bearer token for method (its short name),
// checks the role and the tenant's rate, and returns the context the call
// runs with. Both transports use it, before they parse anything.
func (s *Server) authorizeToken(ctx context.Context, method, token, peer string) (context.Context, error) {
	var p auth.Principal
	if s.cfg.Auth != nil {
		var err error
		p, err = s.cfg.Auth.Authenticate(token)
		if err != nil {
			s.log.WarnContext(ctx, "authentication failed", "method", method, "peer", peer, "reason", err.Error())
			msg := "a valid bearer token is required (Authorization: Bearer <token>)"
			switch {
			case errors.Is(err, auth.ErrBadToken):
				msg = "the bearer token is not valid"
			case errors.Is(err, auth.ErrBadJWT):
				msg = "the bearer JWT is not valid (its signature, issuer, audience, subject or expiry)"
			}
			return ctx, opjournal.Errorf(opjournal.CodeUnauthenticated, "", "%s", msg)
		}
		if !p.Allowed(method) {
			s.log.WarnContext(ctx, "permission denied", "method", method, "principal", p.ID, "label", p.Name, "tenant", p.Tenant, "roles", p.Roles, "peer", peer)
			return ctx, opjournal.Errorf(opjournal.CodePermissionDenied, "", "token %q (roles %v) may not call %s", p.Name, p.Roles, method)
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
	}
	if !rateExempt[method] && !s.limits.allow(p) {
		s.log.WarnContext(ctx, "rate limited", "method", method, "principal", p.ID, "label", p.Name, "tenant", p.Tenant)
		return ctx, opjournal.Errorf(opjournal.CodeRateLimited, "", "%s is over its rate limit of %g requests/s; retry after a second", rateHolder(p), float64(s.limits.rps))
	}
	return ctx, nil
}

// rateHolder names whose rate a refusal speaks of.
func rateHolder(p auth.Principal) string {
	if p.ID == "" {
		return "this server's anonymous caller"
	}
	return fmt.Sprintf("principal %q", p.ID)
}

// rateExempt are the methods the tenant's rate limit never refuses, nor
// counts: each records an effect that already happened at a provider
// (MarkSucceeded, MarkFailedFinal, MarkUnknown) or keeps the lease of a
// call in flight (ExtendLease). Refusing one starts no less work; it
// only leaves the operation in_progress with its outcome unrecorded, so
// that a burst of other traffic (anonymous visitors of the gateway, say)
// would turn a payment that happened into one that needs a person. The
// limit holds for the calls that start work: Register, Claim, the reads.
var rateExempt = map[string]bool{"MarkSucceeded": true, "MarkFailedFinal": true, "MarkUnknown": true, "ExtendLease": true}

func peerAddr(ctx context.Context) string {
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		return pr.Addr.String()
	}
	return ""
}

// healthPrefix is the gRPC health service's: load balancers probe it by
// address, and it tells nothing but "serving".
const healthPrefix = "/grpc.health.v1.Health/"

// checkAuthority refuses a gRPC call whose :authority is not an allowed
// host (Config.HostChecked). Browsers cannot make gRPC calls, so DNS
// rebinding cannot reach this listener the way it reaches the HTTP one;
// the check keeps both listeners to the same rule all the same (a
// grpc-web or HTTP/2 bridge in front would otherwise open it).
func (s *Server) checkAuthority(ctx context.Context, fullMethod string) error {
	if strings.HasPrefix(fullMethod, healthPrefix) {
		return nil
	}
	authority := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(":authority")) > 0 {
		authority = md.Get(":authority")[0]
	}
	if hostcheck.Allowed(authority, s.cfg.AllowedHosts) {
		return nil
	}
	s.log.WarnContext(ctx, "host not allowed", "method", fullMethod, "peer", peerAddr(ctx))
	return grpcError(opjournal.Errorf(opjournal.CodePermissionDenied, "", "%s", strings.TrimSuffix(hostcheck.Message(authority), "\n")))
}

func (s *Server) checkAuthorityUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.checkAuthority(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) checkAuthorityStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.checkAuthority(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
