package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/journal/webhook"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store"
)

// serve is `opjournal serve`: the flags checked, then the daemon opened,
// run until a signal, and closed.
func serve(ctx context.Context, o *options, stderr io.Writer) error {
	blog, err := cli.NewBufferedLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		return err
	}
	defer blog.Stop()
	if err := o.validateServe(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &daemon{o: o, blog: blog, log: blog.Logger}
	defer d.Close()
	if err := d.Open(ctx); err != nil {
		return err
	}
	return d.Run(ctx)
}

// validateServe checks what serve's flags say on their own, before
// anything is opened. A bad value is a usage error (exit status 2), as a
// value the flag parser refuses is: scripts tell a misconfiguration from a
// database that is down (1) by the status.
func (o *options) validateServe() error {
	if o.approvalSweep < 0 {
		return cli.Usage(errors.New("--approval-sweep-interval must not be negative"))
	}
	if o.replayCacheSize < 0 {
		return cli.Usage(errors.New("--replay-cache-size must not be negative (0 turns the cache off)"))
	}
	if o.purgeInterval < 0 || o.purgeBatch < 1 || o.purgePause < 0 {
		return cli.Usage(errors.New("--purge-interval and --purge-pause must not be negative, --purge-batch must be at least 1"))
	}
	if o.databaseWait < 0 {
		return cli.Usage(errors.New("--database-wait must not be negative (0: exit at once when the database is unavailable)"))
	}
	if o.authFile == "" && !o.insecureOK {
		for _, addr := range []string{o.grpcAddr, o.httpAddr} {
			if !loopback(addr) {
				return fmt.Errorf("refusing to listen on %s without authentication: give --auth-file (see README, Security), or --insecure to accept that anyone who can reach it may read and change every operation", addr)
			}
		}
	}
	if o.publicURL != "" {
		if u, err := url.Parse(o.publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: want the console's external URL, such as https://journal.example", o.publicURL)
		}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	return nil
}

// daemon is the running service: what Open opened, Run serves and Close
// releases, in the reverse order.
type daemon struct {
	o    *options
	blog *cli.BufferedLog
	log  *slog.Logger

	pol    *policy.Policy
	cfg    server.Config
	store  store.Store
	sender *webhook.Sender
	srv    *server.Server
	// closers run in Close, last opened first.
	closers []func()
}

// Open loads the policy, the tokens, the keys and the certificate, sets
// up tracing and pprof, opens the store (waiting for it up to
// --database-wait) and builds the journal, the webhook sender and the
// server. Nothing listens yet.
func (d *daemon) Open(ctx context.Context) error {
	o := d.o
	var err error
	if d.pol, err = loadPolicy(o.policyPath); err != nil {
		return err
	}
	d.cfg = server.Config{GRPCAddr: o.grpcAddr, HTTPAddr: o.httpAddr, Logger: d.log, LogLinesDropped: d.blog.Dropped,
		AdaptiveProcs: o.adaptiveProcs, RateLimit: o.rateLimit, RateBurst: o.rateBurst,
		MetricsAddr: o.metricsAddr, NoConsole: o.noConsole,
		AllowedHosts: o.allowedHosts, PublicURL: o.publicURL, TrustProxyHeaders: o.trustProxy,
		Purge:         server.PurgeConfig{Interval: o.purgeInterval, BatchSize: o.purgeBatch, Pause: o.purgePause},
		ApprovalSweep: o.approvalSweep}
	if o.authFile != "" {
		if d.cfg.Auth, err = auth.Load(o.authFile); err != nil {
			return err
		}
		d.closers = append(d.closers, d.cfg.Auth.Close)
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		d.cfg.TLS = &cert
	}
	// The server's live heap is small (a few MiB: requests in flight), so
	// Go's default GOGC=100 collects very often; 400 spends about a fifth
	// less CPU per call. A soft memory limit keeps what that costs in
	// memory bounded: near it, the collector runs as often as it must
	// (measured with opjournal-bench: README, Configuration). GOGC and
	// GOMEMLIMIT in the environment win.
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	// OpenTelemetry traces, when OTEL_* configures an exporter (off otherwise).
	stopTracing, err := tracing.SetupMain(ctx, "opjournal")
	if err != nil {
		return err
	}
	d.closers = append(d.closers, stopTracing)
	if o.pprofAddr != "" {
		if err := servePprof(ctx, o.pprofAddr, o.allowedHosts, d.log); err != nil {
			return err
		}
	}
	keys, err := hashKeys(o.hashKeyFile, o.databaseURL, d.pol, d.log)
	if err != nil {
		return err
	}
	secrets, err := webhookSecrets(o.webhookSecrets, d.pol, d.log)
	if err != nil {
		return err
	}
	if d.store, err = openStoreWaiting(ctx, o.databaseURL, o.databaseWait, d.log); err != nil {
		return err
	}
	d.closers = append(d.closers, func() { d.store.Close() })

	// The approval webhooks: Register hands every operation it created in
	// awaiting_approval to the sender, which queues it and returns at once.
	opts := []journal.Option{journal.WithHashKeys(keys), journal.WithReplayCache(journal.ReplayCacheConfig{Size: o.replayCacheSize})}
	if secrets != nil {
		opts = append(opts, journal.WithAwaitingApproval(func(op *opjournal.Operation) {
			if n, ok := webhook.ForOperation(d.pol, op); ok {
				d.sender.Notify(n)
			}
		}))
	}
	svc := journal.New(d.store, d.pol, journal.Limits{MaxPayloadBytes: o.maxPayloadBytes, MaxResultBytes: o.maxResultBytes}, opts...)
	if secrets != nil {
		tenants := []string{""}
		if d.cfg.Auth != nil {
			tenants = d.cfg.Auth.Tenants()
		}
		if d.sender, err = webhook.New(webhook.Config{Secrets: secrets, PublicURL: o.publicURL, Logger: d.log,
			Pending: webhook.Pending(svc, tenants)}); err != nil {
			return err
		}
		d.cfg.Collectors = append(d.cfg.Collectors, d.sender)
	}
	d.srv = server.New(svc, d.cfg)
	return nil
}

// Run serves until ctx ends: the webhook sender in the background, the
// listeners in the foreground. The "serving" line says where, once every
// listener is up.
func (d *daemon) Run(ctx context.Context) error {
	if d.sender != nil {
		senderCtx, stopSender := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { defer close(stopped); _ = d.sender.Run(senderCtx) }()
		defer func() { stopSender(); <-stopped }()
	}
	return d.srv.Run(ctx, d.serving)
}

// serving logs the "serving" line that scripts and tests wait for.
func (d *daemon) serving(a server.Addrs) {
	o := d.o
	metricsAddr := ""
	if a.Metrics != nil {
		metricsAddr = a.Metrics.String()
	}
	consoleURL := ""
	if !o.noConsole {
		scheme := "http"
		if d.cfg.TLS != nil {
			scheme = "https"
		}
		consoleURL = scheme + "://" + a.HTTP.String() + "/console/"
		if o.publicURL != "" {
			consoleURL = strings.TrimSuffix(o.publicURL, "/") + "/console/"
		}
	}
	d.log.Info("serving", "grpc_addr", a.GRPC.String(), "http_addr", a.HTTP.String(), "metrics_addr", metricsAddr, "console", consoleURL,
		"store", storeKind(o.databaseURL), "actions", d.pol.Names(), "auth", d.cfg.Auth != nil,
		"tls", d.cfg.TLS != nil, "rate_limit", o.rateLimit, "version", cli.Version(buildVersion))
	d.blog.Flush() // others wait for this line
}

// Close releases what Open opened, last first. It may be called after a
// failed Open.
func (d *daemon) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}
