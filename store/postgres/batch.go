package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/opjournal/opjournal"
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
	ctx  context.Context // the caller's; a call whose caller gave up is skipped
	in   In
	out  Out  // set by exec when applied
	ok   bool // exec applied the call (its row came back)
	err  error
	done chan struct{}
}

// batcher runs calls of one kind in batches (see above).
type batcher[In, Out any] struct {
	what  string // for errors: "register", "claim", …
	queue chan *call[In, Out]
	max   int
	// exec applies the calls in one statement, setting out and ok on each
	// call it applied. An error means the statement as a whole failed
	// (nothing of it was committed).
	exec func(ctx context.Context, calls []*call[In, Out]) error
	// bound limits one statement (the store's statement timeout).
	bound func(context.Context) (context.Context, context.CancelFunc)
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	// waiting counts calls handed to do and not yet taken by a worker;
	// batches and calls count what the workers ran.
	waiting, batches, calls atomic.Int64
}

// errClosed answers calls made after Close.
var errClosed = opjournal.Errorf(opjournal.CodeUnavailable, "", "the store is closed")

func newBatcher[In, Out any](what string, workers, max int, bound func(context.Context) (context.Context, context.CancelFunc),
	exec func(context.Context, []*call[In, Out]) error) *batcher[In, Out] {
	b := &batcher[In, Out]{what: what, queue: make(chan *call[In, Out]), max: max, exec: exec, bound: bound, quit: make(chan struct{})}
	for range workers {
		b.wg.Go(b.work)
	}
	return b
}

// do runs one call and returns what exec set. ok is false when the call's
// row did not apply; the caller then takes its one-call path.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (out Out, ok bool, err error) {
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.waiting.Add(1)
	select {
	case b.queue <- c:
	case <-ctx.Done():
		b.waiting.Add(-1)
		return out, false, classify(b.what, ctx.Err())
	case <-b.quit:
		b.waiting.Add(-1)
		return out, false, errClosed
	}
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

// work is one worker: take a call, add every call already waiting (up to
// max), run them as one statement, answer them.
func (b *batcher[In, Out]) work() {
	batch := make([]*call[In, Out], 0, b.max)
	for {
		batch = batch[:0]
		select {
		case c := <-b.queue:
			b.waiting.Add(-1)
			batch = append(batch, c)
		case <-b.quit:
			return
		}
	fill:
		for len(batch) < b.max {
			select {
			case c := <-b.queue:
				b.waiting.Add(-1)
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.batches.Add(1)
		b.calls.Add(int64(len(batch)))
		b.run(batch)
	}
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
		for _, c := range live {
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

// close stops the workers once their current batch is answered. Closing
// twice is harmless.
func (b *batcher[In, Out]) close() {
	b.once.Do(func() { close(b.quit) })
	b.wg.Wait()
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
