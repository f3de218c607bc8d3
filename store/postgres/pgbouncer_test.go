package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/storetest"
)

// throughPgBouncer gives each caller a schema of its own behind a real
// PgBouncer in transaction pooling mode, migrated on a direct connection
// (Open does not migrate through a pooler), and remembers the PgBouncer
// databases it made, so the test can prove the traffic went through it.
type throughPgBouncer struct {
	b       *pgtest.PgBouncer
	mu      sync.Mutex
	aliases []string
}

func (p *throughPgBouncer) newSchema(t *testing.T) string {
	t.Helper()
	through := p.b.NewSchema(t)
	if err := postgres.Migrate(pgtest.DirectURL(t, through)); err != nil {
		t.Fatalf("migrate on the direct URL: %v", err)
	}
	p.mu.Lock()
	p.aliases = append(p.aliases, pgtest.Alias(through))
	p.mu.Unlock()
	return through
}

func (p *throughPgBouncer) open(t *testing.T, url string) store.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open through pgbouncer: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// requireTraffic fails the test unless PgBouncer counted transactions of
// every schema it served: the store's only way to its schema is the
// PgBouncer database of that schema (migrations went directly), so a
// store that bypassed PgBouncer leaves its count at zero.
func (p *throughPgBouncer) requireTraffic(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	aliases := p.aliases
	p.mu.Unlock()
	if len(aliases) == 0 {
		t.Fatal("no schema was made through pgbouncer")
	}
	var xacts int64
	for _, a := range aliases {
		// At least Open's ping and its schema version check.
		xacts += p.b.AwaitTraffic(t, a, 2).TotalXacts
	}
	t.Logf("pgbouncer served %d schemas, %d transactions", len(aliases), xacts)
}

// TestConformanceThroughPgBouncer runs the whole conformance suite, the
// hot path batched and one call per statement, through a real PgBouncer
// in transaction pooling mode (default_query_exec_mode=cache_describe),
// and fails if any schema's traffic did not go through it.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	p := &throughPgBouncer{b: pgtest.StartPgBouncer(t)}
	t.Run("suite", func(t *testing.T) {
		for name, params := range map[string]string{"batched": "", "one-call": "&opjournal_batch_workers=0"} {
			t.Run(name, func(t *testing.T) {
				storetest.Run(t, func(t *testing.T) storetest.Opener {
					url := p.newSchema(t) + params
					return func(t *testing.T) store.Store { return p.open(t, url) }
				})
			})
		}
	})
	p.requireTraffic(t)
}

// TestModelThroughPgBouncer checks the batched store against the
// protocol's pure model through PgBouncer (storetest.RunModel).
func TestModelThroughPgBouncer(t *testing.T) {
	t.Parallel()
	p := &throughPgBouncer{b: pgtest.StartPgBouncer(t)}
	t.Run("model", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) store.Store { return p.open(t, p.newSchema(t)) })
	})
	p.requireTraffic(t)
}

// TestMigrationsThroughPgBouncer: migrations need a session, which a
// transaction pooler does not give. Migrate refuses a pooled URL; Open
// through PgBouncer does not migrate and says what to run; a URL to
// PgBouncer that is not marked as pooled is refused by PgBouncer before
// anything is migrated through it, with a hint; once migrated on the
// direct URL, Open through PgBouncer works.
func TestMigrationsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgtest.StartPgBouncer(t)
	through := b.NewSchema(t)
	direct := pgtest.DirectURL(t, through)
	ctx := context.Background()
	migrated := func() bool {
		t.Helper()
		conn, err := pgx.Connect(ctx, direct)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	if err := postgres.Migrate(through); !errors.Is(err, postgres.ErrMigrateThroughPooler) {
		t.Fatalf("Migrate through pgbouncer: %v, want ErrMigrateThroughPooler", err)
	}
	_, err := postgres.Open(ctx, through)
	if opjournal.ErrorCode(err) != opjournal.CodeUnavailable || !strings.Contains(err.Error(), "opjournal migrate") {
		t.Fatalf("Open through pgbouncer on an empty schema: %v; want UNAVAILABLE naming `opjournal migrate`", err)
	}
	unmarked := strings.Replace(through, "default_query_exec_mode=cache_describe", "", 1)
	_, err = postgres.Open(ctx, unmarked)
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
		t.Fatalf("Open through pgbouncer without the statement mode: %v; want PgBouncer's refusal and the hint", err)
	}
	// Migrate (opjournal migrate) on a URL to PgBouncer that does not say
	// so: refused before golang-migrate's session lock is taken through it.
	if err := postgres.Migrate(unmarked); !errors.Is(err, postgres.ErrMigrateThroughPooler) || !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("Migrate through pgbouncer without the statement mode: %v, want ErrMigrateThroughPooler with PgBouncer's refusal", err)
	}
	if migrated() {
		t.Fatal("something was created through pgbouncer: no migration may run through a transaction pooler")
	}

	if err := postgres.Migrate(direct); err != nil {
		t.Fatalf("Migrate on the direct URL: %v", err)
	}
	s, err := postgres.Open(ctx, through)
	if err != nil {
		t.Fatalf("Open through pgbouncer after migrating: %v", err)
	}
	defer s.Close()
	if _, err := s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdRegister, Key: "k", Action: "a", RequestHash: "h", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	b.AwaitTraffic(t, pgtest.Alias(through), 3)
}

// TestPurgeLockThroughPgBouncer races two stores (two servers) for the
// purge lock through PgBouncer, whose pool for the schema is ONE server
// connection: every statement of both stores runs in one server session,
// where a session advisory lock would be taken again by whoever asks
// (they are re-entrant), so only a lock that does not live in the
// session can pass. Exactly one caller wins; unlock releases the lock;
// a lease that ended (its holder dead) is taken over, and the old
// holder's late unlock leaves the new holder's lock alone.
func TestPurgeLockThroughPgBouncer(t *testing.T) {
	t.Parallel()
	p := &throughPgBouncer{b: pgtest.StartPgBouncer(t, func(o *pgbouncer.Options) { o.PoolSize = 1 })}
	url := p.newSchema(t)
	ctx := context.Background()
	a, b := p.open(t, url), p.open(t, url)

	const callers = 16
	var wins atomic.Int32
	var unlocks sync.Map
	var wg sync.WaitGroup
	for i := range callers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			unlock, ok, err := s.TryLock(ctx, "purge")
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				wins.Add(1)
				unlocks.Store(i, unlock)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of %d racing callers got the purge lock; want exactly 1", n, callers)
	}
	var unlock func()
	unlocks.Range(func(_, v any) bool { unlock = v.(func()); return false })
	for _, s := range []store.Store{a, b} {
		if _, ok, err := s.TryLock(ctx, "purge"); err != nil || ok {
			t.Fatalf("a held lock was taken again: %v %v", ok, err)
		}
	}
	unlock()
	unlockB, ok, err := b.TryLock(ctx, "purge")
	if err != nil || !ok {
		t.Fatalf("lock after unlock: %v %v", ok, err)
	}

	// B dies holding it: its lease ends (moved to the past on the server,
	// instead of waiting out the 30 s lease), and A takes it over.
	conn, err := pgx.Connect(ctx, pgtest.DirectURL(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE store_locks SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'purge'`); err != nil {
		t.Fatal(err)
	}
	unlockA, ok, err := a.TryLock(ctx, "purge")
	if err != nil || !ok {
		t.Fatalf("an ended lease was not taken over: %v %v", ok, err)
	}
	unlockB() // late: must not release A's lock
	if _, ok, err := b.TryLock(ctx, "purge"); err != nil || ok {
		t.Fatalf("the old holder's unlock released the new holder's lock: %v %v", ok, err)
	}
	unlockA()
	var rows int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM store_locks`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("after every unlock: %d lock rows (%v), want 0", rows, err)
	}
	p.requireTraffic(t)
}
