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
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opjournal/opjournal/internal/soak"
)

func main() {
	cfg := soak.DefaultConfig()
	fs := flag.NewFlagSet("opjournal-soak", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "opjournal-soak: unexpected arguments %v\n", fs.Args())
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "opjournal-soak:", err)
		os.Exit(2)
	}
	// SIGINT or SIGTERM aborts the run: the child processes are stopped
	// and the schema dropped (unless --keep), without a verdict.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := soak.Run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "opjournal-soak:", err)
		stop()
		os.Exit(1)
	}
	if !sum.Passed() {
		stop()
		os.Exit(1)
	}
}
