package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/storetest"
)

// TestTermsAgreeWithGo runs every shared term, as PostgreSQL renders it
// (bare and qualified by an alias), on real rows and compares each answer
// with the protocol's Go evaluation of the same row at the same clock.
func TestTermsAgreeWithGo(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewSchema(t)+"&opjournal_batch_workers=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.pool.Exec(ctx, `CREATE TABLE term_rows (operation_key text PRIMARY KEY, status text NOT NULL,
		lease_until timestamptz, unknown_since timestamptz, needs_review boolean NOT NULL, next_check_at timestamptz, updated_at timestamptz NOT NULL,
		approval_deadline timestamptz)`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	rows := storetest.TermRows(now)
	byKey := map[string]*opjournal.Operation{}
	null := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	for _, op := range rows {
		byKey[op.Key] = op
		var deadline time.Time
		if op.Approval != nil {
			deadline = op.Approval.Deadline
		}
		if _, err := s.pool.Exec(ctx, `INSERT INTO term_rows VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, op.Key, string(op.Status),
			null(op.LeaseUntil), null(op.UnknownSince), op.NeedsReview, null(op.NextCheckAt), null(op.UpdatedAt), null(deadline)); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range storetest.SharedTerms {
		for _, d := range []protocol.Dialect{dialect, dialect.On("o")} {
			// $2 is bound (the purge's action) so that the numbering is
			// the store's; the term reads $1 and $3 at most.
			q := `SELECT operation_key, ` + st.Term.SQL(d) + ` FROM term_rows o WHERE $1::timestamptz IS NOT NULL AND ($2::text IS NULL OR $3::float8 IS NOT NULL)`
			res, err := s.pool.Query(ctx, q, now, nil, storetest.TermRetention.Seconds())
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
				if want := st.Term.Value(op, now, storetest.TermArgs); !sameValue(got, want) {
					t.Errorf("%s on %+v: PostgreSQL says %v, Go %v", st.Name, *op, got, want)
				}
			}
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			if n != len(rows) {
				t.Fatalf("%s: %d rows of %d", st.Name, n, len(rows))
			}
		}
	}
}

// sameValue compares a value PostgreSQL returned with Term.Value's.
func sameValue(got, want any) bool {
	if g, ok := got.(time.Time); ok {
		w, ok := want.(time.Time)
		return ok && g.Equal(w)
	}
	return fmt.Sprint(got) == fmt.Sprint(want)
}
