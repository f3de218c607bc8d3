package failover

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// intent is one business intent: a payment (the provider deduplicates by
// Idempotency-Key) or an email (it does not; the key travels in the
// searchable reference field).
type intent struct {
	key        string
	action     string
	path       string
	idempotent bool
	payload    map[string]any
}

// newIntent returns intent n of the run, a function of the seed.
func (h *harness) newIntent(n int) intent {
	rng := rand.New(rand.NewPCG(uint64(h.cfg.Seed), uint64(n)))
	if rng.Float64() < h.cfg.emailShare() {
		return intent{
			key:    fmt.Sprintf("failover:%s:%d:email:%d", h.cfg.Mode, h.cfg.Seed, n),
			action: "send_email", path: "/emails",
			payload: map[string]any{"to": fmt.Sprintf("customer-%d@example.com", rng.IntN(1_000_000)), "subject": fmt.Sprintf("Receipt %d", n)},
		}
	}
	return intent{
		key:    fmt.Sprintf("failover:%s:%d:pay:%d", h.cfg.Mode, h.cfg.Seed, n),
		action: "create_payment", path: "/payments", idempotent: true,
		payload: map[string]any{"order_id": fmt.Sprint(n), "amount_minor": 100 + rng.IntN(1_000_000), "currency": "EUR"},
	}
}

// agent is one simulated agent with its own SDK client and connection.
type agent struct {
	h    *harness
	id   int
	conn *grpc.ClientConn
	cli  *client.Client

	mu      sync.Mutex
	current string // the key its Execute is working on
	markOK  bool   // a MarkSucceeded for current was answered OK in this Execute
}

// dialJournal connects to one journal replica; observe, if set, sees
// every call and its answer.
func dialJournal(addr string, observe grpc.UnaryClientInterceptor) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if observe != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(observe))
	}
	return grpc.NewClient(addr, opts...)
}

// observeCalls is an agent's interceptor: the ledger and the per-failover
// counts are kept from the calls as they went over the wire.
func (a *agent) observeCalls(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	started := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	key := ""
	if k, ok := req.(interface{ GetOperationKey() string }); ok {
		key = k.GetOperationKey()
	}
	a.h.observe(path.Base(method), key, reply, err, started, a)
	return err
}

// observe classifies one journal call of an agent (a nil agent: another
// caller's, counted but not in the ledger).
func (h *harness) observe(method, key string, reply any, err error, started time.Time, a *agent) {
	h.calls.Add(1)
	f := h.openFailover()
	if err == nil {
		h.mu.Lock()
		if n := len(h.failovers); n > 0 && started.After(h.failovers[n-1].kill) && h.failovers[n-1].firstAgentOK.IsZero() {
			h.failovers[n-1].firstAgentOK = time.Now()
		}
		h.mu.Unlock()
		op := reply.(interface{ GetOperation() *pb.Operation }).GetOperation()
		if key == "" || op == nil || a == nil {
			return
		}
		s := stateOf(op)
		if r, ok := reply.(*pb.RegisterResponse); ok && r.GetCreated() {
			if n := h.ledger.noteCreated(key); n > 1 {
				h.wrong(f, key, fmt.Sprintf("Register answered created=true for the %d. time", n))
				if before, ok := h.ledger.acked(key, started); ok {
					h.noteLost(h.failoverCount(), key, before.state, "missing (registered anew by the agent's retry)")
				}
			}
		}
		if before, ok := h.ledger.record(key, s, started); ok && !s.atOrAfter(before.state) {
			h.wrong(f, key, fmt.Sprintf("%s answered %s after %s was acknowledged", method, s, before.state))
		}
		if method == "MarkSucceeded" {
			a.mu.Lock()
			if a.current == key {
				a.markOK = true
			}
			a.mu.Unlock()
		}
		return
	}
	code := status.Code(err)
	reason := client.CodeOf(err)
	switch {
	case code == codes.Unavailable || reason == opjournal.CodeUnavailable:
		h.unavailable.Add(1)
		if f != nil {
			f.unavailable.Add(1)
		}
		return
	case code == codes.Canceled || code == codes.DeadlineExceeded && reason == "":
		h.clientGaveUp.Add(1) // our side stopped waiting: no answer at all
		return
	}
	name := method + " " + string(reason)
	if reason == "" {
		name = method + " " + code.String()
	}
	h.noteOther(f, name)
	if reason == opjournal.CodeNotFound && a != nil {
		if prev, ok := h.ledger.acked(key, started); ok {
			h.wrong(f, key, fmt.Sprintf("%s answered NOT_FOUND after %s was acknowledged", method, prev.state))
		}
	}
}

// run pursues intents until next says stop, each until the journal says
// it is settled or ctx ends.
func (a *agent) run(ctx context.Context, next func() (int, bool)) {
	for {
		n, ok := next()
		if !ok {
			return
		}
		a.pursue(ctx, a.h.newIntent(n))
	}
}

// pursue retries one intent with the same key until it is settled: like a
// real agent, after a journal error (UNAVAILABLE included) or an outcome
// that is not yet known it asks again later, never with another key.
func (a *agent) pursue(ctx context.Context, in intent) {
	h := a.h
	h.intents.Add(1)
	op := client.Op{Key: in.key, Action: in.action, Payload: in.payload}
	fn := agenttool.Post(h.providerURL, in.path, in.payload, in.idempotent, 10*time.Second, &h.providerCalls)
	for ctx.Err() == nil {
		a.mu.Lock()
		a.current, a.markOK = in.key, false
		a.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := a.cli.Execute(cctx, op, fn)
		cancel()
		h.executes.Add(1)
		pause := 300 * time.Millisecond
		var nr *client.NotRecordedError
		switch {
		case errors.As(err, &nr):
			// fn ran, the outcome did not reach the journal: unknown to the
			// agent, and the journal shows unknown once the lease ends.
			h.notRecorded.Add(1)
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if opjournal.ErrorCode(err) == opjournal.CodeUnavailable {
				h.executeUnavailable.Add(1) // nothing known: ask again with the same key
			} else {
				h.executeOther.Add(1)
			}
		default:
			a.mu.Lock()
			markOK := a.markOK
			a.mu.Unlock()
			switch out.Kind {
			case client.Succeeded:
				if !out.Replayed && !markOK {
					h.violate("sdk", in.key, "Execute reported a fresh success that no MarkSucceeded answer acknowledged")
				}
				h.settled.Add(1)
				return
			case client.FailedFinal:
				h.settled.Add(1)
				return
			case client.VerificationRequired:
				if out.NeedsReview {
					h.settled.Add(1)
					h.reviews.Add(1)
					return
				}
				pause = time.Second
			case client.InProgressElsewhere:
				pause = min(out.RetryAfter, 2*time.Second)
			case client.Conflict:
				h.violate("conflict", in.key, "the same intent was answered as a conflict")
				return
			}
		}
		sleep(ctx, pause)
	}
}

// prober measures when one journal replica answers a write again: it
// registers a new probe key every probeInterval.
type prober struct {
	replica int
	conn    *grpc.ClientConn
	rpc     pb.JournalServiceClient

	mu  sync.Mutex
	oks []callSpan // successful calls, in order of their end
	n   atomic.Int64
}

type callSpan struct{ start, end time.Time }

const probeInterval = 50 * time.Millisecond

func (p *prober) run(ctx context.Context, mode Mode) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := p.n.Add(1)
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := p.rpc.Register(cctx, &pb.RegisterRequest{
			OperationKey: fmt.Sprintf("failover:%s:probe:%d:%d", mode, p.replica+1, n),
			ActionType:   "create_payment",
			Payload:      mustStruct(map[string]any{"order_id": "probe", "amount_minor": 1, "currency": "EUR"}),
		})
		cancel()
		if err == nil {
			p.mu.Lock()
			p.oks = append(p.oks, callSpan{start, time.Now()})
			p.mu.Unlock()
		}
	}
}

// firstOKAfter returns the end of the first successful probe that started
// after t (ok false if none yet).
func (p *prober) firstOKAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.oks {
		if s.start.After(t) {
			return s.end, true
		}
	}
	return time.Time{}, false
}

// longestGap returns the longest time between the ends of two successive
// successful probes (or from the last one to to) that overlaps [from, to].
func (p *prober) longestGap(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	var prev time.Time
	for _, s := range p.oks {
		if !prev.IsZero() && s.end.After(from) && prev.Before(to) {
			gap = max(gap, s.end.Sub(prev))
		}
		prev = s.end
		if s.end.After(to) {
			return gap
		}
	}
	if !prev.IsZero() && prev.Before(to) {
		since := prev
		if from.After(since) {
			since = from
		}
		gap = max(gap, to.Sub(since))
	}
	return gap
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
