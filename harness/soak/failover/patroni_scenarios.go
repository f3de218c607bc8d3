package failover

import (
	"context"
	"fmt"
	"syscall"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// journalConnectTimeout is the journal's connect_timeout on the
// harness's multi-host URL (store/postgres's multi-host default: the URL
// gives none), and journalStatementTimeout its statement bound; both are
// part of the write-gap bound.
const (
	journalConnectTimeout   = 2 * time.Second
	journalStatementTimeout = 5 * time.Second
)

// gapBound is how long writes may stop in one Patroni scenario, from the
// manager's settings: the leader key outlives a dead leader by up to ttl,
// the others notice within loop_wait, a promotion's operations are bounded
// by retry_timeout; then the journal's statement on a connection to the
// old primary waits out its statement bound, and a new connection waits
// out the connect timeout on each of up to two unanswering hosts before
// it reaches the new primary. Slack covers the probes' interval and a
// busy machine. held is a fault the harness itself keeps up longer (etcd
// paused until the leader demoted).
func (c Config) gapBound(held time.Duration) time.Duration {
	p := c.Patroni
	return time.Duration(p.TTL+p.LoopWait+p.RetryTimeout)*time.Second + journalStatementTimeout + 2*journalConnectTimeout + 5*time.Second + held
}

// patroniEvent runs scenario sc as failover n: the fault, the wait until
// both journal replicas answer a write again, the restoration of a whole
// cluster by Patroni (the harness restarts a killed node's Patroni, as a
// supervisor would), the ledger check.
func (h *harness) patroniEvent(ctx context.Context, n int, sc string) error {
	c := h.patroni
	if err := c.waitHealthy(ctx, standbyTimeout); err != nil {
		return fmt.Errorf("%s: before the fault: %w", sc, err)
	}
	ms, err := c.members(ctx, "")
	if err != nil {
		return fmt.Errorf("%s: %w", sc, err)
	}
	oldName, tl := leaderOf(ms)
	old := c.node(oldName)
	syncName := roleOf(ms, "sync_standby")
	f := &failoverRecord{n: n, scenario: sc, from: oldName, other: map[string]int{}, standbyBefore: "async"}
	if c.sync {
		f.standbyBefore = "sync " + syncName
	}
	var st *straddles
	if sc == ScenarioStallKill {
		if st, err = h.startStraddles(ctx, n); err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		if err := c.waitReplayed(ctx, old, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		stalled := time.Now()
		old.proxy.Stall() // the standbys stream from old through its proxy: nothing more reaches them
		if err := st.release(ctx); err != nil {
			return fmt.Errorf("%s: straddling intents: %w", sc, err)
		}
		h.mu.Lock()
		h.straddleEvents++
		h.mu.Unlock()
		h.say("%s: replication from %s stalled; %d intents claimed before it were marked succeeded after it; %s of load on %s alone",
			sc, oldName, straddlesPerFailover, h.cfg.LagWindow, oldName)
		sleep(ctx, h.cfg.LagWindow-time.Since(stalled))
	}
	h.mu.Lock()
	f.kill = time.Now()
	h.open = f
	h.failovers = append(h.failovers, f)
	h.mu.Unlock()

	var held time.Duration
	var resumed time.Time // pause-etcd: when etcd ran again
	var thaw []int        // frozen PostgreSQL processes, to SIGCONT
	skip := ""            // a node whose REST API not to ask (its Patroni is gone)
	switched := make(chan error, 1)
	switch sc {
	case ScenarioSwitchover:
		// Patroni answers once the switchover is done; meanwhile the
		// harness watches for the new leader like for the other faults.
		go func() { switched <- c.switchover(ctx, old) }()
		h.say("%s: %s's Patroni asked to hand over (POST /switchover)", sc, oldName)
	case ScenarioKillNode, ScenarioStallKill:
		if err := c.killNode(old); err != nil {
			return err
		}
		if sc == ScenarioStallKill {
			old.proxy.Close() // what it still held for the standbys is lost with the node
		}
		skip = oldName
		h.say("%s: kill -9 of %s (leader: Patroni and every PostgreSQL process)", sc, oldName)
	case ScenarioKillPostmaster:
		pids, err := postgresPIDs(old)
		if err != nil {
			return err
		}
		if err := signalAll(pids, syscall.SIGKILL); err != nil {
			return err
		}
		h.say("%s: kill -9 of %s's PostgreSQL (its Patroni lives on; primary_start_timeout 0)", sc, oldName)
	case ScenarioFreezePrimary:
		if thaw, err = postgresPIDs(old); err != nil {
			return err
		}
		_ = signalAll(thaw, syscall.SIGSTOP)
		h.say("%s: SIGSTOP of %s's PostgreSQL (leader; its Patroni runs on and cannot reach it)", sc, oldName)
	case ScenarioFreezeStandby:
		s := c.node(syncName)
		if s == nil {
			return fmt.Errorf("%s: no synchronous standby", sc)
		}
		if thaw, err = postgresPIDs(s); err != nil {
			return err
		}
		_ = signalAll(thaw, syscall.SIGSTOP)
		h.say("%s: SIGSTOP of %s's PostgreSQL (the synchronous standby): commits wait for it", sc, syncName)
	case ScenarioPauseEtcd:
		_ = c.etcd.Process.Signal(syscall.SIGSTOP)
		h.say("%s: SIGSTOP of etcd: no Patroni can renew or read the leader key", sc)
		limit := time.Duration(c.set.TTL+c.set.RetryTimeout+c.set.LoopWait)*time.Second + 15*time.Second
		demoted := waitFor(ctx, limit, oldName+" demoted", func() (bool, error) { return !c.writable(ctx, old), nil }) == nil
		held = time.Since(f.kill)
		_ = c.etcd.Process.Signal(syscall.SIGCONT)
		resumed = time.Now()
		f.note = map[bool]string{true: "leader demoted itself", false: "leader still writable"}[demoted] + fmt.Sprintf(" after %s; etcd resumed", held.Round(100*time.Millisecond))
		h.say("%s: %s; SIGCONT of etcd", sc, f.note)
	}

	// Patroni's decision: a new leader, for the faults that need one.
	switch sc {
	case ScenarioSwitchover, ScenarioKillNode, ScenarioStallKill, ScenarioKillPostmaster, ScenarioFreezePrimary:
		err := waitFor(ctx, h.cfg.gapBound(0), "a new Patroni leader", func() (bool, error) {
			ms, err := c.members(ctx, skip)
			if err != nil {
				return false, nil
			}
			l, t := leaderOf(ms)
			return l != "" && (l != oldName || t > tl), nil
		})
		if err != nil {
			h.say("%s: %v", sc, err)
		} else {
			f.promoted = time.Now()
			h.say("%s: Patroni promoted a new leader %s after the fault", sc, f.promoted.Sub(f.kill).Round(time.Millisecond))
		}
	case ScenarioFreezeStandby:
		if err := waitFor(ctx, h.cfg.gapBound(0), "another synchronous standby", func() (bool, error) {
			ms, err := c.members(ctx, "")
			s := roleOf(ms, "sync_standby")
			return err == nil && s != "" && s != syncName, nil
		}); err != nil {
			h.say("%s: %v", sc, err)
		}
	}
	if sc == ScenarioSwitchover {
		if err := <-switched; err != nil {
			return err
		}
	}
	if sc == ScenarioFreezePrimary {
		// Past the ttl (a new leader holds the key): the old primary runs
		// again and must not take a write it could acknowledge.
		held = time.Since(f.kill)
	}
	if thaw != nil && sc == ScenarioFreezePrimary {
		_ = signalAll(thaw, syscall.SIGCONT)
		h.say("%s: SIGCONT of %s's PostgreSQL after %s", sc, oldName, held.Round(100*time.Millisecond))
	}

	// Recovered: every replica answered a write that started after the
	// fault, and after the promotion if there was one (a switchover's old
	// primary answers until it shuts down), or after etcd ran again (the
	// leader answers until it demotes itself).
	since := f.kill
	switch {
	case !f.promoted.IsZero():
		since = f.promoted
	case !resumed.IsZero():
		since = resumed
	}
	if err := waitFor(ctx, h.cfg.gapBound(held)+recoverTimeout, "both journal replicas answering after the fault", func() (bool, error) {
		for _, pr := range h.probers {
			if _, ok := pr.firstOKAfter(since); !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("%s: %w", sc, err)
	}
	for _, pr := range h.probers {
		t, _ := pr.firstOKAfter(since)
		if t.After(f.recovered) {
			f.recovered = t
		}
	}
	if thaw != nil && sc == ScenarioFreezeStandby {
		_ = signalAll(thaw, syscall.SIGCONT)
		h.say("%s: SIGCONT of %s's PostgreSQL after %s", sc, syncName, time.Since(f.kill).Round(100*time.Millisecond))
	}
	h.mu.Lock()
	h.open = nil
	h.mu.Unlock()
	h.say("%s: journal answering again %s after the fault (%d calls answered UNAVAILABLE meanwhile, %d other errors)",
		sc, f.recovered.Sub(f.kill).Round(time.Millisecond), f.unavailable.Load(), total(f.other))

	if st != nil {
		// Patroni takes about ttl to promote, longer than the straddling
		// intents' lease: the reconciler may already have restored their
		// lost succeeded records by now, which their history shows.
		for key, fd := range h.lookupAll(ctx, st.keys) {
			a, ok := h.ledger.acked(key, f.kill)
			switch {
			case !ok:
			case fd.missing || fd.err == nil && !fd.st.atOrAfter(a.state):
				h.noteLost(n, key, a.state, map[bool]string{true: "missing", false: fd.st.String()}[fd.missing])
			case fd.err == nil && h.settledByReconciler(ctx, key):
				h.noteLost(n, key, a.state, "restored by the reconciler before the check")
			}
		}
	}
	f.check = h.checkLedger(ctx, n)
	h.say("%s: ledger: %d acknowledged, %d found at or after, %d missing, %d regressed", sc,
		f.check.acked, f.check.found, f.check.missing, f.check.regressed)

	// The cluster made whole again. A killed node's Patroni is restarted
	// (systemd would); Patroni rewinds or recopies its PostgreSQL.
	if sc == ScenarioKillNode || sc == ScenarioStallKill {
		if sc == ScenarioStallKill {
			if err := old.proxy.Resume(); err != nil {
				return err
			}
		}
		if err := c.startNode(old); err != nil {
			return err
		}
	}
	if err := c.waitHealthy(ctx, standbyTimeout); err != nil {
		return fmt.Errorf("%s: after the fault: %w", sc, err)
	}
	f.rebuilt = time.Since(f.kill)
	f.gapBound = h.cfg.gapBound(held)
	for _, pr := range h.probers {
		f.gap = max(f.gap, pr.longestGap(f.kill, time.Now()))
	}
	if ms, err := c.members(ctx, ""); err == nil {
		var t2 int
		f.to, t2 = leaderOf(ms)
		f.timelines = t2 - tl
	}
	h.say("%s: cluster whole again after %s: leader %s, %d promotion(s); longest write gap %s (bound %s)", sc,
		f.rebuilt.Round(time.Millisecond), f.to, f.timelines, f.gap.Round(time.Millisecond), f.gapBound.Round(time.Millisecond))
	return nil
}

// settledByReconciler reports whether a key's terminal state was recorded
// by the reconciler (not by the agent that had it acknowledged).
func (h *harness) settledByReconciler(ctx context.Context, key string) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := h.checker.ListEvents(cctx, &pb.ListEventsRequest{OperationKey: key, PageSize: 1000})
	if err != nil {
		return false
	}
	for _, e := range resp.GetEvents() {
		if to := e.GetToStatus(); to == pb.Status_STATUS_SUCCEEDED || to == pb.Status_STATUS_FAILED_FINAL {
			return e.GetActor() == reconcilerID
		}
	}
	return false
}
