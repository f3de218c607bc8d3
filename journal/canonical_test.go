package journal_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// mustStruct builds a Struct from Go values.
func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	st, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// envelope canonicalises st for action as the gRPC transport does.
func envelope(t *testing.T, svc *journal.Service, action string, st *structpb.Struct) json.RawMessage {
	t.Helper()
	env, _, err := canonjson.StructRequest(action, st, svc.PayloadOptions(action))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRegisterTakesACanonicalEnvelope: a request the transport already
// canonicalised (RegisterRequest.Envelope) is the same request as its JSON
// text: the same hash, so a replay in text form matches it, the same
// stored payload, redacted as the text's would be.
func TestRegisterTakesACanonicalEnvelope(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	if got := svc.PayloadOptions("create_payment").IntegerFields; !slices.Equal(got, []string{"amount_minor"}) {
		t.Fatalf("PayloadOptions(create_payment) = %v", got)
	}
	if got := svc.PayloadOptions("wire_money").IntegerFields; got != nil {
		t.Fatalf("PayloadOptions of an unknown action = %v", got)
	}

	st := mustStruct(t, map[string]any{"order_id": "1", "amount_minor": 100, "currency": "EUR", "memo": nil,
		"card_number": "4111111111111111", "nested": map[string]any{"card_cvc": "123"}})
	byStruct, err := svc.Register(ctx, journal.RegisterRequest{Key: "p1", Action: "create_payment", Envelope: envelope(t, svc, "create_payment", st)})
	if err != nil || !byStruct.Created {
		t.Fatalf("register by envelope: %+v, %v", byStruct, err)
	}
	const redacted = `{"amount_minor":100,"card_number":"[redacted]","currency":"EUR","nested":{"card_cvc":"[redacted]"},"order_id":"1"}`
	if got := string(byStruct.Operation.Payload); got != redacted {
		t.Fatalf("stored payload %s, want %s", got, redacted)
	}
	text := json.RawMessage(`{"nested":{"card_cvc":"123"},"currency":"EUR","card_number":"4111111111111111","amount_minor":1e2,"order_id":"1"}`)
	byText, err := svc.Register(ctx, journal.RegisterRequest{Key: "p1", Action: "create_payment", Payload: text})
	if err != nil || byText.Created || byText.Operation.RequestHash != byStruct.Operation.RequestHash {
		t.Fatalf("the same request as text: %+v, %v; want a replay with hash %s", byText, err, byStruct.Operation.RequestHash)
	}
	// Another card is another request, whichever form it comes in.
	st.Fields["card_number"] = structpb.NewStringValue("5500000000000004")
	if _, err := svc.Register(ctx, journal.RegisterRequest{Key: "p1", Action: "create_payment", Envelope: envelope(t, svc, "create_payment", st)}); opjournal.ErrorCode(err) != opjournal.CodePayloadMismatch {
		t.Fatalf("other card by envelope: %v", err)
	}

	// An envelope is taken only for the action it names, and is held to
	// the payload limit like text.
	for _, tc := range []struct {
		name, action string
		env          json.RawMessage
		code         opjournal.Code
	}{
		{"other action", "send_email", envelope(t, svc, "create_payment", mustStruct(t, map[string]any{"to": "a"})), opjournal.CodeInternal},
		{"not an envelope", "send_email", json.RawMessage(`{"to":"a"}`), opjournal.CodeInternal},
		{"too large", "send_email", envelope(t, svc, "send_email", mustStruct(t, map[string]any{"to": strings.Repeat("a", 1100)})), opjournal.CodeTooLarge},
	} {
		_, err := svc.Register(ctx, journal.RegisterRequest{Key: "e-" + strings.ReplaceAll(tc.name, " ", "-"), Action: tc.action, Envelope: tc.env})
		var e *opjournal.Error
		if !asError(err, &e) || e.Code != tc.code || e.Field != "payload" {
			t.Errorf("%s: %v, want %s on payload", tc.name, err, tc.code)
		}
		if _, err := svc.Lookup(ctx, "", "e-"+strings.ReplaceAll(tc.name, " ", "-")); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
			t.Errorf("%s: the refused register stored an operation: %v", tc.name, err)
		}
	}
}

// TestCanonicalResults: a result the transport already canonicalised is
// stored as given, redacted by the operation's action, and held to the
// result limit and to being an object, with canonicalResult's errors.
func TestCanonicalResults(t *testing.T) {
	t.Parallel()
	svc, ctx := setup(t)
	for _, key := range []string{"p1", "p2"} {
		if _, err := svc.Register(ctx, journal.RegisterRequest{Key: key, Action: "create_payment", Payload: json.RawMessage(`{"order_id":"1","amount_minor":100,"currency":"EUR"}`),
			Claim: &journal.ClaimOptions{WorkerID: "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	canonical := func(m map[string]any) json.RawMessage {
		c, err := canonjson.CanonicalizeStruct(mustStruct(t, m), canonjson.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	big := canonical(map[string]any{"note": strings.Repeat("x", 600)})
	_, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "p1", Attempt: 1, ExternalID: "x", Result: big, ResultCanonical: true})
	_, textErr := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "p1", Attempt: 1, ExternalID: "x", Result: big})
	if opjournal.ErrorCode(err) != opjournal.CodeTooLarge || err.Error() != textErr.Error() {
		t.Fatalf("oversized canonical result: %v; as text: %v", err, textErr)
	}
	_, err = svc.MarkFailedFinal(ctx, journal.MarkRequest{Key: "p1", Attempt: 1, Result: json.RawMessage(`[1]`), ResultCanonical: true})
	if e := (*opjournal.Error)(nil); !asError(err, &e) || e.Code != opjournal.CodeInvalidArgument || e.Field != "result" || e.Message != "must be a JSON object" {
		t.Fatalf("a canonical result that is no object: %v", err)
	}

	op, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "p1", Attempt: 1, ExternalID: "x",
		Result: canonical(map[string]any{"id": "x", "items": []any{map[string]any{"card_number": "4111111111111111"}}}), ResultCanonical: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(op.Result); got != `{"id":"x","items":[{"card_number":"[redacted]"}]}` {
		t.Fatalf("stored result %s", got)
	}
	op, err = svc.MarkFailedFinal(ctx, journal.MarkRequest{Key: "p2", Attempt: 1, ErrorCode: "card_declined",
		Result: canonical(map[string]any{"decline_code": "do_not_honor", "card_cvc": "123"}), ResultCanonical: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(op.Result); got != `{"card_cvc":"[redacted]","decline_code":"do_not_honor"}` {
		t.Fatalf("stored refusal %s", got)
	}
}
