// Package postgres is the production store: PostgreSQL through a pgx/v5
// pool. Any number of opjournal processes may share one database; the
// primary key and conditional UPDATEs make them exactly as safe as one.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/migrations"
	"github.com/opjournal/opjournal/store"
)

// Store implements store.Store on PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Open applies pending migrations to the database at url
// ("postgres://user@host:port/db?..."; pgx connection parameters such as
// search_path or pool_max_conns are honoured) and returns a Store. It
// returns an *opjournal.Error with CodeUnavailable when the database cannot
// be reached.
func Open(ctx context.Context, url string) (*Store, error) {
	if err := Migrate(url); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", redact(err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify("connect", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify("connect", err)
	}
	return &Store{pool: pool}, nil
}

// Migrate applies the embedded migrations (migrations/postgres) to the
// database at url. golang-migrate holds an advisory lock meanwhile, so
// several servers starting at once are safe.
func Migrate(url string) error {
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	mURL := url
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if strings.HasPrefix(url, prefix) {
			mURL = "pgx5://" + strings.TrimPrefix(url, prefix)
		}
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, mURL)
	if err != nil {
		return classify("migrate", err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return classify("migrate", err)
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() error { s.pool.Close(); return nil }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// columns is the row every query returns. The status is the effective one:
// an in_progress row whose lease has expired on the database clock reads as
// unknown (its worker vanished mid-call). The last column is the database's
// clock, used to compute retry-after hints without trusting ours.
const columns = `tenant, operation_key, action_type, request_hash, payload::text,
	CASE WHEN status = 'in_progress' AND lease_until <= now() THEN 'unknown' ELSE status END,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	coalesce(duplicate_external_id, ''), result::text, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at, now()`

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

func scanOp(row pgx.Row) (scanned, error) {
	var (
		op         opjournal.Operation
		payload    string
		result     *string
		status     string
		leaseUntil *time.Time
		dbNow      time.Time
	)
	err := row.Scan(&op.Tenant, &op.Key, &op.Action, &op.RequestHash, &payload, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &op.DuplicateExternalID,
		&result, &op.ErrorCode, &op.NeedsReview, &op.ReviewReason, &op.CreatedAt, &op.UpdatedAt, &dbNow)
	if err != nil {
		return scanned{}, err
	}
	op.Payload = []byte(payload)
	if result != nil {
		op.Result = []byte(*result)
	}
	op.Status = opjournal.Status(status)
	if leaseUntil != nil {
		op.LeaseUntil = *leaseUntil
	}
	return scanned{op: &op, dbNow: dbNow}, nil
}

// one runs a statement that returns at most one operation row. found is
// false when no row matched (the conditional update did not apply).
func (s *Store) one(ctx context.Context, what, sql string, args ...any) (sc scanned, found bool, err error) {
	sc, err = scanOp(s.pool.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return scanned{}, false, nil
	}
	if err != nil {
		return scanned{}, false, classify(what, err)
	}
	return sc, true, nil
}

func (s *Store) get(ctx context.Context, tenant, key string) (scanned, error) {
	sc, found, err := s.one(ctx, "get", `SELECT `+columns+` FROM operations WHERE tenant = $1 AND operation_key = $2`, tenant, key)
	if err != nil {
		return scanned{}, err
	}
	if !found {
		return scanned{}, opjournal.Errorf(opjournal.CodeNotFound, "operation_key", "no operation %q", key)
	}
	return sc, nil
}

// Get returns the operation with its effective status.
func (s *Store) Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	sc, err := s.get(ctx, tenant, key)
	return sc.op, err
}

// Register inserts the operation, or returns the existing one with the same
// hash (and claims it if asked). With a claim, a new key is inserted
// directly as in_progress with attempt 1: one statement, one commit.
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (store.RegisterResult, error) {
	var (
		sc      scanned
		created bool
		err     error
	)
	if p.Claim == nil {
		sc, created, err = s.one(ctx, "register", `
			INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status)
			VALUES ($1, $2, $3, $4, $5::json, 'pending')
			ON CONFLICT (tenant, operation_key) DO NOTHING
			RETURNING `+columns,
			p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload))
	} else {
		sc, created, err = s.one(ctx, "register", `
			INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status,
			                        attempt_count, lease_owner, lease_until)
			VALUES ($1, $2, $3, $4, $5::json, 'in_progress', 1, $6, now() + make_interval(secs => $7))
			ON CONFLICT (tenant, operation_key) DO NOTHING
			RETURNING `+columns,
			p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload), p.Claim.WorkerID, p.Claim.LeaseSeconds)
	}
	if err != nil {
		return store.RegisterResult{}, err
	}
	if created {
		res := store.RegisterResult{Operation: sc.op, Created: true}
		if p.Claim != nil {
			res.Claim = &store.ClaimResult{Operation: sc.op, Claimed: true}
		}
		return res, nil
	}
	// The key exists. Its hash decides: same request → replay, other → conflict.
	existing, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return store.RegisterResult{}, err
	}
	if err := store.CheckHash(existing.op, p.RequestHash); err != nil {
		return store.RegisterResult{}, err
	}
	res := store.RegisterResult{Operation: existing.op}
	if p.Claim != nil {
		cr, err := s.claim(ctx, p.Tenant, p.Key, *p.Claim)
		if err != nil {
			return store.RegisterResult{}, err
		}
		res.Operation, res.Claim = cr.Operation, &cr
	}
	return res, nil
}

// Claim takes a lease by one conditional UPDATE: exactly one of any number
// of concurrent callers (in any number of processes) sees a row come back.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	return s.claim(ctx, p.Tenant, p.Key, p.ClaimPolicy)
}

func (s *Store) claim(ctx context.Context, tenant, key string, cp store.ClaimPolicy) (store.ClaimResult, error) {
	sc, claimed, err := s.one(ctx, "claim", `
		UPDATE operations
		SET status = 'in_progress', attempt_count = attempt_count + 1, lease_owner = $3,
		    lease_until = now() + make_interval(secs => $4), updated_at = now()
		WHERE tenant = $1 AND operation_key = $2 AND NOT needs_review
		  AND (status = 'pending'
		       OR ($5 AND (status = 'unknown' OR (status = 'in_progress' AND lease_until <= now()))))
		RETURNING `+columns,
		tenant, key, cp.WorkerID, cp.LeaseSeconds, cp.AllowRetryAfterUnknown)
	if err != nil {
		return store.ClaimResult{}, err
	}
	if claimed {
		return store.ClaimResult{Operation: sc.op, Claimed: true}, nil
	}
	cur, err := s.get(ctx, tenant, key)
	if err != nil {
		return store.ClaimResult{}, err
	}
	return store.ClaimResult{Operation: cur.op, RetryAfter: retryAfter(cur)}, nil
}

func retryAfter(sc scanned) time.Duration {
	if sc.op.Status != opjournal.StatusInProgress {
		return 0
	}
	return sc.op.LeaseUntil.Sub(sc.dbNow)
}

// MarkSucceeded records a confirmed effect from any issued attempt.
func (s *Store) MarkSucceeded(ctx context.Context, p store.MarkSucceededParams) (*opjournal.Operation, error) {
	var result *string
	if p.Result != nil {
		r := string(p.Result)
		result = &r
	}
	sc, done, err := s.one(ctx, "mark succeeded", `
		UPDATE operations
		SET status = 'succeeded', external_id = $4, result = $5::json, lease_until = NULL, updated_at = now()
		WHERE tenant = $1 AND operation_key = $2
		  AND status IN ('pending', 'in_progress', 'unknown')
		  AND $3 BETWEEN 1 AND attempt_count
		RETURNING `+columns,
		p.Tenant, p.Key, p.Attempt, p.ExternalID, result)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	if err := store.CheckAttemptIssued(cur.op, p.Attempt); err != nil {
		return nil, err
	}
	// The operation is terminal (terminal states never change, so this read
	// is stable). The same external_id again is a no-op.
	if cur.op.Status == opjournal.StatusSucceeded && cur.op.ExternalID == p.ExternalID {
		return cur.op, nil
	}
	// Another effect was confirmed: keep the first, record the second, and
	// hand the operation to a person. The first duplicate reported is kept.
	sc, done, err = s.one(ctx, "mark succeeded (duplicate)", `
		UPDATE operations
		SET needs_review = true, review_reason = coalesce(review_reason, $4),
		    duplicate_external_id = coalesce(duplicate_external_id, $3), updated_at = now()
		WHERE tenant = $1 AND operation_key = $2 AND status IN ('succeeded', 'failed_final')
		RETURNING `+columns,
		p.Tenant, p.Key, p.ExternalID, store.DuplicateEffectReason(cur.op, p.ExternalID))
	if err != nil {
		return nil, err
	}
	if !done {
		return nil, opjournal.Errorf(opjournal.CodeInternal, "", "operation %q left a terminal state", p.Key)
	}
	return sc.op, nil
}

// MarkUnknown moves the current lease holder's operation to unknown.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "unknown", p)
}

// MarkFailedFinal moves the current lease holder's operation to failed_final.
func (s *Store) MarkFailedFinal(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "failed_final", p)
}

// markByHolder applies a transition only for the current, live lease: the
// attempt number is the fencing token and the lease is judged by now().
func (s *Store) markByHolder(ctx context.Context, to string, p store.MarkParams) (*opjournal.Operation, error) {
	sc, done, err := s.one(ctx, "mark "+to, `
		UPDATE operations
		SET status = $4, error_code = nullif($5, ''), lease_until = NULL, updated_at = now()
		WHERE tenant = $1 AND operation_key = $2 AND status = 'in_progress'
		  AND attempt_count = $3 AND lease_until > now()
		RETURNING `+columns,
		p.Tenant, p.Key, p.Attempt, to, p.ErrorCode)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	return nil, store.ExplainNotHolder(cur.op, p.Attempt)
}
