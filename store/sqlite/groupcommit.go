package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

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
type txFunc func(ctx context.Context, tx *sql.Tx) error

// txCall is one caller's transaction waiting in the committer.
type txCall struct {
	ctx  context.Context // the caller's; skipped if done before it starts
	what string
	fn   txFunc
	err  error
	done chan struct{}
}

// committer runs the process's write transactions (see above).
type committer struct {
	db     *sql.DB
	mu     sync.Mutex
	queue  []*txCall
	busy   bool // a transaction is running
	closed bool
	kick   chan struct{}
	quit   chan struct{}
	wg     sync.WaitGroup
	// groups and calls count transactions and the calls they carried.
	groups, calls int64
}

func newCommitter(db *sql.DB) *committer {
	c := &committer{db: db, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	c.wg.Go(c.work)
	return c
}

// do runs fn in a write transaction, possibly shared with other calls,
// and returns once that transaction committed (or fn's error).
func (c *committer) do(ctx context.Context, what string, fn txFunc) error {
	if err := ctx.Err(); err != nil {
		return classify(what, err)
	}
	call := &txCall{ctx: ctx, what: what, fn: fn, done: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return classify(what, errClosed)
	}
	if !c.busy && len(c.queue) == 0 {
		c.busy = true
		c.mu.Unlock()
		c.run([]*txCall{call})
		c.finished()
		return call.err
	}
	c.queue = append(c.queue, call)
	c.mu.Unlock()
	c.wake()
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
	c.mu.Lock()
	defer c.mu.Unlock()
	return store.BatchStat{Kind: "write", Statements: c.groups, Calls: c.calls, Waiting: int64(len(c.queue))}
}

func (c *committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// finished ends a transaction and wakes the worker for what queued.
func (c *committer) finished() {
	c.mu.Lock()
	c.busy = false
	more := len(c.queue) > 0
	c.mu.Unlock()
	if more {
		c.wake()
	}
}

// take removes the next group from the queue, or returns nil when there is
// none or a transaction is running.
func (c *committer) take() []*txCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy || len(c.queue) == 0 {
		return nil
	}
	n := min(len(c.queue), maxGroup)
	group := append([]*txCall(nil), c.queue[:n]...)
	c.queue = append(c.queue[:0], c.queue[n:]...)
	c.busy = true
	return group
}

func (c *committer) work() {
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
		for group := c.take(); group != nil; group = c.take() {
			c.run(group)
			c.finished()
		}
	}
}

// run executes one group in one IMMEDIATE transaction and answers every
// call in it.
func (c *committer) run(group []*txCall) {
	c.mu.Lock()
	c.groups++
	c.calls += int64(len(group))
	c.mu.Unlock()
	defer func() {
		for _, call := range group {
			close(call.done)
		}
	}()
	ctx := context.Background()
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
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
func (c *committer) inSavepoint(ctx context.Context, tx *sql.Tx, i int, call *txCall) error {
	sp := fmt.Sprintf("call%d", i)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return err
	}
	if call.err = call.fn(ctx, tx); call.err != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO "+sp); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, "RELEASE "+sp)
	return err
}

// close refuses new calls, answers the queued ones UNAVAILABLE (the
// server drains its calls before closing the store, so there are none in
// an orderly shutdown) and stops the worker. A transaction already
// running finishes.
func (c *committer) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	pending := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, call := range pending {
		call.err = classify(call.what, errClosed)
		close(call.done)
	}
	close(c.quit)
	c.wg.Wait()
}

// errClosed is the cause for calls made after Close.
var errClosed = errors.New("the store is closed")
