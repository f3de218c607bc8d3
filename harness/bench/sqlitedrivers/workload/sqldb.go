package workload

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// SQLDB runs the workload through database/sql, as store/sqlite does: a
// pool, IMMEDIATE transactions (the driver's DSN says so), and each
// statement prepared once on the pool and bound to the transaction with
// Tx.StmtContext (store/sqlite/prepared.go).
type SQLDB struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// OpenSQL opens dsn with the database/sql driver named driver, applies
// Schema and returns the database. It returns the driver's error, naming
// the driver, when the file cannot be opened or the schema fails.
func OpenSQL(driver, dsn string) (*SQLDB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", driver, err)
	}
	schema, err := Schema()
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: schema: %w", driver, err)
	}
	return &SQLDB{db: db, stmts: map[string]*sql.Stmt{}}, nil
}

// DB returns the pool (for checks after a run).
func (d *SQLDB) DB() *sql.DB { return d.db }

func (d *SQLDB) prepared(query string) (*sql.Stmt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stmts[query]; ok {
		return st, nil
	}
	st, err := d.db.Prepare(query)
	if err != nil {
		return nil, err
	}
	d.stmts[query] = st
	return st, nil
}

type sqlTx struct {
	d  *SQLDB
	tx *sql.Tx
}

// Begin starts a transaction (IMMEDIATE by the DSN).
func (d *SQLDB) Begin() (Tx, error) {
	tx, err := d.db.BeginTx(context.Background(), nil)
	if err != nil {
		return nil, err
	}
	return &sqlTx{d: d, tx: tx}, nil
}

// Commit commits tx.
func (d *SQLDB) Commit(tx Tx) error { return tx.(*sqlTx).tx.Commit() }

// Rollback abandons tx.
func (d *SQLDB) Rollback(tx Tx) error { return tx.(*sqlTx).tx.Rollback() }

// Close closes the statements and the pool.
func (d *SQLDB) Close() error {
	d.mu.Lock()
	for _, st := range d.stmts {
		st.Close()
	}
	d.stmts = nil
	d.mu.Unlock()
	return d.db.Close()
}

func (t *sqlTx) Exec(query string, args ...any) error {
	st, err := t.d.prepared(query)
	if err != nil {
		return err
	}
	ctx := context.Background()
	_, err = t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	return err
}

func (t *sqlTx) QueryRow(query string, args []any, dest ...any) (bool, error) {
	st, err := t.d.prepared(query)
	if err != nil {
		return false, err
	}
	ctx := context.Background()
	err = t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...).Scan(dest...)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}
