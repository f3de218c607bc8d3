package journal_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestRefsPolicyAndSchema: the policy's refs rules and payload_schema are
// enforced at Register, each refusal names its field, never quotes a
// value, and stores nothing.
func TestRefsPolicyAndSchema(t *testing.T) {
	t.Parallel()
	pol, err := policy.Parse([]byte(`actions:
  pay:
    redact_fields: [card_number]
    refs: {required: [order_id], forbidden: [email]}
    payload_schema:
      type: object
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1}
        note: {type: string, maxLength: 5}
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := journal.New(st, pol, journal.Limits{})
	ctx := context.Background()
	good := journal.RegisterRequest{Key: "k", Action: "pay", Payload: json.RawMessage(`{"amount_minor":5}`), Refs: map[string]string{"order_id": "817"}}
	for _, tc := range []struct {
		name  string
		edit  func(r *journal.RegisterRequest)
		field string
	}{
		{"required ref missing", func(r *journal.RegisterRequest) { r.Refs = nil }, "refs/order_id"},
		{"forbidden ref", func(r *journal.RegisterRequest) { r.Refs = map[string]string{"order_id": "1", "email": "a@b.c"} }, "refs/email"},
		{"redacted member as a ref", func(r *journal.RegisterRequest) {
			r.Refs = map[string]string{"order_id": "1", "card_number": "4111111111111111"}
		}, "refs/card_number"},
		{"bad ref name", func(r *journal.RegisterRequest) { r.Refs = map[string]string{"order_id": "1", "Bad Name": "x"} }, "refs"},
		{"own key as parent", func(r *journal.RegisterRequest) { r.ParentKey = "k" }, "parent_key"},
		{"parent with a space", func(r *journal.RegisterRequest) { r.ParentKey = "a b" }, "parent_key"},
		{"schema: missing member", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`{}`) }, "payload/amount_minor"},
		{"schema: too long", func(r *journal.RegisterRequest) {
			r.Payload = json.RawMessage(`{"amount_minor":5,"note":"secret-value"}`)
		}, "payload/note"},
	} {
		r := good
		tc.edit(&r)
		_, err := svc.Register(ctx, r)
		var e *opjournal.Error
		if opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument || !errorsAs(err, &e) || e.Field != tc.field {
			t.Errorf("%s: %v, want INVALID_ARGUMENT on %s", tc.name, err, tc.field)
			continue
		}
		for _, secret := range []string{"4111111111111111", "secret-value", "a@b.c"} {
			if strings.Contains(e.Message, secret) {
				t.Errorf("%s: the message quotes a value: %s", tc.name, e.Message)
			}
		}
	}
	if _, err := svc.Lookup(ctx, "", "k"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("a refused register stored something: %v", err)
	}
	res, err := svc.Register(ctx, good)
	if err != nil || !res.Created || res.Operation.Refs["order_id"] != "817" {
		t.Fatalf("good register: %+v %v", res, err)
	}
	// List validates its filters as Register does.
	if _, err := svc.List(ctx, journal.ListRequest{ListFilter: journal.ListFilter{Refs: map[string]string{"": "x"}}}); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
		t.Errorf("list with a bad ref: %v", err)
	}
	page, err := svc.List(ctx, journal.ListRequest{ListFilter: journal.ListFilter{Refs: map[string]string{"order_id": "817"}}})
	if err != nil || len(page.Operations) != 1 {
		t.Fatalf("list by ref: %+v %v", page, err)
	}
}

func errorsAs(err error, target **opjournal.Error) bool {
	for err != nil {
		if e, ok := err.(*opjournal.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}
