// Command opjournal-demo runs the reproducible check of docs/spec.md against the
// real processes: it starts opjournal (on a fresh SQLite file),
// opjournal-fakeprovider and opjournal-reconciler on free ports, runs the
// scenarios of package demo, prints every step, and exits non-zero if any
// observation differs from docs/spec.md. `make demo` builds the binaries and
// runs it.
//
// Every process runs with the demo's policy (demo.PolicyYAML: the shipped
// policy with a 5 s in_flight_window, the test provider's true one), so
// that the release of a proven absence takes seconds, not the 2 min 3 s of
// the shipped policy; --policy FILE runs with another one (--policy
// protocol/policy/default.yaml waits the shipped window, printing its progress).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/harness/demo"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	if err != nil && !cli.IsUsage(err) {
		fmt.Fprintln(os.Stderr, "\nDEMO FAILED:", err)
		os.Exit(1)
	}
	cli.Exit("opjournal-demo", err)
}

// newRoot is the command line; the demo runs in RunE.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var binDir, policyPath string
	var verbose, withGateway bool
	c := &cobra.Command{
		Use:   "opjournal-demo [--bin-dir bin] [--gateway] [-v]",
		Short: "the reproducible check of docs/spec.md against the real processes",
		Long: `Run the reproducible check of docs/spec.md against the real processes: start
opjournal (on a fresh SQLite file), opjournal-fakeprovider and
opjournal-reconciler on free ports, run the scenarios of package demo, print
every step, and exit 1 if any observation differs from docs/spec.md (2 for bad
flags). With --gateway the agent calls only opjournal-gateway's HTTP and MCP
doors. "make demo" and "make demo-gateway" build the binaries and run it.`,
		Example: `  opjournal-demo --bin-dir bin
  opjournal-demo --gateway --bin-dir bin -v   # with the processes' logs`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run(cmd.Context(), binDir, policyPath, verbose, withGateway); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "\nDEMO PASSED: every step observed what docs/spec.md says; one effect per intent.")
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&binDir, "bin-dir", "bin", "where opjournal, opjournal-fakeprovider and opjournal-reconciler are")
	fs.BoolVarP(&verbose, "v", "v", false, "also print the processes' logs")
	fs.BoolVar(&withGateway, "gateway", false, "run the gateway scenarios (make demo-gateway): the agent calls only opjournal-gateway's HTTP and MCP doors")
	fs.StringVar(&policyPath, "policy", "", "policy YAML file for every process (default: the shipped policy with a 5 s in_flight_window; protocol/policy/default.yaml waits the shipped 2 minutes)")
	return cli.NewRoot(c, "", stdout, stderr)
}

func run(ctx context.Context, binDir, policyPath string, verbose, withGateway bool) error {
	dir, err := os.MkdirTemp("", "opjournal-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pol, policyArgs, err := demoPolicy(dir, policyPath)
	if err != nil {
		return err
	}
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
	journalArgs := append([]string{"serve", "--database-url", "sqlite://" + filepath.Join(dir, "journal.db"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, policyArgs...)
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
		Args: append([]string{"--journal-addr", grpcAddr, "--poll-interval", "200ms", "--id", "demo-reconciler"}, policyArgs...),
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
			Args: append([]string{"--journal-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--mcp-addr", "127.0.0.1:0",
				"--mcp-upstream", providerURL + "/mcp", "--worker-id", "demo-gateway"}, policyArgs...),
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
		Policy:      pol,
		Out:         os.Stdout,
	})
}

// demoPolicy writes the demo's policy into dir (or reads the one at path)
// and says which it is: the --policy arguments of every process, and the
// parsed policy for the narration.
func demoPolicy(dir, path string) (*policy.Policy, []string, error) {
	if path != "" {
		p, err := policy.Load(path)
		if err != nil {
			return nil, nil, err
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, nil, err
		}
		fmt.Printf("policy: %s: %s\n", path, demo.PolicySummary(p))
		return p, []string{"--policy", abs}, nil
	}
	src, err := demo.PolicyYAML()
	if err != nil {
		return nil, nil, err
	}
	path = filepath.Join(dir, "demo-policy.yaml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		return nil, nil, err
	}
	p, err := policy.Load(path)
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("policy: the shipped policy with in_flight_window %s instead of 2m (the test provider carries out nothing after it\n"+
		"        answered or gave up; --policy protocol/policy/default.yaml waits the shipped window): %s\n"+
		"        create_payment also asks an operator to approve payments above %d minor units, and has budgets per agent and\n"+
		"        currency: %d payments a day (then refused) and %d minor units a day (then a person decides)\n",
		demo.InFlightWindow, demo.PolicySummary(p), demo.ApprovalThreshold, demo.DailyPayments, demo.DailySpend)
	return p, []string{"--policy", path}, nil
}
