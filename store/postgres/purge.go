package postgres

import (
	"context"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
)

// purgeable matches the rows opjournal.Purgeable allows ($2: the action,
// $3: the retention in seconds), through operations_terminal_idx.
const purgeable = `action_type = $2 AND status IN ('succeeded', 'failed_final') AND NOT needs_review
	  AND updated_at <= ` + clock + ` - make_interval(secs => $3::float8)`

// purgeBatch deletes one batch in one statement: it locks the oldest
// purgeable rows, SKIPPING rows another transaction holds (a purger
// beside this one, or a transition: FOR UPDATE re-checks the guard on the
// row's latest version, so a row that a duplicate report has just put
// under review is not deleted), then deletes them and their history.
// Every row is deleted by exactly one purger, and no row is locked for
// longer than the statement.
const purgeBatch = `WITH victims AS (
	SELECT tenant, operation_key FROM operations
	WHERE ` + purgeable + `
	ORDER BY updated_at LIMIT $4
	FOR UPDATE SKIP LOCKED
), ops AS (
	DELETE FROM operations o USING victims v
	WHERE o.tenant = v.tenant AND o.operation_key = v.operation_key
	RETURNING o.tenant, o.operation_key, o.updated_at
), evs AS (
	DELETE FROM operation_events e USING ops
	WHERE e.tenant = ops.tenant AND e.operation_key = ops.operation_key
	RETURNING 1
)
SELECT (SELECT count(*) FROM ops), (SELECT count(*) FROM evs), (SELECT min(updated_at) FROM ops), (SELECT max(updated_at) FROM ops)`

// purgeCount counts what purgeBatch would delete, with no limit.
const purgeCount = `WITH v AS (
	SELECT tenant, operation_key, updated_at FROM operations WHERE ` + purgeable + `
)
SELECT (SELECT count(*) FROM v),
       (SELECT count(*) FROM operation_events e JOIN v ON e.tenant = v.tenant AND e.operation_key = v.operation_key),
       (SELECT min(updated_at) FROM v), (SELECT max(updated_at) FROM v)`

// Purge deletes one batch of purgeable operations of an action, oldest
// first, with their history (refs live in the row). With DryRun it counts
// every purgeable operation instead.
func (s *Store) Purge(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	if p.Retention <= 0 || (!p.DryRun && p.Limit <= 0) {
		return store.PurgeResult{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "", "purge needs a retention and a batch size")
	}
	q, args := purgeBatch, []any{s.clockArg(), p.Action, p.Retention.Seconds(), p.Limit}
	if p.DryRun {
		q, args = purgeCount, args[:3]
	} else {
		// A batch is a bounded statement; a dry run counts everything.
		var cancel context.CancelFunc
		ctx, cancel = s.bound(ctx)
		defer cancel()
	}
	var res store.PurgeResult
	var oldest, newest *time.Time
	if err := s.pool.QueryRow(ctx, q, args...).Scan(&res.Operations, &res.Events, &oldest, &newest); err != nil {
		return store.PurgeResult{}, classify("purge", err)
	}
	if oldest != nil {
		res.Oldest, res.Newest = *oldest, *newest
	}
	return res, nil
}

// OldestTerminal returns the oldest updated_at among action's terminal
// operations (zero if none) and the clock: the first entry of
// operations_terminal_idx.
func (s *Store) OldestTerminal(ctx context.Context, action string) (oldest, now time.Time, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var o *time.Time
	err = s.pool.QueryRow(ctx, `SELECT (SELECT min(updated_at) FROM operations
		WHERE action_type = $2 AND status IN ('succeeded', 'failed_final')), `+clock, s.clockArg(), action).Scan(&o, &now)
	if err != nil {
		return time.Time{}, time.Time{}, classify("oldest terminal", err)
	}
	if o != nil {
		oldest = *o
	}
	return oldest, now, nil
}

// TryLock takes a session advisory lock on its own pooled connection and
// keeps both until unlock: several servers on one database then purge one
// at a time, and a server that dies releases the lock with its
// connection. The lock's number is a hash of the schema and the name, so
// journals in different schemas of one database do not share it.
func (s *Store) TryLock(ctx context.Context, name string) (func(), bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, classify("lock", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || ':opjournal:' || $1, 0))`, name).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, classify("lock", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultStatementTimeout)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended(current_schema() || ':opjournal:' || $1, 0))`, name); err != nil {
			// The lock goes with the session: close the connection.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}
	return unlock, true, nil
}
