package failover

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Mode is the replication mode of a run.
type Mode string

// The replication modes.
const (
	// Sync: synchronous_standby_names = '*' whenever the standby streams;
	// every failover happens while the standby is the synchronous one.
	Sync Mode = "sync"
	// Async: asynchronous streaming; before each kill the standby's
	// replication connection is stalled for Config.LagWindow, so the last
	// acknowledged writes exist on the primary only.
	Async Mode = "async"
)

// Config is one failover run (one mode).
type Config struct {
	// Mode is sync or async.
	Mode Mode
	// Duration is the load phase; Failovers failovers happen in it, evenly
	// spaced (each waits for the standby first, so a slow rebuild delays
	// the next one).
	Duration  time.Duration
	Failovers int
	// Agents is the number of simulated agents.
	Agents int
	// EmailShare is the share of intents that send an email, a provider
	// route that does not deduplicate (the rest are payments, which
	// carry the key as Idempotency-Key); AsyncEmailShare is the share in
	// async mode, 0 by default: a registration lost by asynchronous
	// replication and then retried by the agent calls the provider a
	// second time, which only a provider that deduplicates by key absorbs
	// (see the package doc).
	EmailShare, AsyncEmailShare float64
	// PromoteDelay is how long the "failover manager" takes to notice the
	// dead primary before promoting the standby.
	PromoteDelay time.Duration
	// LagWindow (async) is how long the standby receives nothing before
	// the kill.
	LagWindow time.Duration
	// LeaseSeconds is the policy's lease.
	LeaseSeconds int
	// Settle bounds the phase after the load in which agents and the
	// reconciler finish every intent.
	Settle time.Duration
	// BinDir holds opjournal, opjournal-reconciler, opjournal-fakeprovider.
	BinDir string
	// PGBin holds initdb, pg_ctl, pg_basebackup (PostgreSQL 15).
	PGBin string
	// WorkDir is where the clusters live ("" = a new temporary directory,
	// removed at the end unless Keep).
	WorkDir string
	// Keep keeps the clusters' directories and logs.
	Keep bool
	// Seed makes the payloads and the mix of actions reproducible.
	Seed int64
	// Progress is the interval of the progress lines.
	Progress time.Duration
}

// DefaultConfig is the make target's run of one mode: 75 s of load with
// two failovers.
func DefaultConfig(m Mode) Config {
	return Config{
		Mode: m, Duration: 75 * time.Second, Failovers: 2, Agents: 8, EmailShare: 0.3,
		PromoteDelay: time.Second, LagWindow: 500 * time.Millisecond, LeaseSeconds: 5,
		Settle: 90 * time.Second, BinDir: "bin", PGBin: "/usr/lib/postgresql/15/bin",
		Seed: 1, Progress: 5 * time.Second,
	}
}

// RegisterFlags binds the fields to flags (mode excepted: the command
// takes --mode sync|async|both).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Duration, "duration", c.Duration, "load phase per mode")
	fs.IntVar(&c.Failovers, "failovers", c.Failovers, "failovers per mode (kill -9 of the primary, promotion of the standby)")
	fs.IntVar(&c.Agents, "agents", c.Agents, "simulated agents")
	fs.Float64Var(&c.EmailShare, "email-share", c.EmailShare, "share of intents that send an email (a route that does not deduplicate); the rest are payments with an Idempotency-Key")
	fs.Float64Var(&c.AsyncEmailShare, "async-email-share", c.AsyncEmailShare, "the same in async mode (default 0: see the package doc)")
	fs.DurationVar(&c.PromoteDelay, "promote-delay", c.PromoteDelay, "time from the kill until the standby is promoted (failure detection)")
	fs.DurationVar(&c.LagWindow, "lag-window", c.LagWindow, "async: the standby receives nothing for this long before the kill")
	fs.IntVar(&c.LeaseSeconds, "lease-seconds", c.LeaseSeconds, "the policy's lease")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "bound on the settle phase after the load")
	fs.StringVar(&c.BinDir, "bin-dir", c.BinDir, "directory of the opjournal binaries (make binaries)")
	fs.StringVar(&c.PGBin, "pg-bin", c.PGBin, "directory of PostgreSQL's initdb, pg_ctl and pg_basebackup")
	fs.StringVar(&c.WorkDir, "work-dir", c.WorkDir, "directory for the clusters (default: a temporary one)")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "keep the clusters' directories and logs")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the payloads and of the action mix")
	fs.DurationVar(&c.Progress, "progress", c.Progress, "interval of the progress lines")
}

// emailShare is the share of emails in c's mode.
func (c Config) emailShare() float64 {
	if c.Mode == Async {
		return c.AsyncEmailShare
	}
	return c.EmailShare
}

// Validate names the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Mode != Sync && c.Mode != Async:
		return fmt.Errorf("mode %q: want sync or async", c.Mode)
	case c.Failovers < 1:
		return fmt.Errorf("--failovers %d: want at least 1", c.Failovers)
	case c.Duration < time.Duration(c.Failovers)*10*time.Second:
		return fmt.Errorf("--duration %s: want at least 10s per failover (%d failovers)", c.Duration, c.Failovers)
	case c.Agents < 1:
		return fmt.Errorf("--agents %d: want at least 1", c.Agents)
	case c.EmailShare < 0 || c.EmailShare > 1 || c.AsyncEmailShare < 0 || c.AsyncEmailShare > 1:
		return fmt.Errorf("--email-share %v, --async-email-share %v: want 0..1", c.EmailShare, c.AsyncEmailShare)
	case c.PromoteDelay < 0 || c.LagWindow < 0:
		return errors.New("--promote-delay and --lag-window must not be negative")
	case c.LeaseSeconds < 2:
		return fmt.Errorf("--lease-seconds %d: want at least 2", c.LeaseSeconds)
	case c.Settle <= 0:
		return errors.New("--settle must be positive")
	case c.Seed <= 0:
		return errors.New("--seed must be positive")
	}
	for _, b := range []string{"opjournal", "opjournal-reconciler", "opjournal-fakeprovider"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("%s: %w (build the binaries: make binaries)", b, err)
		}
	}
	for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(c.PGBin, b)); err != nil {
			return fmt.Errorf("%s: %w (Debian's postgresql-15 package, or --pg-bin)", b, err)
		}
	}
	return nil
}
