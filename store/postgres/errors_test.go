package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opjournal/opjournal"
)

func TestClassifyCausesOfADatabaseGone(t *testing.T) {
	opErr := func(e error) error { return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", e)} }
	for name, err := range map[string]error{
		"deadline":                  context.DeadlineExceeded,
		"canceled":                  fmt.Errorf("acquire: %w", context.Canceled),
		"EOF":                       fmt.Errorf("failed to receive message: %w", io.EOF),
		"unexpected EOF":            fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF),
		"conn closed":               fmt.Errorf("x: %w", pgconn.ErrConnClosed),
		"conn closed (text only)":   errors.New("conn closed"),
		"closed pool":               errors.New("closed pool"),
		"reset":                     opErr(syscall.ECONNRESET),
		"refused":                   &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		"broken pipe":               opErr(syscall.EPIPE),
		"net closed":                fmt.Errorf("write: %w", net.ErrClosed),
		"DNS":                       &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true},
		"admin shutdown":            &pgconn.PgError{Severity: "FATAL", Code: "57P01"},
		"starting up":               &pgconn.PgError{Severity: "FATAL", Code: "57P03"},
		"too many connections":      &pgconn.PgError{Severity: "FATAL", Code: "53300"},
		"disk full":                 &pgconn.PgError{Severity: "ERROR", Code: "53100"},
		"connection failure":        &pgconn.PgError{Severity: "FATAL", Code: "08006"},
		"statement_timeout":         &pgconn.PgError{Severity: "ERROR", Code: "57014"},
		"read-only standby":         &pgconn.PgError{Severity: "ERROR", Code: "25006"},
		"deadlock detected":         &pgconn.PgError{Severity: "ERROR", Code: "40P01"},
		"serialization failure":     &pgconn.PgError{Severity: "ERROR", Code: "40001"},
		"migrate lock, conn closed": &database.Error{OrigErr: pgconn.ErrConnClosed, Err: "try lock failed"},
		"migrate step, EOF":         fmt.Errorf("up: %w", database.Error{OrigErr: io.ErrUnexpectedEOF, Err: "migration failed"}),
	} {
		if got := classify("test", err); opjournal.ErrorCode(got) != opjournal.CodeUnavailable {
			t.Errorf("%s (%v): %v, want UNAVAILABLE", name, err, got)
		}
	}
}

func TestClassifyOtherErrorsAreInternal(t *testing.T) {
	for name, err := range map[string]error{
		"unique violation":     &pgconn.PgError{Severity: "ERROR", Code: "23505"},
		"undefined table":      &pgconn.PgError{Severity: "ERROR", Code: "42P01"},
		"wrong password":       fmt.Errorf("failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "28P01"}),
		"no such database":     fmt.Errorf("failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "3D000"}),
		"migrate, bad SQL":     &database.Error{OrigErr: &pgconn.PgError{Code: "42601"}, Err: "migration failed"},
		"a bug":                errors.New("cannot scan NULL into *string"),
		"no rows (never here)": pgx.ErrNoRows,
	} {
		if got := classify("test", err); opjournal.ErrorCode(got) != opjournal.CodeInternal {
			t.Errorf("%s (%v): %v, want INTERNAL", name, err, got)
		}
	}
}

// TestClassifyRealConnectFailures classifies what pgx really returns when
// the server refuses, hangs up, or never answers.
func TestClassifyRealConnectFailures(t *testing.T) {
	listen := func(handle func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return ln.Addr().String()
	}
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	hangUp := listen(func(c net.Conn) { c.Close() })
	silent := listen(func(c net.Conn) { t.Cleanup(func() { c.Close() }) })
	for name, addr := range map[string]string{"refused": closed, "hung up": hangUp, "silent": silent} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cs, err := parseSettings("postgres://u@" + addr + "/db?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := pgx.ParseConfig(cs.poolURL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnectTimeout = time.Second // the default is 5 s: keep the test short
			start := time.Now()
			_, err = pgx.ConnectConfig(context.Background(), cfg)
			got := classify("connect", err)
			if opjournal.ErrorCode(got) != opjournal.CodeUnavailable || time.Since(start) > 3*time.Second {
				t.Fatalf("%v after %v, want UNAVAILABLE within the connect timeout", got, time.Since(start))
			}
		})
	}
}

func TestSettingsDefaults(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	os.Unsetenv("PGCONNECT_TIMEOUT")

	cs, err := parseSettings("postgres://u:secret@db:5432/j?sslmode=disable&search_path=s1")
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, cs.poolURL)
	if q.Get("connect_timeout") != "5" || q.Get("search_path") != "s1" || q.Get("sslmode") != "disable" ||
		cs.explicitPing || cs.explicitConnect || cs.stmtTimeout != defaultStatementTimeout {
		t.Fatalf("defaults: %+v", cs)
	}

	// What the URL sets is kept; our own parameter is removed.
	cs, err = parseSettings("postgresql://u@db/j?connect_timeout=30&pool_ping_timeout=10s&opjournal_statement_timeout=1m30s")
	if err != nil {
		t.Fatal(err)
	}
	q = query(t, cs.poolURL)
	if q.Get("connect_timeout") != "30" || q.Has(statementTimeoutParam) || !cs.explicitPing || cs.stmtTimeout != 90*time.Second {
		t.Fatalf("explicit: %+v", cs)
	}
	if cs, err = parseSettings("postgres://db/j?opjournal_statement_timeout=0"); err != nil || cs.stmtTimeout != 0 {
		t.Fatalf("0 turns the bound off: %+v %v", cs, err)
	}
	for _, bad := range []string{"5", "soon", "-1s"} {
		if _, err := parseSettings("postgres://db/j?opjournal_statement_timeout=" + bad); err == nil || !strings.Contains(err.Error(), statementTimeoutParam) {
			t.Errorf("opjournal_statement_timeout=%s: %v, want an error naming the parameter", bad, err)
		}
	}

	// Batching: defaults, explicit values (removed from both URLs), bad values.
	if cs.batchWorkers != defaultBatchWorkers || cs.batchSize != defaultBatchSize {
		t.Fatalf("batch defaults: %+v", cs)
	}
	cs, err = parseSettings("postgres://db/j?opjournal_batch_workers=0&opjournal_batch_size=8")
	if err != nil || cs.batchWorkers != 0 || cs.batchSize != 8 || strings.Contains(cs.poolURL+cs.migrateURL, "batch") {
		t.Fatalf("batch settings: %+v %v", cs, err)
	}
	for _, bad := range []string{"opjournal_batch_workers=-1", "opjournal_batch_workers=many", "opjournal_batch_size=0", "opjournal_batch_size=5000"} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := parseSettings("postgres://db/j?" + bad); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the parameter", bad, err)
		}
	}

	// PGCONNECT_TIMEOUT counts as set.
	t.Setenv("PGCONNECT_TIMEOUT", "20")
	if cs, err = parseSettings("postgres://db/j"); err != nil || query(t, cs.poolURL).Has("connect_timeout") || !cs.explicitConnect {
		t.Fatalf("with PGCONNECT_TIMEOUT: %+v %v", cs, err)
	}
}

// TestSettingsSplitParameters checks that each driver gets only the
// parameters meant for it (pgx sends the others to the server, which
// rejects them).
func TestSettingsSplitParameters(t *testing.T) {
	cs, err := parseSettings("postgres://u@db:5432/j?pool_max_conns=3&search_path=s1&pool_ping_timeout=1s&connect_timeout=5" +
		"&x-migrations-table=mig&opjournal_statement_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	m, err := url.Parse(cs.migrateURL)
	if err != nil {
		t.Fatal(err)
	}
	mq := m.Query()
	if m.Scheme != "pgx5" || m.Host != "db:5432" || m.Path != "/j" || mq.Has("pool_max_conns") || mq.Has("pool_ping_timeout") ||
		mq.Has(statementTimeoutParam) || mq.Get("search_path") != "s1" || mq.Get("connect_timeout") != "5" || mq.Get("x-migrations-table") != "mig" {
		t.Fatalf("migrate URL: %s", cs.migrateURL)
	}
	pq := query(t, cs.poolURL)
	if !strings.HasPrefix(cs.poolURL, "postgres://u@db:5432/j?") || pq.Has("x-migrations-table") || pq.Has(statementTimeoutParam) ||
		pq.Get("pool_max_conns") != "3" || pq.Get("search_path") != "s1" {
		t.Fatalf("pool URL: %s", cs.poolURL)
	}
}

func query(t *testing.T, s string) url.Values {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}
