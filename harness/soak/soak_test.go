package soak

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
)

// TestShortSoak is a short soak with the real binaries: two journal
// replicas, two reconcilers and the test provider as child processes,
// 24 agents (six without heartbeats), every provider fault kind
// (with calls to /emails and /applications held for 1.5× and 3× the 2 s
// lease), large payloads, kills of both kinds, a pool drop and a search
// outage, in under a minute. The invariants are the test; timing only
// changes how many intents get through. It also checks, from the
// summary, that the run did what it claims: slow calls of both kinds,
// calls kept beyond the lease by heartbeats, calls given up at the lease
// by agents without heartbeats, large payloads that went through unknown.
func TestShortSoak(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-fakeprovider",
		"github.com/opjournal/opjournal/cmd/opjournal-reconciler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}

	cfg := shortConfig()
	cfg.BinDir = bin
	cfg.DatabaseURL = pgtest.NewSchema(t)
	if os.Getenv("SOAK_TEST_LOGS") != "" {
		cfg.LogDir = os.Getenv("SOAK_TEST_LOGS")
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("the soak could not run: %v", err)
	}
	if !sum.Passed() {
		t.Fatalf("%d invariant violation(s); replay with: %s", len(sum.Violations), sum.Command)
	}
	// The run must have exercised what it claims to.
	switch {
	case sum.Intents == 0 || sum.Operations == 0:
		t.Fatalf("no intent went through")
	case sum.JournalKills == 0 || sum.ReconcilerKills == 0:
		t.Fatalf("kills: journal %d, reconciler %d; want both", sum.JournalKills, sum.ReconcilerKills)
	case sum.PoolDrops != 1:
		t.Fatalf("pool drops: %d, want 1", sum.PoolDrops)
	case total(sum.Faults) == 0:
		t.Fatalf("no fault fired")
	case sum.SlowLease15 == 0 || sum.SlowLease3 == 0:
		t.Fatalf("slow calls: 1.5x lease %d, 3x lease %d; want both", sum.SlowLease15, sum.SlowLease3)
	case sum.NoHeartbeatAgents == 0:
		t.Fatalf("no agent ran without heartbeats")
	case sum.HeartbeatKept == 0:
		t.Fatalf("no call outlasted its lease under heartbeats")
	case sum.GaveUp == 0 || sum.GaveUpNoHeartbeat == 0:
		t.Fatalf("calls given up at the lease: %d (%d without heartbeat); want some of agents without heartbeats", sum.GaveUp, sum.GaveUpNoHeartbeat)
	case sum.LargeIntents == 0 || sum.LargeUnknown == 0:
		t.Fatalf("large-payload intents: %d, of which %d went through unknown; want both", sum.LargeIntents, sum.LargeUnknown)
	case sum.Released == 0:
		t.Fatalf("nothing was released for retry")
	case sum.Duplicates != 0:
		t.Fatalf("%d duplicates", sum.Duplicates) // a violation too; said once more
	}
}

// TestShortSoakThroughPgBouncer is the short soak with every journal
// replica connected only through a real PgBouncer in transaction pooling
// mode (Config.PgBouncer): the invariants must hold as they do directly,
// with the kills and the pool drop (which now ends PgBouncer's server
// connections); PgBouncer must have carried the replicas' traffic.
func TestShortSoakThroughPgBouncer(t *testing.T) {
	cfg := shortConfig()
	cfg.PgBouncer = true
	sum := runShort(t, cfg)
	switch {
	case sum.Intents == 0 || sum.Operations == 0:
		t.Fatalf("no intent went through")
	case sum.JournalKills == 0 || sum.ReconcilerKills == 0:
		t.Fatalf("kills: journal %d, reconciler %d; want both", sum.JournalKills, sum.ReconcilerKills)
	case sum.PoolDrops != 1:
		t.Fatalf("pool drops: %d, want 1", sum.PoolDrops)
	case !sum.PgBouncer || sum.PgBouncerXacts < int64(sum.Operations):
		// Each operation took several journal statements through it.
		t.Fatalf("pgbouncer carried %d transactions for %d operations: the replicas bypassed it", sum.PgBouncerXacts, sum.Operations)
	case sum.Duplicates != 0:
		t.Fatalf("%d duplicates", sum.Duplicates)
	}
	t.Logf("pgbouncer carried %d transactions for %d operations", sum.PgBouncerXacts, sum.Operations)
}

// runShort builds the binaries and runs cfg against a schema of its own,
// failing the test if the run could not be carried out or an invariant
// was violated.
func runShort(t *testing.T, cfg Config) Summary {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-fakeprovider",
		"github.com/opjournal/opjournal/cmd/opjournal-reconciler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}
	cfg.BinDir = bin
	cfg.DatabaseURL = pgtest.NewSchema(t)
	if os.Getenv("SOAK_TEST_LOGS") != "" {
		cfg.LogDir = os.Getenv("SOAK_TEST_LOGS")
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("the soak could not run: %v", err)
	}
	if !sum.Passed() {
		t.Fatalf("%d invariant violation(s); replay with: %s", len(sum.Violations), sum.Command)
	}
	return sum
}

// shortConfig is the short soak: 15 s of load, a kill every 2–4 s, a 7 s
// search outage, escalation after 7 s, and more slow-lease faults and
// large payloads than the default, so that each shows within 15 s. The
// policy is the default one: a 2 s lease, calls held 3 s and 6 s, and an
// in_flight_window of 7 s, which leaves a margin over the 6 s hold plus
// the 0.5 s index lag: `make test` runs this next to every other test on a
// busy machine, where the provider may take a while to even read a
// request.
func shortConfig() Config {
	cfg := DefaultConfig()
	cfg.Seed = 20261130
	cfg.Duration = 15 * time.Second
	cfg.Settle = 30 * time.Second
	cfg.Agents = 24
	// Kills alternate between a replica and a reconciler: at most 4 s
	// apart, two fit into the load phase even when restarts are slow.
	cfg.KillMin, cfg.KillMax = 2*time.Second, 4*time.Second
	cfg.SearchOutage = 7 * time.Second
	cfg.UnknownAfter = 7 * time.Second
	cfg.Progress = 3 * time.Second
	// Enough of the new faults to see each of them in 15 s.
	cfg.Faults.SlowLease15, cfg.Faults.SlowLease3 = 0.12, 0.12
	cfg.Mix.Large = 0.15
	return cfg
}

// TestIntentForKey: an agent that lost its memory rebuilds the same
// intent, payload included (a large one too), from the key alone.
func TestIntentForKey(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 42
	cfg.Mix.Large = 0.2
	large := 0
	for n := range 200 {
		in := NewIntent(cfg, n)
		if in.Large {
			large++
			b, err := json.Marshal(in.Payload) // sorted keys, no spaces: as long as the canonical JSON
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < LargeMemberBytes || len(b) >= 64<<10 {
				t.Fatalf("intent %d: a large payload of %d bytes; want %d to 64 KiB", n, len(b), LargeMemberBytes)
			}
		}
		again, err := IntentForKey(cfg, in.Key)
		if err != nil {
			t.Fatal(err)
		}
		if again.Key != in.Key || again.Action != in.Action || again.Path != in.Path || len(again.Payload) != len(in.Payload) {
			t.Fatalf("intent %d: %+v, rebuilt %+v", n, in, again)
		}
		for k, v := range in.Payload {
			if again.Payload[k] != v {
				t.Fatalf("intent %d: payload %s = %v, rebuilt %v", n, k, v, again.Payload[k])
			}
		}
	}
	if large == 0 {
		t.Fatal("no large payload among 200 intents at mix-large 0.2")
	}
	other := cfg
	other.Seed = 43
	if _, err := IntentForKey(other, NewIntent(cfg, 1).Key); err == nil {
		t.Fatal("a key of another seed was accepted")
	}
	if a, b := NewIntent(other, 7).Payload["attachment"], NewIntent(cfg, 7).Payload["attachment"]; a != nil && a == b {
		t.Fatal("two seeds gave the same attachment")
	}
	// The agents' waits: past 3× the lease where the slow-lease faults are.
	in := map[string]Intent{}
	for n := 0; len(in) < 3; n++ {
		if i := NewIntent(cfg, n); i.Timeout != cfg.ShortAgentTimeout {
			in[i.Action] = i
		}
	}
	if got := in["create_payment"].Timeout; got != cfg.AgentTimeout {
		t.Errorf("payment timeout %s, want %s", got, cfg.AgentTimeout)
	}
	for _, name := range []string{"send_email", "submit_application"} {
		if got, lease := in[name].Timeout, time.Duration(cfg.LeaseSeconds)*time.Second; got <= 3*lease {
			t.Errorf("%s timeout %s, want more than 3 × the lease %s", name, got, lease)
		}
	}
}

// TestValidateInFlightWindow: the soak's policy must give in_flight_window
// at least the longest hold of a request the provider then carries out
// (3× the lease with --rate-slow-3x-lease) plus the index lag; less is
// refused, naming the flags.
func TestValidateInFlightWindow(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("the default config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string // in the error; none: valid
	}{
		{"default window for the 6s hold", func(*Config) {}, nil},
		{"window shorter than 3x lease", func(c *Config) { c.InFlightWindow = 5 * time.Second },
			[]string{"in-flight-window", "6s", "--rate-slow-3x-lease", "--lease-seconds 2", "--index-lag", "6.5s"}},
		{"window covers the hold but not the index lag", func(c *Config) { c.InFlightWindow = 6 * time.Second },
			[]string{"in-flight-window", "6.5s"}},
		{"exactly the hold plus the index lag", func(c *Config) { c.InFlightWindow = 6500 * time.Millisecond }, nil},
		{"a longer lease needs a longer window", func(c *Config) { c.LeaseSeconds = 5 },
			[]string{"15s", "--lease-seconds 5", "15.5s"}},
		{"without 3x, the 1.5x hold decides", func(c *Config) { c.Faults.SlowLease3 = 0; c.LeaseSeconds = 5 },
			[]string{"7.5s", "--rate-slow-1.5x-lease: 1.5 × --lease-seconds 5", "8s"}},
		{"1.5x of a 4s lease fits the default window", func(c *Config) { c.Faults.SlowLease3 = 0; c.LeaseSeconds = 4 }, nil},
		{"without the slow-lease faults, --slow-delay", func(c *Config) {
			c.Faults.SlowLease15, c.Faults.SlowLease3, c.SlowDelay = 0, 0, 9*time.Second
		}, []string{"9s", "--slow-delay"}},
		{"no fault holds: any window", func(c *Config) {
			c.Faults.SlowLease15, c.Faults.SlowLease3, c.Faults.Slow, c.InFlightWindow = 0, 0, 0, time.Millisecond
		}, nil},
		{"zero window", func(c *Config) { c.InFlightWindow = 0 }, []string{"in-flight-window: must be positive"}},
		{"rates over 1", func(c *Config) { c.Faults.SlowLease3 = 0.7 }, []string{"add up to more than 1"}},
		{"rate out of range", func(c *Config) { c.Faults.SlowLease15 = 1.5 }, []string{"rate-slow-1.5x-lease"}},
		{"share of agents out of range", func(c *Config) { c.Mix.NoHeartbeat = -0.1 }, []string{"mix-no-heartbeat"}},
		{"the shipped policy is safe for its leases", func(c *Config) { c.ShippedPolicy = true }, nil},
		{"the shipped policy ignores the soak policy's flags", func(c *Config) {
			c.ShippedPolicy, c.InFlightWindow, c.LeaseSeconds = true, time.Second, 30
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestShippedPlan: with --shipped-policy the slow-lease holds, the agents'
// waits and the settle deadline follow the shipped policy's leases and
// release delays.
func TestShippedPlan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ShippedPolicy = true
	pol, err := shippedPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"create_payment", "send_email", "submit_application"} {
		act, ok := pol.Action(name)
		if !ok {
			t.Fatalf("the shipped policy has no %s", name)
		}
		p, lease := cfg.plan(name), time.Duration(act.LeaseSeconds)*time.Second
		if p.lease != lease {
			t.Errorf("%s: lease %s, want the shipped %s", name, p.lease, lease)
		}
		if name == "create_payment" {
			if p.slow15 != 0 || p.slow3 != 0 || p.agentTimeout != cfg.AgentTimeout {
				t.Errorf("payments: %+v; want no slow-lease holds and the plain agent timeout", p)
			}
			continue
		}
		if p.slow15 != lease*3/2 || p.slow3 != 3*lease {
			t.Errorf("%s: holds %s and %s, want 1.5× and 3× %s", name, p.slow15, p.slow3, lease)
		}
		if p.agentTimeout <= 3*lease || p.postHold <= p.agentTimeout {
			t.Errorf("%s: agents wait %s and timeouts hold %s; want more than %s, and the hold longer", name, p.agentTimeout, p.postHold, 3*lease)
		}
		if w := act.Reconcile.InFlightWindow; w < p.commitHold+cfg.IndexLag {
			t.Errorf("%s: the shipped in_flight_window %s does not cover the %s hold", name, w, p.commitHold)
		}
	}
	need, err := cfg.neededSettle()
	if err != nil {
		t.Fatal(err)
	}
	app, _ := pol.Action("submit_application")
	if min := cfg.plan("submit_application").agentTimeout + app.ReleaseAfter(); need < min {
		t.Errorf("settle %s; an application given up at the end of the load needs at least %s", need, min)
	}
	if !strings.Contains(string(cfg.policyYAML()), "create_ticket") {
		t.Error("the policy file of a shipped-policy run is not the shipped policy")
	}
}

// TestNoHeartbeatAgents: the share of agents without heartbeats is
// rounded, at least one for a positive share, and drawn from the seed.
func TestNoHeartbeatAgents(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed, cfg.Agents = 5, 16
	for _, tc := range []struct {
		share float64
		want  int
	}{{0, 0}, {0.01, 1}, {0.25, 4}, {1, 16}} {
		cfg.Mix.NoHeartbeat = tc.share
		if got := len(noHeartbeatAgents(cfg)); got != tc.want {
			t.Errorf("share %v of 16: %d agents, want %d", tc.share, got, tc.want)
		}
	}
	cfg.Mix.NoHeartbeat = 0.25
	a, b := noHeartbeatAgents(cfg), noHeartbeatAgents(cfg)
	if !maps.Equal(a, b) {
		t.Errorf("the same seed chose %v and %v", a, b)
	}
}

// TestReplayArgs: the replay command names the seed and exactly the flags
// that differ from the defaults.
func TestReplayArgs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 7
	cfg.Agents = 64
	cfg.Duration = 10 * time.Minute
	got := strings.Join(cfg.ReplayArgs(), " ")
	if got != "--seed=7 --agents=64 --duration=10m0s" {
		t.Fatalf("replay args: %s", got)
	}
}
