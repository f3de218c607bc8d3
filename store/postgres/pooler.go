package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store/migrations"
)

// Behind a transaction pooler (PgBouncer with pool_mode = transaction)
// each transaction, and each statement outside one, may run on another
// server connection. Nothing of a session survives from one statement to
// the next: named prepared statements, SET, session advisory locks. The
// store says so through pgx's own URL parameter default_query_exec_mode:
// any mode but cache_statement (pgx's default, which keeps named prepared
// statements per connection) marks the URL as one that may go through a
// pooler, and then
//
//   - no startup parameters are added: PgBouncer refuses the ones it does
//     not track, and none is needed, because without cached prepared
//     statements there are no generic plans (see Open);
//   - Open does not migrate (golang-migrate holds a SESSION advisory lock
//     across statements, which the pooler would take on one server
//     connection and try to release on another, leaving it held): it
//     checks that the schema is current and otherwise says to run
//     `opjournal migrate` on a direct URL; Migrate refuses such a URL;
//   - the housekeeping lock (TryLock) is a lease row (lock.go), as it is
//     on a direct connection too.
//
// The mode to use behind PgBouncer 1.18 (which has no prepared statements
// in transaction mode) is cache_describe: pgx asks the server once per
// client connection for a statement's parameter and result types (an
// unnamed Parse and Describe, then Sync), then sends every execution as
// Parse + Bind + Execute of the unnamed statement in ONE message run
// ended by Sync, which the pooler keeps on one server connection. The
// server types the parameters, so the unnest arrays and the NULL test
// clock are typed as the statements say, and the unnamed statement is
// planned for each execution's values (a custom plan, never a cached
// generic one). Not describe_exec: it binds in a second round trip the
// unnamed statement parsed in the first, which may be another server
// connection. Not exec or simple_protocol: they type parameters from Go
// values (a []byte would be bytea, not jsonb). cache_describe's one
// caveat, a description gone stale when a migration changes a
// statement's column types under a running server, is the same as
// cache_statement's.
const poolerExecMode = "cache_describe"

// pooled reports whether cfg's statement mode marks a URL that may go
// through a transaction pooler (see above).
func pooled(cfg *pgx.ConnConfig) bool {
	return cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement
}

// ErrMigrateThroughPooler is returned by Migrate for a URL marked as
// going through a transaction pooler.
var ErrMigrateThroughPooler = errors.New("postgres: migrations need a direct connection to PostgreSQL (golang-migrate holds a session advisory lock across statements, which a transaction pooler such as PgBouncer does not keep): this URL sets default_query_exec_mode, which marks a pooled URL; run `opjournal migrate --database-url URL` with a URL of the server itself (or of a PgBouncer database in session mode), without default_query_exec_mode")

// latestVersion is the version of the last embedded migration.
func latestVersion() (uint, error) {
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		return 0, fmt.Errorf("postgres: migrations: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("postgres: migrations: %w", err)
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil // no next migration: v is the last
		}
		v = next
	}
}

// checkMigrated is Open's check behind a pooler: the schema must be at
// the last embedded migration, and clean, since Open does not migrate
// there. Its errors say what to run.
func checkMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	want, err := latestVersion()
	if err != nil {
		return err
	}
	var version int64
	var dirty bool
	err = pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&version, &dirty)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01", errors.Is(err, pgx.ErrNoRows): // no table, or no version yet
		return opjournal.Errorf(opjournal.CodeUnavailable, "", "postgres: the database has no opjournal schema (or is not migrated), and this URL goes through a transaction pooler (default_query_exec_mode), where Open does not migrate: run `opjournal migrate --database-url URL` with a direct URL of the server first")
	case err != nil:
		return classify("schema version", err)
	case dirty:
		return opjournal.Errorf(opjournal.CodeUnavailable, "", "postgres: migration %d failed half-way (schema_migrations is dirty): repair it, then run `opjournal migrate` with a direct URL", version)
	case version != int64(want):
		return opjournal.Errorf(opjournal.CodeUnavailable, "", "postgres: the database schema is at version %d and this build needs %d; behind a transaction pooler (default_query_exec_mode) Open does not migrate: run `opjournal migrate --database-url URL` with a direct URL of the server", version, want)
	}
	return nil
}

// poolerHint adds what to do to a connection refused for its startup
// parameters, which is how PgBouncer answers the planner settings Open
// sends on a URL not marked as pooled.
func poolerHint(err error) error {
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
		return err
	}
	return fmt.Errorf("%w (this looks like PgBouncer or another pooler: add default_query_exec_mode=%s to the database URL, remove search_path and other session settings, and run migrations with `opjournal migrate` on a direct URL)", err, poolerExecMode)
}
