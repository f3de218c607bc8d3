package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
)

// `serve --database-wait D` measured from outside, as an operator's
// supervisor sees it: the exit status and the time until the process
// exits, and what it printed. TestServeDatabaseWaitBounds and
// TestServeWaitsForAWritableHost cover the refused-connection case and a
// start during the wait; these add a host that accepts connections and
// never answers (a frozen primary), the bad values' exit status, the
// keyword/value form's password, and how soon serve starts once the
// database is up.

// frozenHost listens on a free local port and accepts every connection
// without ever answering: a database host that hangs.
func frozenHost(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// timedServe runs serve to its exit and returns its status, output and
// how long it ran.
func timedServe(t *testing.T, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = childEnv(nil)
	setProcAttr(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("serve %v did not exit within %v:\n%s", args, startTimeout, out.String())
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), took
}

// TestDatabaseWaitOnAFrozenHost: with the only host accepting connections
// and never answering, serve tries for D and exits 1 within D plus one
// connect_timeout (5 s, the attempt under way when D ends) plus a margin
// for two busy cores; its message says UNAVAILABLE, the time it really
// waited and the flag, and shows no password, in either form of the
// connection string.
func TestDatabaseWaitOnAFrozenHost(t *testing.T) {
	t.Parallel()
	host := frozenHost(t)
	h, port, _ := net.SplitHostPort(host)
	const connectTimeout = 5 * time.Second
	for _, c := range []struct {
		name, dsn string
		wait      time.Duration
	}{
		{"url, 1s", fmt.Sprintf("postgres://opjournal:%s@%s/opjournal?sslmode=disable", url.QueryEscape(dbPassword), host), time.Second},
		{"url, 7s", fmt.Sprintf("postgres://opjournal:%s@%s/opjournal?sslmode=disable", url.QueryEscape(dbPassword), host), 7 * time.Second},
		{"keyword/value, 2s", fmt.Sprintf("host=%s port=%s user=opjournal password='%s' dbname=opjournal sslmode=disable", h, port, dbPassword), 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, took := timedServe(t, "--database-url", c.dsn, "--database-wait", c.wait.String())
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, out)
			}
			if limit := c.wait + connectTimeout + 3*time.Second; took < c.wait || took > limit {
				t.Errorf("exited after %v, want within [%v, %v]:\n%s", took, c.wait, limit, out)
			}
			if !strings.Contains(out, "UNAVAILABLE") || !strings.Contains(out, "--database-wait "+c.wait.String()) {
				t.Errorf("the message does not say the database is unavailable and which wait ran out:\n%s", out)
			}
			// The time it says it waited is the time it ran, to the second.
			var said time.Duration
			if i := strings.Index(out, "(waited "); i >= 0 {
				said, _ = time.ParseDuration(strings.Fields(out[i+len("(waited "):])[0])
			}
			if d := said - took; d > 1500*time.Millisecond || d < -1500*time.Millisecond {
				t.Errorf("it says it waited %v; it ran %v:\n%s", said, took, out)
			}
			if strings.Contains(out, dbPassword) {
				t.Errorf("the password is in the output:\n%s", out)
			}
		})
	}
}

// TestDatabaseWaitBadValuesExit2: a value of --database-wait that is not a
// duration, has no unit, or is negative is a usage error, exit status 2
// before anything is tried, naming the flag.
func TestDatabaseWaitBadValuesExit2(t *testing.T) {
	t.Parallel()
	dsn := fmt.Sprintf("postgres://opjournal:%s@%s/opjournal?sslmode=disable", dbPassword, closedPort(t))
	for _, v := range []string{"soon", "5", "-1s", "1x"} {
		code, out, took := timedServe(t, "--database-url", dsn, "--database-wait", v)
		if code != 2 || !strings.Contains(out, "database-wait") || took > 10*time.Second {
			t.Errorf("--database-wait %s: exit %d after %v, want 2 at once naming the flag:\n%s", v, code, took, out)
		}
		if strings.Contains(out, dbPassword) {
			t.Errorf("--database-wait %s: the password is in the output:\n%s", v, out)
		}
	}
}

// TestDatabaseWaitServesSoonAfterTheDatabaseIsUp: the database comes up
// 3 s into a 60 s wait; serve is serving within its one-second retry (plus
// a margin) of that moment, not at the end of the wait.
func TestDatabaseWaitServesSoonAfterTheDatabaseIsUp(t *testing.T) {
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
	u.Host = px.Addr()
	u.User = url.UserPassword(u.User.Username(), dbPassword)
	waiting := make(chan time.Time, 1)
	o := serverOpts{OnLine: func(line []byte) {
		if bytes.Contains(line, []byte(`"waiting for the database"`)) {
			select {
			case waiting <- time.Now():
			default:
			}
		}
	}}
	started, failed := spawnInBackground(t, o, "--database-url", u.String(), "--database-wait", "60s")
	var first time.Time
	select {
	case first = <-waiting:
	case err := <-failed:
		t.Fatalf("serve did not wait: %v", err)
	case <-time.After(startTimeout):
		t.Fatal("no \"waiting for the database\" line")
	}
	// Up a few retries later (a wait on the clock, as the database's own
	// start-up takes time; what is measured is serve's answer to it).
	<-time.After(time.Until(first.Add(3 * time.Second)))
	if err := px.Resume(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	select {
	case p := <-started:
		if took := time.Since(up); took > 10*time.Second {
			t.Fatalf("serve started %v after the database was up", took)
		}
		register(t, ctxFor(t), p, "dbwait:soon")
		if strings.Contains(p.Stderr(), dbPassword) {
			t.Fatalf("the password is in the log:\n%s", p.Stderr())
		}
	case err := <-failed:
		t.Fatalf("serve did not start once the database was up: %v", err)
	}
}
