package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	zsqlite "zombiezen.com/go/sqlite"
)

// The write path's connection.
//
// Every write transaction runs on one connection (groupcommit.go), so the
// store keeps one for them, opened through zombiezen.com/go/sqlite: the
// same SQLite (modernc.org/sqlite's translation, pure Go) as the read
// pool, called directly instead of through database/sql and modernc's
// database/sql driver. harness/bench/SQLITE.md measured why: on the fused cycle's
// statements that layer (per-call mutexes, C-heap copies of every
// argument, column names read on every query, database/sql's per-call
// bookkeeping) cost more CPU than SQLite's own work, and this path does
// the same statements in less than half the CPU. Reads stay on the pool:
// they run beside the writer under WAL.

// writer is the write connection. mu is held for a whole transaction:
// the committer runs one at a time, and Close waits for it.
type writer struct {
	mu   sync.Mutex
	conn *zsqlite.Conn // nil once closed
}

// openWriter opens path's write connection with the store's settings
// (see dsn). It returns an error naming the path and the step.
func openWriter(path string) (*writer, error) {
	// OpenNoMutex (which OpenConn adds): the connection is used by one
	// goroutine at a time (mu), so SQLite's own per-call mutex is waste.
	conn, err := zsqlite.OpenConn(path, zsqlite.OpenReadWrite)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s for writing: %w", path, err)
	}
	w := &writer{conn: conn}
	// As in dsn: WAL (set by the file already; kept for a file made
	// elsewhere), every commit fsynced, foreign keys enforced.
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", "PRAGMA foreign_keys = 1"} {
		if err := w.run(p, nil, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("sqlite: open %s for writing: %s: %w", path, p, err)
		}
	}
	// A writer in another process makes this one wait, as busy_timeout
	// does for the pool.
	conn.SetBusyTimeout(30 * time.Second)
	return w, nil
}

// close closes the connection once no transaction runs.
func (w *writer) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return nil
	}
	err := w.conn.Close()
	w.conn = nil
	return err
}

// wtx is one write transaction on the writer (its mu held).
type wtx struct {
	w    *writer
	done bool
}

// begin locks the writer and starts an IMMEDIATE transaction: the write
// lock is taken at BEGIN (see dsn for why).
func (w *writer) begin() (*wtx, error) {
	w.mu.Lock()
	if w.conn == nil {
		w.mu.Unlock()
		return nil, errClosed
	}
	if err := w.run("BEGIN IMMEDIATE", nil, nil); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	return &wtx{w: w}, nil
}

// Commit commits the transaction, or rolls it back if COMMIT fails (a
// failed COMMIT can leave it open), and unlocks the writer.
func (t *wtx) Commit() error {
	if t.done {
		return errors.New("sqlite: transaction already ended")
	}
	t.done = true
	defer t.w.mu.Unlock()
	if err := t.w.run("COMMIT", nil, nil); err != nil {
		if !t.w.conn.AutocommitEnabled() {
			t.w.run("ROLLBACK", nil, nil) //nolint:errcheck // the commit's error is the answer
		}
		return err
	}
	return nil
}

// Rollback abandons the transaction and unlocks the writer; after Commit
// it does nothing.
func (t *wtx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.w.mu.Unlock()
	if t.w.conn.AutocommitEnabled() {
		return nil // SQLite ended it already (a failed statement can)
	}
	return t.w.run("ROLLBACK", nil, nil)
}

// changes is what an Exec reports: the rows it changed.
type changes int64

// RowsAffected returns the rows changed.
func (c changes) RowsAffected() (int64, error) { return int64(c), nil }

// LastInsertId is not tracked.
func (c changes) LastInsertId() (int64, error) {
	return 0, errors.New("sqlite: LastInsertId not tracked")
}

// ExecContext runs a statement in the transaction. The context is not
// consulted: a transaction's statements run to their end (groupcommit.go
// explains why the callers' contexts must not interrupt them); the
// parameter keeps database/sql's shape for the store's write functions.
func (t *wtx) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.w.run(query, args, nil); err != nil {
		return nil, err
	}
	return changes(t.w.conn.Changes()), nil
}

// QueryRowContext runs a query for at most one row, scanned by the
// returned row's Scan (sql.ErrNoRows when there is none).
func (t *wtx) QueryRowContext(_ context.Context, query string, args ...any) *wrow {
	r := &wrow{err: sql.ErrNoRows}
	if err := t.w.run(query, args, func(st *zsqlite.Stmt) (bool, error) {
		r.err = nil
		r.vals = snapshot(st)
		return false, nil
	}); err != nil {
		r.err = err
	}
	return r
}

// QueryContext runs a query and calls each for every row (each returns
// false to stop early).
func (t *wtx) QueryContext(query string, args []any, each func(r rowScanner) (bool, error)) error {
	return t.w.run(query, args, func(st *zsqlite.Stmt) (bool, error) {
		return each(&wrow{vals: snapshot(st)})
	})
}

// run prepares query (once: the connection caches statements by text,
// and the write path's texts are fixed), binds args (?1 is args[0]),
// steps it to its end, giving each row to row if set, and resets it.
func (w *writer) run(query string, args []any, row func(*zsqlite.Stmt) (bool, error)) (err error) {
	st, err := w.conn.Prepare(query)
	if err != nil {
		return err
	}
	defer func() {
		// Reset reports the step's error again; keep the first.
		if rerr := st.Reset(); err == nil {
			err = rerr
		}
		if cerr := st.ClearBindings(); err == nil {
			err = cerr
		}
	}()
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			st.BindNull(i + 1)
		case string:
			st.BindText(i+1, v)
		case int:
			st.BindInt64(i+1, int64(v))
		case int64:
			st.BindInt64(i+1, v)
		case []byte:
			st.BindBytes(i+1, v)
		default:
			return fmt.Errorf("sqlite: cannot bind argument %d of type %T", i+1, a)
		}
	}
	for {
		more, err := st.Step()
		if err != nil || !more {
			return err
		}
		if row == nil {
			continue
		}
		if next, err := row(st); err != nil || !next {
			return err
		}
	}
}

// value is one column of a row, copied out of the statement.
type value struct {
	typ zsqlite.ColumnType
	i   int64
	s   string
}

func snapshot(st *zsqlite.Stmt) []value {
	vals := make([]value, st.ColumnCount())
	for i := range vals {
		v := value{typ: st.ColumnType(i)}
		switch v.typ {
		case zsqlite.TypeInteger:
			v.i = st.ColumnInt64(i)
		case zsqlite.TypeText, zsqlite.TypeBlob:
			v.s = st.ColumnText(i)
		case zsqlite.TypeFloat:
			v.s = fmt.Sprint(st.ColumnFloat(i))
		}
		vals[i] = v
	}
	return vals
}

// wrow is one row read on the writer.
type wrow struct {
	vals []value
	err  error
}

// Scan copies the row into dest with database/sql's rules for the types
// the store scans (*string, *int, *int64, *bool, *sql.NullString,
// *sql.NullInt64): NULL only into the Null types, integers only from
// INTEGER columns. It returns sql.ErrNoRows when there was no row.
func (r *wrow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite: scan: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, d := range dest {
		v := r.vals[i]
		null := v.typ == zsqlite.TypeNull
		isInt := v.typ == zsqlite.TypeInteger
		ok := true
		switch d := d.(type) {
		case *string:
			ok = !null && !isInt
			*d = v.s
		case *int:
			ok = isInt
			*d = int(v.i)
		case *int64:
			ok = isInt
			*d = v.i
		case *bool:
			ok = isInt
			*d = v.i != 0
		case *sql.NullString:
			ok = !isInt
			*d = sql.NullString{String: v.s, Valid: !null}
		case *sql.NullInt64:
			ok = null || isInt
			*d = sql.NullInt64{Int64: v.i, Valid: !null}
		default:
			return fmt.Errorf("sqlite: scan column %d: unsupported destination %T", i, d)
		}
		if !ok {
			return fmt.Errorf("sqlite: scan column %d: cannot store %s in %T", i, v.typ, d)
		}
	}
	return nil
}
