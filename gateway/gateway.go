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
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/policy"
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
	// ScopeHeaders are the request headers whose values (hashed, never
	// stored) scope keys to a caller: the same Idempotency-Key from two
	// API keys is two intents (default: Authorization). For MCP over HTTP
	// too.
	ScopeHeaders []string
	// StdioScope is the caller's scope of the MCP front door over stdio
	// (one local agent): default "stdio".
	StdioScope string
}

// Gateway serves the front doors. It is safe for concurrent use.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	routes   map[string]*httpRoute // "POST /payments"
	tools    map[string]*toolRoute // tool name
	fallback *upstream
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
	if len(cfg.ScopeHeaders) == 0 {
		cfg.ScopeHeaders = []string{"Authorization"}
	}
	if cfg.StdioScope == "" {
		cfg.StdioScope = "stdio"
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger, routes: map[string]*httpRoute{}, tools: map[string]*toolRoute{}}
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
			g.routes[h.Method+" "+h.Path] = &httpRoute{action: name, cfg: h, up: up}
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
