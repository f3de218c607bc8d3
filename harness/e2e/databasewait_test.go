package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
)

// dbPassword is put in the connection strings of these tests (the test
// server trusts every connection, so it is not checked): no log line or
// error may show it.
const dbPassword = "s3cr3t-never-logged"

// closedPort is a local port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeWaitsForAWritableHost starts serve on a two-host URL while
// neither host accepts connections (a database starting beside the
// service, a failover manager still electing its leader): it waits,
// logging the hosts it tries and never the password, and serves as soon
// as one host is up, in the same process.
func TestServeWaitsForAWritableHost(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	px.Close() // refused until Resume
	other := closedPort(t)
	u.User = url.UserPassword(u.User.Username(), dbPassword)
	u.Host = px.Addr() + "," + other
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()

	waiting := make(chan string, 16)
	o := serverOpts{OnLine: func(line []byte) {
		if bytes.Contains(line, []byte(`"waiting for the database"`)) {
			select {
			case waiting <- string(line):
			default:
			}
		}
	}}
	started, failed := spawnInBackground(t, o, "--database-url", u.String(), "--database-wait", "2m")
	select {
	case line := <-waiting:
		if want := px.Addr() + "," + other; !strings.Contains(line, want) {
			t.Errorf("the waiting line does not name the hosts %s: %s", want, line)
		}
	case err := <-failed:
		t.Fatalf("serve did not wait for the database: %v", err)
	case <-time.After(startTimeout):
		t.Fatal("no \"waiting for the database\" line")
	}
	if err := px.Resume(); err != nil {
		t.Fatal(err)
	}
	var srv *proc
	select {
	case srv = <-started:
	case err := <-failed:
		t.Fatalf("serve did not start once the database was up: %v", err)
	}
	register(t, ctxFor(t), srv, "dbwait:op-1")
	if strings.Contains(srv.Stderr(), dbPassword) {
		t.Fatalf("the password is in the log:\n%s", srv.Stderr())
	}
}

// TestServeDatabaseWaitBounds: --database-wait 0 exits at once, a short
// wait exits once it has passed, both with UNAVAILABLE and without the
// password; a negative wait is refused.
func TestServeDatabaseWaitBounds(t *testing.T) {
	t.Parallel()
	dbURL := fmt.Sprintf("postgres://postgres:%s@%s,%s/postgres?sslmode=disable", dbPassword, closedPort(t), closedPort(t))
	for _, c := range []struct {
		wait     string
		min, max time.Duration
		want     string
	}{
		{"0", 0, 10 * time.Second, "UNAVAILABLE"},
		{"3s", 3 * time.Second, 20 * time.Second, "waited 3s for a writable host"},
		{"-1s", 0, 10 * time.Second, "--database-wait must not be negative"},
	} {
		start := time.Now()
		code, out := runBinary(t, serverOpts{}, "serve", "--database-url", dbURL, "--database-wait", c.wait,
			"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
		took := time.Since(start)
		if code == 0 || !strings.Contains(out, c.want) || took < c.min || took > c.max {
			t.Errorf("--database-wait %s: exit %d after %v, want non-zero within [%v, %v] saying %q:\n%s", c.wait, code, took, c.min, c.max, c.want, out)
		}
		if strings.Contains(out, dbPassword) {
			t.Errorf("--database-wait %s: the password is in the output:\n%s", c.wait, out)
		}
	}
}

// TestKeywordValueDatabaseURL: migrate, serve and purge take the libpq
// keyword/value form (host=a,b port=… dbname=…) that Patroni and
// pg_auto_failover print, as they take the URL; a malformed one is
// refused without echoing the password.
func TestKeywordValueDatabaseURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("host=%s,%s port=%s user=%s password='%s' dbname=%s sslmode=disable target_session_attrs=read-write search_path=%s",
		u.Hostname(), u.Hostname(), u.Port(), u.User.Username(), dbPassword, strings.TrimPrefix(u.Path, "/"), u.Query().Get("search_path"))
	if code, out := runBinary(t, serverOpts{}, "migrate", "--database-url", dsn); code != 0 || strings.Contains(out, dbPassword) {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	srv := startServer(t, "--database-url", dsn)
	register(t, ctxFor(t), srv, "kv:op-1")
	if code, out := runBinary(t, serverOpts{}, "purge", "--dry-run", "--database-url", dsn); code != 0 || strings.Contains(out, dbPassword) {
		t.Fatalf("purge: exit %d:\n%s", code, out)
	}
	bad := "host=" + u.Hostname() + " password='" + dbPassword
	code, out := runBinary(t, serverOpts{}, "migrate", "--database-url", bad)
	if code == 0 || strings.Contains(out, dbPassword) || !strings.Contains(out, "no closing quote") {
		t.Fatalf("a malformed connection string: exit %d:\n%s", code, out)
	}
}
