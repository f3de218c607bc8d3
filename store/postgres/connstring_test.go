package postgres

import (
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestKeywordValueForm checks that the keyword/value form becomes the URL
// pgx reads the same way, quoting and escapes included, and that its
// errors never carry a value (a password).
func TestKeywordValueForm(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	os.Unsetenv("PGCONNECT_TIMEOUT")
	cs, err := parseSettings(`host=db1,db2 port=5432,5433 user=app password='s3 cr\'et' dbname = journal target_session_attrs=read-write opjournal_statement_timeout=2s`)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cs.poolURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	pw, _ := u.User.Password()
	if u.Scheme != "postgres" || u.User.Username() != "app" || pw != "s3 cr'et" || u.Path != "/journal" || q.Get("host") != "db1,db2" ||
		q.Get("port") != "5432,5433" || q.Get("target_session_attrs") != "read-write" || q.Has(statementTimeoutParam) || cs.stmtTimeout.String() != "2s" {
		t.Fatalf("pool URL %s, %+v", cs.poolURL, cs)
	}
	if q.Get("connect_timeout") != "2" {
		t.Errorf("two hosts and no connect_timeout: connect_timeout=%q, want the multi-host default 2", q.Get("connect_timeout"))
	}
	if !strings.HasPrefix(cs.migrateURL, "pgx5://") {
		t.Errorf("migrate URL %s", cs.migrateURL)
	}
	for _, bad := range []string{`host=db password='unterminated`, `host=db pass word=hunter2`, `host=db password=hunter2 junk`, `host=db =hunter2`, "host=db password=hunter2 x\x00=1"} {
		_, err := parseSettings(bad)
		if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "unterminated") {
			t.Errorf("%q: %v, want an error that does not echo a value", bad, err)
		}
	}
	for s, want := range map[string]bool{"host=db": true, " dbname=x": true, "postgres://h/db?x=1": false, "sqlite://x": false,
		"opjournal.db": false, "=x": false, "a b=c": false, "": false} {
		if got := IsKeywordValue(s); got != want {
			t.Errorf("IsKeywordValue(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestMultiHostConnectTimeout: a URL with several hosts gets the short
// connect timeout, one host the long one, and an explicit value is kept.
func TestMultiHostConnectTimeout(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	os.Unsetenv("PGCONNECT_TIMEOUT")
	t.Setenv("PGHOST", "")
	for raw, want := range map[string]string{
		"postgres://u@a:5432,b:5432/j":                     "2",
		"postgres://u@a:5432/j":                            "5",
		"postgres://u@/j?host=a,b":                         "2",
		"postgres://u@a,b/j?connect_timeout=9":             "9",
		"host=a port=5432 dbname=j":                        "5",
		"host=a,b dbname=j connect_timeout=1":              "1",
		"postgresql://u@a:1,b:2/j?target_session_attrs=rw": "2",
	} {
		cs, err := parseSettings(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := query(t, cs.poolURL).Get("connect_timeout"); got != want {
			t.Errorf("%s: connect_timeout=%q, want %q", raw, got, want)
		}
	}
}

// TestHosts: the hosts of a connection string for log lines, without the
// user or the password.
func TestHosts(t *testing.T) {
	t.Setenv("PGHOST", "")
	t.Setenv("PGPORT", "")
	for raw, want := range map[string][]string{
		"postgres://u:secret@a:5433,b/j":            {"a:5433", "b:5432"},
		"host=a,b port=6000 user=u password=secret": {"a:6000", "b:6000"},
		"host=/var/run/postgresql dbname=j":         {"/var/run/postgresql (socket, port 5432)"},
		"postgres://u@[::1]:5433/j":                 {"[::1]:5433"},
		"postgres:///j":                             {"localhost:5432"},
		"host=a password='never closed":             nil,
		"sqlite://x.db":                             nil,
	} {
		got := Hosts(raw)
		if !slices.Equal(got, want) {
			t.Errorf("Hosts(%q) = %q, want %q", raw, got, want)
		}
		if strings.Contains(strings.Join(got, " "), "secret") {
			t.Errorf("Hosts(%q) = %q: a password", raw, got)
		}
	}
}

// FuzzKeywordValue: any string is either refused with an error that
// carries no value of it, or becomes a URL that pgx reads (parseSettings
// must never panic on what an operator types).
func FuzzKeywordValue(f *testing.F) {
	for _, s := range []string{"host=a", "host=a,b port=1,2 password='x y' dbname=d", `a=\`, "a='", "a= b=", "=", "a b=c", "host=a =b", "x=' \\' '"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !IsKeywordValue(s) {
			return
		}
		u, err := keywordValueURL(s)
		if err != nil {
			return
		}
		if _, err := url.Parse(u); err != nil {
			t.Fatalf("%q became %q, which is not a URL: %v", s, u, err)
		}
	})
}
