package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
)

// PgBouncer is a real PgBouncer process in transaction pooling mode in
// front of the test server (internal/testkit/pgbouncer), started for one test.
type PgBouncer struct {
	*pgbouncer.Bouncer
}

// StartPgBouncer starts PgBouncer on a free port with its own directory,
// configuration and log, and stops it when the test ends; opts may change
// its options (a pool size). It FAILS the test (never skips) when
// pgbouncer is not installed or does not start.
func StartPgBouncer(t testing.TB, opts ...func(*pgbouncer.Options)) *PgBouncer {
	t.Helper()
	if _, err := pgbouncer.Binary(""); err != nil {
		t.Fatalf("PgBouncer is required for this test: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := pgbouncer.Options{Server: BaseURL(), Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	b, err := pgbouncer.Start(ctx, o)
	if err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		if t.Failed() {
			t.Logf("pgbouncer's log: %s", b.LogPath())
		}
	})
	return &PgBouncer{b}
}

// NewSchema is pgtest.NewSchema through PgBouncer: an empty schema of its
// own (dropped when the test ends) and a URL through PgBouncer whose
// server connections use it, with pgx in the statement mode a
// transaction pooler needs (pgbouncer.ExecMode).
func (b *PgBouncer) NewSchema(t testing.TB) string {
	t.Helper()
	direct := NewSchema(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	through, err := b.AddDatabase(ctx, schema, schema)
	if err != nil {
		t.Fatalf("pgbouncer: add a database for schema %s: %v", schema, err)
	}
	// The alias stays until PgBouncer stops: its SHOW STATS row is the
	// test's proof of traffic (a KILL would drop counts not yet summed up),
	// and its idle server connections close by themselves
	// (server_idle_timeout), or for another alias's (max_user_connections).
	return through
}

// DirectURL returns the URL that reaches the test server directly with
// the schema of a URL NewSchema returned (for migrations, and for checks
// that must not go through PgBouncer).
func DirectURL(t testing.TB, through string) string {
	t.Helper()
	u, err := url.Parse(through)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Path[1:]
	d, err := url.Parse(BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	q := d.Query()
	q.Set("search_path", schema)
	d.RawQuery = q.Encode()
	return d.String()
}

// Alias returns the PgBouncer database of a URL NewSchema returned.
func Alias(through string) string {
	u, err := url.Parse(through)
	if err != nil || len(u.Path) < 2 {
		return ""
	}
	return u.Path[1:]
}

// Stats returns SHOW STATS per database alias, failing the test if the
// admin console does not answer.
func (b *PgBouncer) Stats(t testing.TB) map[string]pgbouncer.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Bouncer.Stats(ctx)
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	return s
}

// AwaitTraffic waits until SHOW STATS counts at least min transactions
// for alias (the totals are refreshed every second), and fails the test
// otherwise: the proof that a test's statements went through PgBouncer.
func (b *PgBouncer) AwaitTraffic(t testing.TB, alias string, min int64) pgbouncer.Stats {
	t.Helper()
	var got pgbouncer.Stats
	await.State(t, 15*time.Second, func() (bool, string) {
		got = b.Stats(t)[alias]
		return got.TotalXacts >= min, "waiting for pgbouncer to count transactions of " + alias + ": " +
			formatStats(got)
	})
	return got
}

func formatStats(s pgbouncer.Stats) string {
	return fmt.Sprintf("total_xact_count=%d total_query_count=%d", s.TotalXacts, s.TotalQueries)
}
