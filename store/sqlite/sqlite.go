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
	return &Store{db: db}, nil
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

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

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

// columns is the row every query returns; see the postgres store for why
// the status is the effective one and why the clock comes last.
const columns = `tenant, operation_key, action_type, request_hash, payload,
	CASE WHEN status = 'in_progress' AND lease_until <= ` + now + ` THEN 'unknown' ELSE status END,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	coalesce(duplicate_external_id, ''), result, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at, ` + now

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

type rowScanner interface{ Scan(dest ...any) error }

func scanOp(row rowScanner) (scanned, error) {
	var (
		op                          opjournal.Operation
		payload                     string
		result                      sql.NullString
		status                      string
		leaseUntil                  sql.NullInt64
		needsReview                 int
		createdAt, updatedAt, dbNow int64
	)
	err := row.Scan(&op.Tenant, &op.Key, &op.Action, &op.RequestHash, &payload, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &op.DuplicateExternalID,
		&result, &op.ErrorCode, &needsReview, &op.ReviewReason, &createdAt, &updatedAt, &dbNow)
	if err != nil {
		return scanned{}, err
	}
	op.Payload = []byte(payload)
	if result.Valid {
		op.Result = []byte(result.String)
	}
	op.Status = opjournal.Status(status)
	if leaseUntil.Valid {
		op.LeaseUntil = time.UnixMilli(leaseUntil.Int64).UTC()
	}
	op.NeedsReview = needsReview != 0
	op.CreatedAt = time.UnixMilli(createdAt).UTC()
	op.UpdatedAt = time.UnixMilli(updatedAt).UTC()
	return scanned{op: &op, dbNow: time.UnixMilli(dbNow).UTC()}, nil
}

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

// inTx runs fn in one IMMEDIATE transaction (see dsn): SQLite has one
// writer, and taking its lock up front means fn's reads and writes see one
// consistent state and never fail half-way on an upgrade.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(what, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return classify(what, err)
	}
	return nil
}

// Get returns the operation with its effective status.
func (s *Store) Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	sc, err := get(ctx, s.db, tenant, key)
	return sc.op, err
}

// Register inserts the operation, or returns the existing one with the same
// hash (and claims it if asked), in one transaction.
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (res store.RegisterResult, err error) {
	err = s.inTx(ctx, "register", func(tx *sql.Tx) error {
		var (
			sc      scanned
			created bool
			err     error
		)
		if p.Claim == nil {
			sc, created, err = one(ctx, tx, "register", `
				INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status, created_at, updated_at)
				VALUES (?1, ?2, ?3, ?4, ?5, 'pending', `+now+`, `+now+`)
				ON CONFLICT (tenant, operation_key) DO NOTHING
				RETURNING `+columns,
				p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload))
		} else {
			sc, created, err = one(ctx, tx, "register", `
				INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status,
				                        attempt_count, lease_owner, lease_until, created_at, updated_at)
				VALUES (?1, ?2, ?3, ?4, ?5, 'in_progress', 1, ?6, `+now+` + ?7 * 1000, `+now+`, `+now+`)
				ON CONFLICT (tenant, operation_key) DO NOTHING
				RETURNING `+columns,
				p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload), p.Claim.WorkerID, p.Claim.LeaseSeconds)
		}
		if err != nil {
			return err
		}
		if created {
			res = store.RegisterResult{Operation: sc.op, Created: true}
			if p.Claim != nil {
				res.Claim = &store.ClaimResult{Operation: sc.op, Claimed: true}
			}
			return nil
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
			cr, err := claim(ctx, tx, p.Tenant, p.Key, *p.Claim)
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
	err = s.inTx(ctx, "claim", func(tx *sql.Tx) error {
		res, err = claim(ctx, tx, p.Tenant, p.Key, p.ClaimPolicy)
		return err
	})
	return res, err
}

func claim(ctx context.Context, tx *sql.Tx, tenant, key string, cp store.ClaimPolicy) (store.ClaimResult, error) {
	sc, claimed, err := one(ctx, tx, "claim", `
		UPDATE operations
		SET status = 'in_progress', attempt_count = attempt_count + 1, lease_owner = ?3,
		    lease_until = `+now+` + ?4 * 1000, updated_at = `+now+`
		WHERE tenant = ?1 AND operation_key = ?2 AND needs_review = 0
		  AND (status = 'pending'
		       OR (?5 AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= `+now+`))))
		RETURNING `+columns,
		tenant, key, cp.WorkerID, cp.LeaseSeconds, boolInt(cp.AllowRetryAfterUnknown))
	if err != nil {
		return store.ClaimResult{}, err
	}
	if claimed {
		return store.ClaimResult{Operation: sc.op, Claimed: true}, nil
	}
	cur, err := get(ctx, tx, tenant, key)
	if err != nil {
		return store.ClaimResult{}, err
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
	err = s.inTx(ctx, "mark succeeded", func(tx *sql.Tx) error {
		sc, done, err := one(ctx, tx, "mark succeeded", `
			UPDATE operations
			SET status = 'succeeded', external_id = ?4, result = ?5, lease_until = NULL, updated_at = `+now+`
			WHERE tenant = ?1 AND operation_key = ?2
			  AND status IN ('pending', 'in_progress', 'unknown')
			  AND ?3 BETWEEN 1 AND attempt_count
			RETURNING `+columns,
			p.Tenant, p.Key, p.Attempt, p.ExternalID, result)
		if err != nil || done {
			op = sc.op
			return err
		}
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
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
		sc, done, err = one(ctx, tx, "mark succeeded (duplicate)", `
			UPDATE operations
			SET needs_review = 1, review_reason = coalesce(review_reason, ?4),
			    duplicate_external_id = coalesce(duplicate_external_id, ?3), updated_at = `+now+`
			WHERE tenant = ?1 AND operation_key = ?2 AND status IN ('succeeded', 'failed_final')
			RETURNING `+columns,
			p.Tenant, p.Key, p.ExternalID, store.DuplicateEffectReason(cur.op, p.ExternalID))
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
	return s.markByHolder(ctx, "unknown", p)
}

// MarkFailedFinal moves the current lease holder's operation to failed_final.
func (s *Store) MarkFailedFinal(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "failed_final", p)
}

func (s *Store) markByHolder(ctx context.Context, to string, p store.MarkParams) (op *opjournal.Operation, err error) {
	err = s.inTx(ctx, "mark "+to, func(tx *sql.Tx) error {
		sc, done, err := one(ctx, tx, "mark "+to, `
			UPDATE operations
			SET status = ?4, error_code = nullif(?5, ''), lease_until = NULL, updated_at = `+now+`
			WHERE tenant = ?1 AND operation_key = ?2 AND status = 'in_progress'
			  AND attempt_count = ?3 AND lease_until > `+now+`
			RETURNING `+columns,
			p.Tenant, p.Key, p.Attempt, to, p.ErrorCode)
		if err != nil || done {
			op = sc.op
			return err
		}
		cur, err := get(ctx, tx, p.Tenant, p.Key)
		if err != nil {
			return err
		}
		return store.ExplainNotHolder(cur.op, p.Attempt)
	})
	return op, err
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
