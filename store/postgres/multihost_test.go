package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/postgres"
)

// TestFrozenFirstHostOfMultiHostURL opens the store on a multi-host URL
// whose first host accepts connections and never answers (a frozen
// primary: SIGSTOP, a hung VM) and whose second is the real PostgreSQL,
// with no connect_timeout given, as a failover manager's users write it.
// pgx tries the hosts in order and waits the whole connect timeout on the
// frozen one before it tries the next, once for the pool's first
// connection and once for the migrations' own; with the single-host
// default (5 s) Open failed: its first connection used up the 5 s bound
// of the ping on the frozen host and never tried the real one. The
// multi-host default (2 s) bounds the first write to about 4.5 s.
func TestFrozenFirstHostOfMultiHostURL(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewSchema(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := tcpproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(frozen.Close)
	frozen.Stall() // accepts, and nothing ever comes back
	u.Host = frozen.Addr() + "," + u.Host
	ctx := context.Background()

	start := time.Now()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open after %v: %v", time.Since(start), err)
	}
	t.Cleanup(func() { s.Close() })
	opened := time.Since(start)
	if _, err := s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdRegister, Key: "frozen:first", Action: "a", RequestHash: "h",
		Payload: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatalf("first write: %v", err)
	}
	took := time.Since(start)
	t.Logf("open %v, first write done %v after the start", opened.Round(time.Millisecond), took.Round(time.Millisecond))
	// Two connects that each wait out the frozen host (the ping's and the
	// migrations'), and slack for a busy machine.
	if bound := 7 * time.Second; took > bound {
		t.Fatalf("the first write completed %v after the start, want < %v (open took %v)", took, bound, opened)
	}
}

// TestKeywordValueConnectionString opens the store on the keyword/value
// form of a two-host connection string (the form Patroni and
// pg_auto_failover print), with our own parameter in it, and writes.
func TestKeywordValueConnectionString(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port := u.Hostname(), u.Port()
	q := u.Query()
	dsn := fmt.Sprintf("host=%s,%s port=%s,%s user=%s dbname='%s' sslmode=disable target_session_attrs=read-write search_path = %s opjournal_statement_timeout=3s",
		host, host, port, port, u.User.Username(), strings.TrimPrefix(u.Path, "/"), q.Get("search_path"))
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open %q: %v", dsn, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Apply(context.Background(), "", &protocol.Command{Kind: protocol.CmdRegister, Key: "kv:1", Action: "a", RequestHash: "h",
		Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "", "kv:1"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(dsn); err != nil {
		t.Fatalf("migrate %q: %v", dsn, err)
	}
}
