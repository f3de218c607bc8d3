package soak

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
	"github.com/opjournal/opjournal/internal/testkit/pgenv"
)

// FaultRates are the probabilities with which the test provider spoils a
// request, per fault kind. Each is the share of ALL matching requests that
// meet that kind (the harness converts them into the provider's
// first-match rule order), so their sum must stay ≤ 1 per method.
type FaultRates struct {
	// CommitThenTimeout stores the effect and holds the answer past the
	// agent's timeout.
	CommitThenTimeout float64
	// TimeoutBeforeCommit holds the request past the agent's timeout and
	// stores nothing.
	TimeoutBeforeCommit float64
	// Reject answers a definite 422 and stores nothing (failed_final).
	Reject float64
	// ErrorAfterCommit stores the effect and answers 500.
	ErrorAfterCommit float64
	// DropConnectionAfterCommit stores the effect and closes the connection.
	DropConnectionAfterCommit float64
	// Slow holds the request for Config.SlowDelay (longer than the lease),
	// then stores the effect, whether or not the agent still waits.
	Slow float64
	// SlowLease15 and SlowLease3 hold a request of the routes that do NOT
	// deduplicate (/emails, /applications) for 1.5× and 3× the action's
	// lease_seconds, then store the effect whether or not the agent still
	// waits. Agents wait long enough for them (see Config.AgentTimeout):
	// the SDK's heartbeats must keep the lease; agents without heartbeats
	// (Mix.NoHeartbeat) give up at the lease ("lease_expired") and the
	// reconciler must find the late effect.
	SlowLease15, SlowLease3 float64
	// Error answers 503 before anything is stored.
	Error float64
	// SearchError answers 503 to the reconcilers' searches (GET).
	SearchError float64
	// SearchTimeout holds the reconcilers' searches past the verifier's
	// timeout (GET).
	SearchTimeout float64
}

// Mix is the share of intents given each agent behaviour, each drawn from
// the seed per intent.
type Mix struct {
	// Dup: two agents are given the same intent at once.
	Dup float64
	// Storm: the agent retries in bursts of several immediate retries.
	Storm float64
	// Restart: the agent crashes during its first call (its client and
	// connection are dropped without recording anything), then rebuilds
	// its client and resumes the intent from its key alone.
	Restart float64
	// Impatient: the agent waits Config.ShortAgentTimeout for the provider
	// instead of Config.AgentTimeout.
	Impatient float64
	// Decline: a payment with a declined card (a definite 402:
	// failed_final without any fault).
	Decline float64
	// Large: the intent's payload carries a member of LargeMemberBytes
	// (just below the journal's 64 KiB payload limit), derived from the
	// seed like the rest of the payload.
	Large float64
	// NoHeartbeat is a share of the AGENTS, not of the intents: that many
	// of them (rounded, chosen from the seed) run their SDK client with
	// client.WithHeartbeat(false), so that a provider call longer than the
	// lease is given up at its end ("lease_expired") while the provider may
	// still carry it out.
	NoHeartbeat float64
}

// Config configures a soak run. DefaultConfig gives the values the
// opjournal-soak command starts from; Run fills in nothing else, so start
// from DefaultConfig.
type Config struct {
	// Seed makes the run reproducible: the intents, the fault decisions of
	// each provider rule, the kill schedule, the pool drop and the search
	// outage all derive from it. 0 picks one from the clock (and reports it).
	Seed int64
	// Duration is the load phase: intents are handed out and faults
	// injected for this long.
	Duration time.Duration
	// Settle bounds the quiescence phase after the load: no new intents, no
	// faults, no kills; agents retry until every intent is settled. A run
	// extends it to what its policy needs (the longest agent wait, then
	// visibility_lag + in_flight_window until a release, then the
	// reconciler's longest backoff) and says so.
	Settle time.Duration
	// Agents is the number of concurrent simulated agents.
	Agents int
	// Intents caps the number of intents (0: as many as the load phase
	// allows).
	Intents int
	// Replicas is the number of journal processes (1 or 2).
	Replicas int
	// Reconcilers is the number of reconciler processes (1 or 2).
	Reconcilers int

	// BinDir holds opjournal, opjournal-reconciler and
	// opjournal-fakeprovider.
	BinDir string
	// DatabaseURL is the PostgreSQL server. Without a search_path the
	// harness creates a schema soak_<seed>_<random> and drops it at the end
	// (unless Keep); with one, it uses that schema as it is.
	DatabaseURL string
	// Keep keeps the schema the harness created.
	Keep bool
	// LogDir, if set, receives each child process's log (<name>.log).
	LogDir string
	// Progress is the interval of the progress lines.
	Progress time.Duration
	// ShippedPolicy makes the journals and reconcilers load the shipped
	// policy as it is (policy.DefaultYAML(); its verifiers read
	// ${PROVIDER_URL}) instead of the harness's own: the leases, the
	// slow-lease holds and the agents' waits follow its lease_seconds, the
	// settle phase is long enough for its releases, and there is no search
	// outage (its unknown_after_seconds is 15–60 minutes). LeaseSeconds,
	// the reconcile settings, InFlightWindow, UnknownAfter and SearchOutage
	// are then not used.
	ShippedPolicy bool

	// Faults are the provider's fault rates.
	Faults FaultRates
	// Mix is the share of each agent behaviour.
	Mix Mix
	// SlowDelay is how long a slow request is held; longer than the lease,
	// so the lease expires while the agent waits.
	SlowDelay time.Duration
	// HoldDelay is how long commit_then_timeout, timeout_before_commit and
	// search timeouts hold a request (the client gives up first).
	HoldDelay time.Duration
	// AgentTimeout is how long an agent waits for the provider on
	// /payments; longer than SlowDelay so slow answers arrive after the
	// lease expired (and are waited for under heartbeats). On /emails and
	// /applications agents wait AgentTimeout plus the longest slow-lease
	// hold (3× the lease with SlowLease3), and the timeout faults hold
	// HoldDelay plus the same.
	AgentTimeout time.Duration
	// ShortAgentTimeout is the wait of impatient agents (Mix.Impatient).
	ShortAgentTimeout time.Duration
	// IndexLag is the provider's search lag; it must stay below
	// VisibilityLag.
	IndexLag time.Duration

	// LeaseSeconds is every action's lease_seconds.
	LeaseSeconds int
	// InitialDelay, Interval, MaxInterval and VisibilityLag are every
	// action's reconcile settings (VisibilityLag above IndexLag).
	InitialDelay, Interval, MaxInterval, VisibilityLag time.Duration
	// InFlightWindow is every action's reconcile.in_flight_window: how long
	// the provider may still carry out a request after the attempt ended.
	// It must cover the longest the provider holds a request before
	// storing its effect (3× the lease with SlowLease3, 1.5× with
	// SlowLease15, SlowDelay with Slow) plus IndexLag, or a release may
	// precede a late effect of a provider that does not deduplicate
	// (emails, applications); Validate refuses less.
	InFlightWindow time.Duration
	// UnknownAfter is every action's unknown_after_seconds: unresolvable
	// operations are escalated after it.
	UnknownAfter time.Duration
	// ReconcilerPoll is the reconcilers' --poll-interval.
	ReconcilerPoll time.Duration

	// KillMin and KillMax bound the pause between kills (kill -9 of a
	// journal replica or a reconciler, alternately, then a restart). 0
	// disables kills.
	KillMin, KillMax time.Duration
	// PoolDrop terminates the journal's database connections once, in the
	// middle of the load.
	PoolDrop bool
	// SearchOutage makes one action's provider search fail for this long,
	// once, so that its unknown operations are escalated; 0 disables it.
	// It happens only if the load phase is at least twice as long, and
	// never with ShippedPolicy.
	SearchOutage time.Duration
	// Operator resolves escalated operations during the load, from the
	// provider's records, as a person would.
	Operator bool
	// PgBouncer puts a real PgBouncer in transaction pooling mode between
	// the journal replicas and PostgreSQL (harness/soak/pgbouncer.go); the schema
	// is then migrated with `opjournal migrate` on a direct connection.
	PgBouncer bool
}

// DefaultConfig returns the configuration of `opjournal-soak` without
// flags.
func DefaultConfig() Config {
	return Config{
		Duration:    2 * time.Minute,
		Settle:      2 * time.Minute,
		Agents:      16,
		Replicas:    2,
		Reconcilers: 2,
		BinDir:      "bin",
		DatabaseURL: pgenv.TestURL(),
		Progress:    5 * time.Second,
		Faults: FaultRates{
			CommitThenTimeout: 0.05, TimeoutBeforeCommit: 0.05, Reject: 0.03, ErrorAfterCommit: 0.05,
			DropConnectionAfterCommit: 0.05, Slow: 0.05, SlowLease15: 0.05, SlowLease3: 0.05, Error: 0.05,
			SearchError: 0.03, SearchTimeout: 0.01,
		},
		Mix:               Mix{Dup: 0.05, Storm: 0.05, Restart: 0.03, Impatient: 0.25, Decline: 0.02, Large: 0.03, NoHeartbeat: 0.25},
		SlowDelay:         3 * time.Second,
		HoldDelay:         10 * time.Second,
		AgentTimeout:      4 * time.Second,
		ShortAgentTimeout: time.Second,
		IndexLag:          500 * time.Millisecond,
		LeaseSeconds:      2,
		InitialDelay:      500 * time.Millisecond,
		Interval:          time.Second,
		MaxInterval:       5 * time.Second,
		VisibilityLag:     4 * time.Second,
		InFlightWindow:    7 * time.Second,
		UnknownAfter:      20 * time.Second,
		ReconcilerPoll:    250 * time.Millisecond,
		KillMin:           10 * time.Second,
		KillMax:           30 * time.Second,
		PoolDrop:          true,
		SearchOutage:      25 * time.Second,
		Operator:          true,
	}
}

// RegisterFlags defines a flag for every field of c on fs, with c's current
// values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the intents, faults and kills (0: from the clock)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "load phase")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "quiescence deadline after the load (extended to what the policy's releases need)")
	fs.IntVar(&c.Agents, "agents", c.Agents, "concurrent simulated agents")
	fs.IntVar(&c.Intents, "intents", c.Intents, "at most this many intents (0: as many as the load phase allows)")
	fs.IntVar(&c.Replicas, "replicas", c.Replicas, "journal processes (1 or 2)")
	fs.IntVar(&c.Reconcilers, "reconcilers", c.Reconcilers, "reconciler processes (1 or 2)")
	fs.StringVar(&c.BinDir, "bin-dir", c.BinDir, "directory with opjournal, opjournal-reconciler and opjournal-fakeprovider")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "PostgreSQL server (default $TEST_DATABASE_URL or the local test database); with search_path, that schema is used as is")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "keep the schema the harness created")
	fs.StringVar(&c.LogDir, "log-dir", c.LogDir, "write each child process's log to DIR/<name>.log")
	fs.DurationVar(&c.Progress, "progress", c.Progress, "interval of the progress lines")
	fs.BoolVar(&c.ShippedPolicy, "shipped-policy", c.ShippedPolicy,
		"journals and reconcilers use the shipped policy as it is (protocol/policy/default.yaml): slow-lease holds and agents' waits follow its lease_seconds, the settle phase its release delays, no search outage; --lease-seconds, the reconcile flags, --in-flight-window, --unknown-after and --search-outage are then unused")

	f := &c.Faults
	fs.Float64Var(&f.CommitThenTimeout, "rate-commit-then-timeout", f.CommitThenTimeout, "share of provider calls that commit, then time out")
	fs.Float64Var(&f.TimeoutBeforeCommit, "rate-timeout-before-commit", f.TimeoutBeforeCommit, "share of provider calls that time out without committing")
	fs.Float64Var(&f.Reject, "rate-reject", f.Reject, "share of provider calls rejected (422)")
	fs.Float64Var(&f.ErrorAfterCommit, "rate-error-after-commit", f.ErrorAfterCommit, "share of provider calls that commit, then answer 500")
	fs.Float64Var(&f.DropConnectionAfterCommit, "rate-drop-connection-after-commit", f.DropConnectionAfterCommit, "share of provider calls that commit, then drop the connection")
	fs.Float64Var(&f.Slow, "rate-slow", f.Slow, "share of provider calls held for --slow-delay (across the lease)")
	fs.Float64Var(&f.SlowLease15, "rate-slow-1.5x-lease", f.SlowLease15,
		"share of /emails and /applications calls held for 1.5× the action's lease_seconds, then carried out (agents wait for them)")
	fs.Float64Var(&f.SlowLease3, "rate-slow-3x-lease", f.SlowLease3,
		"share of /emails and /applications calls held for 3× the action's lease_seconds, then carried out (agents wait for them)")
	fs.Float64Var(&f.Error, "rate-error", f.Error, "share of provider calls answered 503 before anything is stored")
	fs.Float64Var(&f.SearchError, "rate-search-error", f.SearchError, "share of reconciler searches answered 503")
	fs.Float64Var(&f.SearchTimeout, "rate-search-timeout", f.SearchTimeout, "share of reconciler searches that time out")

	m := &c.Mix
	fs.Float64Var(&m.Dup, "mix-dup", m.Dup, "share of intents given to two agents at once")
	fs.Float64Var(&m.Storm, "mix-storm", m.Storm, "share of intents retried in storms of immediate retries")
	fs.Float64Var(&m.Restart, "mix-restart", m.Restart, "share of intents whose agent crashes mid-call and resumes from the key alone")
	fs.Float64Var(&m.Impatient, "mix-impatient", m.Impatient, "share of intents whose agent waits --short-agent-timeout")
	fs.Float64Var(&m.Decline, "mix-decline", m.Decline, "share of payments with a declined card")
	fs.Float64Var(&m.Large, "mix-large", m.Large, fmt.Sprintf("share of intents whose payload carries a %d-byte member (below the journal's 64 KiB limit)", LargeMemberBytes))
	fs.Float64Var(&m.NoHeartbeat, "mix-no-heartbeat", m.NoHeartbeat,
		"share of the AGENTS whose SDK client runs without heartbeats: their calls longer than the lease are given up (lease_expired) and reconciled")

	fs.DurationVar(&c.SlowDelay, "slow-delay", c.SlowDelay, "how long a slow provider call is held (longer than the lease)")
	fs.DurationVar(&c.HoldDelay, "hold-delay", c.HoldDelay, "how long the timeout faults hold a request")
	fs.DurationVar(&c.AgentTimeout, "agent-timeout", c.AgentTimeout,
		"how long an agent waits for /payments; for /emails and /applications, this plus the longest slow-lease hold (3× lease)")
	fs.DurationVar(&c.ShortAgentTimeout, "short-agent-timeout", c.ShortAgentTimeout, "how long an impatient agent waits for the provider")
	fs.DurationVar(&c.IndexLag, "index-lag", c.IndexLag, "the provider's search lag (below --visibility-lag)")
	fs.IntVar(&c.LeaseSeconds, "lease-seconds", c.LeaseSeconds, "policy: lease_seconds")
	fs.DurationVar(&c.InitialDelay, "initial-delay", c.InitialDelay, "policy: reconcile.initial_delay")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "policy: reconcile.interval")
	fs.DurationVar(&c.MaxInterval, "max-interval", c.MaxInterval, "policy: reconcile.max_interval")
	fs.DurationVar(&c.VisibilityLag, "visibility-lag", c.VisibilityLag, "policy: reconcile.visibility_lag (above --index-lag)")
	fs.DurationVar(&c.InFlightWindow, "in-flight-window", c.InFlightWindow,
		"policy: reconcile.in_flight_window (at least the longest hold that commits, 3× --lease-seconds with --rate-slow-3x-lease, plus --index-lag)")
	fs.DurationVar(&c.UnknownAfter, "unknown-after", c.UnknownAfter, "policy: unknown_after_seconds (whole seconds)")
	fs.DurationVar(&c.ReconcilerPoll, "reconciler-poll", c.ReconcilerPoll, "the reconcilers' --poll-interval")

	fs.DurationVar(&c.KillMin, "kill-min", c.KillMin, "shortest pause between kills (0: no kills)")
	fs.DurationVar(&c.KillMax, "kill-max", c.KillMax, "longest pause between kills")
	fs.BoolVar(&c.PoolDrop, "pool-drop", c.PoolDrop, "terminate the journal's database connections once")
	fs.DurationVar(&c.SearchOutage, "search-outage", c.SearchOutage, "one action's search fails this long, once (0: none)")
	fs.BoolVar(&c.Operator, "operator", c.Operator, "resolve escalated operations during the load, as a person would")
	fs.BoolVar(&c.PgBouncer, "pgbouncer", c.PgBouncer,
		"start PgBouncer (pool_mode=transaction) and connect the journal replicas only through it; the schema is migrated directly first")
}

// Validate reports the first field of c that cannot work.
func (c Config) Validate() error {
	rate := func(name string, v float64) error {
		if v < 0 || v > 1 {
			return fmt.Errorf("%s: %v is not in [0, 1]", name, v)
		}
		return nil
	}
	f, m := c.Faults, c.Mix
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"rate-commit-then-timeout", f.CommitThenTimeout}, {"rate-timeout-before-commit", f.TimeoutBeforeCommit},
		{"rate-reject", f.Reject}, {"rate-error-after-commit", f.ErrorAfterCommit},
		{"rate-drop-connection-after-commit", f.DropConnectionAfterCommit}, {"rate-slow", f.Slow}, {"rate-error", f.Error},
		{"rate-slow-1.5x-lease", f.SlowLease15}, {"rate-slow-3x-lease", f.SlowLease3}, {"mix-large", m.Large}, {"mix-no-heartbeat", m.NoHeartbeat},
		{"rate-search-error", f.SearchError}, {"rate-search-timeout", f.SearchTimeout},
		{"mix-dup", m.Dup}, {"mix-storm", m.Storm}, {"mix-restart", m.Restart}, {"mix-impatient", m.Impatient}, {"mix-decline", m.Decline},
	} {
		if err := rate(r.name, r.v); err != nil {
			return err
		}
	}
	switch {
	case c.Duration <= 0:
		return errors.New("duration: must be positive")
	case c.Settle <= 0:
		return errors.New("settle: must be positive")
	case c.Agents < 1:
		return errors.New("agents: at least 1")
	case c.Intents < 0:
		return errors.New("intents: must not be negative")
	case c.Replicas < 1 || c.Replicas > 2:
		return errors.New("replicas: 1 or 2")
	case c.Reconcilers < 1 || c.Reconcilers > 2:
		return errors.New("reconcilers: 1 or 2")
	case c.DatabaseURL == "":
		return errors.New("database-url: required")
	case !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://"):
		return errors.New("database-url: must be a postgres:// URL")
	case f.CommitThenTimeout+f.TimeoutBeforeCommit+f.Reject+f.ErrorAfterCommit+f.DropConnectionAfterCommit+f.Slow+f.SlowLease15+f.SlowLease3+f.Error > 1:
		return errors.New("the provider call fault rates (the --rate-* flags but the search ones) add up to more than 1")
	case f.SearchError+f.SearchTimeout > 1:
		return errors.New("the search fault rates add up to more than 1")
	case c.SlowDelay <= 0 || c.HoldDelay <= 0 || c.AgentTimeout <= 0 || c.ShortAgentTimeout <= 0:
		return errors.New("slow-delay, hold-delay, agent-timeout and short-agent-timeout must be positive")
	case c.HoldDelay <= c.AgentTimeout:
		return errors.New("hold-delay: must be longer than agent-timeout, or the timeout faults do not time out")
	case c.IndexLag < 0:
		return errors.New("index-lag: must not be negative")
	case !c.ShippedPolicy && c.IndexLag >= c.VisibilityLag:
		return errors.New("index-lag: must stay below visibility-lag (a lagging search would prove absence too early)")
	case c.LeaseSeconds < 1:
		return errors.New("lease-seconds: at least 1")
	case c.InitialDelay < 0 || c.Interval <= 0 || c.MaxInterval < c.Interval:
		return errors.New("initial-delay ≥ 0, interval > 0 and max-interval ≥ interval")
	case c.InFlightWindow <= 0:
		return errors.New("in-flight-window: must be positive (the soak policy's searches are definitive)")
	case c.UnknownAfter < time.Second || c.UnknownAfter%time.Second != 0:
		return errors.New("unknown-after: whole seconds, at least 1s")
	case c.ReconcilerPoll <= 0:
		return errors.New("reconciler-poll: must be positive")
	case c.KillMin < 0 || (c.KillMin > 0 && c.KillMax < c.KillMin):
		return errors.New("kill-min ≥ 0 and kill-max ≥ kill-min")
	case c.SearchOutage < 0:
		return errors.New("search-outage: must not be negative")
	case c.Progress <= 0:
		return errors.New("progress: must be positive")
	}
	if c.PgBouncer {
		if _, err := pgbouncer.Binary(""); err != nil {
			return fmt.Errorf("pgbouncer: %w", err)
		}
	}
	return c.checkPolicy()
}

// ReplayArgs returns the command-line arguments that repeat this run: the
// seed and every flag whose value differs from DefaultConfig. A password
// in the database URL is redacted.
func (c Config) ReplayArgs() []string {
	def, cur := DefaultConfig(), c
	dfs := flag.NewFlagSet("default", flag.ContinueOnError)
	def.RegisterFlags(dfs)
	cfs := flag.NewFlagSet("current", flag.ContinueOnError)
	cur.RegisterFlags(cfs)
	args := []string{"--seed=" + strconv.FormatInt(c.Seed, 10)}
	cfs.VisitAll(func(f *flag.Flag) {
		if f.Name == "seed" {
			return
		}
		v := f.Value.String()
		if v == dfs.Lookup(f.Name).Value.String() {
			return
		}
		if f.Name == "database-url" {
			// A replay makes its own schema: drop the one this run used.
			if u, err := url.Parse(v); err == nil {
				q := u.Query()
				q.Del("search_path")
				u.RawQuery = q.Encode()
				v = u.Redacted()
			}
			if v == dfs.Lookup(f.Name).Value.String() {
				return
			}
		}
		args = append(args, "--"+f.Name+"="+shellQuote(v))
	})
	return args
}

// ReplayCommand is ReplayArgs as one command line of opjournal-soak.
func (c Config) ReplayCommand() string {
	return "opjournal-soak " + strings.Join(c.ReplayArgs(), " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '@' || r == '=' || r == ',' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
