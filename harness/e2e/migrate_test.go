package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"
)

// TestMigrateCommand: `opjournal migrate` creates the schema on an empty
// database, a second run changes nothing, and a server then starts on it.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		for run := 1; run <= 2; run++ {
			code, out := runBinary(t, serverOpts{Dir: t.TempDir()}, "migrate", "--database-url", dbURL)
			if code != 0 || !strings.Contains(out, "migrations applied") {
				t.Fatalf("migrate run %d: exit %d\n%s", run, code, out)
			}
		}
		tables := map[string]bool{}
		if strings.HasPrefix(dbURL, "sqlite://") {
			db, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite://"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var n string
				_ = rows.Scan(&n)
				tables[n] = true
			}
			rows.Close()
		} else {
			conn, err := pgx.Connect(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			rows, _ := conn.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				tables[n] = true
			}
		}
		for _, want := range []string{"operations", "operation_events", "schema_migrations"} {
			if !tables[want] {
				t.Fatalf("after migrate, table %s is missing (have %v)", want, tables)
			}
		}
		srv := startServer(t, "--database-url", dbURL)
		if _, err := srv.Client.Lookup(ctxFor(t), nil); err == nil {
			t.Fatal("lookup of an empty key succeeded")
		}
	})
}
