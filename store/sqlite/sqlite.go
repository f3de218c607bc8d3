// Package sqlite is the embedded store: one SQLite file through the pure-Go
// modernc.org/sqlite driver, so `opjournal serve` needs no setup. It is for
// one server process; several processes on one PostgreSQL is the way to
// scale out.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/migrations"
	"github.com/opjournal/opjournal/store"
)

// Store implements store.Store on a SQLite file.
type Store struct {
	db *sql.DB
	// commit runs the write transactions, grouping concurrent ones
	// (groupcommit.go).
	commit *committer
}

var _ store.Store = (*Store)(nil)

// dsn opens path with the settings that hold under concurrency and keep
// the journal durable:
//   - WAL lets readers run beside the one writer;
//   - synchronous(FULL) fsyncs every commit: the journal is written before
//     the external call, so a commit the OS lost on power failure could
//     become a duplicate payment;
//   - busy_timeout makes a writer wait for the lock instead of failing;
//   - _txlock=immediate takes the write lock at BEGIN: a deferred
//     transaction that reads then writes fails with SQLITE_BUSY under load
//     instead of waiting.
func dsn(path string) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Open applies pending migrations to the SQLite file at path (created if
// missing) and returns a Store. It returns an error naming the path when
// the file cannot be opened or migrated.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if err := Migrate(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return &Store{db: db, commit: newCommitter(db)}, nil
}

// Migrate applies the embedded migrations (migrations/sqlite) to the file
// at path, each in a transaction.
func Migrate(path string) error {
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	drv, err := migratesqlite.WithInstance(db, &migratesqlite.Config{})
	if err != nil {
		db.Close()
		return fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	src, err := iofs.New(migrations.SQLite, "sqlite")
	if err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		return fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	defer m.Close() // closes db too
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	return nil
}

// BatchStats reports group commit: one kind, "write", counting
// transactions and the write calls they carried.
func (s *Store) BatchStats() []store.BatchStat { return []store.BatchStat{s.commit.stat()} }

var _ store.Batching = (*Store)(nil)

// Close closes the database.
func (s *Store) Close() error {
	s.commit.close()
	return s.db.Close()
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// now is SQLite's clock in milliseconds. Within one statement SQLite reads
// the clock once, so every "now" in a statement is the same instant.
const now = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// effectiveStatus is the status as the rules see it: an in_progress row
// whose lease has expired on the database clock is unknown.
const effectiveStatus = `(CASE WHEN status = 'in_progress' AND lease_until <= ` + now + ` THEN 'unknown' ELSE status END)`

// isUnknown matches operations whose effective status is unknown.
const isUnknown = `(status = 'unknown' OR (status = 'in_progress' AND lease_until <= ` + now + `))`

// columns is the row every query returns; see the postgres store for why
// the status is the effective one and why the clock comes last.
const columns = `tenant, operation_key, action_type, request_hash, payload, ` + effectiveStatus + `,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	coalesce(duplicate_external_id, ''), result, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	CASE WHEN status = 'unknown' THEN unknown_since WHEN status = 'in_progress' AND lease_until <= ` + now + ` THEN lease_until END,
	check_count, last_checked_at, next_check_at, ` + now

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

type rowScanner interface{ Scan(dest ...any) error }

func scanOp(row rowScanner) (scanned, error) {
	var (
		op                                             opjournal.Operation
		payload                                        string
		result                                         sql.NullString
		status                                         string
		leaseUntil, unknownSince, lastCheck, nextCheck sql.NullInt64
		needsReview                                    int
		createdAt, updatedAt, dbNow                    int64
	)
	err := row.Scan(&op.Tenant, &op.Key, &op.Action, &op.RequestHash, &payload, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &op.DuplicateExternalID,
		&result, &op.ErrorCode, &needsReview, &op.ReviewReason, &createdAt, &updatedAt,
		&unknownSince, &op.CheckCount, &lastCheck, &nextCheck, &dbNow)
	if err != nil {
		return scanned{}, err
	}
	op.Payload = []byte(payload)
	if result.Valid {
		op.Result = []byte(result.String)
	}
	op.Status = opjournal.Status(status)
	for _, t := range []struct {
		src sql.NullInt64
		dst *time.Time
	}{{leaseUntil, &op.LeaseUntil}, {unknownSince, &op.UnknownSince}, {lastCheck, &op.LastCheckedAt}, {nextCheck, &op.NextCheckAt}} {
		if t.src.Valid {
			*t.dst = ms(t.src.Int64)
		}
	}
	op.NeedsReview = needsReview != 0
	op.CreatedAt, op.UpdatedAt = ms(createdAt), ms(updatedAt)
	return scanned{op: &op, dbNow: ms(dbNow)}, nil
}

func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// one runs a statement that returns at most one operation row; found is
// false when no row matched (a conditional update did not apply).
func one(ctx context.Context, q querier, what, query string, args ...any) (sc scanned, found bool, err error) {
	sc, err = scanOp(q.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return scanned{}, false, nil
	}
	if err != nil {
		return scanned{}, false, classify(what, err)
	}
	return sc, true, nil
}

func get(ctx context.Context, q querier, tenant, key string) (scanned, error) {
	sc, found, err := one(ctx, q, "get", `SELECT `+columns+` FROM operations WHERE tenant = ?1 AND operation_key = ?2`, tenant, key)
	if err != nil {
		return scanned{}, err
	}
	if !found {
		return scanned{}, opjournal.Errorf(opjournal.CodeNotFound, "operation_key", "no operation %q", key)
	}
	return sc, nil
}

// inTx runs fn in an IMMEDIATE transaction (see dsn), which it may share
// with concurrent calls, each in its own savepoint (groupcommit.go): SQLite
// has one writer, and taking its lock up front means fn's reads and writes
// see one consistent state and never fail half-way on an upgrade. fn must
// use the ctx it is given, not the caller's.
func (s *Store) inTx(ctx context.Context, what string, fn txFunc) error {
	return s.commit.do(ctx, what, fn)
}

// event is what a transition writes to the history.
type event struct {
	from    opjournal.Status // "" for the registration
	attempt int              // 0: the attempt_count after the change
	actor   string
	reason  string
	extID   string
}

func insertEvent(ctx context.Context, tx *sql.Tx, op *opjournal.Operation, ev event) error {
	attempt := ev.attempt
	if attempt == 0 {
		attempt = op.AttemptCount
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO operation_events
		(tenant, operation_key, at, from_status, to_status, attempt, actor, reason, external_id)
		VALUES (?1, ?2, `+now+`, nullif(?3, ''), ?4, ?5, ?6, ?7, nullif(?8, ''))`,
		op.Tenant, op.Key, string(ev.from), string(op.Status), attempt, ev.actor, ev.reason, ev.extID)
	if err != nil {
		return classify("write history", err)
	}
	return nil
}

// transition applies one conditional UPDATE inside tx and, when it
// applied, writes its event. set and cond may use ?1 (tenant) and ?2 (key);
// args fill ?3 onwards. found is false when the condition did not hold;
// then nothing was written.
func transition(ctx context.Context, tx *sql.Tx, what, set, cond string, ev event, args ...any) (scanned, bool, error) {
	sc, found, err := one(ctx, tx, what, `UPDATE operations SET `+set+`, updated_at = `+now+`
		WHERE tenant = ?1 AND operation_key = ?2 AND (`+cond+`)
		RETURNING `+columns, args...)
	if err != nil || !found {
		return sc, found, err
	}
	return sc, true, insertEvent(ctx, tx, sc.op, ev)
}

// Get returns the operation with its effective status.
func (s *Store) Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	sc, err := get(ctx, s.db, tenant, key)
	return sc.op, err
}

// Register inserts the operation, or returns the existing one with the same
// hash (and claims it if asked), in one transaction.
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (res store.RegisterResult, err error) {
	status, attempt, owner, lease, reason := "pending", 0, sql.NullString{}, 0, "registered"
	if p.Claim != nil {
		status, attempt, owner, lease, reason = "in_progress", 1, sql.NullString{String: p.Claim.WorkerID, Valid: true}, p.Claim.LeaseSeconds, "registered and claimed"
	}
	err = s.inTx(ctx, "register", func(ctx context.Context, tx *sql.Tx) error {
		sc, created, err := one(ctx, tx, "register", `
			INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status,
			                        attempt_count, lease_owner, lease_until, created_at, updated_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
			        CASE WHEN ?6 = 'in_progress' THEN `+now+` + ?9 * 1000 END, `+now+`, `+now+`)
			ON CONFLICT (tenant, operation_key) DO NOTHING
			RETURNING `+columns,
			p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload), status, attempt, owner, lease)
		if err != nil {
			return err
		}
		if created {
			res = store.RegisterResult{Operation: sc.op, Created: true}
			if p.Claim != nil {
				res.Claim = &store.ClaimResult{Operation: sc.op, Claimed: true}
			}
			return insertEvent(ctx, tx, sc.op, event{actor: owner.String, reason: reason})
		}
		existing, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		if err := store.CheckHash(existing.op, p.RequestHash); err != nil {
			return err
		}
		res = store.RegisterResult{Operation: existing.op}
		if p.Claim != nil {
			cr, err := claim(ctx, tx, existing, *p.Claim)
			if err != nil {
				return err
			}
			res.Operation, res.Claim = cr.Operation, &cr
		}
		return nil
	})
	return res, err
}

// Claim takes a lease by one conditional UPDATE.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (res store.ClaimResult, err error) {
	err = s.inTx(ctx, "claim", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		res, err = claim(ctx, tx, cur, p.ClaimPolicy)
		return err
	})
	return res, err
}

// claim claims cur's operation inside tx; cur is its row as read in tx.
func claim(ctx context.Context, tx *sql.Tx, cur scanned, cp store.ClaimPolicy) (store.ClaimResult, error) {
	sc, claimed, err := transition(ctx, tx, "claim",
		`status = 'in_progress', attempt_count = attempt_count + 1, lease_owner = ?3,
		 lease_until = `+now+` + ?4 * 1000, unknown_since = NULL, next_check_at = NULL`,
		`needs_review = 0 AND (status = 'pending' OR (?5 AND `+isUnknown+`))`,
		event{from: cur.op.Status, actor: cp.WorkerID, reason: "claimed"},
		cur.op.Tenant, cur.op.Key, cp.WorkerID, cp.LeaseSeconds, boolInt(cp.AllowRetryAfterUnknown))
	if err != nil {
		return store.ClaimResult{}, err
	}
	if claimed {
		return store.ClaimResult{Operation: sc.op, Claimed: true}, nil
	}
	res := store.ClaimResult{Operation: cur.op}
	if cur.op.Status == opjournal.StatusInProgress {
		res.RetryAfter = cur.op.LeaseUntil.Sub(cur.dbNow)
	}
	return res, nil
}

// MarkSucceeded records a confirmed effect from any issued attempt.
func (s *Store) MarkSucceeded(ctx context.Context, p store.MarkSucceededParams) (op *opjournal.Operation, err error) {
	var result any
	if p.Result != nil {
		result = string(p.Result)
	}
	err = s.inTx(ctx, "mark succeeded", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		actor := p.Actor
		if actor == "" {
			actor = cur.op.LeaseOwner
		}
		sc, done, err := transition(ctx, tx, "mark succeeded",
			`status = 'succeeded', external_id = ?4, result = ?5, lease_until = NULL,
			 unknown_since = NULL, next_check_at = NULL`,
			`status IN ('pending', 'in_progress', 'unknown') AND ?3 BETWEEN 1 AND attempt_count`,
			event{from: cur.op.Status, attempt: p.Attempt, actor: actor, reason: "effect confirmed", extID: p.ExternalID},
			p.Tenant, p.Key, p.Attempt, p.ExternalID, result)
		if err != nil || done {
			op = sc.op
			return err
		}
		if err := store.CheckAttemptIssued(cur.op, p.Attempt); err != nil {
			return err
		}
		if cur.op.Status == opjournal.StatusSucceeded && cur.op.ExternalID == p.ExternalID {
			op = cur.op
			return nil
		}
		// A second, different effect: keep the first, record the second,
		// and hand the operation to a person.
		reason := store.DuplicateEffectReason(cur.op, p.ExternalID)
		sc, done, err = transition(ctx, tx, "mark succeeded (duplicate)",
			`needs_review = 1, review_reason = coalesce(review_reason, ?4),
			 duplicate_external_id = coalesce(duplicate_external_id, ?3)`,
			`status IN ('succeeded', 'failed_final')`,
			event{from: cur.op.Status, attempt: p.Attempt, actor: actor, reason: reason, extID: p.ExternalID},
			p.Tenant, p.Key, p.ExternalID, reason)
		if err != nil {
			return err
		}
		if !done {
			return opjournal.Errorf(opjournal.CodeInternal, "", "operation %q left a terminal state", p.Key)
		}
		op = sc.op
		return nil
	})
	return op, err
}

// MarkUnknown moves the current lease holder's operation to unknown.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "unknown", "outcome unknown", p)
}

// MarkFailedFinal moves the current lease holder's operation to failed_final.
func (s *Store) MarkFailedFinal(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "failed_final", "rejected", p)
}

func (s *Store) markByHolder(ctx context.Context, to, reason string, p store.MarkParams) (op *opjournal.Operation, err error) {
	if p.ErrorCode != "" {
		reason += ": " + p.ErrorCode
	}
	err = s.inTx(ctx, "mark "+to, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		sc, done, err := transition(ctx, tx, "mark "+to,
			`status = ?4, error_code = nullif(?5, ''), lease_until = NULL,
			 unknown_since = CASE WHEN ?4 = 'unknown' THEN `+now+` END`,
			`status = 'in_progress' AND attempt_count = ?3 AND lease_until > `+now,
			event{from: cur.op.Status, attempt: p.Attempt, actor: cur.op.LeaseOwner, reason: reason},
			p.Tenant, p.Key, p.Attempt, to, p.ErrorCode)
		if err != nil || done {
			op = sc.op
			return err
		}
		return store.ExplainNotHolder(cur.op, p.Attempt)
	})
	return op, err
}

// ReleaseForRetry moves an unknown operation (its latest attempt, not under
// review, unknown for at least the visibility lag) back to pending.
func (s *Store) ReleaseForRetry(ctx context.Context, p store.ReleaseParams) (op *opjournal.Operation, err error) {
	err = s.inTx(ctx, "release", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		sc, done, err := transition(ctx, tx, "release",
			`status = 'pending', lease_until = NULL, unknown_since = NULL, next_check_at = NULL`,
			isUnknown+` AND attempt_count = ?3 AND needs_review = 0
			 AND coalesce(unknown_since, lease_until) <= `+now+` - ?4`,
			event{from: cur.op.Status, actor: p.Actor, reason: "released for retry: " + p.Reason},
			p.Tenant, p.Key, p.Attempt, p.VisibilityLag.Milliseconds())
		if err != nil || done {
			op = sc.op
			return err
		}
		return store.ExplainNoRelease(cur.op, p, cur.dbNow)
	})
	return op, err
}

// RecordCheck counts an inconclusive check; an expired lease becomes
// unknown for good (unknown_since = the lease's end).
func (s *Store) RecordCheck(ctx context.Context, p store.RecordCheckParams) (op *opjournal.Operation, err error) {
	err = s.inTx(ctx, "record check", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		from := cur.op.Status
		if from == opjournal.StatusUnknown && !cur.op.LeaseUntil.IsZero() {
			from = opjournal.StatusInProgress // an expired lease, made unknown now
		}
		sc, done, err := transition(ctx, tx, "record check",
			`status = 'unknown',
			 unknown_since = CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END,
			 lease_until = NULL, check_count = check_count + 1, last_checked_at = `+now+`,
			 next_check_at = `+now+` + ?4`,
			isUnknown+` AND attempt_count = ?3`,
			event{from: from, actor: p.Actor, reason: "checked: " + p.Note},
			p.Tenant, p.Key, p.Attempt, p.NextCheckAfter.Milliseconds())
		if err != nil || done {
			op = sc.op
			return err
		}
		return store.ExplainNoCheck(cur.op, p.Attempt)
	})
	return op, err
}

// Escalate sets needs_review on a non-terminal operation; escalating one
// already under review returns it unchanged.
func (s *Store) Escalate(ctx context.Context, p store.EscalateParams) (op *opjournal.Operation, err error) {
	err = s.inTx(ctx, "escalate", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		sc, done, err := transition(ctx, tx, "escalate",
			`needs_review = 1, review_reason = ?3`,
			`status IN ('pending', 'in_progress', 'unknown') AND needs_review = 0`,
			event{from: cur.op.Status, actor: p.Actor, reason: "escalated: " + p.Reason},
			p.Tenant, p.Key, p.Reason)
		switch {
		case err != nil || done:
			op = sc.op
			return err
		case cur.op.NeedsReview:
			op = cur.op
			return nil
		}
		return opjournal.Errorf(opjournal.CodeInvalidState, "", "operation %q is %s: a terminal operation is not escalated", p.Key, cur.op.Status)
	})
	return op, err
}

// Resolve applies an operator's verdict to an unknown or needs_review
// operation. Nothing is deleted: the previous values stay in the history.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) (op *opjournal.Operation, err error) {
	var result any
	if p.Result != nil {
		result = string(p.Result)
	}
	err = s.inTx(ctx, "resolve", func(ctx context.Context, tx *sql.Tx) error {
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		sc, done, err := transition(ctx, tx, "resolve",
			`status = ?3,
			 external_id = CASE WHEN ?3 = 'succeeded' THEN ?4 ELSE external_id END,
			 result = CASE WHEN ?3 = 'succeeded' THEN coalesce(?5, result) ELSE result END,
			 error_code = CASE WHEN ?3 = 'failed_final' THEN coalesce(nullif(?6, ''), error_code) ELSE error_code END,
			 needs_review = 0, lease_until = NULL, unknown_since = NULL, next_check_at = NULL`,
			isUnknown+` OR needs_review = 1`,
			event{from: cur.op.Status, actor: p.Actor, reason: "resolved by operator: " + p.Reason, extID: p.ExternalID},
			p.Tenant, p.Key, string(p.To), p.ExternalID, result, p.ErrorCode)
		if err != nil || done {
			op = sc.op
			return err
		}
		return store.ExplainNoResolve(cur.op)
	})
	return op, err
}

// List returns one page of operations in key order.
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*opjournal.Operation, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT ` + columns + ` FROM operations WHERE tenant = ? AND operation_key > ?`
	args := []any{p.Tenant, p.After}
	if len(p.Statuses) > 0 {
		q += ` AND ` + effectiveStatus + ` IN (?` + strings.Repeat(", ?", len(p.Statuses)-1) + `)`
		for _, st := range p.Statuses {
			args = append(args, string(st))
		}
	}
	if p.NeedsReview != nil {
		q += ` AND needs_review = ?`
		args = append(args, boolInt(*p.NeedsReview))
	}
	if p.Action != "" {
		q += ` AND action_type = ?`
		args = append(args, p.Action)
	}
	if p.DueForCheck {
		q += ` AND status IN ('in_progress', 'unknown') AND ` + isUnknown + ` AND needs_review = 0
		       AND (next_check_at IS NULL OR next_check_at <= ` + now + `)`
	}
	q += ` ORDER BY operation_key LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", classify("list", err)
	}
	defer rows.Close()
	var ops []*opjournal.Operation
	for rows.Next() {
		sc, err := scanOp(rows)
		if err != nil {
			return nil, "", classify("list", err)
		}
		ops = append(ops, sc.op)
	}
	if err := rows.Err(); err != nil {
		return nil, "", classify("list", err)
	}
	ops, next := store.Page(ops, limit)
	return ops, next, nil
}

// Events returns the operation's history, oldest first.
func (s *Store) Events(ctx context.Context, tenant, key string) ([]opjournal.Event, error) {
	if _, err := get(ctx, s.db, tenant, key); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, at, coalesce(from_status, ''), to_status, attempt, actor, reason, coalesce(external_id, '')
		FROM operation_events WHERE tenant = ?1 AND operation_key = ?2 ORDER BY id LIMIT ?3`, tenant, key, store.MaxEvents)
	if err != nil {
		return nil, classify("events", err)
	}
	defer rows.Close()
	var evs []opjournal.Event
	for rows.Next() {
		var e opjournal.Event
		var at int64
		var from, to string
		if err := rows.Scan(&e.ID, &at, &from, &to, &e.Attempt, &e.Actor, &e.Reason, &e.ExternalID); err != nil {
			return nil, classify("events", err)
		}
		e.At, e.From, e.To = ms(at), opjournal.Status(from), opjournal.Status(to)
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("events", err)
	}
	return evs, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// classify turns a driver error into an *opjournal.Error. A busy or locked
// database after the busy timeout is CodeUnavailable (retrying is safe);
// anything else is CodeInternal.
func classify(what string, err error) error {
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			return &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "database unavailable during " + what, Err: err}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "database is closed") {
		return &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "database unavailable during " + what, Err: err}
	}
	return &opjournal.Error{Code: opjournal.CodeInternal, Message: "database error during " + what, Err: err}
}
