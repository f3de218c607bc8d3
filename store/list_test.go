package store_test

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/sqlite"
)

// dialects are the stores' spellings of List's statement.
var dialects = []struct {
	name string
	d    store.ListDialect
}{{"postgres", postgres.ListDialect{}}, {"sqlite", sqlite.ListDialect{}}}

// sampleFilterValue is a value that sets field f of ListFilter (false
// for *bool: a pointer to false filters too). A field of a type not
// listed here fails the test: give it a sample here, and its condition a
// line in listConditions.
func sampleFilterValue(t *testing.T, f reflect.StructField) reflect.Value {
	t.Helper()
	var v any
	switch f.Type {
	case reflect.TypeFor[[]opjournal.Status]():
		v = []opjournal.Status{opjournal.StatusUnknown, opjournal.StatusPending}
	case reflect.TypeFor[*bool]():
		v = new(bool)
	case reflect.TypeFor[string]():
		v = "k-1"
	case reflect.TypeFor[map[string]string]():
		v = map[string]string{"invoice": "in_1", "customer": "cus_1"}
	case reflect.TypeFor[bool]():
		v = true
	case reflect.TypeFor[time.Time]():
		v = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	default:
		t.Fatalf("ListFilter.%s is a %s, which this test cannot set: give it a sample here", f.Name, f.Type)
	}
	return reflect.ValueOf(v)
}

var placeholderRE = regexp.MustCompile(`[$?]([0-9]+)`)

// checkPlaceholders fails unless sql names exactly the parameters
// 1..n, each at least once.
func checkPlaceholders(t *testing.T, what, sql string, n int) {
	t.Helper()
	seen := map[int]bool{}
	for _, m := range placeholderRE.FindAllStringSubmatch(sql, -1) {
		i, _ := strconv.Atoi(m[1])
		if i < 1 || i > n {
			t.Errorf("%s: placeholder %s, but %d parameters: %s", what, m[0], n, sql)
		}
		seen[i] = true
	}
	for i := 1; i <= n; i++ {
		if !seen[i] {
			t.Errorf("%s: parameter %d is bound but never used: %s", what, i, sql)
		}
	}
}

// TestListConditions: every field of ListFilter, set alone, adds exactly
// one condition to a list in each store's dialect, and an unset one
// adds none (no "unset OR match" condition, which a generic plan could
// not serve from a partial index). A field added to ListFilter without
// its line in listConditions fails here.
func TestListConditions(t *testing.T) {
	typ := reflect.TypeFor[store.ListFilter]()
	for _, dl := range dialects {
		base, baseArgs := store.ListConditions(dl.d, store.ListParams{Tenant: "t", After: "a"})
		if len(base) != 2 || len(baseArgs) != 3 {
			t.Errorf("%s: an unfiltered list has %d conditions %q and %d parameters; want the tenant's and the after-key's, and the clock", dl.name, len(base), base, len(baseArgs))
		}
		var all store.ListFilter
		for i := range typ.NumField() {
			field := typ.Field(i)
			var f store.ListFilter
			v := sampleFilterValue(t, field)
			reflect.ValueOf(&f).Elem().Field(i).Set(v)
			reflect.ValueOf(&all).Elem().Field(i).Set(v)
			conds, args := store.ListConditions(dl.d, store.ListParams{Tenant: "t", After: "a", ListFilter: f})
			if len(conds) != len(base)+1 {
				t.Errorf("%s: ListFilter.%s set gives %d conditions, want %d: %q", dl.name, field.Name, len(conds), len(base)+1, conds)
				continue
			}
			if c := conds[len(conds)-1]; strings.TrimSpace(c) == "" {
				t.Errorf("%s: ListFilter.%s set gives an empty condition", dl.name, field.Name)
			}
			// The clock ($1) is read by the columns, not by every condition.
			checkPlaceholders(t, dl.name+" "+field.Name, strings.Join(conds, " AND ")+" $1", len(args))
		}
		conds, _ := store.ListConditions(dl.d, store.ListParams{Tenant: "t", After: "a", ListFilter: all})
		if len(conds) != len(base)+typ.NumField() {
			t.Errorf("%s: every filter set gives %d conditions, want %d", dl.name, len(conds), len(base)+typ.NumField())
		}
		st := store.BuildList(dl.d, store.ListParams{Tenant: "t", After: "a", ListFilter: all, Limit: 7}, nil)
		checkPlaceholders(t, dl.name+" statement", st.SQL, len(st.Args))
		if st.Limit != 7 || st.Args[len(st.Args)-1] != 8 {
			t.Errorf("%s: limit %d, last parameter %v; want 7 and one more row (8)", dl.name, st.Limit, st.Args[len(st.Args)-1])
		}
		if st := store.BuildList(dl.d, store.ListParams{}, nil); st.Limit != opjournal.DefaultPageSize {
			t.Errorf("%s: default limit %d, want %d", dl.name, st.Limit, opjournal.DefaultPageSize)
		}
	}
}

// rows are canned rows for ScanPage.
type rows struct {
	keys []string
	err  error
	i    int
}

func (r *rows) Next() bool { r.i++; return r.i <= len(r.keys) }
func (r *rows) Err() error { return r.err }

// TestScanPage: a page of limit, the key to continue after when the
// extra row came, and the scan's or the rows' error.
func TestScanPage(t *testing.T) {
	read := func(r *rows, limit int, scanErr error) ([]*opjournal.Operation, string, error) {
		return store.ScanPage(r, limit, func() (*opjournal.Operation, error) {
			if scanErr != nil {
				return nil, scanErr
			}
			return &opjournal.Operation{Key: r.keys[r.i-1]}, nil
		})
	}
	ops, next, err := read(&rows{keys: []string{"a", "b", "c"}}, 2, nil)
	if err != nil || len(ops) != 2 || ops[1].Key != "b" || next != "b" {
		t.Errorf("3 rows, limit 2: %d ops, next %q, %v; want a, b and next b", len(ops), next, err)
	}
	ops, next, err = read(&rows{keys: []string{"a", "b"}}, 2, nil)
	if err != nil || len(ops) != 2 || next != "" {
		t.Errorf("2 rows, limit 2: %d ops, next %q, %v; want 2 and no next", len(ops), next, err)
	}
	boom := errors.New("boom")
	if _, _, err := read(&rows{keys: []string{"a"}}, 2, boom); err != boom {
		t.Errorf("scan error: %v", err)
	}
	if _, _, err := read(&rows{keys: []string{"a"}, err: boom}, 2, nil); err != boom {
		t.Errorf("rows error: %v", err)
	}
}

// TestRunPurge: parameters that would purge nothing or everything are
// refused before any step; a dry run counts, otherwise one batch.
func TestRunPurge(t *testing.T) {
	var ran []string
	steps := store.PurgeSteps{
		Count: func(context.Context, store.PurgeParams) (store.PurgeResult, error) {
			ran = append(ran, "count")
			return store.PurgeResult{Operations: 5}, nil
		},
		Batch: func(_ context.Context, p store.PurgeParams) (store.PurgeResult, error) {
			ran = append(ran, "batch")
			return store.PurgeResult{Operations: int64(p.Limit)}, nil
		},
	}
	ctx := context.Background()
	for _, p := range []store.PurgeParams{{Action: "a", Limit: 3}, {Action: "a", Retention: time.Hour}, {Action: "a", Retention: -time.Hour, DryRun: true}} {
		if _, err := store.RunPurge(ctx, p, steps); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
			t.Errorf("%+v: %v, want INVALID_ARGUMENT", p, err)
		}
	}
	if len(ran) != 0 {
		t.Errorf("refused purges ran %v", ran)
	}
	if res, err := store.RunPurge(ctx, store.PurgeParams{Action: "a", Retention: time.Hour, DryRun: true}, steps); err != nil || res.Operations != 5 {
		t.Errorf("dry run: %+v, %v", res, err)
	}
	if res, err := store.RunPurge(ctx, store.PurgeParams{Action: "a", Retention: time.Hour, Limit: 3}, steps); err != nil || res.Operations != 3 {
		t.Errorf("batch: %+v, %v", res, err)
	}
	if strings.Join(ran, ",") != "count,batch" {
		t.Errorf("ran %v, want count then batch", ran)
	}
}
