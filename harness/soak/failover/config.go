package failover

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Manager is who decides and performs the failovers.
type Manager string

// The failover managers.
const (
	// ManagerHarness: the harness itself (kill -9, PromoteDelay, pg_ctl
	// promote, a fresh pg_basebackup), with exact, repeatable timing.
	ManagerHarness Manager = "harness"
	// ManagerPatroni: three nodes under Patroni with one etcd; the harness
	// injects the faults of Config.Scenarios and Patroni decides.
	ManagerPatroni Manager = "patroni"
)

// PatroniSettings are the failover timing of the Patroni cluster (its DCS
// settings, seconds). Patroni wants LoopWait + 2*RetryTimeout <= TTL.
type PatroniSettings struct {
	// TTL is the leader key's lifetime: a leader that stops renewing it
	// (dead, frozen, cut from etcd) is replaced after at most TTL.
	TTL int
	// LoopWait is the pause between Patroni's checks.
	LoopWait int
	// RetryTimeout bounds etcd and PostgreSQL operations; a leader that
	// cannot reach etcd for this long demotes itself.
	RetryTimeout int
}

// The Patroni scenarios (Config.Scenarios); each is one fault, then the
// wait until Patroni has restored a whole cluster.
const (
	ScenarioSwitchover     = "switchover"      // POST /switchover to the leader's Patroni
	ScenarioKillNode       = "kill-node"       // kill -9 of the leader's Patroni and PostgreSQL
	ScenarioKillPostmaster = "kill-postmaster" // kill -9 of the leader's PostgreSQL alone
	ScenarioFreezePrimary  = "freeze-primary"  // SIGSTOP of the leader's PostgreSQL past the ttl, then SIGCONT
	ScenarioFreezeStandby  = "freeze-standby"  // SIGSTOP of the synchronous standby's PostgreSQL, then SIGCONT
	ScenarioPauseEtcd      = "pause-etcd"      // SIGSTOP of etcd past the ttl, then SIGCONT
	ScenarioStallKill      = "stall-kill"      // async: replication stalled, then kill-node
)

// DefaultScenarios are the scenarios of a mode, in order.
func DefaultScenarios(m Mode) []string {
	if m == Async {
		return []string{ScenarioSwitchover, ScenarioKillNode, ScenarioKillPostmaster, ScenarioFreezePrimary, ScenarioPauseEtcd, ScenarioStallKill}
	}
	return []string{ScenarioSwitchover, ScenarioKillNode, ScenarioKillPostmaster, ScenarioFreezePrimary, ScenarioFreezeStandby, ScenarioPauseEtcd}
}

// Config is one failover run (one mode).
type Config struct {
	// Mode is sync or async.
	Mode Mode
	// Manager performs the failovers (ManagerHarness if empty).
	Manager Manager
	// Scenarios (ManagerPatroni) are the faults, in order; empty: the
	// mode's DefaultScenarios. Failovers is then their number.
	Scenarios []string
	// Patroni is the Patroni cluster's timing.
	Patroni PatroniSettings
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
		Seed: 1, Progress: 5 * time.Second, Manager: ManagerHarness,
		Patroni: PatroniSettings{TTL: 10, LoopWait: 1, RetryTimeout: 4},
	}
}

// scenarios are the Patroni scenarios of the run.
func (c Config) scenarios() []string {
	if len(c.Scenarios) > 0 {
		return c.Scenarios
	}
	return DefaultScenarios(c.Mode)
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
	fs.Func("manager", "who fails over: harness (kill -9 and pg_ctl promote, exact timing) or patroni (three Patroni nodes and etcd; default harness)", func(v string) error {
		if m := Manager(v); m != ManagerHarness && m != ManagerPatroni {
			return fmt.Errorf("want harness or patroni")
		}
		c.Manager = Manager(v)
		return nil
	})
	fs.Func("scenarios", "patroni: comma-separated faults, in order (default per mode: "+strings.Join(DefaultScenarios(Sync), ",")+"; async: "+
		strings.Join(DefaultScenarios(Async), ",")+")", func(v string) error {
		c.Scenarios = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				c.Scenarios = append(c.Scenarios, s)
			}
		}
		return nil
	})
	fs.IntVar(&c.Patroni.TTL, "patroni-ttl", c.Patroni.TTL, "patroni: the leader key's ttl (seconds)")
	fs.IntVar(&c.Patroni.LoopWait, "patroni-loop-wait", c.Patroni.LoopWait, "patroni: loop_wait (seconds)")
	fs.IntVar(&c.Patroni.RetryTimeout, "patroni-retry-timeout", c.Patroni.RetryTimeout, "patroni: retry_timeout (seconds)")
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
	case c.Manager != ManagerPatroni && c.Duration < time.Duration(c.Failovers)*10*time.Second: // Patroni's run back to back, as long as they take
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
	switch c.Manager {
	case "", ManagerHarness:
	case ManagerPatroni:
		if err := c.validatePatroni(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--manager %q: want harness or patroni", c.Manager)
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

// validatePatroni checks the Patroni run's settings and programs.
func (c Config) validatePatroni() error {
	p := c.Patroni
	if p.TTL < 1 || p.LoopWait < 1 || p.RetryTimeout < 1 || p.LoopWait+2*p.RetryTimeout > p.TTL {
		return fmt.Errorf("--patroni-ttl %d, --patroni-loop-wait %d, --patroni-retry-timeout %d: want each at least 1 and loop_wait + 2 × retry_timeout ≤ ttl",
			p.TTL, p.LoopWait, p.RetryTimeout)
	}
	known := map[string]bool{ScenarioSwitchover: true, ScenarioKillNode: true, ScenarioKillPostmaster: true, ScenarioFreezePrimary: true,
		ScenarioPauseEtcd: true, ScenarioFreezeStandby: c.Mode == Sync, ScenarioStallKill: c.Mode == Async}
	for _, s := range c.scenarios() {
		if !known[s] {
			return fmt.Errorf("--scenarios: %q is not a scenario of %s mode (want some of %s)", s, c.Mode, strings.Join(DefaultScenarios(c.Mode), ", "))
		}
	}
	if _, err := exec.LookPath("patroni"); err != nil {
		return fmt.Errorf("--manager patroni: %w (Debian: apt-get install patroni etcd-server etcd-client, or scripts/deps.sh)", err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return fmt.Errorf("--manager patroni: %w (Debian: apt-get install etcd-server etcd-client)", err)
	}
	return nil
}
