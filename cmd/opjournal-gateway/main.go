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
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/hostcheck"
	"github.com/opjournal/opjournal/protocol/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	cli.Exit("opjournal-gateway", err)
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// Type names the value in --help.
func (l *list) Type() string { return "value" }

const rootLong = `Put the journal in front of agents that never call an SDK: an HTTP reverse
proxy in front of a provider's API (--http-addr), and an MCP server in front
of upstream MCP servers (--mcp-addr, or --mcp-stdio for one local agent). The
policy's gateway sections say which routes and tools are protected. It talks
to the journal over gRPC only.

Every caller presents its own journal credential (Authorization: Bearer
<token or access token>) and is scoped by its principal; --anonymous makes
every caller one ("anon"), on loopback listeners only.

Every flag can also be set by its environment variable (--http-addr is
OPJOURNAL_HTTP_ADDR); a flag on the command line wins. Once listening it logs
{"msg":"serving","http_addr":…,"mcp_addr":…}. Exit status: 0 after SIGTERM
or SIGINT, 1 when a listener or an upstream fails, 2 for bad flags or a bad
policy.`

// newRoot is the command line; the gateway runs in RunE.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "opjournal-gateway (--http-addr ADDR | --mcp-addr ADDR | --mcp-stdio) [flags]",
		Short: "the journal in front of agents: an HTTP reverse proxy and an MCP server",
		Long:  rootLong,
		Example: `  opjournal-gateway --journal-addr 127.0.0.1:9090 --policy policy.yaml \
      --http-addr 127.0.0.1:8081 --upstream-header 'Authorization: Bearer ${PROVIDER_KEY}'
  opjournal-gateway --anonymous --mcp-addr 127.0.0.1:8082 --mcp-upstream http://127.0.0.1:8099/mcp
      # beside the quick start's opjournal serve and opjournal-fakeprovider --mcp
      # (docs/gateway.md, "Try it locally"); MCP clients of 2025-11-25 and 2026-07-28
  opjournal-gateway --mcp-stdio --mcp-upstream 'cmd:my-mcp-server --flag' --anonymous`,
	}
	var o serveOpts
	fs := c.Flags()
	o.jf.Register(fs)
	fs.StringVar(&o.policyPath, "policy", "", "policy YAML file with the gateway sections (default: the shipped policy)")
	fs.StringVar(&o.httpAddr, "http-addr", "", "serve the HTTP front door on this address (\"\": off)")
	fs.StringVar(&o.httpUpstream, "http-upstream", "", "where the HTTP requests of no protected route go, unchanged (\"\": 404)")
	fs.StringVar(&o.mcpAddr, "mcp-addr", "", "serve the MCP front door (streamable HTTP, at /mcp) on this address (\"\": off)")
	fs.BoolVar(&o.mcpStdio, "mcp-stdio", false, "serve the MCP front door on stdin and stdout (one local agent); logs go to stderr")
	fs.Var(&o.upstreams, "mcp-upstream", "an upstream MCP server: an http(s):// URL (streamable HTTP) or cmd:COMMAND ARGS (stdio); repeat for several")
	fs.BoolVar(&o.anonymous, "anonymous", false, "treat every caller as one (\"anon\": one shared key space, the gateway's own token); for local development, loopback listeners only")
	fs.Float64Var(&o.rateLimit, "rate-limit", 0, "each caller's requests a second at the gateway (0: no limit here; the journal limits each principal)")
	fs.IntVar(&o.rateBurst, "rate-burst", 0, "each caller's burst (default: the rate)")
	fs.Var(&o.upstreamHeaders, "upstream-header", "a header set on every request to an HTTP upstream, 'Name: value' with ${VAR} expanded from the environment (the provider's credential: the caller's Authorization is never forwarded); repeat")
	fs.Var(&o.allowedHosts, "allowed-hosts", "with --anonymous: a host name (or name:port) requests may address besides localhost, 127.0.0.1 and [::1] (other Hosts are refused, against DNS rebinding); repeat")
	fs.StringVar(&o.mcpPublicURL, "mcp-public-url", "", "the MCP door's public URL, its OAuth resource identifier (default http://MCP-ADDR/mcp)")
	fs.Var(&o.authServers, "authorization-server", "an OAuth issuer whose access tokens the journal accepts, advertised in the MCP door's protected-resource metadata; repeat")
	fs.StringVar(&o.stdioScope, "stdio-scope", "stdio", "the caller's scope over --mcp-stdio")
	fs.StringVar(&o.workerID, "worker-id", "", "this gateway's worker id in the journal (default: gateway-HOST-PID)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or text")
	fs.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's /debug/pprof on this loopback address (for profiling)")
	fs.BoolVar(&o.adaptiveProcs, "adaptive-gomaxprocs", true, "run on one CPU (GOMAXPROCS=1) while the doors serve one request at a time, the default CPUs as soon as a second is in flight (false: always the default; off with --mcp-stdio, whose calls it cannot count)")
	cli.MirrorEnv(fs)
	c.RunE = func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), o, stderr) }
	return cli.NewRoot(c, "", stdout, stderr)
}

// serveOpts are the gateway's flags.
type serveOpts struct {
	jf                                          cli.JournalFlags
	policyPath, httpAddr, httpUpstream, mcpAddr string
	mcpStdio, anonymous, adaptiveProcs          bool
	upstreams, upstreamHeaders, allowedHosts    list
	authServers                                 list
	rateLimit                                   float64
	rateBurst                                   int
	mcpPublicURL, stdioScope, workerID          string
	logLevel, logFormat, pprofAddr              string
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
