// Command opjournal-gateway puts the journal in front of agents that never
// call an SDK (package gateway): an HTTP reverse proxy in front of a
// provider's API, and an MCP server in front of upstream MCP servers. The
// policy's gateway sections say which routes and tools are protected. It
// talks to the journal over gRPC only, like the reconciler.
//
//	opjournal-gateway --http-addr 127.0.0.1:8081 [--http-upstream URL]
//	                  [--mcp-addr 127.0.0.1:8082 | --mcp-stdio] --mcp-upstream URL ...
//	                  [--journal-addr 127.0.0.1:9090] [--policy FILE] [--anonymous]
//
// Every caller presents its own journal credential (Authorization: Bearer
// <token or access token>) and is scoped by its principal; --anonymous
// makes every caller one ("anon"), on loopback listeners only.
//
// Every flag can also be set by an environment variable (--http-addr is
// OPJOURNAL_HTTP_ADDR); a flag on the command line wins. Once listening it
// logs {"msg":"serving","http_addr":…,"mcp_addr":…}. Exit status: 0 after
// SIGTERM or SIGINT, 1 when a listener or an upstream fails, 2 for bad
// flags or a bad policy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/hostcheck"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	cli.Exit("opjournal-gateway", err)
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("opjournal-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var jf cli.JournalFlags
	jf.Register(fs)
	policyPath := fs.String("policy", "", "policy YAML file with the gateway sections (default: the shipped policy)")
	httpAddr := fs.String("http-addr", "", "serve the HTTP front door on this address (\"\": off)")
	httpUpstream := fs.String("http-upstream", "", "where the HTTP requests of no protected route go, unchanged (\"\": 404)")
	mcpAddr := fs.String("mcp-addr", "", "serve the MCP front door (streamable HTTP, at /mcp) on this address (\"\": off)")
	mcpStdio := fs.Bool("mcp-stdio", false, "serve the MCP front door on stdin and stdout (one local agent); logs go to stderr")
	var upstreams, upstreamHeaders, authServers list
	fs.Var(&upstreams, "mcp-upstream", "an upstream MCP server: an http(s):// URL (streamable HTTP) or cmd:COMMAND ARGS (stdio); repeat for several")
	anonymous := fs.Bool("anonymous", false, "treat every caller as one (\"anon\": one shared key space, the gateway's own token); for local development, loopback listeners only")
	rateLimit := fs.Float64("rate-limit", 0, "each caller's requests a second at the gateway (0: no limit here; the journal limits each tenant)")
	rateBurst := fs.Int("rate-burst", 0, "each caller's burst (default: the rate)")
	fs.Var(&upstreamHeaders, "upstream-header", "a header set on every request to an HTTP upstream, 'Name: value' with ${VAR} expanded from the environment (the provider's credential: the caller's Authorization is never forwarded); repeat")
	var allowedHosts list
	fs.Var(&allowedHosts, "allowed-hosts", "with --anonymous: a host name (or name:port) requests may address besides localhost, 127.0.0.1 and [::1] (other Hosts are refused, against DNS rebinding); repeat")
	mcpPublicURL := fs.String("mcp-public-url", "", "the MCP door's public URL, its OAuth resource identifier (default http://MCP-ADDR/mcp)")
	fs.Var(&authServers, "authorization-server", "an OAuth issuer whose access tokens the journal accepts, advertised in the MCP door's protected-resource metadata; repeat")
	stdioScope := fs.String("stdio-scope", "stdio", "the caller's scope over --mcp-stdio")
	workerID := fs.String("worker-id", "", "this gateway's worker id in the journal (default: gateway-HOST-PID)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's /debug/pprof on this loopback address (for profiling)")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Usage(err)
	}
	if *httpAddr == "" && *mcpAddr == "" && !*mcpStdio {
		return cli.Usage(errors.New("nothing to serve: give --http-addr, --mcp-addr or --mcp-stdio"))
	}
	if (*mcpAddr != "" || *mcpStdio) && len(upstreams) == 0 {
		return cli.Usage(errors.New("the MCP front door needs at least one --mcp-upstream"))
	}
	// As `opjournal serve`: the live heap is small (calls in flight), so
	// Go's default GOGC=100 collects very often; 400 with a soft memory
	// limit spends less CPU per call (about a sixth of it went to the
	// collector at one caller). GOGC and GOMEMLIMIT in the environment win.
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(64 << 20)
	}
	log, err := cli.NewLogger(*logLevel, *logFormat, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	// OpenTelemetry traces, when OTEL_* configures an exporter (off otherwise).
	stopTracing, err := tracing.SetupMain(ctx, "opjournal-gateway")
	if err != nil {
		return cli.Usage(err)
	}
	defer stopTracing()
	pol := policy.Default()
	if *policyPath != "" {
		if pol, err = policy.Load(*policyPath); err != nil {
			return cli.Usage(err)
		}
	}
	if *workerID == "" {
		host, _ := os.Hostname()
		*workerID = fmt.Sprintf("gateway-%s-%d", host, os.Getpid())
	}
	// Each journal call carries its caller's credential (or, for anonymous
	// and stdio callers, the gateway's own token), so the connection has none.
	conn, ownToken, err := jf.DialWithoutToken()
	if err != nil {
		return cli.Usage(err)
	}
	defer conn.Close()
	upHeaders, err := parseUpstreamHeaders(upstreamHeaders)
	if err != nil {
		return cli.Usage(err)
	}
	identity := gateway.IdentityJournal
	if *anonymous {
		identity = gateway.IdentityAnonymous
	}
	g, err := gateway.New(gateway.Config{
		Journal: client.New(conn, client.WithWorkerID(*workerID)), Policy: pol, Logger: log,
		DefaultUpstream: *httpUpstream, StdioScope: *stdioScope,
		Identity: identity, OwnToken: ownToken, RateLimit: *rateLimit, RateBurst: *rateBurst, UpstreamHeaders: upHeaders,
	})
	if err != nil {
		return cli.Usage(err)
	}
	if !*anonymous && (*httpAddr != "" || *mcpAddr != "") {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := g.CheckJournalAuthenticates(cctx)
		cancel()
		if err != nil {
			return cli.Usage(err)
		}
	}

	errc := make(chan error, 4)
	if *pprofAddr != "" {
		ln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			return err
		}
		if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			ln.Close()
			return cli.Usage(fmt.Errorf("--pprof-addr %s: only a loopback address is accepted", *pprofAddr))
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = psrv.Serve(ln) }()
		defer psrv.Close()
	}
	var servers []*http.Server
	serving := []any{"routes", g.Routes(), "tools", g.Tools(), "worker_id", *workerID}
	if *httpAddr != "" {
		ln, err := listen(*httpAddr, *anonymous, "--http-addr")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: hostChecked(g, *anonymous, allowedHosts), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errc <- serveHTTP(srv, ln) }()
		serving = append(serving, "http_addr", ln.Addr().String())
	}
	var ms *mcp.Server
	if *mcpAddr != "" || *mcpStdio {
		sessions, err := connectUpstreams(ctx, upstreams)
		for _, s := range sessions {
			defer s.Close()
		}
		if err != nil {
			return err
		}
		if ms, err = g.MCPServer(ctx, sessions...); err != nil {
			return cli.Usage(err)
		}
	}
	if *mcpAddr != "" {
		ln, err := listen(*mcpAddr, *anonymous, "--mcp-addr")
		if err != nil {
			return err
		}
		resource := *mcpPublicURL
		if resource == "" {
			resource = "http://" + ln.Addr().String() + "/mcp"
		}
		h := g.MCPHandler(ms, gateway.MCPHTTPOptions{Resource: resource, AuthorizationServers: authServers})
		srv := &http.Server{Handler: hostChecked(h, *anonymous, allowedHosts), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errc <- serveHTTP(srv, ln) }()
		serving = append(serving, "mcp_addr", ln.Addr().String())
	}
	if *mcpStdio {
		go func() { errc <- ms.Run(ctx, &mcp.StdioTransport{}) }()
		serving = append(serving, "mcp_stdio", true)
	}
	log.Info("serving", serving...)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	// The calls whose callers gave up run on, detached, within their
	// leases; the records of calls already answered are still being
	// written. Past the deadline the calls left are cancelled and
	// recorded as unknown (the reconciler settles them).
	if g.Shutdown(sctx) != nil {
		log.Warn("calls still in flight at the shutdown deadline were cancelled; their outcomes are recorded as unknown")
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// listen listens on addr; anonymous callers are accepted on a loopback
// address only (anyone who reaches the listener shares their key space).
func listen(addr string, anonymous bool, flagName string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if anonymous && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		ln.Close()
		return nil, cli.Usage(fmt.Errorf("%s %s: --anonymous serves loopback addresses only (every caller shares one key space); drop --anonymous to identify callers by their journal credentials", flagName, addr))
	}
	return ln, nil
}

// hostChecked refuses, for anonymous callers, requests addressed to any
// host but a loopback name or an allowed one: without authentication, a
// web page on a name rebound to 127.0.0.1 could otherwise use the gateway
// (and the provider credentials it holds).
func hostChecked(h http.Handler, anonymous bool, allowed []string) http.Handler {
	if !anonymous {
		return h
	}
	return hostcheck.Loopback(allowed)(h)
}

// parseUpstreamHeaders reads the --upstream-header values ('Name: value',
// ${VAR} expanded from the environment).
func parseUpstreamHeaders(vals []string) (http.Header, error) {
	h := http.Header{}
	for _, v := range vals {
		name, value, ok := strings.Cut(v, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
			return nil, fmt.Errorf("--upstream-header: give 'Name: value' (the value may be ${VAR})")
		}
		expanded, err := policy.ExpandEnv(value, os.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("--upstream-header %s: %w", name, err)
		}
		if strings.ContainsAny(expanded, "\r\n") {
			return nil, fmt.Errorf("--upstream-header %s: the value has a line break", name)
		}
		h.Add(name, expanded)
	}
	return h, nil
}

func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// connectUpstreams opens a client session to each upstream MCP server.
func connectUpstreams(ctx context.Context, upstreams []string) ([]*mcp.ClientSession, error) {
	c := mcp.NewClient(gateway.Implementation, nil)
	var sessions []*mcp.ClientSession
	for _, u := range upstreams {
		var t mcp.Transport
		switch {
		case strings.HasPrefix(u, "http://"), strings.HasPrefix(u, "https://"):
			t = &mcp.StreamableClientTransport{Endpoint: u, DisableStandaloneSSE: true}
		case strings.HasPrefix(u, "cmd:"):
			argv := strings.Fields(strings.TrimPrefix(u, "cmd:"))
			if len(argv) == 0 {
				return sessions, cli.Usage(errors.New("--mcp-upstream cmd: needs a command"))
			}
			t = &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}
		default:
			return sessions, cli.Usage(fmt.Errorf("--mcp-upstream %q: give an http(s):// URL or cmd:COMMAND", u))
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		cs, err := c.Connect(cctx, t, nil)
		cancel()
		if err != nil {
			return sessions, fmt.Errorf("--mcp-upstream %s: %w", u, err)
		}
		sessions = append(sessions, cs)
	}
	return sessions, nil
}
