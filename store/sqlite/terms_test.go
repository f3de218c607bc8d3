package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/storetest"
)

// TestTermsFile: terms.go is the shared terms as SQLite renders them
// today (the protocol's generator rewrites it), so the store's constants
// are the protocol's definitions.
func TestTermsFile(t *testing.T) {
	got, err := Terms()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("terms.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got) {
		t.Fatal("terms.go is not the protocol's shared terms: run go run ./protocol/cmd/protocolgen (make generate) and review the diff")
	}
}

// TestTermsAgreeWithGo runs every shared term, as SQLite renders it (bare
// and qualified by an alias), on real rows and compares each answer with
// the protocol's Go evaluation of the same row at the same clock.
func TestTermsAgreeWithGo(t *testing.T) {
	db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "terms.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE term_rows (operation_key TEXT PRIMARY KEY, status TEXT NOT NULL,
		lease_until INTEGER, unknown_since INTEGER, needs_review INTEGER NOT NULL, next_check_at INTEGER, updated_at INTEGER NOT NULL,
		approval_deadline INTEGER)`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	rows := storetest.TermRows(now)
	byKey := map[string]*opjournal.Operation{}
	for _, op := range rows {
		byKey[op.Key] = op
		var deadline time.Time
		if op.Approval != nil {
			deadline = op.Approval.Deadline
		}
		if _, err := db.Exec(`INSERT INTO term_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, op.Key, string(op.Status),
			nullTime(op.LeaseUntil), nullTime(op.UnknownSince), op.NeedsReview, nullTime(op.NextCheckAt), nullTime(op.UpdatedAt), nullTime(deadline)); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range storetest.SharedTerms {
		for _, d := range []protocol.Dialect{dialect, dialect.On("o")} {
			// ?2 is bound (the purge's action) so that the numbering is
			// the store's; the term reads ?1 and ?3 only.
			q := `SELECT operation_key, ` + st.Term.SQL(d) + ` FROM term_rows o WHERE ?2 IS NULL OR ?3 IS NOT NULL`
			res, err := db.Query(q, now.UnixMilli(), nil, storetest.TermRetention.Milliseconds())
			if err != nil {
				t.Fatalf("%s: %v\n%s", st.Name, err, q)
			}
			n := 0
			for res.Next() {
				var key string
				var got any
				if err := res.Scan(&key, &got); err != nil {
					t.Fatal(err)
				}
				n++
				op := byKey[key]
				if want := sqliteValue(st.Term.Value(op, now, storetest.TermArgs)); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s on %+v: SQLite says %v, Go %v", st.Name, *op, got, want)
				}
			}
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			res.Close()
			if n != len(rows) {
				t.Fatalf("%s: %d rows of %d", st.Name, n, len(rows))
			}
		}
	}
}

// sqliteValue is v as SQLite returns it: booleans and times are integers
// (times in milliseconds).
func sqliteValue(v any) any {
	switch x := v.(type) {
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	case time.Time:
		return x.UnixMilli()
	}
	return v
}
