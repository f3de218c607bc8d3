package journal_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// TestListRefusesBadFilters: a key prefix is held to the rules of a key,
// and an updated_at range may not end before it starts; a refusal names
// the field.
func TestListRefusesBadFilters(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	for _, key := range []string{"pay:1", "pay:2", "ticket:1"} {
		if _, err := svc.Register(ctx, journal.RegisterRequest{Key: key, Action: "create_payment",
			Payload: json.RawMessage(`{"order_id":"1","amount_minor":100,"currency":"EUR"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		req   journal.ListRequest
		field string
	}{
		{"prefix with a space", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: "pay 1"}}, "key_prefix"},
		{"prefix non-ASCII", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: "платёж"}}, "key_prefix"},
		{"prefix with a control byte", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: "pay\x00"}}, "key_prefix"},
		{"prefix longer than a key", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: strings.Repeat("k", journal.MaxKeyLen+1)}}, "key_prefix"},
		{"inverted range", journal.ListRequest{ListFilter: journal.ListFilter{UpdatedAfter: now, UpdatedBefore: now.Add(-time.Millisecond)}}, "updated_before"},
	} {
		_, err := svc.List(ctx, tc.req)
		var e *opjournal.Error
		if !asError(err, &e) || e.Code != opjournal.CodeInvalidArgument || e.Field != tc.field {
			t.Errorf("%s: got %v, want %s on field %q", tc.name, err, opjournal.CodeInvalidArgument, tc.field)
		}
	}
	// What is allowed passes through to the store: a prefix of the longest
	// key, an empty range, one bound only, and the filters themselves.
	for _, tc := range []struct {
		name string
		req  journal.ListRequest
		want []string
	}{
		{"prefix", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: "pay:"}}, []string{"pay:1", "pay:2"}},
		{"prefix of MaxKeyLen", journal.ListRequest{ListFilter: journal.ListFilter{KeyPrefix: strings.Repeat("k", journal.MaxKeyLen)}}, nil},
		{"empty range", journal.ListRequest{ListFilter: journal.ListFilter{UpdatedAfter: now, UpdatedBefore: now}}, nil},
		{"until the future", journal.ListRequest{ListFilter: journal.ListFilter{UpdatedBefore: now.Add(time.Hour), KeyPrefix: "ticket"}}, []string{"ticket:1"}},
		{"from the future", journal.ListRequest{ListFilter: journal.ListFilter{UpdatedAfter: now.Add(time.Hour)}}, nil},
		{"no expired lease", journal.ListRequest{ListFilter: journal.ListFilter{LeaseExpired: true}}, nil},
	} {
		res, err := svc.List(ctx, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, op := range res.Operations {
			got = append(got, op.Key)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: keys %q, want %q", tc.name, got, tc.want)
		}
	}
}
