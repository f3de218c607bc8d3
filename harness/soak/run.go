package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// harness is one soak run.
type harness struct {
	cfg     Config
	out     io.Writer
	outMu   sync.Mutex
	start   time.Time
	runID   string
	schema  string
	created bool   // the harness created the schema (and drops it)
	baseURL string // the server, without search_path
	cluster *cluster
	bouncer *pgbouncer.Bouncer // with Config.PgBouncer (pgbouncer.go)
	control *fakeprovider.ControlClient
	faults  *faultSet

	settle      time.Duration // the settle deadline: Config.Settle, or what the policy needs
	noHeartbeat int           // agents without heartbeats

	mu          sync.Mutex
	intents     []*intentState
	regKeys     map[string]bool // keys an agent got a journal answer for
	gaveUpKeys  map[string]bool // keys of the calls the SDK gave up at the lease
	journalErrs map[string]int
	violations  []Violation

	busy                                                  atomic.Int64
	pursuing                                              sync.Map // key -> time the intent was handed to an agent
	settledCount, executes, unknownCalls, verifyWaits     atomic.Int64
	inProgress, restarts, poolDrops, terminated, resolved atomic.Int64
	providerCalls                                         atomic.Int32
	lastUnanswered                                        atomic.Int64 // unix nanoseconds: start of the last provider call without an answer
	faultsCleared                                         atomic.Int64 // unix nanoseconds: when the faults were cleared for good
	gaveUpCalls, gaveUpNoHeartbeat, heartbeatKept         atomic.Int64
	afterRelease, largeIntents                            atomic.Int64
}

// Run runs one soak: it starts the provider, the journal replicas and the
// reconcilers as child processes on a fresh PostgreSQL schema, drives
// cfg.Agents simulated agents for cfg.Duration under faults and kills,
// lets everything settle, and checks the invariants against the
// provider's effect counts and the journal. Progress and the summary go to
// out. The error is non-nil only when the run itself could not be carried
// out (a binary missing, PostgreSQL unreachable); invariant violations are
// in Summary.Violations (Summary.Passed is false).
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	if cfg.Seed < 0 {
		return Summary{}, errors.New("soak: seed must be positive")
	}
	if err := cfg.Validate(); err != nil {
		return Summary{}, fmt.Errorf("soak: %w", err)
	}
	for _, b := range []string{"opjournal", "opjournal-reconciler", "opjournal-fakeprovider"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return Summary{}, fmt.Errorf("soak: %s: %w (build the binaries: make binaries)", b, err)
		}
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return Summary{}, fmt.Errorf("soak: log dir: %w", err)
		}
	}
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	h := &harness{
		cfg: cfg, out: out, start: time.Now(),
		runID:       fmt.Sprintf("%d_%s", cfg.Seed, hex.EncodeToString(rb[:])),
		regKeys:     map[string]bool{},
		gaveUpKeys:  map[string]bool{},
		journalErrs: map[string]int{},
	}
	h.say("seed %d  run %s  replay: %s", cfg.Seed, h.runID, cfg.ReplayCommand())
	need, err := cfg.neededSettle()
	if err != nil {
		return Summary{}, fmt.Errorf("soak: %w", err)
	}
	h.settle = max(cfg.Settle, need)
	which := "the soak's own policy"
	if cfg.ShippedPolicy {
		which = "the shipped policy (protocol/policy/default.yaml) as it is"
	}
	h.say("policy: %s; the slowest request the provider carries out is held %s (in_flight_window covers it plus index lag %s)",
		which, cfg.maxCommitHold(), cfg.IndexLag)
	for _, l := range cfg.describePlan() {
		h.say("  %s", l)
	}
	if need > cfg.Settle {
		h.say("settle deadline %s instead of --settle %s: an agent may wait up to the longest agent timeout after the load, then a release needs visibility_lag + in_flight_window after its attempt ended, plus the reconciler's longest backoff", h.settle, cfg.Settle)
	} else {
		h.say("settle deadline %s (the policy's releases need at most %s)", h.settle, need)
	}
	if cfg.ShippedPolicy && cfg.SearchOutage > 0 {
		h.say("no search outage with the shipped policy: its unknown_after_seconds (15–60 min) would escalate nothing within the run")
	}
	if !cfg.ShippedPolicy && cfg.UnknownAfter < cfg.VisibilityLag+cfg.InFlightWindow {
		h.say("note: unknown-after %s < visibility-lag + in-flight-window %s: operations not found may be escalated before they may be released",
			cfg.UnknownAfter, cfg.VisibilityLag+cfg.InFlightWindow)
	}
	sum, err := h.run(ctx)
	sum.Seed, sum.Command = cfg.Seed, cfg.ReplayCommand()
	if err != nil {
		return sum, err
	}
	sum.Write(out)
	return sum, nil
}

// say prints one progress line, prefixed with the time since the start.
func (h *harness) say(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.out, "[%6s] %s\n", time.Since(h.start).Round(time.Second), fmt.Sprintf(format, args...))
}

func (h *harness) run(ctx context.Context) (sum Summary, err error) {
	if err := h.prepareDB(ctx); err != nil {
		return sum, err
	}
	defer h.dropDB()

	dir, err := os.MkdirTemp("", "opjournal-soak-")
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(dir)
	policyPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, h.cfg.policyYAML(), 0o600); err != nil {
		return sum, err
	}
	u, _ := url.Parse(h.baseURL)
	q := u.Query()
	q.Set("search_path", h.schema)
	u.RawQuery = q.Encode()
	dbURL := u.String()
	if h.cfg.PgBouncer {
		defer h.stopPgBouncer() // after the replicas (deferred later, stopped first)
		if dbURL, err = h.startPgBouncer(ctx, dir); err != nil {
			return sum, err
		}
	}
	h.cluster = &cluster{cfg: h.cfg, dbURL: dbURL, appPrefix: "opjournal-soak-" + h.runID, policyPath: policyPath,
		hashKeys: hashkey.EnvFor(hashkey.Random("soak"))}
	defer h.cluster.stop()
	defer func() {
		if err != nil {
			h.say("child process logs (tails):\n%s", h.cluster.outputs(4000))
		}
	}()

	if err := h.cluster.startProvider(ctx); err != nil {
		return sum, err
	}
	h.control = fakeprovider.NewControlClient(h.cluster.providerURL, &http.Client{Timeout: 30 * time.Second})
	h.faults = &faultSet{cfg: h.cfg, control: h.control, fired: map[string]int{}}
	if err := h.cluster.startReplicas(ctx); err != nil {
		return sum, err
	}
	if err := h.cluster.startReconcilers(ctx); err != nil {
		return sum, err
	}
	noHB := noHeartbeatAgents(h.cfg)
	h.noHeartbeat = len(noHB)
	h.say("provider %s (index lag %s); %d journal replica(s) %s; %d reconciler(s); %d agents (%d without heartbeats); schema %s",
		h.cluster.providerURL, h.cfg.IndexLag, h.cfg.Replicas, h.replicaAddrs(), h.cfg.Reconcilers, h.cfg.Agents, h.noHeartbeat, h.schema)
	if err := h.faults.arm(ctx); err != nil {
		return sum, err
	}

	// The load phase.
	loadCtx, endLoad := context.WithTimeout(ctx, h.cfg.Duration)
	defer endLoad()
	hardCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	work := make(chan *intentState)
	var agents sync.WaitGroup
	for i := range h.cfg.Agents {
		a := &agent{h: h, id: i, noHeartbeat: noHB[i], rng: mrand.New(mrand.NewPCG(uint64(h.cfg.Seed), uint64(i)))}
		if err := a.connect(); err != nil {
			return sum, err
		}
		agents.Go(func() { a.run(hardCtx, work) })
	}
	generated := make(chan struct{})
	go func() { h.generate(loadCtx, work); close(work); close(generated) }()
	var bg sync.WaitGroup
	bg.Go(func() { h.chaos(loadCtx) })
	if h.cfg.Operator {
		bg.Go(func() { h.operate(loadCtx) })
	}
	progressCtx, stopProgress := context.WithCancel(context.Background())
	defer stopProgress()
	var progress sync.WaitGroup
	progress.Go(func() { h.progress(progressCtx) })

	// With a cap on intents, the load also ends once they are all settled.
	go func() {
		<-generated
		for loadCtx.Err() == nil && h.busy.Load() > 0 {
			sleep(loadCtx, 100*time.Millisecond)
		}
		endLoad()
	}()
	<-loadCtx.Done()
	if ctx.Err() != nil {
		// Interrupted: the child processes share our process group, so a
		// terminal's ^C has stopped them too. Nothing left to check.
		h.say("interrupted: stopping")
		hardStop()
		bg.Wait()
		agents.Wait()
		return sum, fmt.Errorf("soak: interrupted after %s: %w", time.Since(h.start).Round(time.Second), ctx.Err())
	}
	h.say("load phase over: no new intents, no more faults or kills; settling (deadline %s)", h.settle)
	bg.Wait() // every killed process is back
	cleanCtx := context.WithoutCancel(ctx)
	if err := h.faults.clear(cleanCtx); err != nil {
		return sum, err
	}
	h.faultsCleared.Store(time.Now().UnixNano())
	settled := make(chan struct{})
	go func() { agents.Wait(); close(settled) }()
	t := time.NewTimer(h.settle)
	select {
	case <-settled:
	case <-t.C:
		h.say("settle deadline passed with %d agent(s) still retrying; stopping them", h.busy.Load())
		hardStop()
		<-settled
	}
	t.Stop()
	// A provider may still be holding a request that an agent gave up on;
	// its effect must be counted too: wait until the slow commit of the
	// last call without an answer (that arrived while faults were armed)
	// would be visible.
	if last := min(h.lastUnanswered.Load(), h.faultsCleared.Load()); last > 0 {
		until := time.Unix(0, last).Add(h.cfg.maxCommitHold() + h.cfg.IndexLag + time.Second)
		if d := time.Until(until); d > 0 {
			h.say("waiting %s for the provider's held requests (the last unanswered call plus the slowest hold)", d.Round(time.Second))
			sleep(cleanCtx, d)
		}
	}
	stopProgress()
	progress.Wait()
	h.say("checking the invariants")
	sum, err = h.check(cleanCtx)
	if h.bouncer != nil && err == nil {
		sum.PgBouncer = true
		if sum.PgBouncerXacts, err = h.pgbouncerTraffic(cleanCtx); err != nil {
			err = fmt.Errorf("soak: pgbouncer's stats: %w", err)
		}
	}
	return sum, err
}

func (h *harness) replicaAddrs() string {
	h.cluster.mu.Lock()
	defer h.cluster.mu.Unlock()
	var s []string
	for _, r := range h.cluster.replicas {
		s = append(s, r.grpcAddr)
	}
	return strings.Join(s, ", ")
}

// generate hands out intents 0, 1, 2, … until ctx ends or cfg.Intents are
// out; an intent marked Dup goes to two agents at once.
func (h *harness) generate(ctx context.Context, work chan<- *intentState) {
	for n := 0; h.cfg.Intents == 0 || n < h.cfg.Intents; n++ {
		in := NewIntent(h.cfg, n)
		st := &intentState{n: n, key: in.Key, large: in.Large}
		copies := 1
		if in.Dup {
			copies = 2
		}
		for i := range copies {
			select {
			case work <- st:
			case <-ctx.Done():
				return
			}
			if i == 0 { // an agent has it: it counts
				h.mu.Lock()
				h.intents = append(h.intents, st)
				h.mu.Unlock()
				if st.large {
					h.largeIntents.Add(1)
				}
			}
		}
	}
}

// registered notes that the journal answered an agent for st's key.
func (h *harness) registered(st *intentState) {
	if st.registered.Swap(true) {
		return
	}
	h.mu.Lock()
	h.regKeys[st.key] = true
	h.mu.Unlock()
}

// gaveUp notes that the SDK gave up a call at the end of its lease
// ("lease_expired").
func (h *harness) gaveUp(st *intentState, noHeartbeat bool) {
	h.gaveUpCalls.Add(1)
	if noHeartbeat {
		h.gaveUpNoHeartbeat.Add(1)
	}
	h.mu.Lock()
	h.gaveUpKeys[st.key] = true
	h.mu.Unlock()
}

// noHeartbeatAgents chooses the agents without heartbeats: round(share ×
// Agents) of them (at least one for a positive share), by a permutation
// drawn from the seed.
func noHeartbeatAgents(cfg Config) map[int]bool {
	k := int(math.Round(cfg.Mix.NoHeartbeat * float64(cfg.Agents)))
	if cfg.Mix.NoHeartbeat > 0 {
		k = max(k, 1)
	}
	rng := mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x6e6f6862))
	out := map[int]bool{}
	for _, i := range rng.Perm(cfg.Agents)[:min(k, cfg.Agents)] {
		out[i] = true
	}
	return out
}

// observe records an agent's final observation of an intent.
func (h *harness) observe(st *intentState, o observation) {
	st.mu.Lock()
	first := !st.settled
	st.settled = true
	st.observed = append(st.observed, o)
	st.mu.Unlock()
	if first {
		h.settledCount.Add(1)
	}
}

func (h *harness) journalErr(code string) {
	if code == "" {
		code = "timeout"
	}
	h.mu.Lock()
	h.journalErrs[code]++
	h.mu.Unlock()
}

// violate records an invariant violation.
func (h *harness) violate(invariant, key, detail string) {
	h.mu.Lock()
	h.violations = append(h.violations, Violation{Invariant: invariant, Key: key, Detail: detail})
	h.mu.Unlock()
}

// --- the database ---

// prepareDB creates the run's schema, or adopts the one in the URL.
func (h *harness) prepareDB(ctx context.Context) error {
	u, err := url.Parse(h.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("soak: database url: %w", err)
	}
	q := u.Query()
	if sp := q.Get("search_path"); sp != "" {
		h.schema = sp
	} else {
		h.schema, h.created = "soak_"+h.runID, true
	}
	q.Del("search_path")
	u.RawQuery = q.Encode()
	h.baseURL = u.String()
	if !h.created {
		return nil
	}
	conn, err := h.adminConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{h.schema}.Sanitize()); err != nil {
		return fmt.Errorf("soak: create schema %s: %w", h.schema, err)
	}
	return nil
}

// adminConn connects as the harness itself, under an application_name
// the pool drop does not match.
func (h *harness) adminConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(h.baseURL)
	if err != nil {
		return nil, fmt.Errorf("soak: database url: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "opjournal-soakctl-" + h.runID
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("soak: PostgreSQL is not reachable (--database-url, TEST_DATABASE_URL): %w", err)
	}
	return conn, nil
}

// dropDB drops the schema the harness created, unless Keep.
func (h *harness) dropDB() {
	if !h.created {
		return
	}
	if h.cfg.Keep {
		h.say("kept schema %s", h.schema)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := h.adminConn(ctx)
	if err != nil {
		h.say("drop schema %s: %v", h.schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{h.schema}.Sanitize()+" CASCADE"); err != nil {
		h.say("drop schema %s: %v", h.schema, err)
	}
}

// dropPool terminates every database connection of the journal replicas
// (found by application_name; the shared server is not restarted).
func (h *harness) dropPool(ctx context.Context) (int, error) {
	conn, err := h.adminConn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pattern := strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(h.cluster.appPrefix) + "%"
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name LIKE $1 AND pid <> pg_backend_pid()) AS t`, pattern).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("terminate the journal's connections: %w", err)
	}
	return n, nil
}

// --- chaos: kills, the pool drop and the search outage ---

// chaos kills a journal replica or a reconciler (alternately) every
// KillMin..KillMax, restarts it after a short pause, drops the journal's
// connection pool once and runs the search outage, all on a schedule drawn
// from the seed. It returns when ctx ends and every process is back.
func (h *harness) chaos(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(uint64(h.cfg.Seed), 0x63686173))
	d := h.cfg.Duration
	poolAt := time.Duration(float64(d) * (0.3 + 0.4*rng.Float64()))
	outageAt := time.Duration(float64(d) * (0.1 + 0.3*rng.Float64()))
	outagePath := actions[rng.IntN(len(actions))].path
	first := rng.IntN(2)

	var wg sync.WaitGroup
	defer wg.Wait()
	if h.cfg.PoolDrop {
		wg.Go(func() {
			sleep(ctx, poolAt)
			if ctx.Err() != nil {
				return
			}
			n, err := h.dropPool(context.WithoutCancel(ctx))
			if err != nil {
				h.say("pool drop failed: %v", err)
				return
			}
			h.poolDrops.Add(1)
			h.terminated.Add(int64(n))
			h.say("pool drop: pg_terminate_backend on %d connection(s) of the journal replicas", n)
		})
	}
	if h.cfg.SearchOutage > 0 && d >= 2*h.cfg.SearchOutage && !h.cfg.ShippedPolicy {
		wg.Go(func() {
			sleep(ctx, outageAt)
			if ctx.Err() != nil {
				return
			}
			if err := h.faults.setOutage(context.WithoutCancel(ctx), outagePath); err != nil {
				h.say("search outage: %v", err)
				return
			}
			h.say("search outage: GET %s fails for %s", outagePath, h.cfg.SearchOutage)
			sleep(ctx, h.cfg.SearchOutage)
			if ctx.Err() == nil {
				if err := h.faults.setOutage(context.WithoutCancel(ctx), ""); err != nil {
					h.say("search outage end: %v", err)
				}
				h.say("search outage over")
			}
		})
	}
	if h.cfg.KillMin <= 0 {
		return
	}
	for i := 0; ; i++ {
		wait := h.cfg.KillMin + time.Duration(rng.Int64N(int64(h.cfg.KillMax-h.cfg.KillMin)+1))
		down := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		journal := (i+first)%2 == 0
		target := rng.IntN(max(h.cfg.Replicas, h.cfg.Reconcilers))
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		var err error
		if journal {
			target %= h.cfg.Replicas
			h.say("kill -9 journal-%d (pid %d); restart in %s", target+1, h.cluster.replicas[target].proc.Pid(), down.Round(time.Millisecond))
			var moved bool
			moved, err = h.cluster.killJournal(ctx, target, down)
			if moved {
				h.say("journal-%d came back on new ports %s (its ports were taken); agents and reconcilers follow", target+1, h.replicaAddrs())
			}
		} else {
			target %= h.cfg.Reconcilers
			h.say("kill -9 reconciler-%d (pid %d); restart in %s", target+1, h.cluster.reconcilers[target].proc.Pid(), down.Round(time.Millisecond))
			err = h.cluster.killReconciler(ctx, target, down)
		}
		if err != nil {
			h.violate("harness", "", "restart after kill: "+err.Error())
			return
		}
	}
}

// operate is a person working through the review queue during the load:
// each escalated operation is resolved from the provider's own records
// (one effect → succeeded with its id; none → failed_final). It waits
// until the escalated attempt cannot still produce a late effect.
func (h *harness) operate(ctx context.Context) {
	for {
		sleep(ctx, 3*time.Second)
		if ctx.Err() != nil {
			return
		}
		rpc, done, err := h.rpc()
		if err != nil {
			continue
		}
		ops, _ := listAll(ctx, rpc, &pb.ListOperationsRequest{NeedsReview: ptr(true)})
		for _, op := range ops {
			if ctx.Err() != nil {
				break
			}
			if st := op.GetStatus(); st == pb.Status_STATUS_SUCCEEDED || st == pb.Status_STATUS_FAILED_FINAL || op.GetDuplicateExternalId() != "" {
				continue // a detected duplicate: left for the report
			}
			// The provider may still carry out a held request.
			if since := op.GetUnknownSince(); since == nil || time.Since(since.AsTime()) < h.cfg.plan(op.GetActionType()).commitHold+h.cfg.IndexLag+time.Second {
				continue
			}
			eff, err := h.control.Lookup(ctx, op.GetOperationKey())
			if err != nil {
				continue
			}
			req := &pb.ResolveRequest{OperationKey: op.GetOperationKey(), Actor: "soak-operator"}
			switch eff.Count {
			case 0:
				req.Resolution, req.ErrorCode, req.Reason = pb.Resolution_RESOLUTION_FAILED_FINAL, "no_effect_at_provider", "no effect in the provider's records"
			case 1:
				req.Resolution, req.ExternalId, req.Reason = pb.Resolution_RESOLUTION_SUCCEEDED, eff.Records[0].ID, "effect seen in the provider's records"
			default:
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := rpc.Resolve(cctx, req); err == nil {
				h.resolved.Add(1)
			}
			cancel()
		}
		done()
	}
}

func ptr[T any](v T) *T { return &v }

// progress prints a line every cfg.Progress.
func (h *harness) progress(ctx context.Context) {
	t := time.NewTicker(h.cfg.Progress)
	defer t.Stop()
	lastT, lastDone, lastExec := time.Now(), int64(0), int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		done, exec := h.settledCount.Load(), h.executes.Load()
		secs := now.Sub(lastT).Seconds()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fired, _ := h.faults.counts(fctx)
		cancel()
		h.mu.Lock()
		started := len(h.intents)
		h.mu.Unlock()
		h.say("intents %d/%d settled (large %d)  %.1f intents/s  %.1f calls/s  unknown outcomes %d (lease_expired %d, %d without heartbeat)  faults %d (slow 1.5x/3x lease %d/%d)  long calls kept by heartbeats %d  retries after release %d  kills journal=%d reconciler=%d  pool drops %d  agents busy %d",
			done, started, h.largeIntents.Load(), float64(done-lastDone)/secs, float64(exec-lastExec)/secs,
			h.unknownCalls.Load(), h.gaveUpCalls.Load(), h.gaveUpNoHeartbeat.Load(),
			total(fired), fired[FaultSlowLease15], fired[FaultSlowLease3], h.heartbeatKept.Load(), h.afterRelease.Load(),
			h.cluster.journalKills.Load(), h.cluster.reconcilerKills.Load(), h.poolDrops.Load(), h.busy.Load())
		lastT, lastDone, lastExec = now, done, exec
		if b := h.busy.Load(); b > 0 && b <= 3 {
			var open []string
			h.pursuing.Range(func(k, v any) bool {
				open = append(open, fmt.Sprintf("%s (for %s)", k, time.Since(v.(time.Time)).Round(time.Second)))
				return true
			})
			h.say("  still pursued: %s", strings.Join(open, ", "))
		}
	}
}
