package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// purgeable matches the rows protocol.Purgeable allows ($2: the action,
// $3: the retention in seconds), through operations_terminal_idx.
var purgeable = `action_type = $2 AND ` + protocol.PurgeableTerm.SQL(dialect)

// purgeVictims locks the oldest purgeable rows of one batch ($4), SKIPPING
// rows another transaction holds (a purger beside this one, or a
// transition: FOR UPDATE re-checks the guard on the row's latest version,
// so a row that a duplicate report has just put under review is not
// deleted), and deletes them.
var purgeVictims = `victims AS (
	SELECT tenant, operation_key FROM operations
	WHERE ` + purgeable + `
	ORDER BY updated_at LIMIT $4
	FOR UPDATE SKIP LOCKED
), ops AS (
	DELETE FROM operations o USING victims v
	WHERE o.tenant = v.tenant AND o.operation_key = v.operation_key
	RETURNING o.tenant, o.operation_key, o.updated_at
)`

// purgeBatch deletes one batch in one statement: the victims and their
// history. Every row is deleted by exactly one purger, and no row is
// locked for longer than the statement.
var purgeBatch = `WITH ` + purgeVictims + `, evs AS (
	DELETE FROM operation_events e USING ops
	WHERE e.tenant = ops.tenant AND e.operation_key = ops.operation_key
	RETURNING 1
), holds AS (
	DELETE FROM budget_holds h USING ops
	WHERE h.tenant = ops.tenant AND h.operation_key = ops.operation_key
)
SELECT (SELECT count(*) FROM ops), (SELECT count(*) FROM evs), (SELECT min(updated_at) FROM ops), (SELECT max(updated_at) FROM ops)`

// drainingFor selects the partitions whose rows a purge of this action
// ($3: its retention) leaves for the partition's drop (partitions.go):
// draining, and ended at least the retention ago. FOR SHARE: a
// maintenance that stops a partition draining (stopDraining) waits for
// this statement, so that it deletes what this one left there.
const drainingFor = `SELECT to_regclass(quote_ident(partition_name))::oid AS part, upto FROM operation_events_draining
	WHERE upto <= ` + clock + ` - make_interval(secs => $3::float8)
	FOR SHARE`

// purgeBatchDraining is purgeBatch when some partitions drain: the
// victims' history there stays for the drop, unreachable (the operation is
// gone; a new one under its key reads from its own registration on), and
// is counted as purged with the rest: that is the history these
// operations had. (Counted without the sinceRegistered bound, which would
// look up every victim's registration in every partition: a key purged,
// registered again and purged again before the first history's partition
// is dropped counts that first history twice.)
var purgeBatchDraining = `WITH drain AS (` + drainingFor + `), ` + purgeVictims + `, evs AS (
	DELETE FROM operation_events e USING ops
	WHERE e.tenant = ops.tenant AND e.operation_key = ops.operation_key
	  AND e.tableoid <> ALL (ARRAY(SELECT part FROM drain WHERE part IS NOT NULL))
	RETURNING 1
), holds AS (
	DELETE FROM budget_holds h USING ops
	WHERE h.tenant = ops.tenant AND h.operation_key = ops.operation_key
), kept AS (
	SELECT count(*) AS n FROM ops JOIN operation_events e ON e.tenant = ops.tenant AND e.operation_key = ops.operation_key
	WHERE e.at < (SELECT max(upto) FROM drain) AND e.tableoid = ANY (ARRAY(SELECT part FROM drain))
)
SELECT (SELECT count(*) FROM ops), (SELECT count(*) FROM evs) + (SELECT n FROM kept), (SELECT min(updated_at) FROM ops), (SELECT max(updated_at) FROM ops)`

// anyDraining is whether purgeBatchDraining is needed ($2: the retention).
// A partition that starts draining just after this answer is harmless:
// purgeBatch deletes its rows, as it always did.
const anyDraining = `SELECT EXISTS (SELECT 1 FROM operation_events_draining
	WHERE upto <= ` + clock + ` - make_interval(secs => $2::float8))`

// purgeCount counts what purgeBatch would delete, with no limit: of the
// history, the current incarnation's (an earlier one's rows may wait in a
// draining partition, already counted when their operation went).
var purgeCount = `WITH v AS (
	SELECT tenant, operation_key, updated_at FROM operations WHERE ` + purgeable + `
)
SELECT (SELECT count(*) FROM v),
       (SELECT count(*) FROM operation_events e JOIN v ON e.tenant = v.tenant AND e.operation_key = v.operation_key
        WHERE ` + sinceRegistered("e", "v.tenant", "v.operation_key") + `),
       (SELECT min(updated_at) FROM v), (SELECT max(updated_at) FROM v)`

// Purge deletes one batch of purgeable operations of an action, oldest
// first, with their history (refs live in the row); in partitions that
// drain, the history is left for the partition's drop (partitions.go),
// which the purge's maintenance does when due. With DryRun it counts
// every purgeable operation instead.
func (s *Store) Purge(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	return store.RunPurge(ctx, p, store.PurgeSteps{Count: s.countPurgeable, Batch: s.purgeOneBatch})
}

// countPurgeable is a dry run: purgeCount, unbounded (a batch is a
// bounded statement; a dry run counts everything).
func (s *Store) countPurgeable(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	return s.purgeStatement(ctx, purgeCount, s.clockArg(), p.Action, p.Retention.Seconds())
}

// purgeOneBatch runs the maintenance when due, then deletes one batch in
// one bounded statement: purgeBatch, or purgeBatchDraining when some
// partitions drain.
func (s *Store) purgeOneBatch(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	if err := s.maintainIfDue(ctx); err != nil {
		return store.PurgeResult{}, fmt.Errorf("purge: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	args := []any{s.clockArg(), p.Action, p.Retention.Seconds(), p.Limit}
	var drain bool
	if err := s.pool.QueryRow(ctx, anyDraining, args[0], args[2]).Scan(&drain); err != nil {
		return store.PurgeResult{}, classify("purge", err)
	}
	q := purgeBatch
	if drain {
		q = purgeBatchDraining
	}
	return s.purgeStatement(ctx, q, args...)
}

// purgeStatement runs one of the purge's statements, which all answer
// with the operations, the events, and the oldest and newest updated_at.
func (s *Store) purgeStatement(ctx context.Context, q string, args ...any) (store.PurgeResult, error) {
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
		WHERE action_type = $2 AND `+terminal+`), `+clock, s.clockArg(), action).Scan(&o, &now)
	if err != nil {
		return time.Time{}, time.Time{}, classify("oldest terminal", err)
	}
	if o != nil {
		oldest = *o
	}
	return oldest, now, nil
}

// TryLock is in lock.go.

// DueApprovals lists the operations whose approval has timed out
// (protocol.ApprovalDueTerm), of every tenant, oldest deadline first,
// through operations_approval_due_idx.
func (s *Store) DueApprovals(ctx context.Context, limit int) ([]store.DueApproval, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT tenant, operation_key FROM operations
		WHERE status = 'awaiting_approval' AND `+approvalDue+` ORDER BY approval_deadline LIMIT $2`, s.clockArg(), limit)
	if err != nil {
		return nil, classify("due approvals", err)
	}
	defer rows.Close()
	var out []store.DueApproval
	for rows.Next() {
		var d store.DueApproval
		if err := rows.Scan(&d.Tenant, &d.Key); err != nil {
			return nil, classify("due approvals", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("due approvals", err)
	}
	return out, nil
}

// AwaitingApprovals counts the operations awaiting approval per action,
// through operations_approval_due_idx (only they are in it).
func (s *Store) AwaitingApprovals(ctx context.Context) ([]store.ApprovalCount, time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT `+clock, s.clockArg()).Scan(&now); err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT action_type, count(*), min(created_at) FROM operations
		WHERE status = 'awaiting_approval' GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	defer rows.Close()
	var out []store.ApprovalCount
	for rows.Next() {
		var r store.ApprovalCount
		if err := rows.Scan(&r.Action, &r.Count, &r.OldestCreated); err != nil {
			return nil, time.Time{}, classify("awaiting approvals", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	return out, now, nil
}
