package failover

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestShortSyncFailover is one failover with synchronous replication
// against the real binaries and a throwaway PostgreSQL pair: every
// acknowledged operation survives, calls during the failover answer
// UNAVAILABLE and nothing else, no duplicate, the journal replicas
// recover without a restart. About 40 s; -short skips it (make
// soak-failover runs both modes with more failovers).
func TestShortSyncFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover harness takes about 40 s (make soak-failover runs it in full)")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-fakeprovider",
		"github.com/opjournal/opjournal/cmd/opjournal-reconciler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}
	cfg := DefaultConfig(Sync)
	cfg.BinDir, cfg.Duration, cfg.Failovers, cfg.Agents, cfg.Settle = bin, 20*time.Second, 1, 4, 45*time.Second
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("the run could not be carried out: %v", err)
	}
	if !sum.Passed() {
		t.Fatalf("FAIL: %v", sum.Violations)
	}
	switch f := sum.Failovers; {
	case len(f) != 1:
		t.Fatalf("%d failovers, want 1", len(f))
	case f[0].Acked == 0 || f[0].Found != f[0].Acked:
		t.Fatalf("ledger after the failover: %d acknowledged, %d found", f[0].Acked, f[0].Found)
	case f[0].Recovered <= 0 || f[0].Recovered > 30*time.Second:
		t.Fatalf("recovered after %s", f[0].Recovered)
	case f[0].Unavailable == 0:
		t.Fatalf("no agent call answered UNAVAILABLE during the failover: the failover was not exercised")
	case sum.Acknowledged < f[0].Acked || sum.Effects == 0:
		t.Fatalf("acknowledged %d, effects %d", sum.Acknowledged, sum.Effects)
	}
}

// TestShortPatroniFailover is the harness under Patroni with etcd (v2
// API), synchronous mode: a switchover, then a kill -9 of the leader's
// node (Patroni and PostgreSQL). Patroni decides and promotes; every
// acknowledged operation survives both, no duplicate, only UNAVAILABLE
// meanwhile, each fault promotes a new leader, writes come back within
// the bound the settings give, and the journal replicas never restart.
// About a minute; -short skips it, and so does a machine without
// Patroni or etcd (scripts/deps.sh installs them).
func TestShortPatroniFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Patroni run takes about a minute (make soak-failover MANAGER=patroni runs every scenario)")
	}
	for _, prog := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed (%v): scripts/deps.sh installs Debian's patroni, etcd-server and etcd-client", prog, err)
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-fakeprovider",
		"github.com/opjournal/opjournal/cmd/opjournal-reconciler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}
	cfg := DefaultConfig(Sync)
	cfg.Manager, cfg.Scenarios = ManagerPatroni, []string{ScenarioSwitchover, ScenarioKillNode}
	cfg.BinDir, cfg.Duration, cfg.Agents, cfg.Settle = bin, 10*time.Second, 4, 45*time.Second
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("the run could not be carried out: %v", err)
	}
	if !sum.Passed() {
		t.Fatalf("FAIL: %v", sum.Violations)
	}
	if len(sum.Failovers) != 2 {
		t.Fatalf("%d scenarios run, want 2", len(sum.Failovers))
	}
	for _, f := range sum.Failovers {
		switch {
		case f.Promotions < 1 || f.From == f.To:
			t.Errorf("%s: %d promotions, leader %s → %s: Patroni did not fail over", f.Scenario, f.Promotions, f.From, f.To)
		case f.Acked == 0 || f.Found != f.Acked:
			t.Errorf("%s: ledger %d acknowledged, %d found", f.Scenario, f.Acked, f.Found)
		case f.LongestGap <= 0 || f.LongestGap > f.GapBound:
			t.Errorf("%s: longest write gap %s, bound %s", f.Scenario, f.LongestGap, f.GapBound)
		}
	}
	if kill := sum.Failovers[1]; kill.Unavailable == 0 {
		t.Errorf("no agent call answered UNAVAILABLE during the kill: the failover was not exercised")
	}
}

// TestStateOrder pins the ledger's order of states to the protocol's
// transitions.
func TestStateOrder(t *testing.T) {
	t.Parallel()
	st := func(s pb.Status, attempt int32, review bool) state {
		return state{status: s, attempt: attempt, review: review}
	}
	pending, inProg1 := st(pb.Status_STATUS_PENDING, 0, false), st(pb.Status_STATUS_IN_PROGRESS, 1, false)
	unknown1, released1 := st(pb.Status_STATUS_UNKNOWN, 1, false), st(pb.Status_STATUS_PENDING, 1, false)
	inProg2, succ1 := st(pb.Status_STATUS_IN_PROGRESS, 2, false), st(pb.Status_STATUS_SUCCEEDED, 1, false)
	failed1, review1 := st(pb.Status_STATUS_FAILED_FINAL, 1, false), st(pb.Status_STATUS_UNKNOWN, 1, true)
	for _, c := range []struct {
		found, acked state
		want         bool
	}{
		{pending, pending, true}, {inProg1, pending, true}, {unknown1, inProg1, true}, {released1, unknown1, true},
		{inProg2, released1, true}, {succ1, inProg1, true}, {succ1, unknown1, true}, {succ1, review1, true},
		{pending, inProg1, false}, {inProg1, unknown1, false}, {inProg1, succ1, false}, {failed1, succ1, false},
		{unknown1, review1, false}, {pending, succ1, false}, {inProg1, inProg2, false}, {review1, unknown1, true},
	} {
		if got := c.found.atOrAfter(c.acked); got != c.want {
			t.Errorf("%s at or after %s = %v, want %v", c.found, c.acked, got, c.want)
		}
	}
}

// TestPatroniSettings: the Patroni run refuses settings Patroni would
// refuse or that do not fit the mode, and its write-gap bound is the sum
// the package doc gives.
func TestPatroniSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode      Mode
		scenarios []string
		set       PatroniSettings
		want      string
	}{
		{Async, []string{ScenarioFreezeStandby}, PatroniSettings{10, 1, 4}, `"freeze-standby" is not a scenario of async mode`},
		{Sync, []string{ScenarioStallKill}, PatroniSettings{10, 1, 4}, `"stall-kill" is not a scenario of sync mode`},
		{Sync, []string{"reboot"}, PatroniSettings{10, 1, 4}, `"reboot" is not a scenario`},
		{Sync, nil, PatroniSettings{5, 1, 4}, "loop_wait + 2 × retry_timeout ≤ ttl"},
		{Sync, nil, PatroniSettings{10, 0, 4}, "at least 1"},
	} {
		cfg := DefaultConfig(c.mode)
		cfg.Manager, cfg.Scenarios, cfg.Patroni, cfg.Failovers = ManagerPatroni, c.scenarios, c.set, 1
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v %+v: %v, want an error saying %q", c.mode, c.scenarios, c.set, err, c.want)
		}
	}
	cfg := DefaultConfig(Sync)
	if got, want := cfg.gapBound(3*time.Second), (10+1+4+5+2*2+5+3)*time.Second; got != want {
		t.Errorf("gapBound = %s, want %s", got, want)
	}
	if got := DefaultScenarios(Async); !slices.Contains(got, ScenarioStallKill) || slices.Contains(got, ScenarioFreezeStandby) {
		t.Errorf("async scenarios %v", got)
	}
}
