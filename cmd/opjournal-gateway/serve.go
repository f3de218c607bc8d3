package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/adaptiveprocs"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/protocol/policy"
)

// serve runs the gateway until ctx is done or a listener fails: the
// flags checked, then the gateway opened, run and closed.
func serve(ctx context.Context, o serveOpts, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	d := &gatewayd{o: o}
	defer d.Close()
	if err := d.Open(ctx, stderr); err != nil {
		return err
	}
	return d.Run(ctx)
}

// validate checks what the flags say on their own, before anything is
// opened.
func (o serveOpts) validate() error {
	if o.httpAddr == "" && o.mcpAddr == "" && !o.mcpStdio {
		return cli.Usage(errors.New("nothing to serve: give --http-addr, --mcp-addr or --mcp-stdio"))
	}
	if (o.mcpAddr != "" || o.mcpStdio) && len(o.upstreams) == 0 {
		return cli.Usage(errors.New("the MCP front door needs at least one --mcp-upstream"))
	}
	return nil
}

// door is one HTTP front door: its listener and server.
type door struct {
	ln  net.Listener
	srv *http.Server
}

// gatewayd is the running gateway: what Open opened, Run serves and Close
// releases, last opened first.
type gatewayd struct {
	o       serveOpts
	log     *slog.Logger
	g       *gateway.Gateway
	ms      *mcp.Server
	doors   []door
	serving []any // the "serving" line's attributes
	closers []func()
}

// Open sets up logging and tracing, loads the policy, dials the journal
// (checking that it authenticates the callers the gateway will pass on),
// connects the MCP upstreams and binds the doors' listeners. Nothing
// serves yet.
func (d *gatewayd) Open(ctx context.Context, stderr io.Writer) error {
	o := &d.o
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
	var err error
	if d.log, err = cli.NewLogger(o.logLevel, o.logFormat, stderr); err != nil {
		return cli.Usage(err)
	}
	// OpenTelemetry traces, when OTEL_* configures an exporter (off otherwise).
	stopTracing, err := tracing.SetupMain(ctx, "opjournal-gateway")
	if err != nil {
		return cli.Usage(err)
	}
	d.closers = append(d.closers, stopTracing)
	pol := policy.Default()
	if o.policyPath != "" {
		if pol, err = policy.Load(o.policyPath); err != nil {
			return cli.Usage(err)
		}
	}
	if o.workerID == "" {
		host, _ := os.Hostname()
		o.workerID = fmt.Sprintf("gateway-%s-%d", host, os.Getpid())
	}
	// Each journal call carries its caller's credential (or, for anonymous
	// and stdio callers, the gateway's own token), so the connection has none.
	conn, ownToken, err := o.jf.DialWithoutToken()
	if err != nil {
		return cli.Usage(err)
	}
	d.closers = append(d.closers, func() { conn.Close() })
	upHeaders, err := parseUpstreamHeaders(o.upstreamHeaders)
	if err != nil {
		return cli.Usage(err)
	}
	identity := gateway.IdentityJournal
	if o.anonymous {
		identity = gateway.IdentityAnonymous
	}
	if d.g, err = gateway.New(gateway.Config{
		Journal: client.New(conn, client.WithWorkerID(o.workerID)), Policy: pol, Logger: d.log,
		DefaultUpstream: o.httpUpstream, StdioScope: o.stdioScope,
		Identity: identity, OwnToken: ownToken, RateLimit: o.rateLimit, RateBurst: o.rateBurst, UpstreamHeaders: upHeaders,
	}); err != nil {
		return cli.Usage(err)
	}
	if !o.anonymous && (o.httpAddr != "" || o.mcpAddr != "") {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.g.CheckJournalAuthenticates(cctx)
		cancel()
		if err != nil {
			return cli.Usage(err)
		}
	}
	if err := d.openPprof(); err != nil {
		return err
	}
	return d.openDoors(ctx)
}

// openPprof serves Go's profiles on --pprof-addr, a loopback address.
func (d *gatewayd) openPprof() error {
	if d.o.pprofAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.o.pprofAddr)
	if err != nil {
		return err
	}
	if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		ln.Close()
		return cli.Usage(fmt.Errorf("--pprof-addr %s: only a loopback address is accepted", d.o.pprofAddr))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = psrv.Serve(ln) }()
	d.closers = append(d.closers, func() { psrv.Close() })
	return nil
}

// openDoors binds the HTTP and MCP doors and connects the MCP upstreams.
func (d *gatewayd) openDoors(ctx context.Context) error {
	o := d.o
	// One caller's request through a door is a chain of hand-offs (the
	// door, the journal's gRPC client, the upstream), each waking an idle
	// second P: governed, the HTTP door spent 13% less CPU per call at one
	// caller (harness/bench/ANALYSIS.md, "The gateway on one P"). The calls of --mcp-stdio are not
	// requests to count, so a gateway serving it keeps the default.
	var procs *adaptiveprocs.Governor
	if o.adaptiveProcs && !o.mcpStdio && runtime.GOMAXPROCS(0) > 1 {
		procs = adaptiveprocs.New(time.Second)
		pctx, stop := context.WithCancel(ctx)
		d.closers = append(d.closers, stop)
		go procs.Run(pctx)
	}
	d.serving = []any{"routes", d.g.Routes(), "tools", d.g.Tools(), "worker_id", o.workerID}
	if o.httpAddr != "" {
		ln, err := listen(o.httpAddr, o.anonymous, "--http-addr")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: procs.Handler(hostChecked(d.g, o.anonymous, o.allowedHosts), nil), ReadHeaderTimeout: 10 * time.Second}
		d.doors = append(d.doors, door{ln, srv})
		d.serving = append(d.serving, "http_addr", ln.Addr().String())
	}
	if o.mcpAddr != "" || o.mcpStdio {
		sessions, err := connectUpstreams(ctx, o.upstreams)
		for _, s := range sessions {
			d.closers = append(d.closers, func() { s.Close() })
		}
		if err != nil {
			return err
		}
		if d.ms, err = d.g.MCPServer(ctx, sessions...); err != nil {
			return cli.Usage(err)
		}
	}
	if o.mcpAddr != "" {
		ln, err := listen(o.mcpAddr, o.anonymous, "--mcp-addr")
		if err != nil {
			return err
		}
		resource := o.mcpPublicURL
		if resource == "" {
			resource = "http://" + ln.Addr().String() + "/mcp"
		}
		h := d.g.MCPHandler(d.ms, gateway.MCPHTTPOptions{Resource: resource, AuthorizationServers: o.authServers})
		// Only POSTs carry the MCP door's work: a client's GET is an event
		// stream that stays open while it waits.
		posts := func(r *http.Request) bool { return r.Method == http.MethodPost }
		srv := &http.Server{Handler: procs.Handler(hostChecked(h, o.anonymous, o.allowedHosts), posts), ReadHeaderTimeout: 10 * time.Second}
		d.doors = append(d.doors, door{ln, srv})
		d.serving = append(d.serving, "mcp_addr", ln.Addr().String())
	}
	if o.mcpStdio {
		d.serving = append(d.serving, "mcp_stdio", true)
	}
	return nil
}

// Run serves the doors until ctx is done or one fails, then drains them:
// the calls whose callers gave up run on, detached, within their leases,
// and past the deadline are cancelled and recorded as unknown (the
// reconciler settles them).
func (d *gatewayd) Run(ctx context.Context) error {
	errc := make(chan error, len(d.doors)+1)
	for _, dr := range d.doors {
		go func() { errc <- serveHTTP(dr.srv, dr.ln) }()
	}
	if d.o.mcpStdio {
		go func() { errc <- d.ms.Run(ctx, &mcp.StdioTransport{}) }()
	}
	d.log.Info("serving", d.serving...)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	d.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dr := range d.doors {
		_ = dr.srv.Shutdown(sctx)
	}
	if d.g.Shutdown(sctx) != nil {
		d.log.Warn("calls still in flight at the shutdown deadline were cancelled; their outcomes are recorded as unknown")
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Close releases what Open opened, last first: listeners not yet served,
// the MCP upstreams, the journal connection, tracing. It may be called
// after a failed Open.
func (d *gatewayd) Close() {
	for _, dr := range d.doors {
		dr.ln.Close() // already closed by a shutdown: harmless
	}
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}
