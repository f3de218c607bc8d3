package sqlite

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/groupq"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/store"
)

// Group commit for the embedded store.
//
// SQLite has one writer, and with synchronous=FULL every commit waits for
// an fsync. So the write transactions of this process go through one
// committer: a call that finds it idle runs its own transaction at once
// (a lone caller is never delayed); calls that arrive meanwhile queue, in
// arrival order, and the next transaction carries all of them (up to
// maxGroup), each inside its own SAVEPOINT, with one COMMIT and one fsync
// for the lot. A call whose function fails is rolled back to its
// savepoint: it changes nothing, exactly as its own transaction would
// have, and the others commit. Every caller is answered after the commit.
// Writers in other processes still meet SQLite's busy_timeout.

// maxGroup caps the calls in one transaction.
const maxGroup = 64

// txFunc is one call's work inside a write transaction. ctx is the
// transaction's, not the caller's: a caller that gives up must not
// interrupt the others' statements on the shared connection.
type txFunc func(ctx context.Context, tx *wtx) error

// txCall is one caller's transaction waiting in the committer.
type txCall struct {
	ctx  context.Context // the caller's; skipped if done before it starts
	what string
	fn   txFunc
	err  error
	done chan struct{}
}

// committer runs the process's write transactions (see above); its queue
// (internal/groupq, one transaction at a time) decides which calls share
// one.
type committer struct {
	w *writer // the write connection (writer.go)
	q *groupq.Queue[*txCall]
}

func newCommitter(w *writer) *committer {
	c := &committer{w: w}
	c.q = groupq.New(1, maxGroup, c.run)
	return c
}

// do runs fn in a write transaction, possibly shared with other calls,
// and returns once that transaction committed (or fn's error).
func (c *committer) do(ctx context.Context, what string, fn txFunc) error {
	if err := ctx.Err(); err != nil {
		return classify(what, err)
	}
	call := &txCall{ctx: ctx, what: what, fn: fn, done: make(chan struct{})}
	if c.q.TryAlone() {
		c.run([]*txCall{call})
		c.q.Finished()
		return call.err
	}
	if !c.q.Add(call) {
		return classify(what, errClosed)
	}
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		// fn may still run and commit; like a statement cut short, the
		// answer is UNAVAILABLE and a retry (idempotent by key, fenced by
		// attempt) finds out.
		return classify(what, ctx.Err())
	}
}

// stat reports the committer's counters: transactions run, calls carried,
// calls waiting.
func (c *committer) stat() store.BatchStat {
	groups, calls, waiting := c.q.Stats()
	return store.BatchStat{Kind: "write", Statements: groups, Calls: calls, Waiting: waiting}
}

// run executes one group in one IMMEDIATE transaction and answers every
// call in it.
func (c *committer) run(group []*txCall) {
	ctx := context.Background()
	var txErr error // the transaction's own failure, for its span
	defer func() {
		for _, call := range group {
			close(call.done)
		}
	}()
	if tracing.Enabled() {
		// One span for the transaction: a child of the first call's,
		// linked to the others' (tracing.StartBatch),
		// ended before the callers are answered.
		var span trace.Span
		ctx, span = tracing.StartBatch(ctx, "sqlite", groupWhat(group), callContexts(group))
		defer func() { tracing.EndStore(span, txErr, string(opjournal.CodeUnavailable)) }()
	}
	tx, err := c.w.begin()
	if err != nil {
		txErr = err
		for _, call := range group {
			call.err = classify(call.what, err)
		}
		return
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	live := 0
	for i, call := range group {
		if err := call.ctx.Err(); err != nil {
			call.err = classify(call.what, err)
			continue
		}
		live++
		if len(group) == 1 {
			call.err = call.fn(ctx, tx)
			continue
		}
		if err := c.inSavepoint(ctx, tx, i, call); err != nil {
			txErr = err
			// The transaction itself failed: none of it will commit.
			for _, other := range group {
				if other.err == nil {
					other.err = classify(other.what, err)
				}
			}
			return
		}
	}
	if live == 0 || (len(group) == 1 && group[0].err != nil) {
		return // nothing to keep: the deferred rollback ends it
	}
	if err := tx.Commit(); err != nil {
		txErr = err
		for _, call := range group {
			if call.err == nil {
				call.err = classify(call.what, err)
			}
		}
	}
}

// inSavepoint runs one call of a group inside its own savepoint, undoing
// the call's changes if it fails (call.err). It returns an error only when
// the transaction itself is broken.
func (c *committer) inSavepoint(ctx context.Context, tx *wtx, i int, call *txCall) error {
	sp := savepoints[i]
	if _, err := tx.ExecContext(ctx, sp.begin); err != nil {
		return err
	}
	if call.err = call.fn(ctx, tx); call.err != nil {
		if _, err := tx.ExecContext(ctx, sp.undo); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, sp.release)
	return err
}

// savepoints are the statements of each position in a group, built once
// (their texts are fixed, so the writer prepares each once).
var savepoints = func() (sp [maxGroup]struct{ begin, undo, release string }) {
	for i := range sp {
		name := fmt.Sprintf("call%d", i)
		sp[i].begin, sp[i].undo, sp[i].release = "SAVEPOINT "+name, "ROLLBACK TO "+name, "RELEASE "+name
	}
	return sp
}()

// close refuses new calls, lets the worker finish the queue, and answers
// anything left UNAVAILABLE. A transaction already running finishes.
func (c *committer) close() {
	for _, call := range c.q.Close() {
		call.err = classify(call.what, errClosed)
		close(call.done)
	}
}

// errClosed is the cause for calls made after Close.
var errClosed = errors.New("the store is closed")

// groupWhat names a group's transaction for its span: its calls' kind
// ("register") when they are all of one, else "write".
func groupWhat(group []*txCall) string {
	what := group[0].what
	for _, c := range group[1:] {
		if c.what != what {
			return "write"
		}
	}
	return what
}

func callContexts(group []*txCall) []context.Context {
	out := make([]context.Context, len(group))
	for i, c := range group {
		out[i] = c.ctx
	}
	return out
}
