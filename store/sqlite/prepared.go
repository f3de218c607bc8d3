package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// SQLite parses a statement's text every time it is prepared, and
// database/sql prepares a text statement on every call: profiling the
// fused path (BenchmarkFused) showed sqlite3_prepare_v2 at 42% of the
// store's CPU. The reads' fixed statements are therefore prepared once per
// connection and reused: a statement prepared on the pool (*sql.Stmt)
// remembers the connections it was prepared on. (The write path runs on
// its own connection, which caches its statements itself: writer.go.)
//
// Only statements whose text is fixed go through here (the texts are
// constants): the cache never grows with the data.
type preparedCache struct {
	mu sync.Mutex
	by map[string]*sql.Stmt
}

// prepared returns query prepared on the pool, preparing it on first use.
func (s *Store) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.by[query]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.by == nil {
		c.by = map[string]*sql.Stmt{}
	}
	c.by[query] = st
	return st, nil
}

// closeStatements closes the cached statements (before the pool closes).
func (s *Store) closeStatements() {
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.by {
		st.Close()
	}
	c.by = nil
}

// queryRow runs a fixed-text query on the pool q through the cache. A statement that does not prepare is run as text,
// so that its error reaches the caller through the row as usual.
func (s *Store) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	st, err := s.prepared(ctx, query)
	if err != nil {
		return q.QueryRowContext(ctx, query, args...)
	}
	if _, ok := q.(*sql.DB); ok {
		return st.QueryRowContext(ctx, args...)
	}
	return q.QueryRowContext(ctx, query, args...)
}
