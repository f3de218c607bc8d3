package failover

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
)

// straddlesPerFailover is how many intents (half payments, half emails)
// each async failover claims before the stall and completes after it.
const straddlesPerFailover = 4

// straddles are intents whose Register+Claim the standby has replayed
// and whose provider call and MarkSucceeded happen after replication
// stalled: the succeeded record the agent was told about exists on the
// primary only, and the kill loses it. Deterministic, where the normal
// load's losses depend on what was in flight.
type straddles struct {
	gate    chan struct{} // closed after the stall: the provider calls go ahead
	claimed sync.WaitGroup
	done    sync.WaitGroup
	keys    []string
}

// startStraddles starts them and returns once each is claimed.
func (h *harness) startStraddles(ctx context.Context, n int) (*straddles, error) {
	s := &straddles{gate: make(chan struct{})}
	for j := range straddlesPerFailover {
		in := intent{key: fmt.Sprintf("failover:async:%d:straddle:%d:pay:%d", h.cfg.Seed, n, j), action: "create_payment",
			path: "/payments", idempotent: true, payload: map[string]any{"order_id": fmt.Sprintf("straddle-%d-%d", n, j), "amount_minor": 4200, "currency": "EUR"}}
		if j%2 == 1 {
			in = intent{key: fmt.Sprintf("failover:async:%d:straddle:%d:email:%d", h.cfg.Seed, n, j), action: "send_email",
				path: "/emails", payload: map[string]any{"to": "straddle@example.com", "subject": fmt.Sprintf("straddle %d %d", n, j)}}
		}
		s.keys = append(s.keys, in.key)
		a := &agent{h: h, id: -1}
		conn, err := dialJournal(h.journals[j%2].Field("grpc_addr"), a.observeCalls)
		if err != nil {
			return nil, err
		}
		a.conn, a.cli = conn, client.New(conn, client.WithWorkerID(fmt.Sprintf("failover-straddle-%d-%d", n, j)))
		a.current = in.key
		call := agenttool.Post(h.providerURL, in.path, in.payload, in.idempotent, 10*time.Second, &h.providerCalls)
		s.claimed.Add(1)
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			defer conn.Close()
			var once sync.Once
			claimed := func() { once.Do(s.claimed.Done) }
			defer claimed() // also when Execute never calls fn
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			out, err := a.cli.Execute(cctx, client.Op{Key: in.key, Action: in.action, Payload: in.payload},
				func(ctx context.Context, at client.Attempt) (client.Effect, error) {
					claimed()
					select {
					case <-s.gate:
					case <-ctx.Done():
						return client.Effect{}, ctx.Err()
					}
					return call(ctx, at)
				})
			if err != nil || out.Kind != client.Succeeded {
				h.violate("harness", in.key, fmt.Sprintf("straddling intent: %v %v (want succeeded before the kill)", out.Kind, err))
			}
		}()
	}
	if err := waitGroup(ctx, &s.claimed, 15*time.Second); err != nil {
		return nil, fmt.Errorf("straddling intents not claimed: %w", err)
	}
	h.mu.Lock()
	for _, k := range s.keys {
		h.straddleKeys[k] = true
	}
	h.mu.Unlock()
	return s, nil
}

// release lets the provider calls go ahead and waits until each Execute
// has its answer (MarkSucceeded acknowledged by the primary alone).
func (s *straddles) release(ctx context.Context) error {
	close(s.gate)
	return waitGroup(ctx, &s.done, 15*time.Second)
}

func (h *harness) straddled(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.straddleKeys[key]
}

// waitGroup waits for wg, at most within.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, within time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("not done after %s", within)
	case <-ctx.Done():
		return ctx.Err()
	}
}
