// Package postgres is the production store: PostgreSQL through a pgx/v5
// pool. Any number of opjournal processes may share one database; the
// primary key and conditional UPDATEs make them exactly as safe as one.
package postgres

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strconv"
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
	pool        *pgxpool.Pool
	stmtTimeout time.Duration // bounds each statement; 0: only the caller's context
	// The hot path's batchers (batch.go); nil when batching is off.
	registers *batcher[store.RegisterParams, batched]
	claims    *batcher[store.ClaimParams, batched]
	marks     *batcher[store.MarkSucceededParams, batched]
}

var _ store.Store = (*Store)(nil)

// Defaults for connection parameters the URL does not set. They make a
// call fail fast with CodeUnavailable (gRPC UNAVAILABLE, HTTP 503) when the
// database is unreachable, instead of hanging until the caller gives up,
// also when its connections are silently dead (a partition, a dead host:
// no RST, no FIN, nothing answers). A refused or reset connection fails in
// milliseconds without any of them.
const (
	// defaultConnectTimeout (connect_timeout, libpq's name and unit:
	// seconds) bounds establishing a connection: dial, TLS, startup and
	// authentication. Without it pgx waits as long as the caller's context
	// lets it, and pgxpool caps a pool connection's attempt at 2 minutes.
	defaultConnectTimeout = 5 * time.Second
	// defaultPingTimeout (pool_ping_timeout) bounds the liveness ping that
	// pgxpool sends before handing out a connection idle for more than a
	// second. A connection cut while idle then fails its ping (at once when
	// the database closed it, within this bound when it is silently dead)
	// and the pool discards it and tries another, or dials a new one.
	// Without it a silently dead connection keeps the call until its
	// deadline. pgxpool's other "health check" (pool_health_check_period,
	// 1 minute) only retires connections that are too old or idle too
	// long; it never pings, so it is left at its default.
	defaultPingTimeout = 2 * time.Second
	// defaultStatementTimeout (opjournal_statement_timeout, a Go duration;
	// "0" turns it off) bounds each statement, waiting for a pooled
	// connection included, on our side of the wire. It is what bounds a
	// statement sent on a connection that died silently while in use (used
	// within the last second, so not pinged), and the wait for a pool
	// whose connections are all stuck that way. When it expires pgx closes
	// the connection (the statement may still have been executed: the
	// call answers UNAVAILABLE and, being idempotent by key or fenced by
	// attempt, is safe to repeat). Every journal statement touches one row
	// by its key; 5 s is far beyond a healthy database's answer.
	defaultStatementTimeout = 5 * time.Second
)

// Our own URL parameters; they are removed before the URL reaches pgx,
// which would send them to the server as settings.
const (
	statementTimeoutParam = "opjournal_statement_timeout"
	// batchWorkersParam is how many statements of each batched kind
	// (register, claim, mark succeeded) may run at once; 0 turns batching
	// off (every call is a statement of its own).
	batchWorkersParam = "opjournal_batch_workers"
	// batchSizeParam caps the calls in one batched statement.
	batchSizeParam = "opjournal_batch_size"
)

// Batching defaults (batch.go). One worker per kind makes the largest
// batches: while its statement runs, every call of that kind queues for
// the next one, so each statement's fixed cost (round trip, executor
// start-up, commit) is shared by all of them. On 2 cores at 32 callers it
// did 29% and 58% more operations per second than 2 and 4 workers
// (BenchmarkFused); a database with many cores may want more
// (opjournal_batch_workers). A lone caller is never delayed.
const (
	defaultBatchWorkers = 1
	defaultBatchSize    = 64
)

// connSettings are a database URL with the defaults above applied.
type connSettings struct {
	poolURL         string // for pgxpool: with connect_timeout; without ours, nor golang-migrate's x-*
	migrateURL      string // for golang-migrate (pgx5://): with connect_timeout; without ours, nor pool_*
	stmtTimeout     time.Duration
	batchWorkers    int
	batchSize       int
	explicitConnect bool // the URL or PGCONNECT_TIMEOUT sets connect_timeout
	explicitPing    bool // the URL sets pool_ping_timeout
}

// parseSettings applies the defaults to a postgres:// or postgresql:// URL
// and splits it for pgxpool and golang-migrate: each driver sends the
// parameters it does not know to the server as settings, which it rejects.
// Other forms (keyword/value) are passed through as they are; Open still
// sets the pool's defaults on its parsed configuration.
func parseSettings(raw string) (connSettings, error) {
	cs := connSettings{poolURL: raw, migrateURL: raw, stmtTimeout: defaultStatementTimeout,
		batchWorkers: defaultBatchWorkers, batchSize: defaultBatchSize}
	_, envTimeout := os.LookupEnv("PGCONNECT_TIMEOUT")
	scheme, rest, _ := strings.Cut(raw, "://")
	if scheme != "postgres" && scheme != "postgresql" {
		cs.explicitConnect = envTimeout || strings.Contains(raw, "connect_timeout=")
		cs.explicitPing = strings.Contains(raw, "pool_ping_timeout=")
		return cs, nil
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		cs.migrateURL = "pgx5://" + rest // pgxpool and migrate report the error
		return cs, nil
	}
	q := u.Query()
	if q.Has(statementTimeoutParam) {
		v := q.Get(statementTimeoutParam)
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return cs, fmt.Errorf("postgres: database url: %s=%q is not a duration such as 5s (0 turns the bound off)", statementTimeoutParam, v)
		}
		cs.stmtTimeout = d
		q.Del(statementTimeoutParam)
	}
	for _, n := range []struct {
		param string
		dst   *int
		min   int
	}{{batchWorkersParam, &cs.batchWorkers, 0}, {batchSizeParam, &cs.batchSize, 1}} {
		if !q.Has(n.param) {
			continue
		}
		v, err := strconv.Atoi(q.Get(n.param))
		if err != nil || v < n.min || v > 1024 {
			return cs, fmt.Errorf("postgres: database url: %s=%q is not a whole number from %d to 1024", n.param, q.Get(n.param), n.min)
		}
		*n.dst = v
		q.Del(n.param)
	}
	cs.explicitPing = q.Has("pool_ping_timeout")
	cs.explicitConnect = envTimeout || q.Has("connect_timeout")
	if !cs.explicitConnect {
		q.Set("connect_timeout", strconv.Itoa(int(defaultConnectTimeout/time.Second)))
	}
	without := func(prefix string) string {
		v := neturl.Values{}
		for k, vs := range q {
			if !strings.HasPrefix(k, prefix) {
				v[k] = vs
			}
		}
		return v.Encode()
	}
	pool, mig := *u, *u
	pool.RawQuery = without("x-")
	mig.Scheme, mig.RawQuery = "pgx5", without("pool_")
	cs.poolURL, cs.migrateURL = pool.String(), mig.String()
	return cs, nil
}

// Open applies pending migrations to the database at url
// ("postgres://user@host:port/db?..."; pgx connection parameters such as
// search_path, connect_timeout or pool_max_conns are honoured, and so is
// opjournal_statement_timeout) and returns a Store. It returns an
// *opjournal.Error with CodeUnavailable when the database cannot be
// reached.
func Open(ctx context.Context, url string) (*Store, error) {
	cs, err := parseSettings(url)
	if err != nil {
		return nil, err
	}
	if err := Migrate(url); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(cs.poolURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", redact(err))
	}
	if !cs.explicitConnect && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout // keyword/value form
	}
	if !cs.explicitPing {
		cfg.PingTimeout = defaultPingTimeout
	}
	// Every statement of the journal finds its rows by key. Its prepared
	// statements are planned once, generically, and that plan is kept;
	// one made while the table was still small, for a batch over arrays of
	// unknown length, joins by hashing or sorting the whole table, and
	// keeps doing so as the table grows. So these connections never choose
	// a scan or join that ignores the key index (unless the URL says
	// otherwise).
	for name, value := range map[string]string{"enable_seqscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off"} {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify("connect", err)
	}
	s := &Store{pool: pool, stmtTimeout: cs.stmtTimeout}
	pctx, cancel := s.bound(ctx)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, classify("connect", err)
	}
	if w := cs.batchWorkers; w > 0 {
		s.registers = newBatcher("register", w, cs.batchSize, s.bound, s.execRegister)
		s.claims = newBatcher("claim", w, cs.batchSize, s.bound, s.execClaim)
		s.marks = newBatcher("mark succeeded", w, cs.batchSize, s.bound, s.execMarkSucceeded)
	}
	return s, nil
}

// Migrate applies the embedded migrations (migrations/postgres) to the
// database at url. golang-migrate holds an advisory lock meanwhile, so
// several servers starting at once are safe.
func Migrate(url string) error {
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	cs, err := parseSettings(url)
	if err != nil {
		return err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, cs.migrateURL)
	if err != nil {
		return classify("migrate", err)
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return classify("migrate", err)
	}
	return nil
}

// BatchStats reports what the batchers did (nil when batching is off).
func (s *Store) BatchStats() []store.BatchStat {
	if s.registers == nil {
		return nil
	}
	return []store.BatchStat{s.registers.stat("register"), s.claims.stat("claim"), s.marks.stat("mark_succeeded")}
}

var _ store.Batching = (*Store)(nil)

// Close stops the batchers (calls in flight are answered first) and closes
// the pool.
func (s *Store) Close() error {
	if s.registers != nil {
		s.registers.close()
		s.claims.close()
		s.marks.close()
	}
	s.pool.Close()
	return nil
}

// bound limits one statement, waiting for a pooled connection included, to
// the statement timeout (sooner if ctx says so).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.stmtTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.stmtTimeout)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// effectiveStatus is the status as the rules see it: an in_progress row
// whose lease has expired on the database clock is unknown (its worker
// vanished mid-call).
const effectiveStatus = `(CASE WHEN status = 'in_progress' AND lease_until <= now() THEN 'unknown' ELSE status END)`

// isUnknown matches operations whose effective status is unknown.
const isUnknown = `(status = 'unknown' OR (status = 'in_progress' AND lease_until <= now()))`

// columns is the row every query returns, with the effective status and,
// last, the database's clock (used to compute retry-after hints without
// trusting ours).
const columns = `tenant, operation_key, action_type, request_hash, payload::text, ` + effectiveStatus + `,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	coalesce(duplicate_external_id, ''), result::text, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	CASE WHEN status = 'unknown' THEN unknown_since WHEN status = 'in_progress' AND lease_until <= now() THEN lease_until END,
	check_count, last_checked_at, next_check_at, now()`

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

// scanOp reads one row of columns, after the extra leading columns, if any.
func scanOp(row pgx.Row, extra ...any) (scanned, error) {
	var (
		op                                             opjournal.Operation
		payload                                        string
		result                                         *string
		status                                         string
		leaseUntil, unknownSince, lastCheck, nextCheck *time.Time
		dbNow                                          time.Time
	)
	err := row.Scan(append(extra, &op.Tenant, &op.Key, &op.Action, &op.RequestHash, &payload, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &op.DuplicateExternalID,
		&result, &op.ErrorCode, &op.NeedsReview, &op.ReviewReason, &op.CreatedAt, &op.UpdatedAt,
		&unknownSince, &op.CheckCount, &lastCheck, &nextCheck, &dbNow)...)
	if err != nil {
		return scanned{}, err
	}
	op.Payload = []byte(payload)
	if result != nil {
		op.Result = []byte(*result)
	}
	op.Status = opjournal.Status(status)
	for _, t := range []struct {
		src *time.Time
		dst *time.Time
	}{{leaseUntil, &op.LeaseUntil}, {unknownSince, &op.UnknownSince}, {lastCheck, &op.LastCheckedAt}, {nextCheck, &op.NextCheckAt}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return scanned{op: &op, dbNow: dbNow}, nil
}

// one runs a statement that returns at most one operation row. found is
// false when no row matched (the conditional update did not apply).
//
// A statement is sent once. If the connection fails after sending it, its
// outcome is unknown here, and it is never repeated (nor is it by pgx,
// which since 5.13 does not mark such errors safe to retry): the call
// answers UNAVAILABLE and the caller's retry, idempotent by key or fenced
// by attempt, finds out.
func (s *Store) one(ctx context.Context, what, sql string, args ...any) (sc scanned, found bool, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
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

// event says what a transition writes to the history: SQL expressions over
// the updated row, which may use the statement's parameters.
type event struct {
	prev    string // the "from" status, evaluated on the row before the update
	attempt string
	actor   string
	reason  string
	extID   string
}

// transition applies one conditional UPDATE and writes its event in the
// SAME statement (a data-modifying CTE): one round trip, one commit, and no
// way for a change to exist without its history. set and cond may use $1
// (tenant) and $2 (key); args fill $3 onwards. found is false when the
// condition did not hold, and then nothing was written.
func (s *Store) transition(ctx context.Context, what, set, cond string, ev event, args ...any) (scanned, bool, error) {
	if ev.prev == "" {
		ev.prev = effectiveStatus
	}
	if ev.extID == "" {
		ev.extID = "NULL"
	}
	sql := `WITH upd AS (
			UPDATE operations SET prev_status = ` + ev.prev + `, ` + set + `, updated_at = now()
			WHERE tenant = $1 AND operation_key = $2 AND (` + cond + `)
			RETURNING *
		), ev AS (
			INSERT INTO operation_events (tenant, operation_key, from_status, to_status, attempt, actor, reason, external_id)
			SELECT tenant, operation_key, prev_status, ` + effectiveStatus + `, ` + ev.attempt + `, ` + ev.actor + `, ` + ev.reason + `, ` + ev.extID + `
			FROM upd
		)
		SELECT ` + columns + ` FROM upd`
	return s.one(ctx, what, sql, args...)
}

// Register inserts the operation, or returns the existing one with the same
// hash (and claims it if asked). With a claim, a new key is inserted
// directly as in_progress with attempt 1: one statement, one commit. The
// statement is shared with concurrent calls (batch.go).
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (store.RegisterResult, error) {
	if s.registers == nil {
		return s.registerOne(ctx, p)
	}
	if s.registers.tryAlone() {
		defer s.registers.finished()
		return s.registerOne(ctx, p)
	}
	b, ok, err := s.registers.do(ctx, p)
	switch {
	case err != nil:
		return store.RegisterResult{}, err
	case ok && !b.existed:
		return registered(p, b.sc), nil
	case ok:
		return s.registerExisting(ctx, p, b.sc)
	}
	// The key exists but the statement's snapshot did not show it, or it
	// came twice in the batch: the one-call path decides.
	return s.registerOne(ctx, p)
}

// registerOne is Register in a statement of its own.
func (s *Store) registerOne(ctx context.Context, p store.RegisterParams) (store.RegisterResult, error) {
	status, attempt, owner, lease, reason := "pending", 0, (*string)(nil), 0, "registered"
	if p.Claim != nil {
		status, attempt, owner, lease, reason = "in_progress", 1, &p.Claim.WorkerID, p.Claim.LeaseSeconds, "registered and claimed"
	}
	sc, created, err := s.one(ctx, "register", `
		WITH ins AS (
			INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status,
			                        attempt_count, lease_owner, lease_until)
			VALUES ($1, $2, $3, $4, $5::json, $6, $7, $8,
			        CASE WHEN $6 = 'in_progress' THEN now() + make_interval(secs => $9) END)
			ON CONFLICT (tenant, operation_key) DO NOTHING
			RETURNING *
		), ev AS (
			INSERT INTO operation_events (tenant, operation_key, from_status, to_status, attempt, actor, reason)
			SELECT tenant, operation_key, NULL, status, attempt_count, coalesce(lease_owner, ''), $10 FROM ins
		)
		SELECT `+columns+` FROM ins`,
		p.Tenant, p.Key, p.Action, p.RequestHash, string(p.Payload), status, attempt, owner, lease, reason)
	if err != nil {
		return store.RegisterResult{}, err
	}
	if created {
		return registered(p, sc), nil
	}
	existing, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return store.RegisterResult{}, err
	}
	return s.registerExisting(ctx, p, existing)
}

// registered is the result of a Register that inserted the row.
func registered(p store.RegisterParams, sc scanned) store.RegisterResult {
	res := store.RegisterResult{Operation: sc.op, Created: true}
	if p.Claim != nil {
		res.Claim = &store.ClaimResult{Operation: sc.op, Claimed: true}
	}
	return res
}

// registerExisting answers a Register whose key exists: its hash decides
// (same request → replay, and a claim if asked; other → conflict).
func (s *Store) registerExisting(ctx context.Context, p store.RegisterParams, existing scanned) (store.RegisterResult, error) {
	if err := store.CheckHash(existing.op, p.RequestHash); err != nil {
		return store.RegisterResult{}, err
	}
	res := store.RegisterResult{Operation: existing.op}
	if p.Claim != nil && (existing.op.Status.Terminal() || existing.op.NeedsReview) {
		// No claim can win: a terminal state never changes, and an
		// operation under review leaves review only for a terminal one.
		// A replay is answered without another statement.
		res.Claim = &store.ClaimResult{Operation: existing.op}
		return res, nil
	}
	if p.Claim != nil {
		cr, err := s.Claim(ctx, store.ClaimParams{Tenant: p.Tenant, Key: p.Key, ClaimPolicy: *p.Claim})
		if err != nil {
			return store.RegisterResult{}, err
		}
		res.Operation, res.Claim = cr.Operation, &cr
	}
	return res, nil
}

// Claim takes a lease by one conditional UPDATE: exactly one of any number
// of concurrent callers (in any number of processes) sees a row come back.
// The statement is shared with concurrent calls (batch.go).
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if s.claims == nil {
		return s.claimOne(ctx, p)
	}
	if s.claims.tryAlone() {
		defer s.claims.finished()
		return s.claimOne(ctx, p)
	}
	b, ok, err := s.claims.do(ctx, p)
	switch {
	case err != nil:
		return store.ClaimResult{}, err
	case ok:
		return store.ClaimResult{Operation: b.sc.op, Claimed: true}, nil
	case !b.sent:
		return s.claimOne(ctx, p)
	}
	return s.claimLost(ctx, p)
}

// claimOne is Claim in a statement of its own.
func (s *Store) claimOne(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	sc, claimed, err := s.transition(ctx, "claim",
		`status = 'in_progress', attempt_count = attempt_count + 1, lease_owner = $3,
		 lease_until = now() + make_interval(secs => $4), unknown_since = NULL, next_check_at = NULL`,
		`NOT needs_review AND (status = 'pending' OR ($5 AND `+isUnknown+`))`,
		event{attempt: "attempt_count", actor: "$3", reason: "'claimed'"},
		p.Tenant, p.Key, p.WorkerID, p.LeaseSeconds, p.AllowRetryAfterUnknown)
	if err != nil {
		return store.ClaimResult{}, err
	}
	if claimed {
		return store.ClaimResult{Operation: sc.op, Claimed: true}, nil
	}
	return s.claimLost(ctx, p)
}

// claimLost answers a claim whose update did not apply with the operation
// as it is now, and how long another worker's lease still runs.
func (s *Store) claimLost(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return store.ClaimResult{}, err
	}
	res := store.ClaimResult{Operation: cur.op}
	if cur.op.Status == opjournal.StatusInProgress {
		res.RetryAfter = cur.op.LeaseUntil.Sub(cur.dbNow)
	}
	return res, nil
}

// MarkSucceeded records a confirmed effect from any issued attempt. The
// statement is shared with concurrent calls (batch.go).
func (s *Store) MarkSucceeded(ctx context.Context, p store.MarkSucceededParams) (*opjournal.Operation, error) {
	if s.marks == nil {
		return s.markSucceededOne(ctx, p)
	}
	if s.marks.tryAlone() {
		defer s.marks.finished()
		return s.markSucceededOne(ctx, p)
	}
	b, ok, err := s.marks.do(ctx, p)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return b.sc.op, nil
	case !b.sent:
		return s.markSucceededOne(ctx, p)
	}
	return s.markSucceededNotApplied(ctx, p)
}

// markSucceededOne is MarkSucceeded in a statement of its own.
func (s *Store) markSucceededOne(ctx context.Context, p store.MarkSucceededParams) (*opjournal.Operation, error) {
	var result *string
	if p.Result != nil {
		r := string(p.Result)
		result = &r
	}
	sc, done, err := s.transition(ctx, "mark succeeded",
		`status = 'succeeded', external_id = $4, result = $5::json, lease_until = NULL,
		 unknown_since = NULL, next_check_at = NULL`,
		`status IN ('pending', 'in_progress', 'unknown') AND $3 BETWEEN 1 AND attempt_count`,
		event{attempt: "$3", actor: "coalesce(nullif($6, ''), lease_owner, '')", reason: "'effect confirmed'", extID: "$4"},
		p.Tenant, p.Key, p.Attempt, p.ExternalID, result, p.Actor)
	if err != nil || done {
		return sc.op, err
	}
	return s.markSucceededNotApplied(ctx, p)
}

// markSucceededNotApplied explains a MarkSucceeded whose update did not
// apply: the attempt was never issued, the same effect is confirmed
// again (a no-op), or another effect is (a duplicate, for a person).
func (s *Store) markSucceededNotApplied(ctx context.Context, p store.MarkSucceededParams) (*opjournal.Operation, error) {
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	if err := store.CheckAttemptIssued(cur.op, p.Attempt); err != nil {
		return nil, err
	}
	// The operation is terminal (terminal states never change back, so this
	// read is stable). The same external_id again is a no-op.
	if cur.op.Status == opjournal.StatusSucceeded && cur.op.ExternalID == p.ExternalID {
		return cur.op, nil
	}
	// Another effect was confirmed: keep the first, record the second, and
	// hand the operation to a person. The first duplicate reported is kept
	// on the row; every one is in the history.
	reason := store.DuplicateEffectReason(cur.op, p.ExternalID)
	sc, done, err := s.transition(ctx, "mark succeeded (duplicate)",
		`needs_review = true, review_reason = coalesce(review_reason, $4),
		 duplicate_external_id = coalesce(duplicate_external_id, $3)`,
		`status IN ('succeeded', 'failed_final')`,
		event{attempt: "$5", actor: "coalesce(nullif($6, ''), lease_owner, '')", reason: "$4", extID: "$3"},
		p.Tenant, p.Key, p.ExternalID, reason, p.Attempt, p.Actor)
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
	return s.markByHolder(ctx, "unknown", "outcome unknown", p)
}

// MarkFailedFinal moves the current lease holder's operation to failed_final.
func (s *Store) MarkFailedFinal(ctx context.Context, p store.MarkParams) (*opjournal.Operation, error) {
	return s.markByHolder(ctx, "failed_final", "rejected", p)
}

// markByHolder applies a transition only for the current, live lease: the
// attempt number is the fencing token and the lease is judged by now().
func (s *Store) markByHolder(ctx context.Context, to, reason string, p store.MarkParams) (*opjournal.Operation, error) {
	if p.ErrorCode != "" {
		reason += ": " + p.ErrorCode
	}
	sc, done, err := s.transition(ctx, "mark "+to,
		`status = $4, error_code = nullif($5, ''), lease_until = NULL,
		 unknown_since = CASE WHEN $4 = 'unknown' THEN now() END`,
		`status = 'in_progress' AND attempt_count = $3 AND lease_until > now()`,
		event{attempt: "$3", actor: "coalesce(lease_owner, '')", reason: "$6"},
		p.Tenant, p.Key, p.Attempt, to, p.ErrorCode, reason)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	return nil, store.ExplainNotHolder(cur.op, p.Attempt)
}

// ReleaseForRetry moves an unknown operation (its latest attempt, not under
// review, unknown for at least the visibility lag) back to pending.
func (s *Store) ReleaseForRetry(ctx context.Context, p store.ReleaseParams) (*opjournal.Operation, error) {
	sc, done, err := s.transition(ctx, "release",
		`status = 'pending', lease_until = NULL, unknown_since = NULL, next_check_at = NULL`,
		isUnknown+` AND attempt_count = $3 AND NOT needs_review
		 AND coalesce(unknown_since, lease_until) <= now() - make_interval(secs => $4)`,
		event{attempt: "attempt_count", actor: "$5", reason: "$6"},
		p.Tenant, p.Key, p.Attempt, p.VisibilityLag.Seconds(), p.Actor, "released for retry: "+p.Reason)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	return nil, store.ExplainNoRelease(cur.op, p, cur.dbNow)
}

// RecordCheck counts an inconclusive check. An expired lease becomes
// unknown for good (with unknown_since = the lease's end), so the history
// shows the in_progress → unknown step.
func (s *Store) RecordCheck(ctx context.Context, p store.RecordCheckParams) (*opjournal.Operation, error) {
	sc, done, err := s.transition(ctx, "record check",
		`status = 'unknown',
		 unknown_since = CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END,
		 lease_until = NULL, check_count = check_count + 1, last_checked_at = now(),
		 next_check_at = now() + make_interval(secs => $4)`,
		isUnknown+` AND attempt_count = $3`,
		event{prev: "status", attempt: "attempt_count", actor: "$5", reason: "$6"},
		p.Tenant, p.Key, p.Attempt, p.NextCheckAfter.Seconds(), p.Actor, "checked: "+p.Note)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	return nil, store.ExplainNoCheck(cur.op, p.Attempt)
}

// Escalate sets needs_review on a non-terminal operation; escalating one
// already under review returns it unchanged.
func (s *Store) Escalate(ctx context.Context, p store.EscalateParams) (*opjournal.Operation, error) {
	sc, done, err := s.transition(ctx, "escalate",
		`needs_review = true, review_reason = $4`,
		`status IN ('pending', 'in_progress', 'unknown') AND NOT needs_review`,
		event{attempt: "attempt_count", actor: "$3", reason: "'escalated: ' || $4"},
		p.Tenant, p.Key, p.Actor, p.Reason)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	if cur.op.NeedsReview {
		return cur.op, nil
	}
	return nil, opjournal.Errorf(opjournal.CodeInvalidState, "", "operation %q is %s: a terminal operation is not escalated", p.Key, cur.op.Status)
}

// Resolve applies an operator's verdict to an unknown or needs_review
// operation. Nothing is deleted: the previous values stay in the history.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) (*opjournal.Operation, error) {
	var result *string
	if p.Result != nil {
		r := string(p.Result)
		result = &r
	}
	sc, done, err := s.transition(ctx, "resolve",
		`status = $3,
		 external_id = CASE WHEN $3 = 'succeeded' THEN $4 ELSE external_id END,
		 result = CASE WHEN $3 = 'succeeded' THEN coalesce($5::json, result) ELSE result END,
		 error_code = CASE WHEN $3 = 'failed_final' THEN coalesce(nullif($6, ''), error_code) ELSE error_code END,
		 needs_review = false, lease_until = NULL, unknown_since = NULL, next_check_at = NULL`,
		isUnknown+` OR needs_review`,
		event{attempt: "attempt_count", actor: "$7", reason: "$8", extID: "nullif($4, '')"},
		p.Tenant, p.Key, string(p.To), p.ExternalID, result, p.ErrorCode, p.Actor, "resolved by operator: "+p.Reason)
	if err != nil || done {
		return sc.op, err
	}
	cur, err := s.get(ctx, p.Tenant, p.Key)
	if err != nil {
		return nil, err
	}
	return nil, store.ExplainNoResolve(cur.op)
}

// List returns one page of operations in key order.
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*opjournal.Operation, string, error) {
	var statuses []string
	for _, st := range p.Statuses {
		statuses = append(statuses, string(st))
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	// The due-for-check filter repeats the partial index's predicate
	// (status IN ('in_progress', 'unknown')) so the planner can use it.
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM operations
		WHERE tenant = $1 AND operation_key > $2
		  AND (coalesce(cardinality($3::text[]), 0) = 0 OR `+effectiveStatus+` = ANY($3))
		  AND ($4::boolean IS NULL OR needs_review = $4)
		  AND ($5 = '' OR action_type = $5)
		  AND (NOT $6 OR (status IN ('in_progress', 'unknown') AND `+isUnknown+` AND NOT needs_review
		                  AND (next_check_at IS NULL OR next_check_at <= now())))
		ORDER BY operation_key
		LIMIT $7`,
		p.Tenant, p.After, statuses, p.NeedsReview, p.Action, p.DueForCheck, limit+1)
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
	if _, err := s.get(ctx, tenant, key); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, at, coalesce(from_status, ''), to_status, attempt, actor, reason, coalesce(external_id, '')
		FROM operation_events WHERE tenant = $1 AND operation_key = $2 ORDER BY id LIMIT $3`, tenant, key, store.MaxEvents)
	if err != nil {
		return nil, classify("events", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (opjournal.Event, error) {
		var e opjournal.Event
		var from, to string
		err := r.Scan(&e.ID, &e.At, &from, &to, &e.Attempt, &e.Actor, &e.Reason, &e.ExternalID)
		e.From, e.To = opjournal.Status(from), opjournal.Status(to)
		return e, err
	})
	if err != nil {
		return nil, classify("events", err)
	}
	return evs, nil
}
