// Package sqlite is the embedded store: one SQLite file through pure Go
// (modernc.org/sqlite's SQLite: reads through its database/sql driver,
// writes on one connection through zombiezen.com/go/sqlite, see writer.go),
// so `opjournal serve` needs no setup and builds with CGO_ENABLED=0. It is
// for one server process; several processes on one PostgreSQL is the way
// to scale out.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
	zsqlite "zombiezen.com/go/sqlite"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/migrations"
)

// Store implements store.Store on a SQLite file.
type Store struct {
	db    *sql.DB
	path  string                           // the file, naming TryLock's locks
	clock atomic.Pointer[func() time.Time] // test clock (SetClock); nil: SQLite's
	// commit runs the write transactions, grouping concurrent ones
	// (groupcommit.go), on the write connection w (writer.go); db is the
	// pool the reads use.
	commit *committer
	w      *writer
	// stmts are the reads' statements, prepared once (prepared.go).
	stmts preparedCache
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
	if err := createPrivate(path); err != nil {
		return nil, err
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
	w, err := openWriter(path)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db, path: path, commit: newCommitter(w), w: w}, nil
}

// createPrivate creates the database file, if it does not exist yet, as
// readable and writable by its owner only (0600): it holds every payload.
// SQLite creates the -wal and -shm files with the database file's mode, so
// they are private too.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	return f.Close()
}

// Migrate applies the embedded migrations (store/migrations/sqlite) to the file
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
	werr := s.w.close() // waits for a transaction still running
	s.closeStatements()
	return errors.Join(werr, s.db.Close())
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// nowSQL is the clock of a statement in milliseconds: the test clock
// (SetClock) when one is set, passed as ?1 in every statement, else
// SQLite's own. Within one statement SQLite reads its clock once, so every
// "now" in a statement is the same instant.
const nowSQL = `coalesce(?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))`

// dialect is how SQLite spells the protocol's shared terms
// (protocol/predicate.go): the statement's clock, a false
// boolean (an integer), and a duration argument in milliseconds (?3 in
// the purge). The terms are rendered into constants (terms.go, by the
// protocol's generator, protocol/cmd/protocolgen), because the write path's statements must stay
// constants: harness/bench/sqlitedrivers evaluates them from this source.
var dialect = protocol.Dialect{
	Now:     nowSQL,
	IsFalse: func(col string) string { return col + " = 0" },
	NowMinus: func(arg string) string {
		if arg != protocol.RetentionArg {
			panic("sqlite: no placeholder for " + arg)
		}
		return nowSQL + " - ?3"
	},
}

// columns is the row every query returns; see the postgres store for why
// the status is the effective one and why the clock comes last. The
// payload, result and note are the first three, so that the BASIC view can
// leave them out.
const (
	fullColumns  = `payload, result, coalesce(note, ''), ` + restColumns
	basicColumns = `NULL, NULL, '', ` + restColumns
	restColumns  = `tenant, operation_key, action_type, request_hash, ` + effectiveStatus + `,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	duplicate_external_ids, duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	` + effectiveUnknownSince + `,
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs, coalesce(parent_key, ''), first_attempt_at, approval, approval_deadline, budgets, ` + nowSQL
)

// The write path's statements, by name: harness/bench/sqlitedrivers runs the same
// texts on other drivers and checks that they still match these.
const (
	// getSQL reads one operation and the clock (?1 the test clock, ?2
	// the tenant, ?3 the key).
	getSQL = `SELECT ` + fullColumns + ` FROM operations WHERE tenant = ?2 AND operation_key = ?3`
	// clockSQL reads the clock alone, for a Register of a new key.
	clockSQL = `SELECT ` + nowSQL
	// updateSQL writes every field a rule may change; ?1 is unused, so
	// that it shares its arguments with insertSQL.
	updateSQL = `UPDATE operations SET status = ?4, attempt_count = ?5, lease_owner = ?6,
			lease_until = ?7, external_id = ?8, result = ?9, error_code = ?10, needs_review = ?11, review_reason = ?12,
			unknown_since = ?13, check_count = ?14, last_checked_at = ?15, next_check_at = ?16, attempt_started_at = ?17,
			duplicate_external_ids = ?18, duplicate_reports = ?19, updated_at = ?20, first_attempt_at = ?21,
			note = ?22, approval = ?23, approval_deadline = ?24
			WHERE tenant = ?2 AND operation_key = ?3`
	// insertSQL writes a new row: updateSQL's arguments, then the fields
	// fixed at registration.
	insertSQL = `INSERT INTO operations (tenant, operation_key, status, attempt_count, lease_owner,
		lease_until, external_id, result, error_code, needs_review, review_reason, unknown_since, check_count,
		last_checked_at, next_check_at, attempt_started_at, duplicate_external_ids, duplicate_reports, updated_at,
		first_attempt_at, note, approval, approval_deadline, action_type, request_hash, hash_key_id, payload, created_at, refs, parent_key, budgets)
		VALUES (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)`
	// insertRefSQL writes one business reference of a new row.
	insertRefSQL = `INSERT INTO operation_refs (tenant, operation_key, name, value) VALUES (?1, ?2, ?3, ?4)`
	// insertHoldSQL writes one budget hold of a new row.
	insertHoldSQL = `INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`
	// insertEventSQL writes one history row.
	insertEventSQL = `INSERT INTO operation_events
		(tenant, operation_key, at, from_status, to_status, attempt, actor, stated_actor, reason, external_id, actor_label)
		VALUES (?1, ?2, ?3, nullif(?4, ''), ?5, ?6, ?7, ?8, ?9, nullif(?10, ''), ?11)`
)

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

type rowScanner interface{ Scan(dest ...any) error }

func scanOp(row rowScanner) (scanned, error) {
	var (
		op                                                                     opjournal.Operation
		payload, result, refs, approval, budgets                               sql.NullString
		status, dups                                                           string
		leaseUntil, unknownSince, lastCheck, nextCheck, attStart, firstAttempt sql.NullInt64
		deadline                                                               sql.NullInt64
		needsReview                                                            int
		createdAt, updatedAt, dbNow                                            int64
	)
	err := row.Scan(&payload, &result, &op.Note, &op.Tenant, &op.Key, &op.Action, &op.RequestHash, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &dups, &op.DuplicateReports,
		&op.ErrorCode, &needsReview, &op.ReviewReason, &createdAt, &updatedAt,
		&unknownSince, &op.CheckCount, &lastCheck, &nextCheck, &attStart, &op.HashKeyID,
		&refs, &op.ParentKey, &firstAttempt, &approval, &deadline, &budgets, &dbNow)
	if err != nil {
		return scanned{}, err
	}
	if budgets.Valid {
		if op.Budgets, err = opjournal.ParseBudgets([]byte(budgets.String)); err != nil {
			return scanned{}, fmt.Errorf("budgets: %w", err)
		}
	}
	if approval.Valid {
		var d time.Time
		if deadline.Valid {
			d = ms(deadline.Int64)
		}
		if op.Approval, err = opjournal.ParseApproval([]byte(approval.String), d); err != nil {
			return scanned{}, fmt.Errorf("approval: %w", err)
		}
	}
	if refs.Valid {
		if op.Refs, err = opjournal.ParseRefs([]byte(refs.String)); err != nil {
			return scanned{}, fmt.Errorf("refs: %w", err)
		}
	}
	if payload.Valid {
		op.Payload = []byte(payload.String)
	}
	if result.Valid {
		op.Result = []byte(result.String)
	}
	if err := json.Unmarshal([]byte(dups), &op.DuplicateExternalIDs); err != nil {
		return scanned{}, fmt.Errorf("duplicate_external_ids: %w", err)
	}
	if len(op.DuplicateExternalIDs) > 0 {
		op.DuplicateExternalID = op.DuplicateExternalIDs[0]
	} else {
		op.DuplicateExternalIDs = nil
	}
	op.Status = opjournal.Status(status)
	for _, t := range []struct {
		src sql.NullInt64
		dst *time.Time
	}{{leaseUntil, &op.LeaseUntil}, {unknownSince, &op.UnknownSince}, {lastCheck, &op.LastCheckedAt}, {nextCheck, &op.NextCheckAt},
		{attStart, &op.AttemptStartedAt}, {firstAttempt, &op.FirstAttemptAt}} {
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

// clockArg is ?1 of every statement: the test clock in milliseconds, or
// NULL for SQLite's.
func (s *Store) clockArg() any {
	if f := s.clock.Load(); f != nil {
		return (*f)().UnixMilli()
	}
	return nil
}

// SetClock makes the store read the time from now instead of SQLite's
// clock (store.Clock, for tests); nil restores SQLite's clock.
func (s *Store) SetClock(now func() time.Time) {
	if now == nil {
		s.clock.Store(nil)
		return
	}
	s.clock.Store(&now)
}

var _ store.Clock = (*Store)(nil)

// get reads one operation (and the clock) through q.
func (s *Store) get(ctx context.Context, q querier, tenant, key string) (scanned, bool, error) {
	return found(scanOp(s.queryRow(ctx, q, getSQL, s.clockArg(), tenant, key)))
}

// getTx is get in a write transaction.
func (s *Store) getTx(ctx context.Context, tx *wtx, tenant, key string) (scanned, bool, error) {
	return found(scanOp(tx.QueryRowContext(ctx, getSQL, s.clockArg(), tenant, key)))
}

// found is get's answer from scanOp's: no row is not an error.
func found(sc scanned, err error) (scanned, bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return scanned{}, false, nil
	}
	if err != nil {
		return scanned{}, false, classify("get", err)
	}
	return sc, true, nil
}

// Get returns the operation with its effective status.
func (s *Store) Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	sc, found, err := s.get(ctx, s.db, tenant, key)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, opjournal.Errorf(opjournal.CodeNotFound, "operation_key", "no operation %q", key)
	}
	return sc.op, nil
}

// applied is what one command did inside a transaction.
type applied struct {
	op       *opjournal.Operation
	rule     *protocol.Rule
	dbNow    time.Time
	existed  bool // the operation was there before (Register)
	claimed  bool
	retryFor time.Duration
}

// apply reads the operation inside tx, applies c with protocol.Apply on
// the database clock, and writes the change and its event. It is the
// whole store: SQLite runs the protocol table itself.
func (s *Store) apply(ctx context.Context, tx *wtx, tenant string, c *protocol.Command) (applied, error) {
	cur, found, err := s.getTx(ctx, tx, tenant, c.Key)
	if err != nil {
		return applied{}, err
	}
	var op *opjournal.Operation
	dbNow := cur.dbNow
	if found {
		op = cur.op
	} else if dbNow, err = s.now(ctx, tx); err != nil {
		return applied{}, err
	}
	if !found && len(c.Budgets) > 0 {
		// One writer: nothing else registers between this read of the
		// window's use and the insert below.
		if c, err = s.decideBudgets(ctx, tx, tenant, c, dbNow); err != nil {
			return applied{}, err
		}
	}
	d, err := protocol.Apply(op, c, dbNow)
	if err != nil {
		return applied{}, err
	}
	res := applied{op: d.Op, rule: d.Rule, dbNow: dbNow, existed: found}
	if d.Rule.Outcome == protocol.Changed {
		d.Op.Tenant = tenant
		if err := s.write(ctx, tx, d.Op, !found); err != nil {
			return applied{}, err
		}
		if d.Event != nil {
			if err := s.insertEvent(ctx, tx, d.Op, d.Event); err != nil {
				return applied{}, err
			}
		}
	}
	switch {
	case c.Kind == protocol.CmdClaim || (c.Kind == protocol.CmdRegister && !found && c.Claim):
		// A new key that needs approval is inserted awaiting it: its
		// Register changes the row but claims nothing.
		res.claimed = d.Rule.Outcome == protocol.Changed && d.Op.Raw() == opjournal.StatusInProgress
		if !res.claimed {
			res.retryFor = store.RetryAfter(d.Op, dbNow)
		}
	case c.Kind == protocol.CmdRegister && d.Op.Status == opjournal.StatusAwaitingApproval:
		res.retryFor = store.AwaitRetryAfter(d.Op, dbNow)
	}
	return res, nil
}

// now reads the statement clock (for a Register of a new key, which reads
// no row).
func (s *Store) now(ctx context.Context, tx *wtx) (time.Time, error) {
	var v int64
	if err := tx.QueryRowContext(ctx, clockSQL, s.clockArg()).Scan(&v); err != nil {
		return time.Time{}, classify("clock", err)
	}
	return ms(v), nil
}

// write stores op's row as Apply left it: a new row (insert) or every
// field a rule may change (update). The stored status is the raw one: an
// expired lease stays in_progress, as in PostgreSQL.
func (s *Store) write(ctx context.Context, tx *wtx, op *opjournal.Operation, insert bool) error {
	dups, err := json.Marshal(nonNil(op.DuplicateExternalIDs))
	if err != nil {
		return classify("write", err)
	}
	var result any
	if op.Result != nil {
		result = string(op.Result)
	}
	args := []any{s.clockArg(), op.Tenant, op.Key, string(op.Raw()), op.AttemptCount, nullText(op.LeaseOwner), nullTime(op.LeaseUntil),
		nullText(op.ExternalID), result, nullText(op.ErrorCode), boolInt(op.NeedsReview), nullText(op.ReviewReason),
		nullTime(op.UnknownSince), op.CheckCount, nullTime(op.LastCheckedAt), nullTime(op.NextCheckAt),
		nullTime(op.AttemptStartedAt), string(dups), op.DuplicateReports, op.UpdatedAt.UnixMilli(), nullTime(op.FirstAttemptAt),
		nullText(op.Note), nil, nil}
	if a := op.Approval; a != nil {
		args[len(args)-2], args[len(args)-1] = string(opjournal.ApprovalJSON(a)), nullTime(a.Deadline)
	}
	if !insert {
		_, err = tx.ExecContext(ctx, updateSQL, args...)
		if err != nil {
			return classify("write", err)
		}
		return nil
	}
	var refs any
	if r := opjournal.RefsJSON(op.Refs); r != nil {
		refs = string(r)
	}
	var budgets any
	if b := opjournal.BudgetsJSON(op.Budgets); b != nil {
		budgets = string(b)
	}
	_, err = tx.ExecContext(ctx, insertSQL, append(args, op.Action, op.RequestHash, op.HashKeyID, string(op.Payload), op.CreatedAt.UnixMilli(), refs, nullText(op.ParentKey), budgets)...)
	if err != nil {
		return classify("write", err)
	}
	for _, h := range op.Budgets {
		if _, err := tx.ExecContext(ctx, insertHoldSQL, op.Tenant, h.Budget, h.Scope, op.CreatedAt.UnixMilli(), op.Key, h.Amount, boolInt(h.OverLimit)); err != nil {
			return classify("write budget holds", err)
		}
	}
	for name, value := range op.Refs {
		if _, err := tx.ExecContext(ctx, insertRefSQL, op.Tenant, op.Key, name, value); err != nil {
			return classify("write refs", err)
		}
	}
	return nil
}

func (s *Store) insertEvent(ctx context.Context, tx *wtx, op *opjournal.Operation, ev *opjournal.Event) error {
	_, err := tx.ExecContext(ctx, insertEventSQL, op.Tenant, op.Key, ev.At.UnixMilli(), string(ev.From), string(ev.To), ev.Attempt, ev.Actor, ev.StatedActor, ev.Reason, ev.ExternalID, ev.ActorLabel)
	if err != nil {
		return classify("write history", err)
	}
	return nil
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

// Apply applies c in one write transaction (shared with concurrent ones,
// groupcommit.go): Register with a claim of a key that exists claims it
// in the same transaction.
func (s *Store) Apply(ctx context.Context, tenant string, c *protocol.Command) (res store.Applied, err error) {
	err = s.commit.do(ctx, store.Verb(c.Kind), func(ctx context.Context, tx *wtx) error {
		a, err := s.apply(ctx, tx, tenant, c)
		if err != nil {
			return err
		}
		res = store.Applied{Operation: a.op, Created: c.Kind == protocol.CmdRegister && !a.existed, Claimed: a.claimed, RetryAfter: a.retryFor}
		if c.Kind != protocol.CmdRegister || !c.Claim || !a.existed {
			return nil
		}
		a, err = s.apply(ctx, tx, tenant, store.ClaimOf(c))
		if err != nil {
			return err
		}
		res.Operation, res.Claimed, res.RetryAfter = a.op, a.claimed, a.retryFor
		return nil
	})
	return res, err
}

// List returns one page of operations in key order: the statement is
// store.BuildList's, in SQLite's terms (ListDialect).
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*opjournal.Operation, string, error) {
	st := store.BuildList(ListDialect{}, p, s.clockArg())
	rows, err := s.db.QueryContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, "", classify("list", err)
	}
	defer rows.Close()
	ops, next, err := store.ScanPage(rows, st.Limit, func() (*opjournal.Operation, error) {
		sc, err := scanOp(rows)
		return sc.op, err
	})
	if err != nil {
		return nil, "", classify("list", err)
	}
	return ops, next, nil
}

// ListDialect is how SQLite spells List's statement (store.ListDialect):
// ?n placeholders, and the conditions below.
type ListDialect struct{}

var _ store.ListDialect = ListDialect{}

// Placeholder is "?n".
func (ListDialect) Placeholder(n int) string { return "?" + strconv.Itoa(n) }

// Columns is the row scanOp reads.
func (ListDialect) Columns(basic bool) string {
	if basic {
		return basicColumns
	}
	return fullColumns
}

// Bool is 1 or 0: SQLite stores booleans as integers.
func (ListDialect) Bool(b bool) any { return boolInt(b) }

// Time is t in milliseconds, rounded up (ceilMs): SQLite stores times as
// whole milliseconds.
func (ListDialect) Time(t time.Time) any { return ceilMs(t) }

// CheckDue is protocol.CheckDueTerm in SQLite's SQL.
func (ListDialect) CheckDue() string { return checkDue }

// LeaseExpired is protocol.LeaseExpiredTerm in SQLite's SQL.
func (ListDialect) LeaseExpired() string { return leaseExpired }

// Statuses is IN with one parameter per status: SQLite has no arrays.
func (ListDialect) Statuses(a *store.Args, statuses []opjournal.Status) string {
	in := make([]string, len(statuses))
	for i, st := range statuses {
		in[i] = a.Add(string(st))
	}
	return effectiveStatus + ` IN (` + strings.Join(in, ", ") + `)`
}

// Refs: each ref narrows the keys through operation_refs' (tenant, name,
// value) index, which then drives the scan.
func (ListDialect) Refs(a *store.Args, tenant string, refs map[string]string) string {
	var conds []string
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		conds = append(conds, `operation_key IN (SELECT operation_key FROM operation_refs WHERE tenant = `+tenant+
			` AND name = `+a.Add(name)+` AND value = `+a.Add(refs[name])+`)`)
	}
	return strings.Join(conds, ` AND `)
}

// KeyPrefix is a range of the key, not LIKE: SQLite compares text byte
// by byte (BINARY), so the range holds exactly the keys that begin with
// those bytes, whatever they are (% and _ included), and the primary
// key's index scans only that range.
func (ListDialect) KeyPrefix(a *store.Args, prefix string) string {
	cond := `operation_key >= ` + a.Add(prefix)
	if end, ok := prefixEnd(prefix); ok {
		cond += ` AND operation_key < ` + a.Add(end)
	}
	return cond
}

// prefixEnd is the least string above every string that begins with
// prefix: prefix cut after its last byte below 0xff, that byte
// incremented. ok is false when every byte is 0xff: nothing bounds the
// range then.
func prefixEnd(prefix string) (end string, ok bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// ceilMs is t in milliseconds, rounded up: a stored time (whole
// milliseconds) is >= t, or < t, exactly when it is >= ceilMs(t), or <
// ceilMs(t).
func ceilMs(t time.Time) int64 {
	m := t.UnixMilli() // rounded down, before the epoch too
	if t.After(time.UnixMilli(m)) {
		m++
	}
	return m
}

// Counts groups the tenant's operations in one statement, which reads
// them through the primary key's tenant prefix.
func (s *Store) Counts(ctx context.Context, tenant string) ([]store.CountRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT action_type, `+effectiveStatus+`, needs_review, `+leaseExpired+`, `+checkDue+`,
		count(*), min(updated_at)
		FROM operations WHERE tenant = ?2 GROUP BY 1, 2, 3, 4, 5`, s.clockArg(), tenant)
	if err != nil {
		return nil, classify("counts", err)
	}
	defer rows.Close()
	var out []store.CountRow
	for rows.Next() {
		var r store.CountRow
		var status string
		var oldest int64
		if err := rows.Scan(&r.Action, &status, &r.NeedsReview, &r.LeaseExpired, &r.CheckDue, &r.Count, &oldest); err != nil {
			return nil, classify("counts", err)
		}
		r.Status, r.OldestUpdate = opjournal.Status(status), ms(oldest)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("counts", err)
	}
	return out, nil
}

// Activity counts the tenant's events per bucket and kind in one
// statement, through operation_events_tenant_at_idx. Times are
// milliseconds, so a bucket starts at a multiple of its width in
// milliseconds (integer division rounds down: every event is after the
// epoch).
func (s *Store) Activity(ctx context.Context, p store.ActivityParams) ([]store.ActivityRow, error) {
	if err := store.CheckBucket(p.Bucket); err != nil {
		return nil, err
	}
	args := []any{p.Tenant, ceilMs(p.Since), p.Bucket.Milliseconds()}
	kind := store.KindCase(func(v string) string {
		args = append(args, v)
		return fmt.Sprintf("?%d", len(args))
	}, func(p string) string { return `substr(reason, 1, length(` + p + `)) = ` + p })
	rows, err := s.db.QueryContext(ctx, `SELECT at / ?3 * ?3, `+kind+`, count(*) FROM operation_events
		WHERE tenant = ?1 AND at >= ?2 GROUP BY 1, 2 ORDER BY 1, 2`, args...)
	if err != nil {
		return nil, classify("activity", err)
	}
	defer rows.Close()
	var out []store.ActivityRow
	for rows.Next() {
		var r store.ActivityRow
		var start int64
		var kind string
		if err := rows.Scan(&start, &kind, &r.Count); err != nil {
			return nil, classify("activity", err)
		}
		r.Start, r.Kind = ms(start), opjournal.EventKind(kind)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("activity", err)
	}
	return out, nil
}

// Events returns one page of the operation's history, oldest first.
func (s *Store) Events(ctx context.Context, p store.EventsParams) ([]opjournal.Event, int64, error) {
	if _, err := s.Get(ctx, p.Tenant, p.Key); err != nil {
		return nil, 0, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = opjournal.DefaultPageSize
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, at, coalesce(from_status, ''), to_status, attempt, actor, actor_label, stated_actor, reason, coalesce(external_id, '')
		FROM operation_events WHERE tenant = ?1 AND operation_key = ?2 AND id > ?3 ORDER BY id LIMIT ?4`, p.Tenant, p.Key, p.After, limit+1)
	if err != nil {
		return nil, 0, classify("events", err)
	}
	defer rows.Close()
	var evs []opjournal.Event
	for rows.Next() {
		var e opjournal.Event
		var at int64
		var from, to string
		if err := rows.Scan(&e.ID, &at, &from, &to, &e.Attempt, &e.Actor, &e.ActorLabel, &e.StatedActor, &e.Reason, &e.ExternalID); err != nil {
			return nil, 0, classify("events", err)
		}
		e.At, e.From, e.To = ms(at), opjournal.Status(from), opjournal.Status(to)
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, classify("events", err)
	}
	evs, next := store.EventPage(evs, limit)
	return evs, next, nil
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
	code := -1 // the SQLite result code, from the pool's driver or the writer's
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		code = se.Code()
	} else if zc := zsqlite.ErrCode(err); zc != zsqlite.ResultOK && zc != zsqlite.ResultError {
		// ErrCode answers SQLITE_ERROR for an error that is not SQLite's.
		code = int(zc)
	}
	if code >= 0 {
		switch code & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			return &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "database unavailable during " + what, Err: err}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "database is closed") {
		return &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "database unavailable during " + what, Err: err}
	}
	return &opjournal.Error{Code: opjournal.CodeInternal, Message: "database error during " + what, Err: err}
}

// DueApprovals lists the operations whose approval has timed out
// (protocol.ApprovalDueTerm), of every tenant, oldest deadline first,
// through operations_approval_due_idx.
func (s *Store) DueApprovals(ctx context.Context, limit int) ([]store.DueApproval, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, operation_key FROM operations
		WHERE status = 'awaiting_approval' AND `+approvalDue+` ORDER BY approval_deadline LIMIT ?2`, s.clockArg(), limit)
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
	var now int64
	if err := s.db.QueryRowContext(ctx, clockSQL, s.clockArg()).Scan(&now); err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT action_type, count(*), min(created_at) FROM operations
		WHERE status = 'awaiting_approval' GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	defer rows.Close()
	var out []store.ApprovalCount
	for rows.Next() {
		var r store.ApprovalCount
		var oldest int64
		if err := rows.Scan(&r.Action, &r.Count, &oldest); err != nil {
			return nil, time.Time{}, classify("awaiting approvals", err)
		}
		r.OldestCreated = ms(oldest)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, classify("awaiting approvals", err)
	}
	return out, ms(now), nil
}

// purgeable matches the rows protocol.Purgeable allows (?2: the action,
// ?3: the retention in milliseconds), through operations_terminal_idx.
const purgeable = `action_type = ?2 AND ` + purgeableTerm

// Purge deletes one batch of purgeable operations of an action, oldest
// first, with their history and refs, in one write transaction (a batch
// is small, so the write lock is held briefly). With DryRun it counts
// every purgeable operation instead.
func (s *Store) Purge(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	return store.RunPurge(ctx, p, store.PurgeSteps{Count: s.countPurgeable, Batch: s.purgeOneBatch})
}

// purgeArgs are ?1–?3 of the purge's statements (purgeable).
func (s *Store) purgeArgs(p store.PurgeParams) []any {
	return []any{s.clockArg(), p.Action, p.Retention.Milliseconds()}
}

// purgeOneBatch selects one batch (?4) and deletes it, row by row, in one
// write transaction.
func (s *Store) purgeOneBatch(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	args := s.purgeArgs(p)
	var res store.PurgeResult
	err := s.commit.do(ctx, "purge", func(ctx context.Context, tx *wtx) error {
		res = store.PurgeResult{}
		type victim struct{ tenant, key string }
		var victims []victim
		err := tx.QueryContext(`SELECT tenant, operation_key, updated_at FROM operations WHERE `+purgeable+`
			ORDER BY updated_at LIMIT ?4`, append(args, p.Limit), func(r rowScanner) (bool, error) {
			var v victim
			var at int64
			if err := r.Scan(&v.tenant, &v.key, &at); err != nil {
				return false, err
			}
			victims = append(victims, v)
			res.Newest = ms(at)
			if res.Oldest.IsZero() {
				res.Oldest = ms(at)
			}
			return true, nil
		})
		if err != nil {
			return classify("purge", err)
		}
		for _, v := range victims {
			ev, err := tx.ExecContext(ctx, `DELETE FROM operation_events WHERE tenant = ?1 AND operation_key = ?2`, v.tenant, v.key)
			if err != nil {
				return classify("purge", err)
			}
			n, _ := ev.RowsAffected()
			res.Events += n
			if _, err := tx.ExecContext(ctx, `DELETE FROM operation_refs WHERE tenant = ?1 AND operation_key = ?2`, v.tenant, v.key); err != nil {
				return classify("purge", err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM budget_holds WHERE tenant = ?1 AND operation_key = ?2`, v.tenant, v.key); err != nil {
				return classify("purge", err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM operations WHERE tenant = ?1 AND operation_key = ?2`, v.tenant, v.key); err != nil {
				return classify("purge", err)
			}
			res.Operations++
		}
		return nil
	})
	return res, err
}

// countPurgeable counts what Purge would delete (a dry run).
func (s *Store) countPurgeable(ctx context.Context, p store.PurgeParams) (store.PurgeResult, error) {
	var res store.PurgeResult
	var oldest, newest sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT count(*), min(updated_at), max(updated_at),
		(SELECT count(*) FROM operation_events e WHERE (e.tenant, e.operation_key) IN
			(SELECT tenant, operation_key FROM operations WHERE `+purgeable+`))
		FROM operations WHERE `+purgeable, s.purgeArgs(p)...).Scan(&res.Operations, &oldest, &newest, &res.Events)
	if err != nil {
		return store.PurgeResult{}, classify("purge", err)
	}
	if oldest.Valid {
		res.Oldest, res.Newest = ms(oldest.Int64), ms(newest.Int64)
	}
	return res, nil
}

// OldestTerminal returns the oldest updated_at among action's terminal
// operations (zero if none) and the clock.
func (s *Store) OldestTerminal(ctx context.Context, action string) (time.Time, time.Time, error) {
	var oldest sql.NullInt64
	var now int64
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT min(updated_at) FROM operations
		WHERE action_type = ?2 AND `+terminal+`), `+nowSQL, s.clockArg(), action).Scan(&oldest, &now)
	if err != nil {
		return time.Time{}, time.Time{}, classify("oldest terminal", err)
	}
	if !oldest.Valid {
		return time.Time{}, ms(now), nil
	}
	return ms(oldest.Int64), ms(now), nil
}

// locks are the TryLock locks of this process: a SQLite file has one
// server process, so a lock in memory keeps its housekeeping to one at a
// time.
var locks sync.Map // "path\x00name" → *sync.Mutex

// TryLock takes the named lock of this database file within the process.
func (s *Store) TryLock(_ context.Context, name string) (func(), bool, error) {
	m, _ := locks.LoadOrStore(s.path+"\x00"+name, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	if !mu.TryLock() {
		return nil, false, nil
	}
	return mu.Unlock, true, nil
}
