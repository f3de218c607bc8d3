// Command opjournal-reconciler settles operations whose outcome is unknown:
// it asks each provider what really happened and tells the journal (see
// package reconciler). It talks to the journal only over gRPC.
//
//	opjournal-reconciler [flags]          run until SIGTERM or SIGINT
//	opjournal-reconciler --once [flags]   one pass; print the counts and exit
//
// Every flag can also be set by an environment variable: --journal-addr is
// OPJOURNAL_JOURNAL_ADDR, --poll-interval is OPJOURNAL_POLL_INTERVAL, and
// so on; a flag on the command line wins over the variable. The verifiers'
// secrets (${VAR} in the policy's verifier URLs and headers) are read from
// the environment when each request is made.
//
// Exit status: 0 after a clean stop or a completed --once pass (whose
// per-operation errors are in the printed counts), 1 if the journal could
// not be listed or a listener failed, 2 for bad flags or a bad policy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/tracing"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/reconciler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	cli.Exit("opjournal-reconciler", err)
}

type options struct {
	journal      cli.JournalFlags
	policyPath   string
	id           string
	pollInterval time.Duration
	concurrency  int
	metricsAddr  string
	once         bool
	logLevel     string
	logFormat    string
	output       *cli.Output
}

// newRoot is the command line: every flag but -o mirrored by its
// OPJOURNAL_* variable.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var o options
	c := &cobra.Command{
		Use:   "opjournal-reconciler [--once] [flags]",
		Short: "settle operations whose outcome is unknown by asking each provider",
		Long: `Settle the operations whose outcome is unknown: ask each provider (the policy's
verifiers) what really happened and tell the journal, over gRPC only. Without
--once it runs until SIGTERM or SIGINT, a pass every --poll-interval; with
--once it runs one pass and prints its counts (-o json: as one JSON object).

Every flag can also be set by its environment variable (--journal-addr is
OPJOURNAL_JOURNAL_ADDR); a flag on the command line wins. The verifiers'
secrets (${VAR} in the policy's verifier URLs and headers) are read from the
environment when each request is made.

Exit status: 0 after a clean stop or a completed --once pass (whose
per-operation errors are in the printed counts), 1 if the journal could not
be listed or a listener failed, 2 for bad flags or a bad policy.`,
		Example: `  opjournal-reconciler --journal-addr 127.0.0.1:9090 --policy policy.yaml
  OPJOURNAL_TOKEN=$(cat reconciler.token) opjournal-reconciler --journal-addr journal:9090 --metrics-addr :9102
  opjournal-reconciler --once -o json     # one pass; its counts as JSON`,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), &o, stdout, stderr) },
	}
	fs := c.Flags()
	o.journal.Register(fs)
	fs.StringVar(&o.policyPath, "policy", "", "policy YAML file, the same as the journal's (default: the shipped policy)")
	fs.StringVar(&o.id, "id", "", "this reconciler's name in the journal's history (default reconciler-<hostname>-<pid>)")
	fs.DurationVar(&o.pollInterval, "poll-interval", reconciler.DefaultPollInterval, "pause between passes")
	fs.IntVar(&o.concurrency, "concurrency", reconciler.DefaultConcurrency, "operations handled at once")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (default: off)")
	fs.BoolVar(&o.once, "once", false, "run one pass, print the counts and exit")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or text")
	cli.MirrorEnv(fs)
	o.output = cli.AddOutputFlag(c, "the counts of --once")
	return cli.NewRoot(c, "", stdout, stderr)
}

func run(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	log, err := cli.NewLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	// OpenTelemetry traces, when OTEL_* configures an exporter (off otherwise).
	stopTracing, err := tracing.SetupMain(ctx, "opjournal-reconciler")
	if err != nil {
		return cli.Usage(err)
	}
	defer stopTracing()
	if o.pollInterval <= 0 {
		return cli.Usage(errors.New("--poll-interval must be positive"))
	}
	if o.concurrency <= 0 {
		return cli.Usage(errors.New("--concurrency must be positive"))
	}
	pol := policy.Default()
	if o.policyPath != "" {
		if pol, err = policy.Load(o.policyPath); err != nil {
			return cli.Usage(err)
		}
	}

	conn, cc, err := o.journal.Dial()
	if err != nil {
		return cli.Usage(err)
	}
	defer conn.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rec, err := reconciler.New(reconciler.Config{
		Journal: opjournalv1.NewJournalServiceClient(tracing.WrapConn(cc)), Policy: pol, ID: o.id,
		PollInterval: o.pollInterval, Concurrency: o.concurrency, Logger: log, Registerer: reg,
	})
	if err != nil {
		return cli.Usage(err)
	}

	metricsAddr := ""
	if o.metricsAddr != "" {
		lis, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		metricsAddr = lis.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener failed", "error", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	var without []string
	for _, name := range pol.Names() {
		if !slices.Contains(rec.VerifiedActions(), name) {
			without = append(without, name)
		}
	}
	log.Info("reconciling", "journal_addr", o.journal.Addr, "id", rec.ID(), "actions_with_verifiers", rec.VerifiedActions(),
		"actions_without_verifiers", without, "poll_interval", o.pollInterval.String(), "concurrency", o.concurrency,
		"metrics_addr", metricsAddr, "once", o.once)

	if o.once {
		stats, err := rec.RunOnce(ctx)
		if *o.output == cli.OutputJSON {
			if jerr := json.NewEncoder(stdout).Encode(stats); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			fmt.Fprintln(stdout, stats)
		}
		return err
	}
	err = rec.Run(ctx)
	log.Info("stopped", "id", rec.ID())
	return err
}
