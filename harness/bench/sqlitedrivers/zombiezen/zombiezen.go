// Package zombiezen runs the workload on zombiezen.com/go/sqlite: the same
// modernc.org/sqlite engine, called directly (no database/sql) on one
// connection opened without SQLite's per-call mutex (SQLITE_OPEN_NOMUTEX;
// the committer runs one transaction at a time). Against moderncsql it
// shows what database/sql and modernc's driver layer cost.
package zombiezen

import (
	"database/sql"
	"fmt"
	"sync"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/opjournal/opjournal/harness/bench/sqlitedrivers/workload"
)

// DB is one connection; mu keeps it to one goroutine at a time (a
// zombiezen Conn is not safe for concurrent use).
type DB struct {
	mu   sync.Mutex
	conn *sqlite.Conn
}

// Open opens path with the store's settings and applies the schema. It
// returns an error naming the step that failed.
func Open(path string) (workload.DB, error) {
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite|sqlite.OpenCreate|sqlite.OpenURI)
	if err != nil {
		return nil, fmt.Errorf("zombiezen: open: %w", err)
	}
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL",
		"PRAGMA busy_timeout = 30000", "PRAGMA foreign_keys = 1"} {
		if err := sqlitex.ExecuteTransient(conn, p, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zombiezen: %s: %w", p, err)
		}
	}
	schema, err := workload.Schema()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := sqlitex.ExecScript(conn, schema); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zombiezen: schema: %w", err)
	}
	return &DB{conn: conn}, nil
}

type tx struct{ conn *sqlite.Conn }

// Begin locks the connection and starts an IMMEDIATE transaction.
func (d *DB) Begin() (workload.Tx, error) {
	d.mu.Lock()
	t := &tx{conn: d.conn}
	if err := t.Exec("BEGIN IMMEDIATE"); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	return t, nil
}

// Commit commits and unlocks the connection.
func (d *DB) Commit(t workload.Tx) error {
	defer d.mu.Unlock()
	if err := t.Exec("COMMIT"); err != nil {
		t.Exec("ROLLBACK") //nolint:errcheck // the commit's error is the answer
		return err
	}
	return nil
}

// Rollback abandons the transaction and unlocks the connection.
func (d *DB) Rollback(t workload.Tx) error {
	defer d.mu.Unlock()
	return t.Exec("ROLLBACK")
}

// Close closes the connection (its cached statements first).
func (d *DB) Close() error { return d.conn.Close() }

func (t *tx) bind(query string, args []any) (*sqlite.Stmt, error) {
	st, err := t.conn.Prepare(query) // cached by text
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			st.BindNull(i + 1)
		case int:
			st.BindInt64(i+1, int64(v))
		case int64:
			st.BindInt64(i+1, v)
		case string:
			st.BindText(i+1, v)
		default:
			st.Reset()         //nolint:errcheck // returning the bind error
			st.ClearBindings() //nolint:errcheck
			return nil, fmt.Errorf("zombiezen: cannot bind %T", a)
		}
	}
	return st, nil
}

func (t *tx) done(st *sqlite.Stmt, err error) error {
	if rerr := st.Reset(); err == nil {
		err = rerr
	}
	st.ClearBindings() //nolint:errcheck // Reset reported the statement's error
	return err
}

func (t *tx) Exec(query string, args ...any) error {
	st, err := t.bind(query, args)
	if err != nil {
		return err
	}
	_, err = st.Step()
	return t.done(st, err)
}

func (t *tx) QueryRow(query string, args []any, dest ...any) (bool, error) {
	st, err := t.bind(query, args)
	if err != nil {
		return false, err
	}
	found, err := st.Step()
	if err != nil || !found {
		return false, t.done(st, err)
	}
	for i, d := range dest {
		null := st.ColumnType(i) == sqlite.TypeNull
		switch d := d.(type) {
		case *string:
			*d = st.ColumnText(i)
		case *int64:
			*d = st.ColumnInt64(i)
		case *int:
			*d = int(st.ColumnInt64(i))
		case *sql.NullString:
			*d = sql.NullString{String: st.ColumnText(i), Valid: !null}
		case *sql.NullInt64:
			*d = sql.NullInt64{Int64: st.ColumnInt64(i), Valid: !null}
		default:
			return false, t.done(st, fmt.Errorf("%w: %T", workload.ErrUnsupported, d))
		}
	}
	return true, t.done(st, nil)
}
