// Command opjournal-soak is opjournal's soak and fault harness: it runs the
// real journal replicas, reconcilers and test provider on a fresh
// PostgreSQL schema, drives many simulated agents through them while it
// injects provider faults, kills processes and drops the database pool, and
// then checks that nothing was lost and nothing duplicated (see package
// soak).
//
//	opjournal-soak [--duration 2m] [--agents 16] [--seed N] [--bin-dir bin] [flags]
//	opjournal-soak --shipped-policy --duration 5m --agents 64 [--seed N]
//
// `make soak DURATION=10m AGENTS=64 SEED=N` builds the binaries and runs it.
// Besides the provider faults and kills, calls to /emails and
// /applications are held 1.5× and 3× the lease (--rate-slow-1.5x-lease,
// --rate-slow-3x-lease), a share of the agents runs without heartbeats
// (--mix-no-heartbeat) and a share of the intents carries a payload just
// below the journal's limit (--mix-large). --shipped-policy runs the
// shipped policy as it is, with the holds scaled to its leases and a
// settle phase long enough for its releases. Flags the run's policy could
// not survive (an --in-flight-window shorter than the slowest hold plus
// --index-lag) are refused with exit status 2. --pgbouncer starts a real
// PgBouncer (Debian's pgbouncer, pool_mode=transaction) and connects every
// journal replica only through it; the schema is migrated first with
// `opjournal migrate` on the direct URL (`make soak-pgbouncer`).
// Exit status: 0 on PASS, 1 on FAIL (an invariant was violated) or when the
// run could not be carried out, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/harness/soak"
	"github.com/opjournal/opjournal/internal/cli"
)

func main() {
	// SIGINT or SIGTERM aborts the run: the child processes are stopped
	// and the schema dropped (unless --keep), without a verdict.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	if errors.Is(err, errFailed) {
		os.Exit(1) // the summary said FAIL
	}
	cli.Exit("opjournal-soak", err)
}

// errFailed is a run that violated an invariant; its summary says so.
var errFailed = errors.New("FAIL")

// newRoot is the command line: soak.Config's flags; the run is RunE.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	cfg := soak.DefaultConfig()
	c := &cobra.Command{
		Use:   "opjournal-soak [--duration 2m] [--agents 16] [--seed N] [--bin-dir bin] [flags]",
		Short: "the soak and fault harness against the real processes",
		Long: `Run the real journal replicas, reconcilers and test provider on a fresh
PostgreSQL schema, drive many simulated agents through them while injecting
provider faults, killing processes and dropping the database pool, and then
check that nothing was lost and nothing duplicated (package soak).

Flags the run's policy could not survive (an --in-flight-window shorter than
the slowest hold plus --index-lag) are refused with exit status 2.
Exit status: 0 on PASS, 1 on FAIL (an invariant was violated) or when the
run could not be carried out, 2 for bad flags.`,
		Example: `  opjournal-soak --bin-dir bin --duration 2m --agents 16
  opjournal-soak --shipped-policy --duration 5m --agents 64 --seed 42
  make soak DURATION=10m AGENTS=64 SEED=42 SOAK_FLAGS="--keep --log-dir soak-logs"`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return cli.Usage(err)
			}
			sum, err := soak.Run(cmd.Context(), cfg, stdout)
			if err != nil {
				return err
			}
			if !sum.Passed() {
				return errFailed
			}
			return nil
		},
	}
	fs := flag.NewFlagSet("opjournal-soak", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	c.Flags().AddGoFlagSet(fs)
	return cli.NewRoot(c, "", stdout, stderr)
}
