package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestSDKUnderEveryPaymentFault: the Go SDK's Execute, driven by 40
// concurrent payment orders (each by two agents at once, as a retry storm
// or a restarted worker would), against the test provider with the fault
// kinds TestTwoReconcilersManyAgents does not inject: a dropped connection
// after the commit, a slow provider whose effect lands after the agent
// gave up (its key held in flight meanwhile), a 503 before anything is
// stored, a definite rejection, and failing and hanging searches for the
// real `opjournal-reconciler` that settles the unknowns. Counted at the
// provider: every order has exactly one charge, or none and ended
// failed_final by the provider's definite refusal; none is lost, none
// stays unsettled.
func TestSDKUnderEveryPaymentFault(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{dbURL: pgURL(t)})
	seed := int64(20261207)
	for i, f := range []fakeprovider.Fault{
		{Path: "/payments", Kind: fakeprovider.DropConnectionAfterCommit, Probability: 0.15},
		{Path: "/payments", Kind: fakeprovider.Slow, Probability: 0.15, Delay: 1500 * time.Millisecond},
		{Path: "/payments", Kind: fakeprovider.Error, Probability: 0.15},
		{Path: "/payments", Kind: fakeprovider.Reject, Count: 2},
		// A bounded number of failed searches: each costs the reconciler
		// a backoff that grows with the checks (to a minute by the sixth),
		// which a test of a minute cannot wait out many times.
		{Method: "GET", Path: "/payments", Kind: fakeprovider.Error, Count: 3},
		{Method: "GET", Path: "/payments", Kind: fakeprovider.Timeout, Count: 1, Delay: 2 * time.Second},
	} {
		if f.Probability > 0 {
			sd := seed + int64(i)
			f.Seed = &sd
		}
		s.fault(t, f)
	}
	const orders = 40
	type result struct {
		kind client.OutcomeKind
		err  error
	}
	var calls atomic.Int32
	results := make([][2]result, orders)
	deadline := time.Now().Add(45 * time.Second)
	var wg sync.WaitGroup
	for i := range orders {
		key := fmt.Sprintf("payment:sdk-faults:order-%02d", i)
		op, body := payment(key, 1000+i)
		fn := agenttool.Post(s.providerURL, "/payments", body, true, 500*time.Millisecond, &calls)
		for a := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(i*2+a)))
				for {
					out, err := s.sdk.Execute(context.Background(), op, fn)
					if err != nil {
						results[i][a] = result{err: err}
						return
					}
					results[i][a] = result{kind: out.Kind}
					// Succeeded and FailedFinal are final; the rest (unknown
					// until the reconciler settles it, another agent's
					// attempt under way) mean "ask again".
					if out.Kind == client.Succeeded || out.Kind == client.FailedFinal || time.Now().After(deadline) {
						return
					}
					// An agent's retry pacing, jittered, not synchronisation.
					time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	var succeeded, rejected int
	for i := range orders {
		key := fmt.Sprintf("payment:sdk-faults:order-%02d", i)
		op := lookup(t, ctxFor(t), s.rpc, key)
		n := s.effects(t, key)
		for a, r := range results[i] {
			if r.err != nil {
				t.Errorf("%s agent %d: %v", key, a, r.err)
			}
		}
		switch op.GetStatus() {
		case pb.Status_STATUS_SUCCEEDED:
			succeeded++
			if n != 1 || op.GetExternalId() == "" {
				t.Errorf("%s succeeded with %d charges (external id %q), want exactly 1", key, n, op.GetExternalId())
			}
			for a, r := range results[i] {
				if r.kind != client.Succeeded {
					t.Errorf("%s succeeded, but agent %d ended with %s", key, a, r.kind)
				}
			}
		case pb.Status_STATUS_FAILED_FINAL:
			rejected++
			if n != 0 {
				t.Errorf("%s failed_final with %d charges", key, n)
			}
			for a, r := range results[i] {
				if r.kind != client.FailedFinal {
					t.Errorf("%s failed_final, but agent %d ended with %s", key, a, r.kind)
				}
			}
		default:
			t.Errorf("%s ended %s (needs_review=%v, checks=%d) with %d charges: not settled in time", key, op.GetStatus(), op.GetNeedsReview(), op.GetCheckCount(), n)
		}
		if op.GetNeedsReview() {
			t.Errorf("%s is under review: %s", key, op.GetReviewReason())
		}
	}
	faults, err := s.provider.Faults(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d succeeded, %d failed_final; %d provider calls; faults fired: %v", succeeded, rejected, calls.Load(), faults.Fired)
	fired := 0
	for _, n := range faults.Fired {
		fired += n
	}
	if fired < 10 || succeeded < orders/2 || rejected != 2 {
		t.Fatalf("%d faults fired, %d orders succeeded and %d failed_final (want the 2 rejected): the run proved little", fired, succeeded, rejected)
	}
}
