package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// setup returns a Service on a fresh SQLite file with the shipped policy.
func setup(t *testing.T) (*journal.Service, context.Context) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return journal.New(st, policy.Default(), journal.Limits{MaxPayloadBytes: 1024, MaxResultBytes: 512}), context.Background()
}

func TestRegisterRejectsBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	ok := journal.RegisterRequest{Key: "k", Action: "create_payment", Payload: json.RawMessage(`{"order_id":"1","amount_minor":100,"currency":"EUR"}`)}
	big := `{"note":"` + strings.Repeat("x", 1100) + `"}`
	tests := []struct {
		name  string
		edit  func(r *journal.RegisterRequest)
		code  opjournal.Code
		field string
	}{
		{"empty key", func(r *journal.RegisterRequest) { r.Key = "" }, opjournal.CodeInvalidArgument, "operation_key"},
		{"key with space", func(r *journal.RegisterRequest) { r.Key = "a b" }, opjournal.CodeInvalidArgument, "operation_key"},
		{"key non-ASCII", func(r *journal.RegisterRequest) { r.Key = "платёж" }, opjournal.CodeInvalidArgument, "operation_key"},
		{"key 201 chars", func(r *journal.RegisterRequest) { r.Key = strings.Repeat("k", 201) }, opjournal.CodeInvalidArgument, "operation_key"},
		{"no action", func(r *journal.RegisterRequest) { r.Action = "" }, opjournal.CodeInvalidArgument, "action_type"},
		{"action 81 chars", func(r *journal.RegisterRequest) { r.Action = strings.Repeat("a", 81) }, opjournal.CodeInvalidArgument, "action_type"},
		{"unknown action", func(r *journal.RegisterRequest) { r.Action = "wire_money" }, opjournal.CodeUnknownAction, "action_type"},
		{"missing payload", func(r *journal.RegisterRequest) { r.Payload = nil }, opjournal.CodeInvalidArgument, "payload"},
		{"payload array", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`[1]`) }, opjournal.CodeInvalidArgument, "payload"},
		{"malformed payload", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`{"a":`) }, opjournal.CodeInvalidArgument, "payload/a"},
		{"float money", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`{"amount_minor":4900.5}`) }, opjournal.CodeInvalidArgument, "payload/amount_minor"},
		{"string money", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`{"amount_minor":"4900"}`) }, opjournal.CodeInvalidArgument, "payload/amount_minor"},
		{"unsafe integer", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(`{"n":9007199254740993}`) }, opjournal.CodeInvalidArgument, "payload/n"},
		{"oversized payload", func(r *journal.RegisterRequest) { r.Payload = json.RawMessage(big) }, opjournal.CodeTooLarge, "payload"},
		{"claim without worker", func(r *journal.RegisterRequest) { r.Claim = &journal.ClaimOptions{} }, opjournal.CodeInvalidArgument, "claim.worker_id"},
		{"claim lease over policy", func(r *journal.RegisterRequest) { r.Claim = &journal.ClaimOptions{WorkerID: "w", LeaseSeconds: 31} }, opjournal.CodeInvalidArgument, "claim.lease_seconds"},
		{"claim negative lease", func(r *journal.RegisterRequest) { r.Claim = &journal.ClaimOptions{WorkerID: "w", LeaseSeconds: -1} }, opjournal.CodeInvalidArgument, "claim.lease_seconds"},
	}
	for _, tc := range tests {
		req := ok
		tc.edit(&req)
		_, err := svc.Register(ctx, req)
		var e *opjournal.Error
		if !asError(err, &e) || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s: got %v, want %s on field %q", tc.name, err, tc.code, tc.field)
			continue
		}
	}
	// Nothing at all was stored under the valid key by any refused request.
	if _, err := svc.Lookup(ctx, "", "k"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("a refused register stored an operation: %v", err)
	}
}

func asError(err error, e **opjournal.Error) bool { return errors.As(err, e) }

func TestSameIntentInAnyJSONFormIsOneOperation(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	forms := []string{
		`{"order_id":"817","amount_minor":490000,"currency":"RUB"}`,
		`{"currency":"RUB","amount_minor":4.9e5,"order_id":"817","memo":null}`,
		`{ "amount_minor" : 490000.0 , "order_id" : "817", "currency" : "R\u0055B" }`,
	}
	var hash string
	for i, f := range forms {
		res, err := svc.Register(ctx, journal.RegisterRequest{Key: "payment:order-817:intent-01", Action: "create_payment", Payload: json.RawMessage(f)})
		if err != nil {
			t.Fatalf("form %d: %v", i, err)
		}
		if res.Created != (i == 0) {
			t.Fatalf("form %d: created = %v", i, res.Created)
		}
		if i == 0 {
			hash = res.Operation.RequestHash
		} else if res.Operation.RequestHash != hash {
			t.Fatalf("form %d hashed differently", i)
		}
	}
	// Another amount is another request: a conflict.
	_, err := svc.Register(ctx, journal.RegisterRequest{Key: "payment:order-817:intent-01", Action: "create_payment", Payload: json.RawMessage(`{"order_id":"817","amount_minor":500000,"currency":"RUB"}`)})
	if opjournal.ErrorCode(err) != opjournal.CodePayloadMismatch {
		t.Fatalf("other amount: %v", err)
	}
}

func TestLeaseAndRetryComeFromPolicy(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	for _, key := range []string{"pay", "ticket"} {
		action := map[string]string{"pay": "create_payment", "ticket": "create_ticket"}[key]
		res, err := svc.Register(ctx, journal.RegisterRequest{Key: key, Action: action, Payload: json.RawMessage(`{"order_id":"1","amount_minor":1,"currency":"EUR","title":"t"}`),
			Claim: &journal.ClaimOptions{WorkerID: "w1"}})
		if err != nil {
			t.Fatal(err)
		}
		// Lease 0 takes the policy's lease_seconds (30 for both).
		if d := res.Operation.LeaseUntil.Sub(res.Operation.UpdatedAt).Seconds(); d != 30 {
			t.Fatalf("%s: default lease = %vs, want 30", key, d)
		}
		if _, err := svc.MarkUnknown(ctx, journal.MarkRequest{Key: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}
	// create_payment is reconcile_before_retry: no claim after unknown.
	if res, err := svc.Claim(ctx, journal.ClaimRequest{Key: "pay", WorkerID: "w2"}); err != nil || res.Claimed {
		t.Fatalf("claim of unknown payment: claimed=%v err=%v", res.Claimed, err)
	}
	// create_ticket is retry_same_key: the provider deduplicates by key.
	if res, err := svc.Claim(ctx, journal.ClaimRequest{Key: "ticket", WorkerID: "w2", LeaseSeconds: 5}); err != nil || !res.Claimed || res.Operation.AttemptCount != 2 {
		t.Fatalf("claim of unknown ticket: %+v err=%v", res, err)
	}
	if _, err := svc.Claim(ctx, journal.ClaimRequest{Key: "ticket", WorkerID: "w3", LeaseSeconds: 31}); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
		t.Fatalf("lease over the policy: %v", err)
	}
}

func TestMarkValidation(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	if _, err := svc.Register(ctx, journal.RegisterRequest{Key: "k", Action: "send_email", Payload: json.RawMessage(`{"to":"x"}`), Claim: &journal.ClaimOptions{WorkerID: "w"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := svc.Lookup(ctx, "", "k")
	cases := []struct {
		name  string
		call  func() error
		code  opjournal.Code
		field string
	}{
		{"attempt 0", func() error {
			_, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "k", Attempt: 0})
			return err
		}, opjournal.CodeInvalidArgument, "attempt"},
		{"external_id too long", func() error {
			_, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "k", Attempt: 1, ExternalID: strings.Repeat("e", 201)})
			return err
		}, opjournal.CodeInvalidArgument, "external_id"},
		{"result not an object", func() error {
			_, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "k", Attempt: 1, Result: json.RawMessage(`[1]`)})
			return err
		}, opjournal.CodeInvalidArgument, "result"},
		{"result too large", func() error {
			_, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "k", Attempt: 1, Result: json.RawMessage(`{"x":"` + strings.Repeat("r", 600) + `"}`)})
			return err
		}, opjournal.CodeTooLarge, "result"},
		{"error_code too long", func() error {
			_, err := svc.MarkUnknown(ctx, journal.MarkRequest{Key: "k", Attempt: 1, ErrorCode: strings.Repeat("c", 101)})
			return err
		}, opjournal.CodeInvalidArgument, "error_code"},
		{"error_code control char", func() error {
			_, err := svc.MarkFailedFinal(ctx, journal.MarkRequest{Key: "k", Attempt: 1, ErrorCode: "a\nb"})
			return err
		}, opjournal.CodeInvalidArgument, "error_code"},
	}
	for _, tc := range cases {
		var e *opjournal.Error
		if err := tc.call(); !asError(err, &e) || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s: got %v, want %s on %q", tc.name, err, tc.code, tc.field)
		}
	}
	after, _ := svc.Lookup(ctx, "", "k")
	if after.Status != before.Status || !after.UpdatedAt.Equal(before.UpdatedAt) || after.ErrorCode != "" {
		t.Fatalf("a refused mark changed the operation: %+v", *after)
	}
}

// TestRedaction: redact_fields are blanked in the stored payload and in a
// result (looked up by the operation's action), at any depth; the hash
// still covers the real values; other results are stored as given.
func TestRedaction(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	pay := func(card string) json.RawMessage {
		return json.RawMessage(`{"amount_minor":100,"card_number":"` + card + `","currency":"EUR","nested":{"card_cvc":"123"},"order_id":"1"}`)
	}
	res, err := svc.Register(ctx, journal.RegisterRequest{Key: "p1", Action: "create_payment", Payload: pay("4111111111111111"), Claim: &journal.ClaimOptions{WorkerID: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Operation.Payload); got != `{"amount_minor":100,"card_number":"[redacted]","currency":"EUR","nested":{"card_cvc":"[redacted]"},"order_id":"1"}` {
		t.Fatalf("stored payload %s", got)
	}
	// Another card under the same key is another request: a conflict.
	if _, err := svc.Register(ctx, journal.RegisterRequest{Key: "p1", Action: "create_payment", Payload: pay("5500000000000004")}); opjournal.ErrorCode(err) != opjournal.CodePayloadMismatch {
		t.Fatalf("other card: %v", err)
	}
	op, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "p1", Attempt: 1, ExternalID: "x", Result: json.RawMessage(`{"id":"x","items":[{"card_number":"4111111111111111"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(op.Result); got != `{"id":"x","items":[{"card_number":"[redacted]"}]}` {
		t.Fatalf("stored result %s", got)
	}
	// send_email redacts nothing: its result is stored as given.
	if _, err := svc.Register(ctx, journal.RegisterRequest{Key: "e1", Action: "send_email", Payload: json.RawMessage(`{"to":"a"}`), Claim: &journal.ClaimOptions{WorkerID: "w"}}); err != nil {
		t.Fatal(err)
	}
	op, err = svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "e1", Attempt: 1, ExternalID: "m", Result: json.RawMessage(`{"card_number":"kept: not a field send_email redacts"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(op.Result); got != `{"card_number":"kept: not a field send_email redacts"}` {
		t.Fatalf("send_email result %s", got)
	}
}

// TestSetNoteValidation: the note's rules (UTF-8, at most MaxNoteLen
// characters, newlines but no other control character) and the actor a
// server without authentication needs; a refused note changes nothing.
func TestSetNoteValidation(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	if _, err := svc.Register(ctx, journal.RegisterRequest{Key: "k", Action: "create_payment", Payload: json.RawMessage(`{"order_id":"1","amount_minor":100,"currency":"EUR"}`)}); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		note, actor, field string
	}{
		"invalid UTF-8":      {"bad \xff byte", "alice", "note"},
		"too many chars":     {strings.Repeat("ж", journal.MaxNoteLen+1), "alice", "note"},
		"a NUL":              {"a\x00b", "alice", "note"},
		"an escape sequence": {"\x1b[2Jcleared", "alice", "note"},
		"DEL":                {"a\x7f", "alice", "note"},
		"no actor, no auth":  {"fine", "", "actor"},
	} {
		_, err := svc.SetNote(ctx, journal.SetNoteRequest{Key: "k", Note: tc.note, Actor: tc.actor})
		var e *opjournal.Error
		if !errors.As(err, &e) || e.Code != opjournal.CodeInvalidArgument || e.Field != tc.field {
			t.Errorf("%s: %v, want INVALID_ARGUMENT on %s", name, err, tc.field)
		}
	}
	op, err := svc.Lookup(ctx, "", "k")
	if err != nil || op.Note != "" {
		t.Fatalf("after refused notes: %v %+v", err, op)
	}
	// The limit counts characters: MaxNoteLen of them in two bytes each pass.
	long := strings.Repeat("ж", journal.MaxNoteLen) + "\n"
	if _, err := svc.SetNote(ctx, journal.SetNoteRequest{Key: "k", Note: long[:len(long)-1], Actor: "alice"}); err != nil {
		t.Fatalf("a note of MaxNoteLen two-byte characters: %v", err)
	}
	if _, err := svc.SetNote(ctx, journal.SetNoteRequest{Key: "nope", Note: "x", Actor: "alice"}); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("a note on an unknown key: %v", err)
	}
}
