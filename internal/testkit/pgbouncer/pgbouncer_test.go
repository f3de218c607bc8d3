package pgbouncer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
)

// TestSchemaPerDatabaseThroughPgBouncer: each PgBouncer database runs its
// statements in its own schema, its traffic is counted in SHOW STATS, and
// a session setting in the startup packet (search_path) is refused, not
// silently dropped.
func TestSchemaPerDatabaseThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgtest.StartPgBouncer(t)
	ctx := context.Background()
	for range 2 {
		url := b.NewSchema(t)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var schema string
		err = conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if schema != pgtest.Alias(url) {
			t.Fatalf("through %s the schema is %q", pgtest.Alias(url), schema)
		}
		b.AwaitTraffic(t, schema, 1)
	}
	_, err := pgx.Connect(ctx, "postgres://postgres@"+b.Addr()+"/x?sslmode=disable&search_path=public")
	if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("search_path in the startup packet: %v; want PgBouncer's refusal", err)
	}
}

// TestStartRefusesBadOptions: a missing binary, server URL or directory is
// a clear error, not a hang.
func TestStartRefusesBadOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		o    pgbouncer.Options
		want string
	}{
		"no binary":  {pgbouncer.Options{Binary: "/nonexistent/pgbouncer", Server: pgtest.BaseURL(), Dir: t.TempDir()}, "/nonexistent/pgbouncer"},
		"bad server": {pgbouncer.Options{Server: "host=127.0.0.1", Dir: t.TempDir()}, "postgres:// URL"},
		"no dir":     {pgbouncer.Options{Server: pgtest.BaseURL()}, "Dir is required"},
	} {
		b, err := pgbouncer.Start(ctx, tc.o)
		if err == nil {
			_ = b.Close()
			t.Fatalf("%s: started", name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to say %q", name, err, tc.want)
		}
	}
}
