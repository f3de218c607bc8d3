package soak

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/pgtest"
)

// TestShortSoak is a short soak with the real binaries: two journal
// replicas, two reconcilers and the test provider as child processes,
// sixteen agents, every provider fault kind, kills of both kinds, a pool
// drop and a search outage, in under a minute. The invariants are the
// test; timing only changes how many intents get through.
func TestShortSoak(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/cmd/opjournal-fakeprovider",
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
	}
}

// shortConfig is the short soak: 15 s of load, a kill every 2–4 s, a 7 s
// search outage, escalation after 7 s. The visibility lag has a wider
// margin over the slow fault than the default (5 s for a 3 s hold), because
// `make test` runs this next to every other test on a busy machine, where
// the provider may take a while to even read a request.
func shortConfig() Config {
	cfg := DefaultConfig()
	cfg.Seed = 20261130
	cfg.Duration = 15 * time.Second
	cfg.Settle = 30 * time.Second
	cfg.Agents = 16
	// Kills alternate between a replica and a reconciler: at most 4 s
	// apart, two fit into the load phase even when restarts are slow.
	cfg.KillMin, cfg.KillMax = 2*time.Second, 4*time.Second
	cfg.SearchOutage = 7 * time.Second
	cfg.UnknownAfter = 7 * time.Second
	cfg.VisibilityLag = 5 * time.Second
	cfg.Progress = 3 * time.Second
	return cfg
}

// TestIntentForKey: an agent that lost its memory rebuilds the same
// intent, payload included, from the key alone.
func TestIntentForKey(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 42
	for n := range 200 {
		in := NewIntent(cfg, n)
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
	other := cfg
	other.Seed = 43
	if _, err := IntentForKey(other, NewIntent(cfg, 1).Key); err == nil {
		t.Fatal("a key of another seed was accepted")
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
