// Command opjournal-soak-failover runs the failover harness (package
// harness/soak/failover) in one or both replication modes and prints its progress
// and a report per mode. It exits 1 when a check failed, 2 when the run
// could not be carried out.
//
//	opjournal-soak-failover --mode both --duration 75s --failovers 2 --bin-dir bin
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/harness/soak/failover"
	"github.com/opjournal/opjournal/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Execute(ctx, newRoot(os.Stdout, os.Stderr), os.Args[1:])
	stop()
	var failed checksFailed
	switch {
	case err == nil:
	case errors.As(err, &failed):
		os.Exit(1)
	case cli.IsUsage(err):
		cli.Exit("opjournal-soak-failover", err)
	default:
		// As before: a run that could not be carried out is status 2,
		// apart from the 1 of a failed check.
		fmt.Fprintln(os.Stderr, "opjournal-soak-failover:", err)
		os.Exit(2)
	}
}

// checksFailed is a run whose summary has a FAIL.
type checksFailed struct{}

func (checksFailed) Error() string { return "a check failed" }

// newRoot is the command line: --mode and failover.Config's flags.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	cfg := failover.DefaultConfig(failover.Sync)
	var mode string
	c := &cobra.Command{
		Use:   "opjournal-soak-failover [--mode sync|async|both] [flags]",
		Short: "the failover harness: PostgreSQL primary killed and standby promoted under load (by the harness, or by Patroni)",
		Long: `Run the failover harness (package soak/failover) in one or both replication
modes, print its progress and a report per mode, then a summary line per mode.
Exit status: 0 when every check passed, 1 when a check failed, 2 for bad flags
or when the run could not be carried out.`,
		Example: `  opjournal-soak-failover --mode both --duration 75s --failovers 2 --bin-dir bin
  opjournal-soak-failover --mode async --keep --work-dir /tmp/failover
  opjournal-soak-failover --manager patroni --mode sync --scenarios switchover,kill-node,freeze-primary --bin-dir bin`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var modes []failover.Mode
			switch mode {
			case "both":
				modes = []failover.Mode{failover.Sync, failover.Async}
			case "sync", "async":
				modes = []failover.Mode{failover.Mode(mode)}
			default:
				return cli.Usage(fmt.Errorf("--mode %q: want sync, async or both", mode))
			}
			return run(cmd.Context(), cfg, modes, stdout)
		},
	}
	c.Flags().StringVar(&mode, "mode", "both", "replication mode: sync, async or both")
	fs := flag.NewFlagSet("opjournal-soak-failover", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	c.Flags().AddGoFlagSet(fs)
	return cli.NewRoot(c, "", stdout, stderr)
}

// run runs each mode, then prints the summary; a FAIL is checksFailed.
func run(ctx context.Context, cfg failover.Config, modes []failover.Mode, stdout io.Writer) error {
	var sums []failover.Summary
	for _, m := range modes {
		c := cfg
		c.Mode = m
		sum, err := failover.Run(ctx, c, stdout)
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		sums = append(sums, sum)
	}
	var err error
	fmt.Fprintln(stdout, "\n=== summary ===")
	for _, s := range sums {
		verdict := "PASS"
		if !s.Passed() {
			verdict, err = "FAIL", checksFailed{}
		}
		fmt.Fprintf(stdout, "%-5s %-8s failovers %d  intents %d  acknowledged %d  found %d  missing %d  regressed %d  lost-after-failover %d  duplicates %d  %s\n",
			s.Mode, s.Manager, len(s.Failovers), s.Intents, s.Acknowledged, s.Found, s.Missing, s.Regressed, len(s.Lost), s.Duplicates, verdict)
	}
	return err
}
