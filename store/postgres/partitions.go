package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opjournal/opjournal/protocol"
)

// The history (operation_events) is partitioned by RANGE on its time, one
// partition per week (store/migrations/postgres/000006 says why a week and why
// not a hash of the tenant), with a DEFAULT partition so that an insert
// never fails. This file keeps the partitions: it creates the coming weeks
// ahead of time and drops a partition once no operation that exists has
// history in it, so a purge releases a week of history with one catalog
// change instead of a delete per row.
//
// The purge rule stays the protocol's (protocol.Purgeable): an operation
// goes when it is terminal, not under review and unchanged for its
// action's retention. What changes is how its history goes:
//
//   - A partition is DRAINING when it has ended and every operation with
//     history in it is terminal and not under review: each will go when
//     its retention has passed, and none will ever change again but by a
//     review (a duplicate report, which pins it, below).
//   - A purge of action A deletes its operations as before, and their
//     history too, except the rows in draining partitions that ended at
//     least A's retention ago: those stay for the drop. They are
//     unreachable: the operation is gone, and if its key is registered
//     again the new operation's history starts at its own registration
//     (the sinceRegistered bound: event ids come from one sequence, and
//     every incarnation starts with a registration event, the only one
//     with no "from" status, whose id is larger than any earlier event of
//     the key, all committed before the purge deleted the old row).
//   - A partition is dropped (detached, then dropped, in one short
//     transaction) when no operation that exists has history of its
//     current incarnation in it; that check runs while the partition is
//     locked against writes (SHARE), so nothing joins it meanwhile.
//   - A partition is PINNED when an operation with history in it is open
//     (pending, in progress, unknown) or under review: no retention will
//     take it, so the partition is not drained; if it was, the history
//     left there for the drop is deleted row by row then, as a purge did
//     before. The default partition is never dropped: its rows are purged
//     row by row.
//
// A partition is checked (a read of its keys against operations) on each
// maintenance, at Open (creation only) and on the purge (at most every
// partitionMaintainEvery on the store's clock), or when an operator calls
// MaintainPartitions. Several replicas may do it at once: one
// transaction-level advisory lock makes them take turns, and a replica
// that finds it held skips its turn.
const (
	// partitionWidth is one week; partitions start on Monday 00:00 UTC.
	partitionWidth = 7 * 24 * time.Hour
	// partitionsAhead is how many weeks after the current one exist.
	partitionsAhead = 2
	// partitionMaintainEvery spaces the purge's maintenance: a check reads
	// the ended partitions (about 1 s per million history rows), and a
	// pass purges in many batches.
	partitionMaintainEvery = time.Minute
	// partitionRecheckEvery spaces the pin checks of a partition that is
	// not dropped: a full read of it when nothing pins it. What it waits
	// to see (the last open operation settling, or a review) only delays
	// a drop, or the cleaning of a partition pinned again.
	partitionRecheckEvery = 6 * time.Hour
	// partitionLockTimeout bounds every lock wait of the maintenance.
	// Dropping and detaching lock the whole history (ACCESS EXCLUSIVE on
	// operation_events, for a few milliseconds), and while that lock is
	// awaited the journal's statements queue behind it: this is the
	// longest they wait. It is shorter than PostgreSQL's default
	// deadlock_timeout (1 s), so when the maintenance and a purge's delete
	// wait for each other, the maintenance gives up first and the purge
	// goes on. A timeout is not an error: the next maintenance tries again.
	partitionLockTimeout = "500ms"
	// partitionMaintainTimeout bounds one maintenance.
	partitionMaintainTimeout = 10 * time.Minute
	// partitionPrefix names the weekly partitions: operation_events_w20261130.
	partitionPrefix = "operation_events_w"
)

// sinceRegistered is the condition that event row e (an alias) belongs to
// the current incarnation of its key: its id is at least that of the
// key's latest registration event. Rows of an earlier incarnation exist
// only in draining partitions, until they are dropped.
func sinceRegistered(e, tenant, key string) string {
	return e + `.id >= (SELECT coalesce(max(r.id), 0) FROM operation_events r
		WHERE r.tenant = ` + tenant + ` AND r.operation_key = ` + key + ` AND r.from_status IS NULL)`
}

// EventPartition is one weekly partition of the history.
type EventPartition struct {
	// Name is the table's name, in the store's schema.
	Name string
	// From and To bound its events' times: From <= at < To.
	From, To time.Time
	// Draining says that a purge leaves purged history in it for the drop.
	Draining bool
}

// PartitionReport is what MaintainPartitions did.
type PartitionReport struct {
	// Created are the partitions created ahead, and Moved the history rows
	// moved into them from the default partition (written while no
	// partition covered their time).
	Created []string
	Moved   int64
	// Dropped are the partitions dropped, and DroppedRows the history rows
	// they held, all of operations already purged.
	Dropped     []string
	DroppedRows int64
	// Draining are the ended partitions now draining, Pinned those that an
	// open or reviewed operation keeps, Unchecked those checked for pins
	// less than partitionRecheckEvery ago (left as they were), and Cleaned
	// the rows deleted from partitions that stopped draining.
	Draining, Pinned, Unchecked []string
	Cleaned                     int64
	// Busy says that another process held the maintenance lock or a lock
	// wait timed out: some work was left for the next maintenance.
	Busy bool
}

// partitionState spaces the maintenance's work, on the store's clock.
type partitionState struct {
	running sync.Mutex // held by the purge's maintenance
	mu      sync.Mutex // guards what follows
	next    time.Time  // when the purge's next maintenance is due
	// checked is when each partition was last checked for pins.
	checked map[string]time.Time
}

// goNow is the store's clock read here: the test clock, or ours (only
// to space the work; every rule reads the database's).
func (s *Store) goNow() time.Time {
	if f := s.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// pinCheckDue reports whether partition name is due for a pin check, and
// if so records one now.
func (st *partitionState) pinCheckDue(name string, now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if last, ok := st.checked[name]; ok && now.Sub(last) < partitionRecheckEvery && !now.Before(last) {
		return false
	}
	if st.checked == nil {
		st.checked = map[string]time.Time{}
	}
	st.checked[name] = now
	return true
}

// maintenanceSettings open every maintenance transaction: the lock
// timeout, and no JIT. The journal's connections plan with enable_seqscan
// off (Open says why); a statement that reads a whole partition may still
// be costed past jit_above_cost, and compiling it took seconds here.
const maintenanceSettings = `SELECT set_config('lock_timeout', '` + partitionLockTimeout + `', true), set_config('jit', 'off', true)`

// partitionLock is the transaction-level advisory lock that makes
// maintenances take turns; like TryLock's, it is per schema.
const partitionLock = `pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':opjournal:event-partitions', 0))`

// listPartitions reads the partitions and their bounds from the catalog
// (the bound expression's literals, cast back by the same session that
// printed them), oldest first. The default partition is left out.
const listPartitions = `SELECT c.relname::text, b[1]::timestamptz, b[2]::timestamptz, d.partition_name IS NOT NULL
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\) TO \(''([^'']*)''\)') b
LEFT JOIN operation_events_draining d ON d.partition_name = c.relname
WHERE i.inhparent = 'operation_events'::regclass AND b IS NOT NULL
ORDER BY 2`

// Partitions returns the history's weekly partitions, oldest first.
func (s *Store) Partitions(ctx context.Context) ([]EventPartition, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	parts, err := readPartitions(ctx, s.pool)
	if err != nil {
		return nil, classify("partitions", err)
	}
	return parts, nil
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func readPartitions(ctx context.Context, q querier) ([]EventPartition, error) {
	rows, err := q.Query(ctx, listPartitions)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventPartition, error) {
		var p EventPartition
		err := r.Scan(&p.Name, &p.From, &p.To, &p.Draining)
		p.From, p.To = p.From.UTC(), p.To.UTC()
		return p, err
	})
}

// weekStart is the Monday 00:00 UTC at or before t.
func weekStart(t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

// now is the store's clock: the test clock, or the database's.
func (s *Store) now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT `+clock, s.clockArg()).Scan(&now); err != nil {
		return time.Time{}, err
	}
	return now.UTC(), nil
}

// lockBusy reports a lock wait that timed out (lock_timeout).
func lockBusy(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// EnsurePartitions creates the partitions of the current week (on the
// store's clock) and of the partitionsAhead weeks after it, where missing.
// Each is created on its own and then attached, which locks the history
// far less than CREATE TABLE ... PARTITION OF (SHARE UPDATE EXCLUSIVE: reads
// and writes go on); rows that the default partition holds for its week
// are moved into it first. It returns the partitions created.
func (s *Store) EnsurePartitions(ctx context.Context) (PartitionReport, error) {
	ctx, cancel := context.WithTimeout(ctx, partitionMaintainTimeout)
	defer cancel()
	var rep PartitionReport
	_, err := s.ensureAhead(ctx, &rep)
	return rep, err
}

// ensureAhead is EnsurePartitions into rep; it returns the store's clock,
// read once for the whole maintenance.
func (s *Store) ensureAhead(ctx context.Context, rep *PartitionReport) (time.Time, error) {
	now, err := s.now(ctx)
	if err != nil {
		return now, classify("partitions", err)
	}
	if err := s.ensurePartitions(ctx, now, rep); lockBusy(err) {
		rep.Busy = true // a lock wait timed out: the next maintenance tries again
	} else if err != nil {
		return now, classify("create partitions", err)
	}
	return now, nil
}

func (s *Store) ensurePartitions(ctx context.Context, now time.Time, rep *PartitionReport) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, maintenanceSettings); err != nil {
		return err
	}
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT `+partitionLock).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		rep.Busy = true // another replica is at it
		return nil
	}
	parts, err := readPartitions(ctx, tx)
	if err != nil {
		return err
	}
	var created []string
	var moved int64
	for w, i := weekStart(now), 0; i <= partitionsAhead; w, i = w.Add(partitionWidth), i+1 {
		end := w.Add(partitionWidth)
		covered := false
		for _, p := range parts {
			// Any overlap counts: a partition made by hand with other
			// bounds is left alone, and its gaps go to the default.
			if p.From.Before(end) && p.To.After(w) {
				covered = true
			}
		}
		if covered {
			continue
		}
		name := partitionPrefix + w.Format("20060102")
		id := pgx.Identifier{name}.Sanitize()
		from, to := w.Format("'2006-01-02 15:04:05Z07:00'"), end.Format("'2006-01-02 15:04:05Z07:00'")
		if _, err := tx.Exec(ctx, `CREATE TABLE `+id+` (LIKE operation_events INCLUDING DEFAULTS)`); err != nil {
			return err
		}
		// Without this, the attach would fail on such rows. The move locks
		// the default partition, which only stray rows are written to.
		tag, err := tx.Exec(ctx, `WITH moved AS (
			DELETE FROM operation_events_default WHERE at >= $1 AND at < $2 RETURNING *
		) INSERT INTO `+id+` SELECT * FROM moved`, w, end)
		if err != nil {
			return err
		}
		moved += tag.RowsAffected()
		if _, err := tx.Exec(ctx, `ALTER TABLE operation_events ATTACH PARTITION `+id+` FOR VALUES FROM (`+from+`) TO (`+to+`)`); err != nil {
			return err
		}
		created = append(created, name)
	}
	if err := tx.Commit(ctx); err != nil {
		if lockBusy(err) {
			rep.Busy = true
			return nil
		}
		return err
	}
	rep.Created = append(rep.Created, created...)
	rep.Moved += moved
	return nil
}

// liveIn is whether an operation that exists has history of its current
// incarnation in partition %[1]s (pinned: one that is open or under
// review). A key's rows in the partition are of an earlier incarnation
// when a registration of the key came after the latest of them.
//
// It reads the partition's keys in index order and looks each up in
// operations by its primary key (OFFSET 0 keeps that order: left to
// itself the planner would read all of operations for the few open ones),
// and looks for a later registration only for keys that exist (the
// subquery names o's columns so that it runs after o is found, not once
// per key before).
const liveIn = `SELECT EXISTS (
	SELECT 1 FROM (SELECT tenant, operation_key, max(id) AS last FROM %[1]s GROUP BY 1, 2) e
	CROSS JOIN LATERAL (SELECT 1 FROM operations o
		WHERE o.tenant = e.tenant AND o.operation_key = e.operation_key %[2]s
		  AND NOT EXISTS (SELECT 1 FROM operation_events r
			WHERE r.tenant = o.tenant AND r.operation_key = o.operation_key AND r.from_status IS NULL AND r.id > e.last)
		OFFSET 0) o
)`

// pinnedCond keeps the operations that pin their history: not settled
// (protocol.SettledTerm).
var pinnedCond = `AND NOT ` + protocol.SettledTerm.SQL(dialect.On("o"))

// MaintainPartitions creates the coming partitions (EnsurePartitions),
// then looks at each partition that has ended on the store's clock: it
// drops the partition when no operation that exists has history in it,
// marks it draining when every operation that has is terminal and not
// under review, and otherwise (pinned) stops it draining, deleting the
// purged history left in it. A lock held elsewhere is not an error
// (Busy). It returns what it did, and a database error if one stopped it.
func (s *Store) MaintainPartitions(ctx context.Context) (PartitionReport, error) {
	ctx, cancel := context.WithTimeout(ctx, partitionMaintainTimeout)
	defer cancel()
	var rep PartitionReport
	started := s.goNow()
	s.parts.mu.Lock()
	s.parts.next = started.Add(partitionMaintainEvery)
	s.parts.mu.Unlock()
	now, err := s.ensureAhead(ctx, &rep)
	if err != nil {
		return rep, err
	}
	parts, err := readPartitions(ctx, s.pool)
	if err != nil {
		return rep, classify("partitions", err)
	}
	for _, p := range parts {
		if p.To.After(now) {
			break // oldest first: the rest have not ended
		}
		if err := s.maintainPartition(ctx, p, started, &rep); err != nil {
			return rep, classify("partition "+p.Name, err)
		}
	}
	return rep, nil
}

func (s *Store) maintainPartition(ctx context.Context, p EventPartition, started time.Time, rep *PartitionReport) error {
	dropped, rows, busy, err := s.dropIfUnused(ctx, p)
	switch {
	case err != nil:
		return err
	case busy:
		rep.Busy = true
		return nil
	case dropped && rows < 0:
		return nil // another replica dropped it
	case dropped:
		rep.Dropped = append(rep.Dropped, p.Name)
		rep.DroppedRows += rows
		return nil
	}
	if !s.parts.pinCheckDue(p.Name, started) {
		rep.Unchecked = append(rep.Unchecked, p.Name)
		return nil
	}
	pinned, busy, err := s.markIfUnpinned(ctx, p)
	switch {
	case err != nil:
		return err
	case busy:
		rep.Busy = true
		return nil
	case !pinned:
		rep.Draining = append(rep.Draining, p.Name)
		return nil
	}
	rep.Pinned = append(rep.Pinned, p.Name)
	if !p.Draining {
		return nil
	}
	cleaned, busy, err := s.stopDraining(ctx, p)
	rep.Cleaned += cleaned
	rep.Busy = rep.Busy || busy
	return err
}

// markIfUnpinned marks partition p draining unless an open or reviewed
// operation has history in it (pinned). It holds the maintenance lock, so
// no replica drops p meanwhile, but no table lock: an operation reviewed
// just after is found by a later maintenance, which stops the drain;
// meanwhile the rows left for the drop are unreachable anyway. A p that
// is gone counts as pinned (nothing to do).
func (s *Store) markIfUnpinned(ctx context.Context, p EventPartition) (pinned, busy bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, maintenanceSettings); err != nil {
		return false, false, err
	}
	id := pgx.Identifier{p.Name}.Sanitize()
	var ok, exists bool
	if err := tx.QueryRow(ctx, `SELECT `+partitionLock+`, to_regclass($1) IS NOT NULL`, id).Scan(&ok, &exists); err != nil {
		return false, false, err
	}
	if !ok {
		return false, true, nil
	}
	if !exists {
		return true, false, nil
	}
	if err := tx.QueryRow(ctx, fmt.Sprintf(liveIn, id, pinnedCond)).Scan(&pinned); err != nil {
		return false, false, err
	}
	if !pinned {
		if _, err := tx.Exec(ctx, `INSERT INTO operation_events_draining (partition_name, upto) VALUES ($1, $2)
			ON CONFLICT (partition_name) DO NOTHING`, p.Name, p.To); err != nil {
			return false, false, err
		}
	}
	return pinned, false, tx.Commit(ctx)
}

// dropIfUnused drops partition p if no operation that exists has history
// in it: detach and drop, in one transaction that first locks p against
// writes, then checks, so nothing joins it between the check and the drop.
// A p already gone is reported dropped with rows -1.
func (s *Store) dropIfUnused(ctx context.Context, p EventPartition) (dropped bool, rows int64, busy bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, 0, false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	id := pgx.Identifier{p.Name}.Sanitize()
	var ok, exists bool
	if _, err := tx.Exec(ctx, maintenanceSettings); err != nil {
		return false, 0, false, err
	}
	if err := tx.QueryRow(ctx, `SELECT `+partitionLock+`, to_regclass($1) IS NOT NULL`, id).Scan(&ok, &exists); err != nil {
		return false, 0, false, err
	}
	if !ok {
		return false, 0, true, nil
	}
	if !exists {
		return true, -1, false, nil // another replica dropped it
	}
	// SHARE: reads of the history go on; writes to p (only a purge's
	// deletes, or an insert stamped with a time long past) wait.
	steps := []func() error{
		func() error { _, err := tx.Exec(ctx, `LOCK TABLE `+id+` IN SHARE MODE`); return err },
		func() error {
			var live bool
			if err := tx.QueryRow(ctx, fmt.Sprintf(liveIn, id, "")).Scan(&live); err != nil {
				return err
			}
			if live {
				return errLive
			}
			return tx.QueryRow(ctx, `SELECT count(*) FROM `+id).Scan(&rows)
		},
		// The default partition rules out DETACH ... CONCURRENTLY, so
		// this takes ACCESS EXCLUSIVE on the history, for milliseconds
		// (bounded by the lock timeout while it waits).
		func() error { _, err := tx.Exec(ctx, `ALTER TABLE operation_events DETACH PARTITION `+id); return err },
		func() error { _, err := tx.Exec(ctx, `DROP TABLE `+id); return err },
		func() error {
			_, err := tx.Exec(ctx, `DELETE FROM operation_events_draining WHERE partition_name = $1`, p.Name)
			return err
		},
		func() error { return tx.Commit(ctx) },
	}
	for _, step := range steps {
		switch err := step(); {
		case errors.Is(err, errLive):
			return false, 0, false, nil
		case lockBusy(err):
			return false, 0, true, nil
		case err != nil:
			return false, 0, false, err
		}
	}
	return true, rows, false, nil
}

// errLive stops a drop: the partition holds history of an operation.
var errLive = errors.New("partition in use")

// stopDraining makes a pinned partition an ordinary one again: its
// draining row goes first (which waits for the purge statements that read
// it: they hold it FOR SHARE), then every row in it of an operation that
// no longer exists, or of an earlier incarnation, is deleted, as the
// purges would have.
func (s *Store) stopDraining(ctx context.Context, p EventPartition) (cleaned int64, busy bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var ok, exists bool
	if _, err := tx.Exec(ctx, maintenanceSettings); err != nil {
		return 0, false, err
	}
	if err := tx.QueryRow(ctx, `SELECT `+partitionLock+`, to_regclass($1) IS NOT NULL`, pgx.Identifier{p.Name}.Sanitize()).Scan(&ok, &exists); err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, true, nil
	}
	if !exists {
		return 0, false, nil // dropped meanwhile
	}
	if _, err := tx.Exec(ctx, `DELETE FROM operation_events_draining WHERE partition_name = $1`, p.Name); err != nil {
		return 0, lockBusy(err), ignoreBusy(err)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{p.Name}.Sanitize()+` e
		WHERE NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant = e.tenant AND o.operation_key = e.operation_key)
		   OR NOT (`+sinceRegistered("e", "e.tenant", "e.operation_key")+`)`)
	if err != nil {
		return 0, lockBusy(err), ignoreBusy(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, lockBusy(err), ignoreBusy(err)
	}
	return tag.RowsAffected(), false, nil
}

func ignoreBusy(err error) error {
	if lockBusy(err) {
		return nil
	}
	return err
}

// maintainIfDue runs MaintainPartitions from the purge when
// partitionMaintainEvery has passed on the store's clock since the last
// one began. A concurrent purge in this process skips it rather than wait.
// A failed maintenance is not retried before the interval: the purge pass
// reports the failure, and the next batches still purge row by row.
func (s *Store) maintainIfDue(ctx context.Context) error {
	if !s.parts.running.TryLock() {
		return nil
	}
	defer s.parts.running.Unlock()
	s.parts.mu.Lock()
	due := !s.goNow().Before(s.parts.next)
	s.parts.mu.Unlock()
	if !due {
		return nil
	}
	_, err := s.MaintainPartitions(ctx)
	return err
}
