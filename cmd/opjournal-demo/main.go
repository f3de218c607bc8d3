// Command opjournal-demo runs the article's reproducible check against the
// real processes: it starts opjournal (on a fresh SQLite file),
// opjournal-fakeprovider and opjournal-reconciler on free ports, runs the
// scenarios of package demo, prints every step, and exits non-zero if any
// observation differs from the SPEC. `make demo` builds the binaries and
// runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/fakeprovider"
	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
	"github.com/opjournal/opjournal/internal/demo"
	"github.com/opjournal/opjournal/internal/procs"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "where opjournal, opjournal-fakeprovider and opjournal-reconciler are")
	verbose := flag.Bool("v", false, "also print the processes' logs")
	withGateway := flag.Bool("gateway", false, "run the gateway scenarios (make demo-gateway): the agent calls only opjournal-gateway's HTTP and MCP doors")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *verbose, *withGateway); err != nil {
		fmt.Fprintln(os.Stderr, "\nDEMO FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("\nDEMO PASSED: every step observed what the SPEC says; one effect per intent.")
}

func run(ctx context.Context, binDir string, verbose, withGateway bool) error {
	dir, err := os.MkdirTemp("", "opjournal-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var logw *os.File
	if verbose {
		logw = os.Stderr
	}
	start := func(s procs.Spec) (*procs.Proc, error) {
		if logw != nil {
			s.Log = logw
		}
		p, err := procs.Start(ctx, s, 30*time.Second)
		if err == nil {
			fmt.Printf("started %-10s pid %d\n", s.Name, p.Pid())
		}
		return p, err
	}
	bin := func(name string) string { return filepath.Join(binDir, name) }

	provider, err := start(procs.Spec{Name: "provider", Path: bin("opjournal-fakeprovider"), Args: []string{"--addr", "127.0.0.1:0", "--mcp"}, Ready: "serving"})
	if err != nil {
		return err
	}
	defer provider.Stop(10 * time.Second)
	providerURL := "http://" + provider.Field("addr")

	// The gateway knows who calls: the journal authenticates the demo's
	// callers (two agents, one of them with a rotated token), so it runs
	// with a tokens file; the SDK scenarios run without, as the quick start.
	journalArgs := []string{"serve", "--database-url", "sqlite://" + filepath.Join(dir, "journal.db"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	var callers demo.GatewayCallers
	var recEnv []string
	if withGateway {
		if callers, err = demo.WriteGatewayCallers(dir); err != nil {
			return err
		}
		journalArgs = append(journalArgs, "--auth-file", callers.TokensFile)
		recEnv = []string{"OPJOURNAL_TOKEN=" + callers.Reconciler}
	}
	journal, err := start(procs.Spec{Name: "journal", Path: bin("opjournal"), Ready: "serving", Args: journalArgs})
	if err != nil {
		return err
	}
	defer journal.Stop(10 * time.Second)
	grpcAddr := journal.Field("grpc_addr")

	rec, err := start(procs.Spec{Name: "reconciler", Path: bin("opjournal-reconciler"), Ready: "reconciling",
		Args: []string{"--journal-addr", grpcAddr, "--poll-interval", "200ms", "--id", "demo-reconciler"},
		Env:  append([]string{"PROVIDER_URL=" + providerURL}, recEnv...)})
	if err != nil {
		return err
	}
	defer rec.Stop(10 * time.Second)
	fmt.Printf("journal gRPC %s, provider %s\n", grpcAddr, providerURL)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	control := fakeprovider.NewControlClient(providerURL, &http.Client{Timeout: 10 * time.Second})
	if withGateway {
		gw, err := start(procs.Spec{Name: "gateway", Path: bin("opjournal-gateway"), Ready: "serving",
			Args: []string{"--journal-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--mcp-addr", "127.0.0.1:0",
				"--mcp-upstream", providerURL + "/mcp", "--worker-id", "demo-gateway"},
			Env: []string{"PROVIDER_URL=" + providerURL}})
		if err != nil {
			return err
		}
		defer gw.Stop(10 * time.Second)
		fmt.Printf("gateway HTTP %s, MCP %s\n", gw.Field("http_addr"), gw.Field("mcp_addr"))
		return demo.RunGateway(ctx, demo.GatewayEnv{
			HTTPURL: "http://" + gw.Field("http_addr"), MCPURL: "http://" + gw.Field("mcp_addr") + "/mcp", Callers: callers,
			RPC: pb.NewJournalServiceClient(client.BearerConn(conn, callers.Admin)), Provider: control, Out: os.Stdout,
		})
	}
	return demo.RunAll(ctx, demo.Env{
		Journal:     client.New(conn, client.WithWorkerID("demo-agent")),
		RPC:         pb.NewJournalServiceClient(conn),
		ProviderURL: providerURL,
		Provider:    control,
		Out:         os.Stdout,
	})
}
