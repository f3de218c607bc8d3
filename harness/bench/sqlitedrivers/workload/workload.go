// Package workload is the embedded store's write path reduced to its SQL:
// the statements store/sqlite issues for the fused cycle (register with
// claim, then mark succeeded), in IMMEDIATE transactions grouped the way
// its committer groups them, on a schema made from store/migrations/sqlite. Each
// driver package beside it (moderncsql, mattnsql, ncrucessql, zombiezen)
// runs this workload through one SQLite driver, so that the drivers can be
// measured side by side on exactly the work the store gives them.
//
// What the store does in Go around these statements (protocol.Apply,
// JSON, building answers) is left out: it is the same whatever the driver.
package workload

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/opjournal/opjournal/store/migrations"
)

// Schema returns the SQLite migrations' up scripts in order, as one
// script: the schema the store runs on, without golang-migrate's own
// bookkeeping table. It fails only if the embedded files cannot be read.
func Schema() (string, error) {
	names, err := fs.Glob(migrations.SQLite, "sqlite/*.up.sql")
	if err != nil {
		return "", err
	}
	slices.Sort(names) // NNNNNN_ prefixes: lexical order is migration order
	var b strings.Builder
	for _, n := range names {
		s, err := fs.ReadFile(migrations.SQLite, n)
		if err != nil {
			return "", err
		}
		b.Write(s)
		b.WriteString("\n")
	}
	return b.String(), nil
}

// Tx is one open write transaction of a driver.
type Tx interface {
	// Exec runs a statement (by its text, prepared once per connection).
	Exec(query string, args ...any) error
	// QueryRow runs a query expected to return at most one row and scans
	// it into dest (*string, *int64, *int, *sql.NullString,
	// *sql.NullInt64). found is false when there is no row.
	QueryRow(query string, args []any, dest ...any) (found bool, err error)
}

// DB is one driver's database, opened with the store's settings (WAL,
// synchronous FULL, busy_timeout, foreign keys, IMMEDIATE transactions).
type DB interface {
	// Begin starts an IMMEDIATE transaction.
	Begin() (Tx, error)
	// Commit commits tx; Rollback abandons it.
	Commit(tx Tx) error
	Rollback(tx Tx) error
	// Close closes the database.
	Close() error
}

// row holds what the store's scanOp scans, with the same Go types, so
// that each driver converts the same values.
type row struct {
	payload, result, refs, approval                                        sql.NullString
	note                                                                   string
	tenant, key, action, hash, status, owner, extID, dups, errCode, reason string
	hashKey, parent                                                        string
	attempts, dupReports, checks                                           int
	leaseUntil, unknownSince, lastCheck, nextCheck, attStart, firstAttempt sql.NullInt64
	deadline                                                               sql.NullInt64
	needsReview                                                            int
	createdAt, updatedAt, dbNow                                            int64
}

func (r *row) dest() []any {
	return []any{&r.payload, &r.result, &r.note, &r.tenant, &r.key, &r.action, &r.hash, &r.status,
		&r.attempts, &r.owner, &r.leaseUntil, &r.extID, &r.dups, &r.dupReports,
		&r.errCode, &r.needsReview, &r.reason, &r.createdAt, &r.updatedAt,
		&r.unknownSince, &r.checks, &r.lastCheck, &r.nextCheck, &r.attStart, &r.hashKey,
		&r.refs, &r.parent, &r.firstAttempt, &r.approval, &r.deadline, &r.dbNow}
}

// Payload is the benchmarks' payload, the one store/sqlite's BenchmarkFused
// registers.
const Payload = `{"amount_minor":490000,"currency":"RUB","order_id":"817"}`

// Register is the store's Register with a claim, of a new key: read the
// row (none), read the clock, insert the row in progress, write its event.
func Register(tx Tx, key string) error {
	var r row
	found, err := tx.QueryRow(GetSQL, []any{nil, "", key}, r.dest()...)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if found {
		return fmt.Errorf("register %s: the key exists", key)
	}
	var now int64
	if _, err := tx.QueryRow(ClockSQL, []any{nil}, &now); err != nil {
		return fmt.Errorf("clock: %w", err)
	}
	lease := now + 30_000
	// The arguments as store.write builds them: ?1 the clock, then the
	// row's fields, then the fields fixed at registration.
	if err := tx.Exec(InsertSQL, nil, "", key, "in_progress", 1, "w", lease, nil, nil, nil, 0, nil,
		nil, 0, nil, nil, now, "[]", 0, now, now, nil, nil, nil,
		"create_payment", "h", "", Payload, now, nil, nil); err != nil {
		return fmt.Errorf("insert %s: %w", key, err)
	}
	if err := tx.Exec(InsertEventSQL, "", key, now, "", "in_progress", 1, "w", "", "claimed", ""); err != nil {
		return fmt.Errorf("event %s: %w", key, err)
	}
	return nil
}

// MarkSucceeded is the store's MarkSucceeded of the current attempt: read
// the row (all 31 columns), update every field, write the event.
func MarkSucceeded(tx Tx, key string) error {
	var r row
	found, err := tx.QueryRow(GetSQL, []any{nil, "", key}, r.dest()...)
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	if !found || r.status != "in_progress" || r.attempts != 1 || r.payload.String != Payload {
		return fmt.Errorf("mark %s: found %v, status %q, attempt %d", key, found, r.status, r.attempts)
	}
	now := r.dbNow
	if err := tx.Exec(UpdateSQL, nil, "", key, "succeeded", r.attempts, nil, nil, "x", `{"ok":true}`, nil, 0, nil,
		nil, r.checks, nil, nil, r.attStart.Int64, r.dups, r.dupReports, now, r.firstAttempt.Int64, nil, nil, nil); err != nil {
		return fmt.Errorf("update %s: %w", key, err)
	}
	if err := tx.Exec(InsertEventSQL, "", key, now, "in_progress", "succeeded", 1, "w", "", "succeeded", "x"); err != nil {
		return fmt.Errorf("event %s: %w", key, err)
	}
	return nil
}

// maxGroup is store/sqlite's cap on the calls in one transaction.
const maxGroup = 64

// Committer runs write transactions the way store/sqlite's committer
// does: a caller that finds it idle runs its own transaction at once;
// callers that arrive meanwhile queue, and the next transaction carries
// up to maxGroup of them, each in its own SAVEPOINT, with one COMMIT.
// (The store hands queued groups to a worker goroutine; here the caller
// that found it idle keeps running them. The SQL is the same.)
type Committer struct {
	DB      DB
	mu      sync.Mutex
	pending []*call
	running bool
}

type call struct {
	fn   func(Tx) error
	err  error
	done chan struct{}
}

// Do runs fn in a write transaction, possibly shared with other calls,
// and returns once it committed, or fn's or the transaction's error.
func (c *Committer) Do(fn func(Tx) error) error {
	cl := &call{fn: fn, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, cl)
	if c.running {
		c.mu.Unlock()
		<-cl.done
		return cl.err
	}
	c.running = true
	for len(c.pending) > 0 {
		n := min(len(c.pending), maxGroup)
		group := slices.Clone(c.pending[:n])
		c.pending = slices.Delete(c.pending, 0, n)
		c.mu.Unlock()
		c.run(group)
		c.mu.Lock()
	}
	c.running = false
	c.mu.Unlock()
	<-cl.done
	return cl.err
}

func (c *Committer) run(group []*call) {
	defer func() {
		for _, cl := range group {
			close(cl.done)
		}
	}()
	fail := func(err error) {
		for _, cl := range group {
			if cl.err == nil {
				cl.err = err
			}
		}
	}
	tx, err := c.DB.Begin()
	if err != nil {
		fail(err)
		return
	}
	if len(group) == 1 {
		if group[0].err = group[0].fn(tx); group[0].err != nil {
			c.DB.Rollback(tx) //nolint:errcheck // the call's error is the answer
			return
		}
	} else {
		for i, cl := range group {
			if err := inSavepoint(tx, i, cl); err != nil {
				c.DB.Rollback(tx) //nolint:errcheck // err is the answer
				fail(err)
				return
			}
		}
	}
	if err := c.DB.Commit(tx); err != nil {
		fail(err)
	}
}

// savepoints are the statements' texts, built once as the store's
// fmt.Sprintf builds them per call.
var savepoints = func() (sp [maxGroup][3]string) {
	for i := range sp {
		name := fmt.Sprintf("call%d", i)
		sp[i] = [3]string{"SAVEPOINT " + name, "ROLLBACK TO " + name, "RELEASE " + name}
	}
	return sp
}()

func inSavepoint(tx Tx, i int, cl *call) error {
	sp := savepoints[i]
	if err := tx.Exec(sp[0]); err != nil {
		return err
	}
	if cl.err = cl.fn(tx); cl.err != nil {
		if err := tx.Exec(sp[1]); err != nil {
			return err
		}
	}
	return tx.Exec(sp[2])
}

// ErrUnsupported is returned by a driver adapter for a destination type
// outside the set Tx.QueryRow documents.
var ErrUnsupported = errors.New("workload: unsupported scan destination")
