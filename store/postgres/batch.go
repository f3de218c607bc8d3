package postgres

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/groupq"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/store"
)

// Group commit for the hot path.
//
// Every journal call is a statement and a commit, and at high concurrency
// the database spends most of its time on what each statement costs
// regardless of its size: the round trip, executor start-up, the commit and
// its WAL flush. So the calls an agent makes once per operation (Register,
// Claim, MarkSucceeded) go through a batcher. A call that finds its kind
// idle runs its own one-row statement at once: a lone caller is never
// delayed. Calls that arrive while a statement runs queue up, and the next
// statement takes all of them (never waiting for more) and applies them in
// ONE statement over arrays (unnest), whose rows are matched back to the
// calls. Under load the batches grow by themselves.
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

// batcher runs calls of one kind in batches (see above): its queue
// (internal/groupq) decides when a call runs alone and which calls share a
// statement; the batcher runs the statements.
type batcher[In, Out any] struct {
	what string // for errors: "register", "claim", …
	rule string // the rules its statement applies, for its span
	// exec applies the calls in one statement, setting out and ok on each
	// call it applied. An error means the statement as a whole failed
	// (nothing of it was committed).
	exec func(ctx context.Context, calls []*call[In, Out]) error
	// bound limits one statement (the store's statement timeout).
	bound func(context.Context) (context.Context, context.CancelFunc)
	q     *groupq.Queue[*call[In, Out]]
}

// errClosed answers calls made after Close.
var errClosed = opjournal.Errorf(opjournal.CodeUnavailable, "", "the store is closed")

func newBatcher[In, Out any](what, rule string, workers, max int, bound func(context.Context) (context.Context, context.CancelFunc),
	exec func(context.Context, []*call[In, Out]) error) *batcher[In, Out] {
	b := &batcher[In, Out]{what: what, rule: rule, exec: exec, bound: bound}
	b.q = groupq.New(workers, max, b.run)
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
	if !b.q.Add(c) {
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

// tryAlone reserves a statement for the caller if the batcher is idle (no
// statement of its kind in flight, nobody waiting). The caller then runs
// its one-call path in its own goroutine, which for one call is cheaper
// than the batched statement and pays no hand-off, and calls finished.
func (b *batcher[In, Out]) tryAlone() bool { return b.q.TryAlone() }

// finished ends a tryAlone statement.
func (b *batcher[In, Out]) finished() { b.q.Finished() }

// stat reports the batcher's counters.
func (b *batcher[In, Out]) stat(kind string) store.BatchStat {
	statements, calls, waiting := b.q.Stats()
	return store.BatchStat{Kind: kind, Statements: statements, Calls: calls, Waiting: waiting}
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
	var span trace.Span
	if tracing.Enabled() {
		// One span for the statement: a child of the first call's, linked
		// to the others' (tracing.StartBatch).
		ctxs := make([]context.Context, len(calls))
		for i, c := range calls {
			ctxs[i] = c.ctx
		}
		ctx, span = tracing.StartBatch(ctx, "postgresql", b.what, ctxs)
		span.SetAttributes(tracing.KeyRule.String(b.rule))
	}
	err := b.exec(ctx, calls)
	var oe *opjournal.Error
	if err != nil && !errors.As(err, &oe) {
		err = classify(b.what, err)
	}
	if span != nil {
		tracing.EndStore(span, err, string(opjournal.ErrorCode(err)))
	}
	return err
}

// close refuses new calls, stops the workers and runs the calls still
// waiting. Closing twice is harmless.
func (b *batcher[In, Out]) close() {
	pending := b.q.Close()
	for len(pending) > 0 {
		n := min(len(pending), defaultBatchSize)
		b.run(pending[:n])
		pending = pending[n:]
	}
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
