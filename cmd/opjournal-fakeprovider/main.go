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
	"flag"
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

	"github.com/opjournal/opjournal/fakeprovider"
)

// shutdownTimeout bounds the wait for requests in flight after a signal.
const shutdownTimeout = 10 * time.Second

func main() {
	err := run(context.Background(), os.Args[1:], os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "opjournal-fakeprovider:", err)
		os.Exit(1)
	}
}

// errUsage marks a command-line error, already reported.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("opjournal-fakeprovider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8099", "listen address (port 0 picks a free port; read it from the serving line)")
	lag := fs.Duration("index-lag", 0, "how old a record must be before search finds it")
	seed := fs.Int64("seed", 0, "seed of probability faults that give none")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	withMCP := fs.Bool("mcp", false, "also serve the MCP tools create_payment and send_email at /mcp (streamable HTTP)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stderr, "--log-level:", err)
		return errUsage
	}
	if fs.NArg() > 0 || *lag < 0 {
		fmt.Fprintln(stderr, "unexpected arguments or a negative --index-lag")
		return errUsage
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	p := fakeprovider.New(fakeprovider.Options{IndexLag: *lag, Seed: *seed, Logger: log})
	var handler http.Handler = p
	if *withMCP {
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
	log.Info("serving", "addr", ln.Addr().String(), "index_lag", lag.String(), "seed", *seed, "mcp", *withMCP)

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
