package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/harness/soak"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/hashkey"
)

// Timeouts of waits on events (none is a synchronisation delay).
const (
	startTimeout   = 60 * time.Second  // a child process's ready line
	stopTimeout    = 15 * time.Second  // SIGTERM until exit
	standbyTimeout = 120 * time.Second // a rebuilt standby streams (and is sync)
	recoverTimeout = 60 * time.Second  // the journal answers after a promotion
	reconcilerID   = "failover-reconciler"
)

// harness is one run of one mode.
type harness struct {
	cfg   Config
	out   io.Writer
	outMu sync.Mutex
	start time.Time

	pair        *pgPair         // ManagerHarness
	patroni     *patroniCluster // ManagerPatroni
	providerURL string
	control     *fakeprovider.ControlClient
	journals    []*procs.Proc
	journalPIDs []int
	reconciler  *procs.Proc
	probers     []*prober
	checker     pb.JournalServiceClient // the harness's own reads, replica 1

	ledger *ledger

	mu             sync.Mutex
	failovers      []*failoverRecord
	open           *failoverRecord // the failover whose window (kill → recovered) is open
	otherCalls     map[string]int  // non-UNAVAILABLE errors, by "Method CODE", outside failover windows
	wrongs         []string
	violations     []string
	lost           map[string]lostOp // acknowledged, then missing or regressed after a failover
	straddleKeys   map[string]bool   // async: claimed before a stall, marked after it
	straddleEvents int               // failovers that lost straddling intents on purpose

	calls, unavailable, clientGaveUp                 atomic.Int64
	intents, settled, reviews, executes, notRecorded atomic.Int64
	executeUnavailable, executeOther                 atomic.Int64
	providerCalls                                    atomic.Int32
}

// lostOp is an acknowledged operation a failover lost (missing, or found
// in an earlier state).
type lostOp struct {
	failover int
	acked    state
	found    string // "missing" or the state found
}

// failoverRecord is one failover as it happened.
type failoverRecord struct {
	n              int
	from, to       string
	kill, promoted time.Time
	recovered      time.Time
	firstAgentOK   time.Time
	rebuilt        time.Duration // until the old primary streamed again as the standby (and was sync)
	standbyBefore  string        // the standby's state at the kill
	scenario       string        // ManagerPatroni: the fault
	note           string        // what the scenario observed besides the figures
	timelines      int           // ManagerPatroni: promotions (timeline changes)
	gap, gapBound  time.Duration // ManagerPatroni: the longest pause between two writes of a probe, and its bound
	unavailable    atomic.Int64
	other          map[string]int
	wrong          int
	check          ledgerCheck
}

// Run runs one failover experiment in cfg.Mode and prints progress and
// its report to out. The error is non-nil when the run itself could not
// be carried out (a binary missing, a cluster that would not start);
// what the run found is in the Summary (Summary.Passed).
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	if cfg.Manager == "" {
		cfg.Manager = ManagerHarness
	}
	if cfg.Manager == ManagerPatroni {
		cfg.Failovers = len(cfg.scenarios())
	}
	if err := cfg.Validate(); err != nil {
		return Summary{}, fmt.Errorf("failover: %w", err)
	}
	h := &harness{cfg: cfg, out: out, start: time.Now(), ledger: newLedger(), otherCalls: map[string]int{}, lost: map[string]lostOp{}, straddleKeys: map[string]bool{}}
	sum, err := h.run(ctx)
	if err != nil {
		return sum, err
	}
	sum.Write(out)
	return sum, nil
}

// say prints one progress line.
func (h *harness) say(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, "[%s %6s] %s\n", h.cfg.Mode, time.Since(h.start).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
}

func (h *harness) violate(kind, key, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, fmt.Sprintf("[%s] %s: %s", kind, key, detail))
}

// wrong records a wrong answer (in sync mode a violation; in async mode
// the expected consequence of a lost write, explained in the report).
func (h *harness) wrong(f *failoverRecord, key, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f != nil {
		f.wrong++
	}
	h.wrongs = append(h.wrongs, key+": "+detail)
}

func (h *harness) noteOther(f *failoverRecord, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f != nil {
		f.other[name]++
		return
	}
	h.otherCalls[name]++
}

// failoverCount is the number of failovers begun so far.
func (h *harness) failoverCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failovers)
}

// openFailover returns the failover whose window is open, or nil.
func (h *harness) openFailover() *failoverRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

func (h *harness) run(ctx context.Context) (sum Summary, err error) {
	sum.Mode = h.cfg.Mode
	root := h.cfg.WorkDir
	if root == "" {
		if root, err = os.MkdirTemp("", "opjournal-failover-"); err != nil {
			return sum, err
		}
		if !h.cfg.Keep {
			defer os.RemoveAll(root)
		}
	}
	root = filepath.Join(root, string(h.cfg.Mode))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return sum, err
	}
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil { // postgres must reach it
		return sum, err
	}

	// The clusters.
	if err := h.startClusters(ctx, root); err != nil {
		return sum, err
	}
	defer h.stopClusters()

	// The journal, the reconciler and the provider.
	policy := soak.DefaultConfig()
	policy.Seed, policy.LeaseSeconds = h.cfg.Seed, h.cfg.LeaseSeconds
	policy.UnknownAfter = 10 * time.Minute // nothing is escalated within a run: unknowns are reconciled
	policy.VisibilityLag, policy.InFlightWindow = time.Second, 3*time.Second
	policyPath := filepath.Join(root, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(soak.PolicyYAML(policy)), 0o644); err != nil {
		return sum, err
	}
	var children []*procs.Proc
	defer func() {
		if err != nil {
			for _, p := range children {
				out := p.Output()
				if len(out) > 3000 {
					out = "…" + out[len(out)-3000:]
				}
				h.say("--- %s (pid %d)\n%s", p.Name, p.Pid(), out)
			}
		}
		for _, p := range children {
			_ = p.Stop(stopTimeout)
		}
	}()
	logTo := func(name string) io.Writer {
		f, err := os.Create(filepath.Join(root, name+".log"))
		if err != nil {
			return nil
		}
		return f // closed with the process's end: the harness exits soon after
	}
	provider, err := procs.Start(ctx, procs.Spec{Name: "provider", Path: filepath.Join(h.cfg.BinDir, "opjournal-fakeprovider"), Ready: "serving",
		Log: logTo("provider"), Args: []string{"--addr", "127.0.0.1:0", "--index-lag", "0s", "--seed", fmt.Sprint(h.cfg.Seed)}}, startTimeout)
	if err != nil {
		return sum, err
	}
	children = append(children, provider)
	h.providerURL = "http://" + provider.Field("addr")
	h.control = fakeprovider.NewControlClient(h.providerURL, &http.Client{Timeout: 30 * time.Second})

	dbURL := h.databaseURL()
	h.say("journal database URL (both replicas): %s", dbURL)
	hashKeys := hashkey.EnvFor(hashkey.Random("failover"))
	for i := range 2 {
		name := fmt.Sprintf("journal-%d", i+1)
		p, err := procs.Start(ctx, procs.Spec{Name: name, Path: filepath.Join(h.cfg.BinDir, "opjournal"), Ready: "serving", Log: logTo(name),
			Env: []string{hashKeys},
			Args: []string{"serve", "--database-url", dbURL + "&application_name=opjournal-" + name, "--grpc-addr", "127.0.0.1:0",
				"--http-addr", "127.0.0.1:0", "--policy", policyPath, "--log-format", "json"}}, startTimeout)
		if err != nil {
			return sum, err
		}
		children = append(children, p)
		h.journals = append(h.journals, p)
		h.journalPIDs = append(h.journalPIDs, p.Pid())
	}
	rec, err := procs.Start(ctx, procs.Spec{Name: "reconciler", Path: filepath.Join(h.cfg.BinDir, "opjournal-reconciler"), Ready: "reconciling",
		Log: logTo("reconciler"), Env: []string{"PROVIDER_URL=" + h.providerURL},
		Args: []string{"--journal-addr", h.journals[0].Field("grpc_addr"), "--policy", policyPath, "--id", reconcilerID,
			"--poll-interval", "250ms", "--concurrency", "8"}}, startTimeout)
	if err != nil {
		return sum, err
	}
	children = append(children, rec)
	h.reconciler = rec
	h.say("provider %s; journal replicas %s (pid %d), %s (pid %d); reconciler pid %d → journal-1; %d agents (%.0f%% emails, which the provider does not deduplicate)",
		h.providerURL, h.journals[0].Field("grpc_addr"), h.journalPIDs[0], h.journals[1].Field("grpc_addr"), h.journalPIDs[1], rec.Pid(),
		h.cfg.Agents, 100*h.cfg.emailShare())

	checkConn, err := dialJournal(h.journals[0].Field("grpc_addr"), nil)
	if err != nil {
		return sum, err
	}
	defer checkConn.Close()
	h.checker = pb.NewJournalServiceClient(checkConn)

	// Probes and agents.
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProbes()
	var probes sync.WaitGroup
	for i, j := range h.journals {
		conn, err := dialJournal(j.Field("grpc_addr"), nil)
		if err != nil {
			return sum, err
		}
		defer conn.Close()
		p := &prober{replica: i, conn: conn, rpc: pb.NewJournalServiceClient(conn)}
		h.probers = append(h.probers, p)
		probes.Go(func() { p.run(probeCtx, h.cfg.Mode) })
	}
	defer probes.Wait()
	defer stopProbes()

	var loadCtx context.Context
	var endLoad context.CancelFunc
	if h.cfg.Manager == ManagerPatroni { // until the scenarios are done, and Duration at least
		loadCtx, endLoad = context.WithCancel(ctx)
	} else {
		loadCtx, endLoad = context.WithTimeout(ctx, h.cfg.Duration)
	}
	defer endLoad()
	hardCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	var nextN atomic.Int64
	next := func() (int, bool) {
		if loadCtx.Err() != nil {
			return 0, false
		}
		return int(nextN.Add(1) - 1), true
	}
	var agents sync.WaitGroup
	for i := range h.cfg.Agents {
		a := &agent{h: h, id: i}
		conn, err := dialJournal(h.journals[i%2].Field("grpc_addr"), a.observeCalls)
		if err != nil {
			return sum, err
		}
		defer conn.Close()
		a.conn = conn
		a.cli = client.New(conn, client.WithWorkerID(fmt.Sprintf("failover-agent-%d", i+1)))
		agents.Go(func() { a.run(hardCtx, next) })
	}
	progressCtx, stopProgress := context.WithCancel(context.Background())
	defer stopProgress()
	go h.progress(progressCtx)

	// The failovers, evenly spread over the load phase; Patroni's
	// scenarios back to back, with a few seconds of steady load between
	// them, the load lasting as long as they take (Duration at least).
	var chaosErr error
	if h.cfg.Manager == ManagerPatroni {
		for i, sc := range h.cfg.scenarios() {
			sleep(loadCtx, 3*time.Second)
			if loadCtx.Err() != nil {
				break
			}
			if chaosErr = h.patroniEvent(ctx, i+1, sc); chaosErr != nil {
				break
			}
		}
		if chaosErr == nil {
			sleep(ctx, max(3*time.Second, time.Until(h.start.Add(h.cfg.Duration))))
			endLoad()
		}
	}
	for i := 1; i <= h.cfg.Failovers && h.cfg.Manager != ManagerPatroni; i++ {
		at := h.start.Add(time.Duration(i) * h.cfg.Duration / time.Duration(h.cfg.Failovers+1))
		sleep(loadCtx, time.Until(at))
		if loadCtx.Err() != nil {
			break
		}
		if chaosErr = h.failover(ctx, i); chaosErr != nil {
			break
		}
	}
	if chaosErr == nil {
		<-loadCtx.Done()
	}
	endLoad()
	if ctx.Err() != nil {
		hardStop()
		agents.Wait()
		return sum, fmt.Errorf("failover: interrupted: %w", ctx.Err())
	}
	if chaosErr != nil {
		hardStop()
		agents.Wait()
		return sum, chaosErr
	}
	h.say("load over after %d intents: no new ones; agents and the reconciler settle the rest (bound %s)", nextN.Load(), h.cfg.Settle)
	settleBy := time.Now().Add(h.cfg.Settle)
	done := make(chan struct{})
	go func() { agents.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(settleBy)):
		h.say("settle bound passed with agents still retrying; stopping them")
		hardStop()
		<-done
	}
	cctx := context.WithoutCancel(ctx)
	if err := h.awaitSettled(cctx, settleBy); err != nil {
		h.say("%v", err)
	}
	stopProgress()
	h.say("checking")
	return h.summarize(cctx), nil
}

// databaseURL is the journal's multi-host URL: both nodes, and pgx picks
// the one that accepts writes (target_session_attrs=read-write), so the
// same URL follows every promotion. connect_timeout 2 s bounds a try of a
// host that does not answer.
func (h *harness) databaseURL() string {
	if c := h.patroni; c != nil {
		// No connect_timeout: store/postgres's multi-host default (2 s) is
		// what a user who gives none gets, and what this measures.
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
			c.nodes[0].port, c.nodes[1].port, c.nodes[2].port)
	}
	a, b := h.pair.nodes[0], h.pair.nodes[1]
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", a.port, b.port)
}

// startClusters starts the PostgreSQL servers of the run and their
// failover manager (the harness's pair, or Patroni's three nodes and
// etcd) and waits until they are ready for the first failover.
func (h *harness) startClusters(ctx context.Context, root string) error {
	if h.cfg.Manager == ManagerPatroni {
		c, err := newPatroni(h.cfg.PGBin, root, h.cfg.Mode == Sync, h.cfg.Patroni)
		if err != nil {
			return err
		}
		h.patroni = c
		if err := c.start(ctx); err != nil {
			return fmt.Errorf("patroni: %w (logs in %s: etcd.log, node-*.log; --keep keeps them)", err, root)
		}
		ms, _ := c.members(ctx, "")
		leader, _ := leaderOf(ms)
		h.say("Patroni %s: three nodes (PostgreSQL on :%d, :%d, :%d), one etcd (v2 API) on :%d, leader %s, %s replication (ttl %ds, loop_wait %ds, retry_timeout %ds); data in %s",
			patroniVersion(), c.nodes[0].port, c.nodes[1].port, c.nodes[2].port, c.etcdPort, leader, h.cfg.Mode,
			c.set.TTL, c.set.LoopWait, c.set.RetryTimeout, root)
		return nil
	}
	pair, err := newPair(h.cfg.PGBin, root, h.cfg.Mode == Sync, h.say)
	if err != nil {
		return err
	}
	h.pair = pair
	if err := pair.initPrimary(ctx); err != nil {
		return err
	}
	if err := pair.rebuildStandby(ctx, pair.standbyNode()); err != nil {
		return err
	}
	if err := h.syncAgain(ctx); err != nil {
		return err
	}
	h.say("PostgreSQL: primary %s on :%d, standby %s on :%d streaming through a proxy (%s), %s replication; data in %s",
		pair.primaryNode().name, pair.primaryNode().port, pair.standbyNode().name, pair.standbyNode().port,
		pair.primaryNode().proxy.Addr(), h.cfg.Mode, root)
	return nil
}

// stopClusters stops what startClusters started.
func (h *harness) stopClusters() {
	if h.patroni != nil {
		h.patroni.stop()
	}
	if h.pair != nil {
		h.pair.stop()
	}
}

// syncAgain waits until the standby streams and, in sync mode, makes it
// the synchronous standby and waits until the primary says so.
func (h *harness) syncAgain(ctx context.Context) error {
	p := h.pair
	if err := waitFor(ctx, standbyTimeout, p.standbyNode().name+" streaming", func() (bool, error) {
		r, err := p.standbyState(ctx)
		return err == nil && r.state == "streaming", err
	}); err != nil {
		return err
	}
	if p.sync {
		if err := p.setSyncNames(ctx, p.primaryNode(), "*"); err != nil {
			return err
		}
	}
	return p.waitStandby(ctx, standbyTimeout)
}

// failover performs failover n: (async: stall the standby's replication
// for LagWindow,) kill -9 of every process of the primary, PromoteDelay of
// "detection", promotion of the standby, the wait until both journal
// replicas answer a write again, the ledger check, and the rebuild of the
// old primary as the new standby.
func (h *harness) failover(ctx context.Context, n int) error {
	p := h.pair
	old, next := p.primaryNode(), p.standbyNode()
	// Precondition: the standby streams (sync: and is synchronous).
	if err := p.waitStandby(ctx, standbyTimeout); err != nil {
		return fmt.Errorf("failover %d: %w", n, err)
	}
	r, _ := p.standbyState(ctx)
	f := &failoverRecord{n: n, from: old.name, to: next.name, other: map[string]int{},
		standbyBefore: fmt.Sprintf("%s/%s", r.state, r.syncState)}
	var st *straddles
	if h.cfg.Mode == Async {
		// A few intents claimed now, replayed by the standby, and completed
		// after the stall: their succeeded records will be lost for sure.
		var err error
		st, err = h.startStraddles(ctx, n)
		if err != nil {
			return fmt.Errorf("failover %d: %w", n, err)
		}
		if err := p.waitReplayed(ctx, 30*time.Second); err != nil {
			return fmt.Errorf("failover %d: %w", n, err)
		}
		// The walreceiver keeps its connection, but nothing more reaches
		// it: what the primary acknowledges from now on is on the primary
		// only. (The window is the experiment, not a wait for anything.)
		stalled := time.Now()
		old.proxy.Stall()
		if err := st.release(ctx); err != nil {
			return fmt.Errorf("failover %d: straddling intents: %w", n, err)
		}
		h.say("failover %d: replication to %s stalled; %d intents claimed before it were marked succeeded after it; %s of load on %s alone",
			n, next.name, straddlesPerFailover, h.cfg.LagWindow, old.name)
		sleep(ctx, h.cfg.LagWindow-time.Since(stalled))
	}
	h.mu.Lock()
	f.kill = time.Now()
	h.open = f
	h.failovers = append(h.failovers, f)
	h.mu.Unlock()
	if err := p.kill(old); err != nil {
		return err
	}
	// The proxy drops what it still holds: WAL that never reached the
	// standby is lost with the primary.
	old.proxy.Close()
	h.say("failover %d: kill -9 of %s (primary, every process); standby was %s", n, old.name, f.standbyBefore)
	sleep(ctx, h.cfg.PromoteDelay) // the failure detection of a real manager
	if p.sync {
		// Like pg_auto_failover's wait_primary: alone, the new primary
		// would block every commit waiting for a standby that is being
		// rebuilt; it commits alone until the standby is back and sync.
		if err := p.setSyncNames(ctx, next, ""); err != nil {
			return fmt.Errorf("failover %d: %w", n, err)
		}
	}
	promoting := time.Now()
	if err := p.promote(ctx, next); err != nil {
		return fmt.Errorf("failover %d: %w", n, err)
	}
	f.promoted = time.Now()
	p.primary = 1 - p.primary
	h.say("failover %d: %s promoted %s after the kill (pg_ctl promote took %s)", n, next.name,
		f.promoted.Sub(f.kill).Round(time.Millisecond), f.promoted.Sub(promoting).Round(time.Millisecond))

	// Recovered: every replica answered a write that started after the kill.
	if err := waitFor(ctx, recoverTimeout, "both journal replicas answering after the promotion", func() (bool, error) {
		for _, pr := range h.probers {
			if _, ok := pr.firstOKAfter(f.kill); !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("failover %d: %w", n, err)
	}
	for _, pr := range h.probers {
		t, _ := pr.firstOKAfter(f.kill)
		if t.After(f.recovered) {
			f.recovered = t
		}
	}
	h.mu.Lock()
	h.open = nil
	h.mu.Unlock()
	h.say("failover %d: journal answering again %s after the kill (%d calls answered UNAVAILABLE meanwhile, %d other errors)",
		n, f.recovered.Sub(f.kill).Round(time.Millisecond), f.unavailable.Load(), total(f.other))

	if st != nil {
		// First the intents lost on purpose: their leases run out a few
		// seconds after the kill and the reconciler restores them, possibly
		// before the whole ledger is through.
		for key, fd := range h.lookupAll(ctx, st.keys) {
			if a, ok := h.ledger.acked(key, f.kill); ok && (fd.missing || fd.err == nil && !fd.st.atOrAfter(a.state)) {
				h.noteLost(n, key, a.state, map[bool]string{true: "missing", false: fd.st.String()}[fd.missing])
			}
		}
	}
	f.check = h.checkLedger(ctx, n)
	h.say("failover %d: ledger: %d acknowledged, %d found at or after, %d missing, %d regressed", n,
		f.check.acked, f.check.found, f.check.missing, f.check.regressed)

	// The old primary comes back as the standby.
	rb := time.Now()
	if err := p.rebuildStandby(ctx, old); err != nil {
		return fmt.Errorf("failover %d: rebuild %s: %w", n, old.name, err)
	}
	if err := old.proxy.Resume(); err != nil { // the next standby streams from it through its proxy
		return err
	}
	if err := h.syncAgain(ctx); err != nil {
		return fmt.Errorf("failover %d: %w", n, err)
	}
	f.rebuilt = time.Since(rb)
	h.mu.Lock()
	if st != nil {
		h.straddleEvents++
	}
	h.mu.Unlock()
	h.say("failover %d: %s rebuilt (pg_basebackup) and streaming%s after %s", n, old.name,
		map[bool]string{true: " as the synchronous standby", false: ""}[p.sync], f.rebuilt.Round(time.Millisecond))
	return nil
}

// ledgerCheck is the comparison of the ledger with the journal.
type ledgerCheck struct {
	acked, found, missing, regressed int
	errs                             int // Lookups that failed
	unsettled                        int // in the journal, neither terminal nor under review
}

// found is one key as the journal answered a Lookup.
type found struct {
	st      state
	missing bool  // NOT_FOUND
	err     error // another error
}

// lookupAll looks keys up, eight at a time.
func (h *harness) lookupAll(ctx context.Context, keys []string) map[string]found {
	out := make(map[string]found, len(keys))
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for key := range work {
				st, err := h.lookup(ctx, key)
				f := found{st: st}
				if err != nil && client.CodeOf(err) == "NOT_FOUND" {
					f.missing = true
				} else {
					f.err = err
				}
				mu.Lock()
				out[key] = f
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return out
}

// checkLedger looks every acknowledged key up and compares: found in the
// acknowledged state or later, missing (NOT_FOUND), or regressed. n is
// the failover just done (0: the final check).
func (h *harness) checkLedger(ctx context.Context, n int) ledgerCheck {
	snap := h.ledger.snapshot()
	got := h.lookupAll(ctx, slices.Collect(maps.Keys(snap)))
	var c ledgerCheck
	for key, a := range snap {
		f := got[key]
		c.acked++
		switch {
		case f.missing:
			c.missing++
			h.noteLost(n, key, a.state, "missing")
		case f.err != nil:
			c.errs++
		case f.st.atOrAfter(a.state):
			c.found++
		default:
			c.regressed++
			h.noteLost(n, key, a.state, f.st.String())
		}
		if f.err == nil && !f.missing && !f.st.terminal() && !f.st.review {
			c.unsettled++
		}
	}
	return c
}

func (h *harness) noteLost(n int, key string, a state, found string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, seen := h.lost[key]; seen && n > 0 {
		return
	}
	if n == 0 { // the final check: keep the failover that lost it, if any
		if _, seen := h.lost[key]; seen {
			return
		}
	}
	h.lost[key] = lostOp{failover: n, acked: a, found: found}
}

// lookup reads a key's state (retrying UNAVAILABLE for a few seconds).
func (h *harness) lookup(ctx context.Context, key string) (state, error) {
	var err error
	for range 20 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var resp *pb.LookupResponse
		resp, err = h.checker.Lookup(cctx, &pb.LookupRequest{OperationKey: key})
		cancel()
		if err == nil {
			return stateOf(resp.GetOperation()), nil
		}
		if client.CodeOf(err) == "NOT_FOUND" || ctx.Err() != nil {
			return state{}, err
		}
		sleep(ctx, 250*time.Millisecond)
	}
	return state{}, err
}

// awaitSettled waits until every acknowledged key is terminal, under
// review, or missing (a loss nothing will bring back once the agents are
// done), or until the bound. Each round asks only about the keys still
// open.
func (h *harness) awaitSettled(ctx context.Context, by time.Time) error {
	open := slices.Collect(maps.Keys(h.ledger.snapshot()))
	return waitFor(ctx, time.Until(by)+time.Second, "every acknowledged operation settled", func() (bool, error) {
		got := h.lookupAll(ctx, open)
		open = open[:0]
		for key, f := range got {
			if f.err != nil || !f.missing && !f.st.terminal() && !f.st.review {
				open = append(open, key)
			}
		}
		if len(open) > 0 {
			return false, fmt.Errorf("%d still open, e.g. %s", len(open), open[0])
		}
		return true, nil
	})
}

func (h *harness) progress(ctx context.Context) {
	t := time.NewTicker(h.cfg.Progress)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		nf := len(h.failovers)
		h.mu.Unlock()
		h.say("intents %d (settled %d)  acknowledged keys %d  journal calls %d (UNAVAILABLE %d)  executes %d (not recorded %d, UNAVAILABLE %d)  failovers %d",
			h.intents.Load(), h.settled.Load(), h.ledger.len(), h.calls.Load(), h.unavailable.Load(),
			h.executes.Load(), h.notRecorded.Load(), h.executeUnavailable.Load(), nf)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err) // a literal of this package
	}
	return s
}

var errNoEffects = errors.New("failover: the provider's effect counts could not be read")

// effectsByKey returns the provider's effects per operation key (the
// payment's Idempotency-Key or the email's reference).
func (h *harness) effectsByKey(ctx context.Context) (map[string]int, error) {
	c, err := h.control.Effects(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoEffects, err)
	}
	out := map[string]int{}
	for k, n := range c.Effects {
		_, key, _ := strings.Cut(k, ":")
		out[key] += n
	}
	return out, nil
}
