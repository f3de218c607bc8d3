// Command opjournal-soak-failover runs the failover harness (package
// internal/soak/failover) in one or both replication modes and prints its progress
// and a report per mode. It exits 1 when a check failed, 2 when the run
// could not be carried out.
//
//	opjournal-soak-failover --mode both --duration 75s --failovers 2 --bin-dir bin
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opjournal/opjournal/internal/soak/failover"
)

func main() {
	cfg := failover.DefaultConfig(failover.Sync)
	fs := flag.NewFlagSet("opjournal-soak-failover", flag.ContinueOnError)
	mode := fs.String("mode", "both", "replication mode: sync, async or both")
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	var modes []failover.Mode
	switch *mode {
	case "both":
		modes = []failover.Mode{failover.Sync, failover.Async}
	case "sync", "async":
		modes = []failover.Mode{failover.Mode(*mode)}
	default:
		fmt.Fprintf(os.Stderr, "opjournal-soak-failover: --mode %q: want sync, async or both\n", *mode)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var sums []failover.Summary
	for _, m := range modes {
		c := cfg
		c.Mode = m
		sum, err := failover.Run(ctx, c, os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "opjournal-soak-failover: %s: %v\n", m, err)
			os.Exit(2)
		}
		sums = append(sums, sum)
	}
	code := 0
	fmt.Println("\n=== summary ===")
	for _, s := range sums {
		verdict := "PASS"
		if !s.Passed() {
			verdict, code = "FAIL", 1
		}
		fmt.Printf("%-5s failovers %d  intents %d  acknowledged %d  found %d  missing %d  regressed %d  lost-after-failover %d  duplicates %d  %s\n",
			s.Mode, len(s.Failovers), s.Intents, s.Acknowledged, s.Found, s.Missing, s.Regressed, len(s.Lost), s.Duplicates, verdict)
	}
	os.Exit(code)
}
