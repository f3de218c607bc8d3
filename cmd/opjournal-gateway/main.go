// Command opjournal-gateway puts the journal in front of agents that never
// call an SDK (package gateway): an HTTP reverse proxy in front of a
// provider's API, and an MCP server in front of upstream MCP servers. The
// policy's gateway sections say which routes and tools are protected. It
// talks to the journal over gRPC only, like the reconciler.
//
//	opjournal-gateway --http-addr 127.0.0.1:8081 [--http-upstream URL]
//	                  [--mcp-addr 127.0.0.1:8082 | --mcp-stdio] --mcp-upstream URL ...
//	                  [--journal-addr 127.0.0.1:9090] [--policy FILE]
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
	var upstreams, scopeHeaders list
	fs.Var(&upstreams, "mcp-upstream", "an upstream MCP server: an http(s):// URL (streamable HTTP) or cmd:COMMAND ARGS (stdio); repeat for several")
	fs.Var(&scopeHeaders, "scope-header", "a request header whose value (hashed, never stored) scopes keys to a caller; repeat (default: Authorization)")
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
	conn, cc, err := jf.Dial()
	if err != nil {
		return cli.Usage(err)
	}
	defer conn.Close()
	g, err := gateway.New(gateway.Config{
		Journal: client.New(cc, client.WithWorkerID(*workerID)), Policy: pol, Logger: log,
		DefaultUpstream: *httpUpstream, ScopeHeaders: scopeHeaders, StdioScope: *stdioScope,
	})
	if err != nil {
		return cli.Usage(err)
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
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
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
		ln, err := net.Listen("tcp", *mcpAddr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
