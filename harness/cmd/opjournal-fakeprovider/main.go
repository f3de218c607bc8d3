// Command opjournal-fakeprovider serves the test provider (package
// fakeprovider) over HTTP: payments with Idempotency-Key, emails and job
// applications with a reference field, a lagging search, fault injection and
// effect counts under /_control/.
//
//	opjournal-fakeprovider [--addr 127.0.0.1:8099] [--index-lag 0s] [--seed 0] [--mcp] [--log-level info]
//
// With --mcp it also serves an MCP server (streamable HTTP) at /mcp whose
// tools create_payment and send_email call the same API, faults included
// (fakeprovider.NewMCPServer): a real upstream for opjournal-gateway.
//
// Once listening it logs one JSON line on stderr,
// {"msg":"serving","addr":"127.0.0.1:NNN",…}, so a test can start it with
// --addr 127.0.0.1:0 and read the address. SIGTERM or SIGINT shut it down
// gracefully (held requests are released first); it then exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// shutdownTimeout bounds the wait for requests in flight after a signal.
const shutdownTimeout = 10 * time.Second

func main() {
	cli.Exit("opjournal-fakeprovider", cli.Execute(context.Background(), newRoot(os.Stdout, os.Stderr), os.Args[1:]))
}

// options are the provider's flags (not read from the environment: a test
// starts it with exactly the flags it means).
type options struct {
	addr     string
	lag      time.Duration
	seed     int64
	logLevel string
	withMCP  bool
}

// newRoot is the command line; the provider serves in RunE.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var o options
	c := &cobra.Command{
		Use:   "opjournal-fakeprovider [flags]",
		Short: "the test provider: payments, emails and applications with fault injection",
		Long: `Serve the test provider over HTTP: payments with Idempotency-Key, emails and job
applications with a reference field, a lagging search, fault injection and
effect counts under /_control/. With --mcp it also serves an MCP server
(streamable HTTP) at /mcp whose tools create_payment and send_email call the
same API, faults included: a real upstream for opjournal-gateway.

Once listening it logs one JSON line on stderr, {"msg":"serving","addr":…},
so a test can start it with --addr 127.0.0.1:0 and read the address. SIGTERM
or SIGINT shut it down gracefully (held requests are released first); it then
exits 0. Exit status 1 when it cannot listen, 2 for bad flags.`,
		Example: `  opjournal-fakeprovider                                  # on 127.0.0.1:8099
  opjournal-fakeprovider --addr 127.0.0.1:0 --index-lag 2s --mcp
  curl -s localhost:8099/_control/effects`,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o, stderr) },
	}
	fs := c.Flags()
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8099", "listen address (port 0 picks a free port; read it from the serving line)")
	fs.DurationVar(&o.lag, "index-lag", 0, "how old a record must be before search finds it")
	fs.Int64Var(&o.seed, "seed", 0, "seed of probability faults that give none")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.withMCP, "mcp", false, "also serve the MCP tools create_payment and send_email at /mcp (streamable HTTP)")
	return cli.NewRoot(c, "", stdout, stderr)
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cli.Usage(fmt.Errorf("--log-level: %w", err))
	}
	if o.lag < 0 {
		return cli.Usage(fmt.Errorf("--index-lag %s: must not be negative", o.lag))
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	p := fakeprovider.New(fakeprovider.Options{IndexLag: o.lag, Seed: o.seed, Logger: log})
	var handler http.Handler = p
	if o.withMCP {
		mux := http.NewServeMux()
		ms := fakeprovider.NewMCPServer("http://"+ln.Addr().String(), nil)
		mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
		mux.Handle("/", p)
		handler = mux
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "index_lag", o.lag.String(), "seed", o.seed, "mcp", o.withMCP)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	p.Close() // release held requests, so Shutdown need not wait for them
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}
