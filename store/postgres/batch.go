package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
)

// Group commit for the hot path.
//
// Every journal call is a statement and a commit, and at high concurrency
// the database spends most of its time on what each statement costs
// regardless of its size: the round trip, executor start-up, the commit and
// its WAL flush. So the calls an agent makes once per operation (Register,
// Claim, MarkSucceeded) go through a batcher: a few worker goroutines each
// take the next waiting call plus every other call of the same kind that is
// already waiting (never waiting for more), and apply them all in ONE
// statement over arrays (unnest), whose rows are matched back to the calls.
// A lone caller is never delayed: with nothing else waiting its batch is
// itself. Under load the batches grow by themselves, because calls queue
// while the workers' statements run.
//
// Nothing about the rules changes. Each row is still decided by its own
// conditions inside one statement (a unique key for inserts, a conditional
// UPDATE for transitions), its event is written by the same statement, and
// the batch commits before any of its callers is answered. A call whose row
// did not apply (the key exists, the condition does not hold, or the same
// key came twice in one batch) is answered by the one-call path, which
// reads the row and explains or retries exactly as without batching.

// call is one caller's request waiting in a batcher.
type call[In, Out any] struct {
	ctx  context.Context // the caller's, bounded; a call whose caller gave up is skipped
	in   In
	out  Out  // set by exec when applied
	ok   bool // exec applied the call (its row came back)
	err  error
	done chan struct{}
}

// batcher runs calls of one kind in batches (see above).
//
// At most `workers` statements of its kind run at once. A call that finds
// none running and nobody waiting runs its own one-call statement in its
// own goroutine (tryAlone): a lone caller pays nothing for batching.
// Calls that arrive while statements run wait in the queue; the worker
// goroutines take them, as many as are waiting (up to max) per statement,
// until the queue is empty.
type batcher[In, Out any] struct {
	what    string // for errors: "register", "claim", …
	workers int
	max     int
	// exec applies the calls in one statement, setting out and ok on each
	// call it applied. An error means the statement as a whole failed
	// (nothing of it was committed).
	exec func(ctx context.Context, calls []*call[In, Out]) error
	// bound limits one statement (the store's statement timeout).
	bound func(context.Context) (context.Context, context.CancelFunc)

	mu      sync.Mutex
	queue   []*call[In, Out]
	running int  // statements in flight, the callers' own included
	closed  bool // no new calls
	kick    chan struct{}
	quit    chan struct{}
	wg      sync.WaitGroup

	// waiting mirrors len(queue); batches and calls count the statements
	// run and the calls they carried (for tests and tuning).
	waiting, batches, calls atomic.Int64
}

// errClosed answers calls made after Close.
var errClosed = opjournal.Errorf(opjournal.CodeUnavailable, "", "the store is closed")

func newBatcher[In, Out any](what string, workers, max int, bound func(context.Context) (context.Context, context.CancelFunc),
	exec func(context.Context, []*call[In, Out]) error) *batcher[In, Out] {
	b := &batcher[In, Out]{what: what, workers: workers, max: max, exec: exec, bound: bound,
		kick: make(chan struct{}, 1), quit: make(chan struct{})}
	for range workers {
		b.wg.Go(b.work)
	}
	return b
}

// do runs one call and returns what exec set. ok is false when the call's
// row did not apply; the caller then takes its one-call path.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (out Out, ok bool, err error) {
	// The statement bound covers the wait in the queue too, as it covers
	// the wait for a pooled connection: behind a statement that hangs (a
	// silent database), a queued call gives up when its own bound ends,
	// not after the other's.
	ctx, cancel := b.bound(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return out, false, classify(b.what, err)
	}
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return out, false, errClosed
	}
	b.queue = append(b.queue, c)
	b.waiting.Store(int64(len(b.queue)))
	b.mu.Unlock()
	b.wake()
	select {
	case <-c.done:
		return c.out, c.ok, c.err
	case <-ctx.Done():
		// The statement may still apply the call; like a statement cut
		// short, the answer is UNAVAILABLE and a retry (idempotent by key,
		// fenced by attempt) finds out.
		return out, false, classify(b.what, ctx.Err())
	}
}

// tryAlone reserves a statement for the caller if the batcher is idle (no
// statement of its kind in flight, nobody waiting). The caller then runs
// its one-call path in its own goroutine, which for one call is cheaper
// than the batched statement and pays no hand-off, and calls finished.
func (b *batcher[In, Out]) tryAlone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.running >= b.workers || len(b.queue) > 0 {
		return false
	}
	b.running++
	b.batches.Add(1)
	b.calls.Add(1)
	return true
}

// stat reports the batcher's counters.
func (b *batcher[In, Out]) stat(kind string) store.BatchStat {
	return store.BatchStat{Kind: kind, Statements: b.batches.Load(), Calls: b.calls.Load(), Waiting: b.waiting.Load()}
}

// wake tells a worker that calls may be waiting.
func (b *batcher[In, Out]) wake() {
	select {
	case b.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// finished ends a statement and wakes a worker for what queued meanwhile.
func (b *batcher[In, Out]) finished() {
	b.mu.Lock()
	b.running--
	more := len(b.queue) > 0
	b.mu.Unlock()
	if more {
		b.wake()
	}
}

// take removes the next batch from the queue and counts it as running, or
// returns nil when the queue is empty or enough statements run already.
func (b *batcher[In, Out]) take() []*call[In, Out] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 || b.running >= b.workers {
		return nil
	}
	n := min(len(b.queue), b.max)
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.waiting.Store(int64(len(b.queue)))
	b.running++
	return batch
}

// work is one worker: whenever woken, run batches until the queue is
// empty (or the other statements in flight leave it no room).
func (b *batcher[In, Out]) work() {
	for {
		select {
		case <-b.kick:
		case <-b.quit:
			return
		}
		for batch := b.take(); batch != nil; batch = b.take() {
			b.runCounted(batch)
			b.finished()
		}
	}
}

func (b *batcher[In, Out]) runCounted(batch []*call[In, Out]) {
	b.batches.Add(1)
	b.calls.Add(int64(len(batch)))
	b.run(batch)
}

// run executes one batch and answers every call in it. If the statement
// fails as a whole, each call is tried on its own, so that one call the
// database refuses cannot fail the others (and an outage fails each one
// fast, with its own error).
func (b *batcher[In, Out]) run(batch []*call[In, Out]) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = classify(b.what, err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	err := b.execBounded(live)
	// A statement the database refused was rolled back as a whole: each
	// call is tried on its own. When the database is out of reach the
	// statement's fate is unknown, and every call answers UNAVAILABLE, as
	// a single statement would.
	if err != nil && len(live) > 1 && opjournal.ErrorCode(err) != opjournal.CodeUnavailable {
		var zero Out
		for _, c := range live {
			c.out, c.ok = zero, false // nothing of the failed statement holds
			c.err = b.execBounded([]*call[In, Out]{c})
		}
	} else {
		for _, c := range live {
			c.err = err
		}
	}
	for _, c := range live {
		if c.err != nil {
			c.ok = false
		}
		close(c.done)
	}
}

func (b *batcher[In, Out]) execBounded(calls []*call[In, Out]) error {
	// Not any one caller's context: a caller giving up must not cancel
	// the others' statement.
	ctx, cancel := b.bound(context.Background())
	defer cancel()
	err := b.exec(ctx, calls)
	var oe *opjournal.Error
	if err != nil && !errors.As(err, &oe) {
		err = classify(b.what, err)
	}
	return err
}

// close refuses new calls, answers the waiting ones, and stops the
// workers. Closing twice is harmless.
func (b *batcher[In, Out]) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	for batch := b.drain(); batch != nil; batch = b.drain() {
		b.runCounted(batch)
	}
	close(b.quit)
	b.wg.Wait()
}

// drain takes the next batch regardless of the statements in flight (the
// store is closing).
func (b *batcher[In, Out]) drain() []*call[In, Out] {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.queue), b.max)
	if n == 0 {
		return nil
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.waiting.Store(int64(len(b.queue)))
	return batch
}

// firstPerKey returns the indexes of the calls whose key has not appeared
// earlier in the batch: a statement may touch a row once, and the later
// calls for the same key take the one-call path after it.
func firstPerKey[In, Out any](calls []*call[In, Out], key func(In) [2]string) []int {
	seen := make(map[[2]string]bool, len(calls))
	idx := make([]int, 0, len(calls))
	for i, c := range calls {
		k := key(c.in)
		if !seen[k] {
			seen[k] = true
			idx = append(idx, i)
		}
	}
	return idx
}
