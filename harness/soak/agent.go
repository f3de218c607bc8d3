package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
)

// callSlack is what an agent's Execute may take beyond its provider
// timeout (the journal's round trips).
const callSlack = 10 * time.Second

// intentState is what the harness (not the agents) remembers of an intent:
// whether the journal ever answered for its key, and what each agent
// finally observed.
type intentState struct {
	n     int
	key   string
	large bool // the payload carries LargeMemberBytes (Mix.Large)

	registered atomic.Bool // some agent got a journal answer for the key
	crashed    atomic.Bool // the intent's one crash happened

	mu       sync.Mutex
	settled  bool          // some agent observed a settled outcome
	observed []observation // every agent's final observation
}

// observation is an agent's final view of an intent.
type observation struct {
	agent       string
	kind        client.OutcomeKind
	externalID  string
	needsReview bool
}

// agent is one simulated AI agent: it pursues intents one at a time with
// its own SDK client, retrying the same key until the journal says the
// intent is settled.
type agent struct {
	h           *harness
	id          int
	gen         int  // restarts so far
	noHeartbeat bool // its SDK client runs with client.WithHeartbeat(false) (Mix.NoHeartbeat)
	conn        *grpc.ClientConn
	cli         *client.Client
	rng         *rand.Rand // pacing jitter
}

func (a *agent) name() string { return fmt.Sprintf("soak-agent-%d.%d", a.id+1, a.gen) }

// connect builds a fresh client: a new connection (preferring the agent's
// own replica, round-robin) and a new worker id.
func (a *agent) connect() error {
	conn, err := a.h.cluster.dial(a.id % a.h.cfg.Replicas)
	if err != nil {
		return err
	}
	a.conn = conn
	a.cli = client.New(conn, client.WithWorkerID(a.name()), client.WithHeartbeat(!a.noHeartbeat))
	return nil
}

// drop forgets the client and its connection, as a crashed process does.
func (a *agent) drop() {
	if a.conn != nil {
		_ = a.conn.Close()
	}
	a.conn, a.cli = nil, nil
}

// run pursues the intents it is handed until work is closed. ctx ends at
// the settle deadline: intents still open then stay unsettled.
func (a *agent) run(ctx context.Context, work <-chan *intentState) {
	defer a.drop()
	for st := range work {
		a.h.busy.Add(1)
		who := st.key + " by agent " + strconv.Itoa(a.id+1)
		a.h.pursuing.Store(who, time.Now())
		a.pursue(ctx, st)
		a.h.pursuing.Delete(who)
		a.h.busy.Add(-1)
	}
}

// pursue works on one intent until an outcome settles it.
func (a *agent) pursue(ctx context.Context, st *intentState) {
	in := NewIntent(a.h.cfg, st.n)
	if in.Restart && !st.crashed.Swap(true) {
		a.crash(ctx, st, in)
		// The memory is gone: the key is all that is left.
		var err error
		if in, err = IntentForKey(a.h.cfg, st.key); err != nil {
			a.h.violate("harness", st.key, err.Error())
			return
		}
	}
	op := client.Op{Key: in.Key, Action: in.Action, Payload: in.Payload}
	fn := a.h.tool(st, in, a.noHeartbeat)
	burst := 0
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, in.Timeout+callSlack)
		out, err := a.cli.Execute(cctx, op, fn)
		cancel()
		a.h.executes.Add(1)
		done, pause := a.outcome(ctx, st, out, err)
		if done {
			return
		}
		if in.Storm && burst < in.StormSize {
			burst++ // a retry storm: again, at once
			continue
		}
		burst = 0
		sleep(ctx, jitter(a.rng, pause))
	}
}

// outcome records one Execute result and says whether the intent is
// settled, or how long to wait before the next retry.
func (a *agent) outcome(ctx context.Context, st *intentState, out client.Outcome, err error) (done bool, pause time.Duration) {
	if err != nil {
		var nr *client.NotRecordedError
		if errors.As(err, &nr) {
			// fn ran, but its outcome did not reach the journal: the lease
			// will expire (or has: STALE_ATTEMPT after a wait longer than
			// the lease) and the reconciler will find out.
			a.h.registered(st)
			a.h.journalErr("not_recorded/" + string(opjournal.ErrorCode(nr.Err)))
			if nr.Observed == client.VerificationRequired {
				a.h.unknownCalls.Add(1)
			}
			return false, 500 * time.Millisecond
		}
		code := opjournal.ErrorCode(err)
		switch {
		case ctx.Err() != nil:
			return true, 0
		case code == opjournal.CodeUnavailable, code == opjournal.CodeInternal, code == opjournal.CodeRateLimited, code == "":
			a.h.journalErr(string(code))
			return false, 400 * time.Millisecond
		}
		a.h.violate("refused", st.key, err.Error())
		return true, 0
	}
	a.h.registered(st)
	obs := observation{agent: a.name(), kind: out.Kind, externalID: out.ExternalID, needsReview: out.NeedsReview}
	switch out.Kind {
	case client.Succeeded, client.FailedFinal:
		a.h.observe(st, obs)
		return true, 0
	case client.VerificationRequired:
		if out.Cause != nil {
			a.h.unknownCalls.Add(1)
			if out.ErrorCode == "lease_expired" {
				a.h.gaveUp(st, a.noHeartbeat)
			}
		}
		if out.NeedsReview { // a person decides; asking again is pointless
			a.h.observe(st, obs)
			return true, 0
		}
		a.h.verifyWaits.Add(1)
		return false, time.Second
	case client.InProgressElsewhere:
		a.h.inProgress.Add(1)
		return false, min(out.RetryAfter, 2*time.Second)
	case client.Conflict:
		a.h.violate("conflict", st.key, "the same intent (same key, same payload) was answered as a conflict")
		return true, 0
	}
	a.h.violate("harness", st.key, fmt.Sprintf("unexpected outcome %v", out.Kind))
	return true, 0
}

// crash starts the intent's first call and, CrashAfter into it, drops the
// client and its connection before anything more reaches the journal, as
// a killed agent process would. Then it starts afresh with a new client.
func (a *agent) crash(ctx context.Context, st *intentState, in Intent) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	cli := a.cli
	go func() {
		defer close(done)
		out, err := cli.Execute(cctx, client.Op{Key: in.Key, Action: in.Action, Payload: in.Payload}, a.h.tool(st, in, a.noHeartbeat))
		var nr *client.NotRecordedError
		if err == nil && out.Kind != client.Conflict || errors.As(err, &nr) {
			a.h.registered(st)
		}
	}()
	t := time.NewTimer(in.CrashAfter)
	select {
	case <-t.C:
	case <-done:
	}
	t.Stop()
	// The connection goes first, so that not even the SDK's "unknown"
	// record gets out: the lease has to expire.
	a.drop()
	cancel()
	<-done
	a.h.executes.Add(1)
	a.h.restarts.Add(1)
	a.gen++
	if err := a.connect(); err != nil {
		a.h.violate("harness", st.key, "reconnect: "+err.Error())
	}
}

// tool is the agent's tool function for an intent: the provider call with
// the key as Idempotency-Key (payments) or reference (the others). Being
// called at all means the journal registered and claimed the key. It also
// counts what the report needs: a call after a release (attempt ≥ 2:
// with reconcile_before_retry only a release grants another attempt), a
// confirmed effect that took longer than the lease (kept by heartbeats),
// and the start of the last call without an answer (the provider may
// still be holding it).
func (h *harness) tool(st *intentState, in Intent, noHeartbeat bool) func(context.Context, client.Attempt) (client.Effect, error) {
	call := agenttool.Post(h.cluster.providerURL, in.Path, in.Payload, in.Idempotent, in.Timeout, &h.providerCalls)
	return func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		h.registered(st)
		start := time.Now()
		if a.Number > 1 {
			h.afterRelease.Add(1)
		}
		eff, err := call(ctx, a)
		switch {
		case err != nil:
			storeMax(&h.lastUnanswered, start.UnixNano())
		case !noHeartbeat && a.Lease > 0 && time.Since(start) > a.Lease:
			h.heartbeatKept.Add(1)
		}
		return eff, err
	}
}

// storeMax raises v to n.
func storeMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if old >= n || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// jitter spreads d by ±25 %.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) * (0.75 + 0.5*rng.Float64()))
}
