// Package postgres is the production store: PostgreSQL through a pgx/v5
// pool. Any number of opjournal processes may share one database; the
// primary key and conditional UPDATEs make them exactly as safe as one.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/migrations"
)

// Store implements store.Store on PostgreSQL.
type Store struct {
	pool        *pgxpool.Pool
	clock       atomic.Pointer[func() time.Time] // test clock (SetClock); nil: now()
	stmtTimeout time.Duration                    // bounds each statement; 0: only the caller's context
	closed      chan struct{}                    // closed by Close: lease renewals stop (lock.go)
	closeOnce   sync.Once
	parts       partitionState // the history's partitions' upkeep (partitions.go)
	// The hot path's batchers (batch.go); nil when batching is off.
	registers *batcher[applyCall, batched]
	claims    *batcher[applyCall, batched]
	marks     *batcher[applyCall, batched]
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
	// defaultMultiHostConnectTimeout is connect_timeout for a connection
	// string that names several hosts (a primary and its standbys, for a
	// failover manager to promote one). pgx tries them in order and waits
	// the whole timeout on a host that accepts connections and never
	// answers (a frozen primary: SIGSTOP, a hung VM, a stalled network)
	// before it tries the next; at 5 s, the statement bound, a statement
	// that needed a new connection failed before reaching the writable
	// host, and writes came back 8 s after a promotion (1.4 s at 2 s).
	// Every connection the pool opens pays it while such a host is first
	// in the list. A healthy server answers the startup in milliseconds,
	// also with TLS, so 2 s leaves a wide margin.
	defaultMultiHostConnectTimeout = 2 * time.Second
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
// A keyword/value string (host=a,b dbname=j …) is first turned into the
// same URL (connstring.go). Other strings are passed through as they are
// (pgx reports what is wrong with them); Open still sets the pool's
// defaults on its parsed configuration.
func parseSettings(raw string) (connSettings, error) {
	cs := connSettings{poolURL: raw, migrateURL: raw, stmtTimeout: defaultStatementTimeout,
		batchWorkers: defaultBatchWorkers, batchSize: defaultBatchSize}
	_, envTimeout := os.LookupEnv("PGCONNECT_TIMEOUT")
	if IsKeywordValue(raw) {
		u, err := keywordValueURL(raw)
		if err != nil {
			return cs, err
		}
		raw, cs.poolURL, cs.migrateURL = u, u, u
	}
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
		d := defaultConnectTimeout
		if multiHost(u, q) {
			d = defaultMultiHostConnectTimeout
		}
		q.Set("connect_timeout", strconv.Itoa(int(d/time.Second)))
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
// ("postgres://user@host:port/db?...", or the keyword/value form
// "host=a,b port=5432 dbname=db ..."; pgx connection parameters such as
// search_path, connect_timeout, target_session_attrs or pool_max_conns
// are honoured, and so is opjournal_statement_timeout) and returns a
// Store. Without connect_timeout it is 5 s, or 2 s when the string names
// several hosts. It returns an
// *opjournal.Error with CodeUnavailable when the database cannot be
// reached.
//
// Behind a transaction pooler (PgBouncer in transaction mode) the URL must
// set default_query_exec_mode=cache_describe (pooler.go says why); Open
// then does not migrate, and fails with CodeUnavailable unless the schema
// is at this build's last migration (run `opjournal migrate` on a direct
// URL first).
func Open(ctx context.Context, url string) (*Store, error) {
	if err := rendered(); err != nil {
		return nil, fmt.Errorf("postgres: this build cannot run the protocol table: %w", err)
	}
	cs, err := parseSettings(url)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(cs.poolURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", redact(err))
	}
	behindPooler := pooled(cfg.ConnConfig)
	if !cs.explicitConnect && cfg.ConnConfig.ConnectTimeout == 0 {
		// A string parseSettings passed through (a URL net/url refuses,
		// such as postgres://a:1,b/db): the same defaults.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
		for _, f := range cfg.ConnConfig.Fallbacks {
			if f.Host != cfg.ConnConfig.Host {
				cfg.ConnConfig.ConnectTimeout = defaultMultiHostConnectTimeout
			}
		}
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
	// otherwise). Without cached prepared statements (a URL for a
	// transaction pooler, pooler.go) every execution is planned for its
	// own values, so nothing is set: PgBouncer would refuse the settings.
	// On a URL not marked as pooled, that refusal is how a PgBouncer is
	// recognised before anything is migrated through it (poolerHint).
	//
	// jit is off too: the settings above cost any plan that must scan far
	// above jit_above_cost, and compiling such a statement took seconds
	// (seen in the partitions' upkeep at 10M operations); the journal's
	// statements touch a few rows each, where JIT never pays.
	if !behindPooler {
		for name, value := range map[string]string{"enable_seqscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off", "jit": "off"} {
			if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
				cfg.ConnConfig.RuntimeParams[name] = value
			}
		}
	}
	cfg.ConnConfig.Tracer = queryTracer{} // spans, when tracing is on (trace.go)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify("connect", err)
	}
	s := &Store{pool: pool, stmtTimeout: cs.stmtTimeout, closed: make(chan struct{})}
	pctx, cancel := s.bound(ctx)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, poolerHint(classify("connect", err))
	}
	if behindPooler {
		err = checkMigrated(pctx, pool)
	} else {
		err = migrateUp(cs.migrateURL) // the ping above proved a direct connection
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	// The coming weeks' partitions of the history (partitions.go); the
	// purge keeps them coming. Until they exist the default partition
	// takes the rows, so a busy lock (another replica at it) is no failure.
	if _, err := s.EnsurePartitions(pctx); err != nil {
		pool.Close()
		return nil, err
	}
	if w := cs.batchWorkers; w > 0 {
		s.registers = newBatcher("register", batchReg.name, w, cs.batchSize, s.bound, s.execRegister)
		s.claims = newBatcher("claim", batchClaim.name, w, cs.batchSize, s.bound, s.execClaim)
		s.marks = newBatcher("mark succeeded", batchMark.name, w, cs.batchSize, s.bound, s.execMarkSucceeded)
	}
	return s, nil
}

// Migrate applies the embedded migrations (store/migrations/postgres) to the
// database at url. golang-migrate holds an advisory lock meanwhile, so
// several servers starting at once are safe. That lock is a session's, so
// Migrate returns ErrMigrateThroughPooler for a URL marked as going
// through a transaction pooler (default_query_exec_mode; pooler.go).
func Migrate(url string) error {
	cs, err := parseSettings(url)
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(cs.poolURL)
	if err == nil && pooled(cfg) {
		return ErrMigrateThroughPooler
	}
	if err == nil {
		if err := refusePooler(cfg); err != nil {
			return err
		}
	}
	return migrateUp(cs.migrateURL)
}

// refusePooler connects once as the store's direct connections do, with
// the planner settings as startup parameters: PgBouncer refuses those, so
// a URL to it that does not say so (no default_query_exec_mode) is found
// before golang-migrate takes its session lock through it. Any other
// failure is left to the migration, which reports it in its own words.
func refusePooler(cfg *pgx.ConnConfig) error {
	if _, set := cfg.RuntimeParams["enable_seqscan"]; !set {
		cfg.RuntimeParams["enable_seqscan"] = "off"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if hinted := poolerHint(err); hinted != err {
			return fmt.Errorf("%w: %w", ErrMigrateThroughPooler, redact(hinted))
		}
		return nil
	}
	return conn.Close(ctx)
}

// migrateUp applies the embedded migrations at a golang-migrate URL.
func migrateUp(migrateURL string) error {
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL)
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
	s.closeOnce.Do(func() { close(s.closed) })
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

type scanned struct {
	op    *opjournal.Operation
	dbNow time.Time
}

// scanOp reads one row of the columns, after the extra leading columns, if any.
func scanOp(row pgx.Row, extra ...any) (scanned, error) {
	var (
		op                                                                     opjournal.Operation
		payload, result, refs, approval, budgets                               *string
		status                                                                 string
		leaseUntil, unknownSince, lastCheck, nextCheck, attStart, firstAttempt *time.Time
		deadline                                                               *time.Time
		dbNow                                                                  time.Time
	)
	err := row.Scan(append(extra, &payload, &result, &op.Note, &op.Tenant, &op.Key, &op.Action, &op.RequestHash, &status,
		&op.AttemptCount, &op.LeaseOwner, &leaseUntil, &op.ExternalID, &op.DuplicateExternalIDs, &op.DuplicateReports,
		&op.ErrorCode, &op.NeedsReview, &op.ReviewReason, &op.CreatedAt, &op.UpdatedAt,
		&unknownSince, &op.CheckCount, &lastCheck, &nextCheck, &attStart, &op.HashKeyID,
		&refs, &op.ParentKey, &firstAttempt, &approval, &deadline, &budgets, &dbNow)...)
	if err != nil {
		return scanned{}, err
	}
	if budgets != nil {
		if op.Budgets, err = opjournal.ParseBudgets([]byte(*budgets)); err != nil {
			return scanned{}, fmt.Errorf("budgets: %w", err)
		}
	}
	if approval != nil {
		var d time.Time
		if deadline != nil {
			d = deadline.UTC()
		}
		if op.Approval, err = opjournal.ParseApproval([]byte(*approval), d); err != nil {
			return scanned{}, fmt.Errorf("approval: %w", err)
		}
	}
	if refs != nil {
		if op.Refs, err = opjournal.ParseRefs([]byte(*refs)); err != nil {
			return scanned{}, fmt.Errorf("refs: %w", err)
		}
	}
	if payload != nil {
		op.Payload = []byte(*payload)
	}
	if result != nil {
		op.Result = []byte(*result)
	}
	if len(op.DuplicateExternalIDs) > 0 {
		op.DuplicateExternalID = op.DuplicateExternalIDs[0]
	} else {
		op.DuplicateExternalIDs = nil
	}
	op.Status = opjournal.Status(status)
	for _, t := range []struct {
		src *time.Time
		dst *time.Time
	}{{leaseUntil, &op.LeaseUntil}, {unknownSince, &op.UnknownSince}, {lastCheck, &op.LastCheckedAt}, {nextCheck, &op.NextCheckAt},
		{attStart, &op.AttemptStartedAt}, {firstAttempt, &op.FirstAttemptAt}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return scanned{op: &op, dbNow: dbNow}, nil
}

// clockArg is $1 of every statement: the test clock, or NULL for the
// database's now().
func (s *Store) clockArg() any {
	if f := s.clock.Load(); f != nil {
		t := (*f)()
		return &t
	}
	return nil
}

// SetClock makes every statement read the time from now instead of the
// database's clock (store.Clock, for tests); nil restores the database's.
func (s *Store) SetClock(now func() time.Time) {
	if now == nil {
		s.clock.Store(nil)
		return
	}
	s.clock.Store(&now)
}

var _ store.Clock = (*Store)(nil)

// one runs a statement that returns at most one operation row. found is
// false when no row matched (the conditional update did not apply).
//
// A statement is sent once. If the connection fails after sending it, its
// outcome is unknown here, and it is never repeated (nor is it by pgx,
// which since 5.13 does not mark such errors safe to retry): the call
// answers UNAVAILABLE and the caller's retry, idempotent by key or fenced
// by attempt, finds out.
func (s *Store) one(ctx context.Context, what, sql string, args ...any) (sc scanned, found bool, err error) {
	return s.oneRule(ctx, what, "", sql, args...)
}

// run is one for a rule's statement: its span names the rule.
func (s *Store) run(ctx context.Context, what string, st *statement, args []any) (scanned, bool, error) {
	return s.oneRule(ctx, what, st.name, st.sql, args...)
}

func (s *Store) oneRule(ctx context.Context, what, rule, sql string, args ...any) (sc scanned, found bool, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if tracing.Enabled() {
		ctx = tracing.WithStatementName(ctx, what, rule)
	}
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
	sc, found, err := s.one(ctx, "get", `SELECT `+fullColumns+` FROM operations WHERE tenant = $2 AND operation_key = $3`,
		s.clockArg(), tenant, key)
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

// The statements of the table's rules, rendered once (render.go) by
// renderStatements, before the first store opens.
var (
	updates  = map[*protocol.Rule]*statement{}
	inserts  = map[*protocol.Rule]*statement{}
	batchReg *statement
	// The hot path's batched statements: the first rule of Claim and of
	// MarkSucceeded.
	batchClaim, batchMark *statement
)

// rendered renders the statements once; Open fails with its error. A
// table this store cannot run (a rule the batched statements cannot
// apply, a kind the renderer lacks) is a programming error that
// TestTheTableRenders catches before any release, never a panic at
// start-up.
var rendered = sync.OnceValue(renderStatements)

// renderStatements fills the statements from the protocol table.
func renderStatements() (err error) {
	defer func() {
		// The renderer's own refusals (render.go) are panics deep in its
		// recursion: an unknown kind has no SQL.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	for _, r := range protocol.AllRules() {
		switch {
		case r.Outcome != protocol.Changed:
		case r.Command == protocol.CmdRegister:
			inserts[r] = renderInsert(r)
		default:
			updates[r] = renderUpdate(r)
		}
	}
	claimed, plain, err := insertRules()
	if err != nil {
		return err
	}
	claimRule, err := batchedRule(protocol.CmdClaim)
	if err != nil {
		return err
	}
	markRule, err := batchedRule(protocol.CmdMarkSucceeded)
	if err != nil {
		return err
	}
	batchReg = renderBatchedInsert(claimed, plain)
	batchClaim = renderBatchedUpdate(claimRule)
	batchMark = renderBatchedUpdate(markRule)
	return nil
}

// insertRules are Register's rules for a new key, chosen by what they
// require (the key absent; a claim asked for, or not) rather than by their
// place in the table. The batched insert decides between the two by the
// call's claim alone, so the table must have exactly two rules that insert,
// told apart by the claim.
func insertRules() (claimed, plain *protocol.Rule, err error) {
	var inserting []*protocol.Rule
	for _, r := range protocol.Rules(protocol.CmdRegister) {
		// A Register with an approval is never batched (register sends it
		// alone): the batched insert is for the two rules a command
		// without one can take.
		if r.Outcome == protocol.Changed && requires(r, protocol.CondAbsent) &&
			(paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister}) || paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister, Claim: true})) {
			inserting = append(inserting, r)
		}
	}
	for _, r := range inserting {
		switch {
		case paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister, Claim: true}) && !paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister}):
			claimed = r
		case paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister}) && !paramsHold(r, &protocol.Command{Kind: protocol.CmdRegister, Claim: true}):
			plain = r
		}
	}
	if len(inserting) != 2 || claimed == nil || plain == nil {
		return nil, nil, fmt.Errorf("the batched Register needs two rules for a new key told apart by the claim; the table has %d", len(inserting))
	}
	return claimed, plain, nil
}

// batchedRule is the rule a batched statement of cmd applies without
// reading the rows: the command's first rule that changes an operation.
// That rule must be the command's first (no rule tried before it could
// apply instead) and its guard all in SQL (no requirement on the command
// alone, which one statement for many calls could not tell apart).
func batchedRule(cmd protocol.CommandKind) (*protocol.Rule, error) {
	rules := protocol.Rules(cmd)
	for _, r := range rules {
		if r.Outcome != protocol.Changed {
			continue
		}
		if r != rules[0] {
			return nil, fmt.Errorf("the batched %s applies %q without reading the row, but rule %q is tried before it", cmd, r.Case, rules[0].Case)
		}
		for _, req := range r.Requires {
			if req.Cond.CommandOnly() {
				return nil, fmt.Errorf("the batched %s cannot apply %q: its guard depends on the command (%v)", cmd, r.Case, req.Cond.Kind)
			}
		}
		return r, nil
	}
	return nil, fmt.Errorf("%s has no rule that changes an operation to batch", cmd)
}

// requires reports whether one of r's requirements is a condition of kind.
func requires(r *protocol.Rule, kind protocol.CondKind) bool {
	for _, req := range r.Requires {
		if req.Cond.Kind == kind {
			return true
		}
	}
	return false
}

// firstRule is the rule a command tries without reading the row: the
// first of its rules whose conditions on the command alone (policy flags,
// the resolution) hold. nil when that rule changes nothing (the row is
// read first then).
func firstRule(c *protocol.Command) *protocol.Rule {
	for _, r := range protocol.Rules(c.Kind) {
		if paramsHold(r, c) {
			if r.Outcome == protocol.Changed {
				return r
			}
			return nil
		}
	}
	return nil
}

// paramsHold evaluates the requirements of r that depend on the command
// alone.
func paramsHold(r *protocol.Rule, c *protocol.Command) bool {
	for _, req := range r.Requires {
		if req.Cond.CommandOnly() && !req.Cond.Eval(nil, c, time.Time{}) {
			return false
		}
	}
	return true
}

// maxApplyRounds bounds how often one call re-reads a row that changed
// under it (each round means another call changed it, and an operation has
// only a handful of transitions).
const maxApplyRounds = 16

// executed is what one command did.
type executed struct {
	sc      scanned
	rule    *protocol.Rule
	changed bool
}

// execute applies command c: the rule it is likely to take, as one
// conditional statement; if that does not apply, the row is read, Apply
// decides on it (the rule, an unchanged answer, or the refusal), and the
// chosen rule runs as a conditional statement guarded by its own
// conditions, so that a concurrent change is never overwritten: then the
// row is read again. known, if set, is the row as just read.
func (s *Store) execute(ctx context.Context, tenant string, c *protocol.Command, known *scanned) (executed, error) {
	if known == nil {
		if r := firstRule(c); r != nil {
			st := updates[r]
			sc, done, err := s.run(ctx, strings.ToLower(string(c.Kind)), st, st.args(s.clockArg(), tenant, c, nil))
			if err != nil || done {
				return executed{sc: sc, rule: r, changed: done}, err
			}
		}
	}
	for round := 0; ; round++ {
		cur := known
		if cur == nil {
			sc, err := s.get(ctx, tenant, c.Key)
			if err != nil {
				return executed{}, err
			}
			cur = &sc
		}
		known = nil
		d, err := protocol.Apply(cur.op, c, cur.dbNow)
		if err != nil {
			return executed{}, err
		}
		if d.Rule.Outcome != protocol.Changed {
			return executed{sc: *cur, rule: d.Rule}, nil
		}
		st := updates[d.Rule]
		sc, done, err := s.run(ctx, strings.ToLower(string(c.Kind)), st, st.args(s.clockArg(), tenant, c, cur.op))
		if err != nil || done {
			return executed{sc: sc, rule: d.Rule, changed: done}, err
		}
		if round == maxApplyRounds {
			return executed{}, opjournal.Errorf(opjournal.CodeUnavailable, "", "operation %q changed %d times while %s was applied; retry", c.Key, round, c.Kind)
		}
	}
}

// applyCall is one command of a tenant, as the batchers carry it.
type applyCall struct {
	tenant string
	c      *protocol.Command
}

// Apply applies c. Register, Claim and MarkSucceeded, the calls an agent
// makes once per operation, share their statements with concurrent calls
// of the same kind (batch.go); every other command is applied by execute.
func (s *Store) Apply(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	switch c.Kind {
	case protocol.CmdRegister:
		return s.register(ctx, tenant, c)
	case protocol.CmdClaim:
		return s.claim(ctx, tenant, c)
	case protocol.CmdMarkSucceeded:
		return s.markSucceeded(ctx, tenant, c)
	}
	ex, err := s.execute(ctx, tenant, c, nil)
	if err != nil {
		return store.Applied{}, err
	}
	return store.Applied{Operation: ex.sc.op}, nil
}

// register inserts the operation, or returns the existing one with the
// same hash (and claims it if asked). With a claim, a new key is inserted
// directly as in_progress with attempt 1: one statement, one commit. The
// statement is shared with concurrent calls (batch.go).
func (s *Store) register(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	// A Register with budgets decides them in a transaction of its own,
	// under the counters' locks (budgets.go).
	if len(c.Budgets) > 0 {
		return s.registerBudgeted(ctx, tenant, c)
	}
	// A Register that needs approval is rare (a person decides it) and has
	// a rule of its own, which the batched insert does not render.
	if s.registers == nil || c.Approval != nil {
		return s.registerOne(ctx, tenant, c)
	}
	if s.registers.tryAlone() {
		defer s.registers.finished()
		return s.registerOne(ctx, tenant, c)
	}
	b, ok, err := s.registers.do(ctx, applyCall{tenant, c})
	switch {
	case err != nil:
		return store.Applied{}, err
	case ok && !b.existed:
		return registered(c, b.sc), nil
	case ok:
		return s.registerExisting(ctx, tenant, c, b.sc)
	}
	// The key exists but the statement's snapshot did not show it, or it
	// came twice in the batch: the one-call path decides.
	return s.registerOne(ctx, tenant, c)
}

// insertRule is the Register rule for a new key: claimed or not.
func insertRule(c *protocol.Command) *protocol.Rule {
	for _, r := range protocol.Rules(protocol.CmdRegister) {
		if paramsHold(r, c) && r.Outcome == protocol.Changed {
			return r
		}
	}
	panic("postgres: no Register rule inserts")
}

// registerOne is Register in a statement of its own. When the key
// exists at the insert but is gone when read (a purge deleted it in
// between), the key is new again: the insert is tried once more.
func (s *Store) registerOne(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	st := inserts[insertRule(c)]
	for round := 0; ; round++ {
		sc, created, err := s.run(ctx, "register", st, st.args(s.clockArg(), tenant, c, nil))
		if err != nil {
			return store.Applied{}, err
		}
		if created {
			return registered(c, sc), nil
		}
		existing, err := s.get(ctx, tenant, c.Key)
		if opjournal.ErrorCode(err) == opjournal.CodeNotFound && round < maxApplyRounds {
			continue
		}
		if err != nil {
			return store.Applied{}, err
		}
		return s.registerExisting(ctx, tenant, c, existing)
	}
}

// registered is the result of a Register that inserted the row.
func registered(c *protocol.Command, sc scanned) store.Applied {
	// A new key that needs approval is inserted awaiting it, never claimed.
	res := store.Applied{Operation: sc.op, Created: true, Claimed: c.Claim && sc.op.Raw() == opjournal.StatusInProgress}
	if sc.op.Status == opjournal.StatusAwaitingApproval {
		res.RetryAfter = store.AwaitRetryAfter(sc.op, sc.dbNow)
	}
	return res
}

// registerExisting answers a Register whose key exists: the table decides
// (the same request → replay, and a claim if asked; another → conflict).
// A claim is decided on the row just read, so a replay of a terminal or
// reviewed operation costs no statement.
func (s *Store) registerExisting(ctx context.Context, tenant string, c *protocol.Command, existing scanned) (store.Applied, error) {
	if _, err := protocol.Apply(existing.op, c, existing.dbNow); err != nil {
		return store.Applied{}, err
	}
	if !c.Claim {
		res := store.Applied{Operation: existing.op}
		if existing.op.Status == opjournal.StatusAwaitingApproval {
			res.RetryAfter = store.AwaitRetryAfter(existing.op, existing.dbNow)
		}
		return res, nil
	}
	ex, err := s.execute(ctx, tenant, store.ClaimOf(c), &existing)
	if err != nil {
		return store.Applied{}, err
	}
	return claimResult(ex), nil
}

// claimResult answers a claim.
func claimResult(ex executed) store.Applied {
	res := store.Applied{Operation: ex.sc.op, Claimed: ex.changed}
	if !ex.changed {
		res.RetryAfter = store.RetryAfter(ex.sc.op, ex.sc.dbNow)
	}
	return res
}

// claim takes a lease by one conditional UPDATE: exactly one of any number
// of concurrent callers (in any number of processes) sees a row come back.
// The statement is shared with concurrent calls (batch.go).
func (s *Store) claim(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	if s.claims == nil {
		return s.claimOne(ctx, tenant, c)
	}
	if s.claims.tryAlone() {
		defer s.claims.finished()
		return s.claimOne(ctx, tenant, c)
	}
	b, ok, err := s.claims.do(ctx, applyCall{tenant, c})
	switch {
	case err != nil:
		return store.Applied{}, err
	case ok:
		return store.Applied{Operation: b.sc.op, Claimed: true}, nil
	}
	return s.claimOne(ctx, tenant, c)
}

func (s *Store) claimOne(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	ex, err := s.execute(ctx, tenant, c, nil)
	if err != nil {
		return store.Applied{}, err
	}
	return claimResult(ex), nil
}

// markSucceeded records a confirmed effect from any issued attempt. The
// statement is shared with concurrent calls (batch.go).
func (s *Store) markSucceeded(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	if s.marks != nil {
		if !s.marks.tryAlone() {
			b, ok, err := s.marks.do(ctx, applyCall{tenant, c})
			switch {
			case err != nil:
				return store.Applied{}, err
			case ok:
				return store.Applied{Operation: b.sc.op}, nil
			}
		} else {
			defer s.marks.finished()
		}
	}
	ex, err := s.execute(ctx, tenant, c, nil)
	if err != nil {
		return store.Applied{}, err
	}
	return store.Applied{Operation: ex.sc.op}, nil
}

// List returns one page of operations in key order: the statement is
// store.BuildList's, in PostgreSQL's terms (ListDialect).
func (s *Store) List(ctx context.Context, p store.ListParams) ([]*opjournal.Operation, string, error) {
	st := store.BuildList(ListDialect{}, p, s.clockArg())
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, st.SQL, st.Args...)
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

// ListDialect is how PostgreSQL spells List's statement
// (store.ListDialect): $n placeholders, and the conditions below.
type ListDialect struct{}

var _ store.ListDialect = ListDialect{}

// Placeholder is "$n".
func (ListDialect) Placeholder(n int) string { return "$" + strconv.Itoa(n) }

// Columns is the row scanOp reads.
func (ListDialect) Columns(basic bool) string {
	if basic {
		return basicColumns
	}
	return fullColumns
}

// Bool is a boolean: PostgreSQL has them.
func (ListDialect) Bool(b bool) any { return b }

// Time is t rounded up to PostgreSQL's microseconds (ceilMicro).
func (ListDialect) Time(t time.Time) any { return ceilMicro(t) }

// CheckDue is protocol.CheckDueTerm in PostgreSQL's SQL.
func (ListDialect) CheckDue() string { return checkDue }

// LeaseExpired is protocol.LeaseExpiredTerm in PostgreSQL's SQL.
func (ListDialect) LeaseExpired() string { return leaseExpired }

// Statuses is one parameter, an array of the statuses.
func (ListDialect) Statuses(a *store.Args, statuses []opjournal.Status) string {
	texts := make([]string, len(statuses))
	for i, st := range statuses {
		texts[i] = string(st)
	}
	return effectiveStatus + ` = ANY(` + a.Add(texts) + `::text[])`
}

// Refs is one containment test of the row's refs (a jsonb object), which
// the partial index operations_refs_idx (rows with refs) serves: it is
// added only when refs are asked for (store.BuildList), since a generic
// plan of "$9 IS NULL OR refs @> $9" could not use it.
func (ListDialect) Refs(a *store.Args, _ string, refs map[string]string) string {
	return `refs @> ` + a.Add(string(opjournal.RefsJSON(refs))) + `::jsonb`
}

// KeyPrefix is matched by starts_with, not by LIKE (where % and _ are
// wildcards) nor by a range of the key: under the database's collation
// (en_US, say) the keys that begin with some bytes are not one range of
// its order.
func (ListDialect) KeyPrefix(a *store.Args, prefix string) string {
	return `starts_with(operation_key, ` + a.Add(prefix) + `)`
}

// ceilMicro rounds t up to PostgreSQL's microseconds: pgx sends a time
// rounded down, which would let a row just before a bound pass it.
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

// Counts groups the tenant's operations in one statement, which reads
// them through the primary key's tenant prefix.
func (s *Store) Counts(ctx context.Context, tenant string) ([]store.CountRow, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT action_type, `+effectiveStatus+`, needs_review, `+leaseExpired+`, `+checkDue+`,
		count(*), min(updated_at)
		FROM operations WHERE tenant = $2 GROUP BY 1, 2, 3, 4, 5`, s.clockArg(), tenant)
	if err != nil {
		return nil, classify("counts", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.CountRow, error) {
		var c store.CountRow
		var status string
		err := r.Scan(&c.Action, &status, &c.NeedsReview, &c.LeaseExpired, &c.CheckDue, &c.Count, &c.OldestUpdate)
		c.Status = opjournal.Status(status)
		return c, err
	})
	if err != nil {
		return nil, classify("counts", err)
	}
	return out, nil
}

// Activity counts the tenant's events per bucket and kind in one
// statement, through operation_events_tenant_at_idx. A bucket's start is
// computed in whole microseconds since the epoch (extract gives an exact
// numeric), so it is a multiple of the width exactly.
func (s *Store) Activity(ctx context.Context, p store.ActivityParams) ([]store.ActivityRow, error) {
	if err := store.CheckBucket(p.Bucket); err != nil {
		return nil, err
	}
	args := []any{p.Tenant, ceilMicro(p.Since), p.Bucket.Microseconds()}
	kind := store.KindCase(func(v string) string {
		args = append(args, v)
		return fmt.Sprintf("$%d::text", len(args))
	}, func(p string) string { return "starts_with(reason, " + p + ")" })
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT floor(extract(epoch FROM at) * 1000000)::bigint / $3 * $3, `+kind+`, count(*)
		FROM operation_events WHERE tenant = $1 AND at >= $2 GROUP BY 1, 2`, args...)
	if err != nil {
		return nil, classify("activity", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ActivityRow, error) {
		var a store.ActivityRow
		var start int64
		var kind string
		err := r.Scan(&start, &kind, &a.Count)
		a.Start, a.Kind = time.UnixMicro(start).UTC(), opjournal.EventKind(kind)
		return a, err
	})
	if err != nil {
		return nil, classify("activity", err)
	}
	// Sorted here rather than by ORDER BY: the database's collation need
	// not order the kinds byte-wise, as the SQLite store does.
	slices.SortFunc(out, func(a, b store.ActivityRow) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(string(a.Kind), string(b.Kind)))
	})
	return out, nil
}

// Events returns one page of the operation's history, oldest first.
func (s *Store) Events(ctx context.Context, p store.EventsParams) ([]opjournal.Event, int64, error) {
	if _, err := s.get(ctx, p.Tenant, p.Key); err != nil {
		return nil, 0, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = opjournal.DefaultPageSize
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, at, coalesce(from_status, ''), to_status, attempt, actor, actor_label, stated_actor, reason, coalesce(external_id, '')
		FROM operation_events e WHERE tenant = $1 AND operation_key = $2 AND id > $3
		  AND `+sinceRegistered("e", "$1", "$2")+` ORDER BY id LIMIT $4`, p.Tenant, p.Key, p.After, limit+1)
	if err != nil {
		return nil, 0, classify("events", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (opjournal.Event, error) {
		var e opjournal.Event
		var from, to string
		err := r.Scan(&e.ID, &e.At, &from, &to, &e.Attempt, &e.Actor, &e.ActorLabel, &e.StatedActor, &e.Reason, &e.ExternalID)
		e.From, e.To = opjournal.Status(from), opjournal.Status(to)
		return e, err
	})
	if err != nil {
		return nil, 0, classify("events", err)
	}
	evs, next := store.EventPage(evs, limit)
	return evs, next, nil
}
