// Package server exposes the journal over gRPC (JournalService, health,
// reflection) and over HTTP (the REST mirror through grpc-gateway,
// /openapi.json, /metrics, /healthz). One table (errors.go) maps opjournal
// error codes to gRPC and HTTP statuses.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/opjournal/opjournal/internal/adaptiveprocs"
	"github.com/opjournal/opjournal/internal/hostcheck"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// Config configures the listeners.
type Config struct {
	// GRPCAddr and HTTPAddr are host:port to listen on (port 0 picks a free one).
	GRPCAddr string
	HTTPAddr string
	// MaxRequestBytes bounds a request body (HTTP) or message (gRPC). Zero
	// derives it from the journal's limits: room for the largest payload or
	// result written with generous whitespace.
	MaxRequestBytes int
	// ShutdownTimeout bounds the graceful drain on shutdown (default 10 s).
	ShutdownTimeout time.Duration
	// AdaptiveProcs runs the process on one P (GOMAXPROCS=1) after a second
	// of serving at most one call at a time, and gives the runtime's default
	// back as soon as a second call is in flight (internal/adaptiveprocs).
	AdaptiveProcs bool
	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// LogLinesDropped, if set, counts the log lines the logger dropped
	// because its output fell behind (cli.BufferedLog.Dropped); it is
	// exported as opjournal_log_lines_dropped_total.
	LogLinesDropped func() uint64
	// Auth, if set, requires a bearer token on every JournalService call
	// and scopes the call to the token's tenant; nil serves everyone as the
	// default tenant "" (only sensible on a loopback address).
	Auth *auth.Authenticator
	// RateLimit is each principal's sustained requests per second (0: none),
	// with bursts of RateBurst (default: one second's worth).
	RateLimit float64
	RateBurst int
	// TLS, if set, serves both listeners over TLS with this certificate.
	TLS *tls.Certificate
	// MetricsAddr, if set, serves /metrics on its own listener (without a
	// token: bind it to a private network), and not on the HTTP listener.
	MetricsAddr string
	// Purge deletes expired operations on an interval (off when zero).
	Purge PurgeConfig
	// ApprovalSweep is how often the timeouts of approvals whose deadline
	// has passed are applied (journal.ExpireApprovals); 0 turns the sweep
	// off (another server, or the reconciler's host, runs it).
	ApprovalSweep time.Duration
	// NoConsole turns the operators' console (/console/) off.
	NoConsole bool
	// AllowedHosts are the names, besides localhost and the loopback IP
	// literals, that requests may address (Host on HTTP, :authority on
	// gRPC) when the host check is on (HostChecked): always without Auth,
	// where it guards against DNS rebinding, and with Auth only when this
	// list is given.
	AllowedHosts []string
	// PublicURL is the console's external URL (https://journal.example),
	// when a proxy in front serves it under another scheme than the
	// listener's; an https one marks the console's cookie Secure.
	PublicURL string
	// TrustProxyHeaders lets X-Forwarded-Proto say the console is served
	// over https (only behind a proxy that sets it; a client could).
	TrustProxyHeaders bool
	// Collectors are more series for /metrics, from the parts the binary
	// runs beside the server (the approval webhooks' sender).
	Collectors []prometheus.Collector
}

// HostChecked reports whether requests must address an allowed host
// (hostcheck): without authentication anyone's browser could otherwise
// reach a loopback listener through a rebound DNS name.
func (c Config) HostChecked() bool { return c.Auth == nil || len(c.AllowedHosts) > 0 }

// Server serves one journal.Service on a gRPC and an HTTP listener.
type Server struct {
	svc     *journal.Service
	cfg     Config
	log     *slog.Logger
	procs   *adaptiveprocs.Governor // nil unless Config.AdaptiveProcs
	metrics *metrics
	// purgeMetrics are the retention series (purge.go).
	purgeMetrics *purgeMetrics
	// purgeHistory keeps the recent purge passes for the console.
	purgeHistory *purgeHistory
	limits       *limiters
	// journal is the JournalService implementation and interceptor the
	// interceptor chain: gRPC runs them, and so does the REST gateway, in
	// process (http.go).
	journal     *journalServer
	interceptor grpc.UnaryServerInterceptor
	// methods are the JournalService methods' series, bound once
	// (methodmetrics.go).
	methods map[string]*methodMetrics
}

// New returns a Server for svc.
func New(svc *journal.Service, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRequestBytes <= 0 {
		l := svc.Limits()
		cfg.MaxRequestBytes = 2*max(l.MaxPayloadBytes, l.MaxResultBytes) + 64<<10
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.RateBurst <= 0 {
		cfg.RateBurst = max(1, int(cfg.RateLimit))
	}
	m := newMetrics()
	m.registry.MustRegister(newBatchCollector(svc.BatchStats))
	m.registry.MustRegister(cfg.Collectors...)
	if cfg.LogLinesDropped != nil {
		m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "opjournal_log_lines_dropped_total",
			Help: "Log lines dropped because the log's output fell behind by more than its buffer holds (each drop is also reported by a warning line).",
		}, func() float64 { return float64(cfg.LogLinesDropped()) }))
	}
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "opjournal_lookup_long_polls",
		Help: "Lookup long polls (wait_seconds) holding their answer now, each waiting for a decision on an operation awaiting approval.",
	}, func() float64 { return float64(svc.LongPolls()) }))
	m.approvals = newApprovalMetrics(m.registry, svc.ApprovalCounts)
	m.budgets = newBudgetMetrics(m.registry, svc.BudgetTotals)
	s := &Server{svc: svc, cfg: cfg, log: cfg.Logger, metrics: m, purgeMetrics: newPurgeMetrics(m.registry), purgeHistory: &purgeHistory{},
		limits:  &limiters{rps: rate.Limit(cfg.RateLimit), burst: cfg.RateBurst, by: map[rateKey]*rate.Limiter{}},
		journal: &journalServer{svc: svc, metrics: m}, methods: m.bindMethods()}
	if cfg.AdaptiveProcs && runtime.GOMAXPROCS(0) > 1 {
		s.procs = adaptiveprocs.New(time.Second)
	}
	s.interceptor = s.unaryInterceptor()
	return s
}

// Addrs are the addresses actually listened on.
type Addrs struct {
	GRPC net.Addr
	HTTP net.Addr
	// Metrics is the metrics listener's (nil without Config.MetricsAddr).
	Metrics net.Addr
}

// Run listens, calls ready with the bound addresses, and serves until ctx
// is done; then it stops accepting, drains in-flight calls (up to
// ShutdownTimeout) and returns nil. It returns an error if a listener
// cannot be opened or a server fails.
func (s *Server) Run(ctx context.Context, ready func(Addrs)) error {
	lis, err := s.listen()
	if err != nil {
		return err
	}
	if s.procs != nil {
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		go s.procs.Run(pctx)
	}
	gs, hs := s.grpcServer()
	hsrv, msrv, err := s.httpServers(ctx, lis.metrics != nil)
	if err != nil {
		gs.Stop()
		lis.close()
		return err
	}

	errc := make(chan error, 3)
	go func() { errc <- gs.Serve(lis.grpc) }()
	go func() {
		var err error
		if s.cfg.TLS != nil {
			hsrv.TLSConfig = serverTLS(s.cfg.TLS)
			err = hsrv.ServeTLS(lis.http, "", "")
		} else {
			err = hsrv.Serve(lis.http)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	if msrv != nil {
		go func() {
			if err := msrv.Serve(lis.metrics); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	s.background(ctx, hs)
	if ready != nil {
		ready(lis.addrs())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.shutdown(gs, hs, hsrv, msrv)
	return runErr
}

// listeners are the server's sockets, bound before anything serves.
type listeners struct{ grpc, http, metrics net.Listener }

// listen binds the gRPC, HTTP and (if asked) metrics addresses; on an
// error it closes what it bound.
func (s *Server) listen() (*listeners, error) {
	var lis listeners
	var err error
	if lis.grpc, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen %s: %w", s.cfg.GRPCAddr, err)
	}
	if lis.http, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		lis.close()
		return nil, fmt.Errorf("http listen %s: %w", s.cfg.HTTPAddr, err)
	}
	if s.cfg.MetricsAddr != "" {
		if lis.metrics, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			lis.close()
			return nil, fmt.Errorf("metrics listen %s: %w", s.cfg.MetricsAddr, err)
		}
	}
	return &lis, nil
}

func (l *listeners) close() {
	for _, c := range []net.Listener{l.grpc, l.http, l.metrics} {
		if c != nil {
			c.Close()
		}
	}
}

// addrs is where each listener is bound (a port 0 resolved).
func (l *listeners) addrs() Addrs {
	a := Addrs{GRPC: l.grpc.Addr(), HTTP: l.http.Addr()}
	if l.metrics != nil {
		a.Metrics = l.metrics.Addr()
	}
	return a
}

// grpcServer builds the gRPC server: the JournalService behind the
// interceptor chain (the host check first when the listeners are checked),
// the health service and reflection.
func (s *Server) grpcServer() (*grpc.Server, *health.Server) {
	unary := []grpc.UnaryServerInterceptor{s.interceptor}
	var stream []grpc.StreamServerInterceptor
	if s.cfg.HostChecked() {
		unary = append([]grpc.UnaryServerInterceptor{s.checkAuthorityUnary}, unary...)
		stream = append(stream, s.checkAuthorityStream)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes),
		grpc.ForceServerCodecV2(codec{}),
		grpc.NumStreamWorkers(streamWorkers()),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS(s.cfg.TLS))))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterJournalServiceServer(gs, s.journal)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// httpServers builds the HTTP listener's server (REST, console, metrics,
// OpenAPI, behind the trace context and the host check) and, when metrics
// have a listener of their own, its server.
func (s *Server) httpServers(ctx context.Context, metricsListener bool) (hsrv, msrv *http.Server, err error) {
	handler, err := s.httpHandler(ctx)
	if err != nil {
		return nil, nil, err
	}
	handler = traceContext(handler)
	if s.cfg.HostChecked() {
		handler = hostcheck.Loopback(s.cfg.AllowedHosts)(handler)
	}
	hsrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second}
	if metricsListener {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metricsHandler(false))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return hsrv, msrv, nil
}

// background starts the loops that run beside the listeners until ctx
// ends: the health watch, the purge and the approvals' timeout sweep.
func (s *Server) background(ctx context.Context, hs *health.Server) {
	go s.watchHealth(ctx, hs)
	if s.cfg.Purge.Interval > 0 {
		go s.purgeLoop(ctx)
	}
	if s.cfg.ApprovalSweep > 0 {
		go every(ctx, s.cfg.ApprovalSweep, s.approvalSweep)
	}
}

// shutdown drains the listeners within ShutdownTimeout: the health
// service says NOT_SERVING first, then the HTTP servers and gRPC stop
// gracefully, gRPC at once when the time is up.
func (s *Server) shutdown(gs *grpc.Server, hs *health.Server, hsrv, msrv *http.Server) {
	s.log.Info("shutting down", "drain_timeout", s.cfg.ShutdownTimeout.String())
	hs.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	_ = hsrv.Shutdown(sctx)
	if msrv != nil {
		_ = msrv.Shutdown(sctx)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
}

// streamWorkers is how many long-lived goroutines grpc-go keeps to run
// RPCs (grpc.NumStreamWorkers). Without them every RPC runs on a fresh
// goroutine whose stack starts small and is grown (runtime.newstack,
// copystack) through the interceptor, handler, journal and pgx frames on
// every call, which showed in CPU profiles under load; a worker keeps its
// grown stack from one RPC to the next (grpc-go replaces it with a fresh
// one after 65,536 RPCs).
//
// In grpc-go v1.85 a new stream is handed to a worker only if one is idle
// (a non-blocking send on an unbuffered channel); when all are busy the
// stream gets its own goroutine as before, so the count caps nothing and
// never queues a call. What it should cover is the number of RPCs in
// flight, not the CPUs: handlers spend most of their time waiting on the
// database, so many more calls are in flight than there are CPUs (the
// bench drives up to 64 concurrent calls on 2 CPUs; REST calls count too,
// as the gateway makes them over gRPC). Hence 16 per CPU, and at least 64.
// Spare workers are cheap: a parked goroutine, and the collector halves
// the stack of one that sits idle through a cycle (a busy one keeps it).
func streamWorkers() uint32 {
	return uint32(max(64, 16*runtime.GOMAXPROCS(0)))
}

func serverTLS(cert *tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
}

// watchHealth reports NOT_SERVING on the gRPC health service while the
// database does not answer, so load balancers route around this replica.
func (s *Server) watchHealth(ctx context.Context, hs *health.Server) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st := healthpb.HealthCheckResponse_SERVING
		if err := s.svc.Ping(pctx); err != nil && ctx.Err() == nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		cancel()
		hs.SetServingStatus("", st)
		hs.SetServingStatus(pb.JournalService_ServiceDesc.ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// traceContext hands the W3C trace context of an HTTP request's headers
// (traceparent) to the RPC it maps to: the REST mirror's calls run
// through the interceptor in process, which makes their server span a
// child of it, as it does for gRPC calls from their metadata. Off, it
// only passes requests on.
func traceContext(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tracing.Enabled() {
			ctx := tracing.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			r = r.WithContext(context.WithValue(ctx, restCallKey{}, true))
		}
		h.ServeHTTP(w, r)
	})
}
