// Package gateway is opjournal's front door for agents that never call an
// SDK: an HTTP reverse proxy in front of a provider's API and an MCP
// server in front of upstream MCP servers. A call to a route or tool that
// an action's policy protects (gateway:) becomes an operation of the
// journal: registered and claimed before anything is sent, sent at most
// once per key, recorded with the SDK's classification, and answered from
// the journal on every retry. Everything else passes straight through.
//
// The gateway talks to the journal over its gRPC API only (the Go SDK,
// client.Execute), like the reconciler, so any number of gateways on one
// journal are exactly as safe as one: the journal decides who calls.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Config configures a Gateway.
type Config struct {
	// Journal is the journal, through the Go SDK (with the gateway's
	// token and worker id).
	Journal *client.Client
	// Policy names the protected routes and tools (each action's
	// gateway:), and is the journal's policy.
	Policy *policy.Policy
	// LookupEnv expands ${VAR} in upstream URLs (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Logger receives a line per journaled call and per refusal; never a
	// body, an argument value or a header value (default slog.Default()).
	Logger *slog.Logger
	// HTTPClient calls the upstream APIs (default: a client without an
	// overall timeout; every journaled call is bounded by its lease).
	HTTPClient *http.Client
	// DefaultUpstream receives the HTTP requests no protected route
	// matches, unchanged ("" answers them 404).
	DefaultUpstream string
	// Identity says how callers are told apart (IdentityJournal: by
	// their own journal credential, the default).
	Identity Identity
	// OwnToken is the gateway's own journal token: the credential of
	// anonymous callers and of the MCP door over stdio ("" when the
	// journal needs none). With IdentityJournal the Journal's connection
	// must carry no token of its own: each call carries its caller's.
	OwnToken string
	// RateLimit is each caller's rate at the gateway, in requests a
	// second (0: none; the journal limits each tenant as well), with
	// bursts of RateBurst (default: the rate).
	RateLimit float64
	RateBurst int
	// UpstreamHeaders are set on every request to an HTTP upstream (the
	// provider's own credential, say: the caller's Authorization is for
	// the gateway and is never forwarded under IdentityJournal).
	UpstreamHeaders http.Header
	// StdioScope is the caller's scope of the MCP front door over stdio
	// (one local agent): default "stdio".
	StdioScope string
}

// Gateway serves the front doors. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	ids    *identities
	routes map[string]*httpRoute // "POST /payments"
	// canonical maps each route's canonicalRoute to it: a request that
	// folds onto one but is not it exactly is refused, never passed
	// through.
	canonical map[string]*httpRoute
	tools     map[string]*toolRoute // tool name
	fallback  *upstream
	// background are the records still being written for calls already
	// answered (execute); Wait waits for them. recording maps their keys
	// to a channel closed when the record is written, so that a retry
	// through this gateway waits for it instead of being told to come back.
	background sync.WaitGroup
	recording  sync.Map // operation key → chan struct{}
	// stopping is cancelled by Shutdown when its deadline passes: the
	// calls still in flight, detached from their callers (execute), are
	// cancelled then and recorded as unknown.
	stopping context.Context
	stop     context.CancelFunc
}

// maxRecordWait bounds how long a retry waits for the record of the call
// it repeats (written one journal round trip after the answer).
const maxRecordWait = 2 * time.Second

// awaitRecord waits until the record of an answered call with key, if one
// is being written, is done.
func (g *Gateway) awaitRecord(ctx context.Context, key string) {
	ch, ok := g.recording.Load(key)
	if !ok {
		return
	}
	t := time.NewTimer(maxRecordWait)
	defer t.Stop()
	select {
	case <-ch.(chan struct{}):
	case <-t.C:
	case <-ctx.Done():
	}
}

// execute runs client.Execute so that the upstream's definite answer
// (an effect or a refusal), which fn hands over on early, reaches the
// caller at once: one journal round trip sooner than waiting for the
// record, which completes in the background. The record is still made
// (the lease is held meanwhile: a retry in that moment is told the call
// is in progress, and a gateway that dies before recording leaves an
// expired lease, which the reconciler settles). It returns the early
// answer, or nil and the outcome the caller must be answered from.
//
// The call runs detached from the caller's cancellation: a client that
// times out or disconnects once its request may have been sent would
// otherwise cancel the upstream request halfway, leaving an outcome
// nobody knows (its retry refused until the reconciler settles it). So
// the call finishes within its lease (the SDK still gives up at the
// lease's end) or until Shutdown gives up on it, its real answer is
// recorded, and the client's retry replays it. ctx's values (the trace)
// still apply.
func execute[A any](ctx context.Context, g *Gateway, op client.Op, early <-chan A,
	fn func(context.Context, client.Attempt) (client.Effect, error)) (client.Outcome, *A, error) {
	if g.stopping.Err() != nil {
		// Shut down: nothing new is sent; the caller retries elsewhere
		// or later with the same key (Unavailable: 503, or the tool's
		// "call again" answer).
		return client.Outcome{}, nil, &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "the gateway is shutting down"}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(g.stopping, cancel)
	type result struct {
		out client.Outcome
		err error
	}
	done := make(chan result, 1)
	recorded := make(chan struct{})
	var taken atomic.Bool
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		defer cancel()
		defer unhook()
		out, err := g.cfg.Journal.Execute(ctx, op, fn)
		if taken.Load() && err != nil && out.Kind != client.Succeeded {
			g.log.Error("the outcome of a call already answered was not recorded; the reconciler settles it", "action", op.Action, "key", op.Key, "err", err)
		}
		g.recording.CompareAndDelete(op.Key, recorded)
		close(recorded)
		done <- result{out, err}
	}()
	select {
	case a := <-early:
		taken.Store(true)
		g.recording.Store(op.Key, recorded)
		select {
		case <-recorded: // recorded meanwhile: nothing to wait for
			g.recording.CompareAndDelete(op.Key, recorded)
		default:
		}
		return client.Outcome{}, &a, nil
	case r := <-done:
		return r.out, nil, r.err
	}
}

// Wait waits until every journaled call has finished and its outcome is
// recorded: the records of calls already answered, and the calls whose
// callers gave up (each bounded by its lease).
func (g *Gateway) Wait() { g.background.Wait() }

// Shutdown waits as Wait until ctx is done; then it cancels the calls
// still in flight (their outcomes are recorded as unknown, for the
// reconciler) and waits for those records. It returns ctx's error when it
// had to cancel calls, nil otherwise. Call it after the front doors have
// stopped taking requests.
func (g *Gateway) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.background.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	g.stop()
	<-done
	return ctx.Err()
}

// New checks the policy's gateway sections (upstream URLs expanded now)
// and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Journal == nil || cfg.Policy == nil {
		return nil, errors.New("gateway: Journal and Policy are required")
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	// The upstream requests' client spans and traceparent (trace.go),
	// never re-sent by the transport (noResend) and no redirect followed:
	// a protected request reaches the provider once or not at all.
	hc := *cfg.HTTPClient
	hc.Transport = tracing.Transport(noResend{hc.Transport})
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.HTTPClient = &hc
	if cfg.StdioScope == "" {
		cfg.StdioScope = "stdio"
	}
	if cfg.RateLimit < 0 || cfg.RateBurst < 0 {
		return nil, errors.New("gateway: the rate limit and burst must not be negative")
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger, routes: map[string]*httpRoute{}, canonical: map[string]*httpRoute{}, tools: map[string]*toolRoute{}, ids: newIdentities(cfg)}
	g.stopping, g.stop = context.WithCancel(context.Background())
	for _, name := range cfg.Policy.Names() {
		act, _ := cfg.Policy.Action(name)
		if act.Gateway == nil {
			continue
		}
		if h := act.Gateway.HTTP; h != nil {
			up, err := newUpstream(h.Upstream, cfg.LookupEnv)
			if err != nil {
				return nil, fmt.Errorf("gateway: actions.%s.gateway.http.upstream: %w", name, err)
			}
			for _, f := range h.ForwardHeaders {
				// The gateway's own value would replace the client's,
				// which the request hash covers.
				for u := range cfg.UpstreamHeaders {
					if http.CanonicalHeaderKey(u) == http.CanonicalHeaderKey(f) {
						return nil, fmt.Errorf("gateway: actions.%s.gateway.http.forward_headers: %s is also an --upstream-header, which the gateway sets itself", name, f)
					}
				}
			}
			hr := &httpRoute{action: name, cfg: h, up: up, escaped: (&url.URL{Path: h.Path}).EscapedPath()}
			g.routes[h.Method+" "+h.Path] = hr
			g.canonical[canonicalRoute(h.Method, &url.URL{Path: h.Path})] = hr
		}
		if m := act.Gateway.MCP; m != nil {
			g.tools[m.Tool] = &toolRoute{action: name, cfg: m}
		}
	}
	if cfg.DefaultUpstream != "" {
		up, err := newUpstream(cfg.DefaultUpstream, cfg.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("gateway: the default upstream: %w", err)
		}
		g.fallback = up
	}
	return g, nil
}

// Routes lists the protected HTTP routes ("POST /payments → create_payment").
func (g *Gateway) Routes() []string {
	var out []string
	for r, h := range g.routes {
		out = append(out, r+" → "+h.action)
	}
	slices.Sort(out)
	return out
}

// Tools lists the protected MCP tools ("create_payment → create_payment").
func (g *Gateway) Tools() []string {
	var out []string
	for t, r := range g.tools {
		out = append(out, t+" → "+r.action)
	}
	slices.Sort(out)
	return out
}

// upstream is a provider's base URL.
type upstream struct {
	base string // no trailing slash
}

func newUpstream(tmpl string, lookup func(string) (string, bool)) (*upstream, error) {
	s, err := policy.ExpandEnv(tmpl, lookup)
	if err != nil {
		return nil, err
	}
	if err := policy.CheckUpstream(s); err != nil {
		return nil, fmt.Errorf("%q %w", s, err)
	}
	return &upstream{base: strings.TrimSuffix(s, "/")}, nil
}

// url is the upstream URL of a request path and query.
func (u *upstream) url(path, rawQuery string) string {
	s := u.base + path
	if rawQuery != "" {
		s += "?" + rawQuery
	}
	return s
}
