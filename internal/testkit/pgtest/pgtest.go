// Package pgtest gives each test its own PostgreSQL schema on the test
// server, so tests run in parallel and leave nothing behind.
//
// The server is $TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test.
// `make test` (scripts/test.sh) sets the variable, starting a throwaway
// cluster when no server runs. A test that needs PostgreSQL and cannot reach
// it FAILS with instructions: PostgreSQL is never silently skipped.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal/internal/testkit/pgenv"
)

// DefaultURL is used when TEST_DATABASE_URL is not set.
const DefaultURL = pgenv.DefaultTestURL

// BaseURL returns the test server's URL (pgenv.TestURL).
func BaseURL() string { return pgenv.TestURL() }

// NewSchema creates an empty schema with a random name and returns a URL
// whose connections use it (search_path). The schema is dropped when the
// test ends. It fails the test if PostgreSQL cannot be reached.
func NewSchema(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is required for this test and is not reachable at TEST_DATABASE_URL=%q: %v\n"+
			"Run the suite with `make test` (it finds or starts a server), or start one: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start", redacted(base), err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
