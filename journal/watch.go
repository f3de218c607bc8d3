package journal

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opjournal/opjournal"
)

// Lookup's long poll (LookupRequest.wait_seconds): a caller waiting for a
// person's decision is answered as soon as the operation changes. A
// decision taken through this process wakes it at once (the service knows
// when it applied one); one taken through another replica is seen by a
// re-read every watchInterval. Between reads nothing is held: no
// connection, no transaction, only a timer and a channel.

// MaxWaitSeconds bounds LookupRequest.wait_seconds.
const MaxWaitSeconds = 60

// watchInterval is how often a long poll re-reads the operation, so that
// a change made by another process is seen too.
var watchInterval = time.Second

// watchers wakes the long polls of a key when this process changes it.
type watchers struct {
	mu sync.Mutex
	m  map[[2]string]*watch
	// held counts the long polls holding their answer now (LongPolls).
	held atomic.Int64
}

// watch is the wake-up channel of one key and how many wait on it.
type watch struct {
	ch chan struct{}
	n  int
}

// wait returns a channel closed at the key's next change and the function
// that stops waiting (it must be called).
func (w *watchers) wait(tenant, key string) (<-chan struct{}, func()) {
	k := [2]string{tenant, key}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[[2]string]*watch{}
	}
	e := w.m[k]
	if e == nil {
		e = &watch{ch: make(chan struct{})}
		w.m[k] = e
	}
	e.n++
	return e.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.n--; e.n == 0 && w.m[k] == e {
			delete(w.m, k)
		}
	}
}

// changed wakes every wait on the key.
func (w *watchers) changed(tenant, key string) {
	k := [2]string{tenant, key}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[k]; e != nil {
		close(e.ch)
		delete(w.m, k)
	}
}

// LongPolls is how many Lookup long polls this process holds now: each
// read the operation awaiting approval and waits for its change.
func (s *Service) LongPolls() int64 { return s.watch.held.Load() }

// changed tells the key's long polls that this process changed it.
func (s *Service) changed(tenant, key string) { s.watch.changed(tenant, key) }

// LookupWait is Lookup with a long poll: while the operation awaits
// approval it holds the answer until the operation changes (a decision,
// the first of two approvals, a timeout) or wait passes, and then answers
// with the record as it is. wait ≤ 0 answers at once; more than
// MaxWaitSeconds is CodeInvalidArgument. A cancelled ctx ends the wait
// with the record as last read.
func (s *Service) LookupWait(ctx context.Context, tenant, key string, wait time.Duration) (*opjournal.Operation, error) {
	if wait < 0 || wait > MaxWaitSeconds*time.Second {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "wait_seconds", "must be 0 … %d", MaxWaitSeconds)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	// The wake-up channel is taken before each read, so a change between
	// the read and the wait is not missed.
	woken, stop := s.watch.wait(tenant, key)
	op, err := s.Lookup(ctx, tenant, key)
	if err != nil || wait == 0 || op.Status != opjournal.StatusAwaitingApproval {
		stop()
		return op, err
	}
	first := op.UpdatedAt
	s.watch.held.Add(1)
	defer s.watch.held.Add(-1)
	end := time.NewTimer(wait)
	defer end.Stop()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-woken:
		case <-tick.C:
		case <-end.C:
			stop()
			return s.Lookup(ctx, tenant, key)
		case <-ctx.Done():
			stop()
			return op, nil
		}
		stop()
		woken, stop = s.watch.wait(tenant, key)
		cur, err := s.Lookup(ctx, tenant, key)
		if err != nil {
			stop()
			if ctx.Err() != nil {
				return op, nil
			}
			return nil, err
		}
		op = cur
		if op.Status != opjournal.StatusAwaitingApproval || !op.UpdatedAt.Equal(first) {
			stop()
			return op, nil
		}
	}
}
