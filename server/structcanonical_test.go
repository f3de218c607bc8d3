package server

import (
	"bytes"
	"context"
	"math"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/policy"
)

// benchScenarioPayload is what harness/cmd/opjournal-bench's fused scenario
// registers.
const benchScenarioPayload = `{"order_id":"817","amount_minor":490000,"currency":"RUB"}`

// testJournalServer is a journalServer over the shipped policy; the
// conversions tested here never reach its store.
func testJournalServer() *journalServer {
	return &journalServer{svc: journal.New(nil, policy.Default(), journal.Limits{})}
}

// TestPayloadJSONIsTheTwoStepPath: what Register hands the journal from a
// Struct is, when the Struct is accepted, the envelope the old path
// (structJSON, then canonjson.Request) made, byte for byte; when it is
// refused, no envelope but structJSON's text (or its error), so that the
// journal refuses it as it always has.
func TestPayloadJSONIsTheTwoStepPath(t *testing.T) {
	t.Parallel()
	s := testJournalServer()
	ctx := context.Background()
	nan := mustStruct(t, `{"a":1}`)
	nan.Fields["a"] = structpb.NewNumberValue(math.NaN())
	for _, tc := range []struct {
		name, action string
		st           *structpb.Struct
		direct       bool // whether the direct path takes it
	}{
		{"bench", "create_payment", mustStruct(t, benchScenarioPayload), true},
		{"typical", "create_payment", mustStruct(t, typicalPayload), true},
		{"10KiB", "send_email", mustStruct(t, largePayload), true},
		{"unknown action", "wire_money", mustStruct(t, typicalPayload), true},
		{"fraction of money", "create_payment", mustStruct(t, `{"amount_minor":4900.5}`), false},
		{"money beyond 2^53", "create_payment", mustStruct(t, `{"amount_minor":9007199254740992}`), false},
		{"NaN", "create_payment", nan, false},
		{"nil", "create_payment", nil, false},
	} {
		payload, env, err := s.payloadJSON(ctx, tc.action, tc.st)
		text, textErr := structJSON("payload", tc.st)
		if !tc.direct {
			if env != nil || !bytes.Equal(payload, text) || (err == nil) != (textErr == nil) || (err != nil && err.Error() != textErr.Error()) {
				t.Errorf("%s: payloadJSON = %s, %s, %v; want structJSON's %s, %v and no envelope", tc.name, payload, env, err, text, textErr)
			}
			continue
		}
		want, _, werr := canonjson.Request(tc.action, text, s.svc.PayloadOptions(tc.action))
		if err != nil || werr != nil || payload != nil || !bytes.Equal(env, want) {
			t.Errorf("%s: payloadJSON = %s, %s, %v; want the envelope %s (%v)", tc.name, payload, env, err, want, werr)
		}
	}

	// Results: canonical JSON straight from the Struct, or structJSON's
	// text when there is none or it is refused.
	for _, st := range []*structpb.Struct{mustStruct(t, typicalResult), mustStruct(t, `{"n":1e16}`), nan, nil} {
		got, canonical, err := resultJSON(ctx, st)
		text, textErr := structJSON("result", st)
		want, werr := canonjson.Canonicalize(text, canonjson.Options{})
		switch {
		case canonical:
			if err != nil || werr != nil || !bytes.Equal(got, want) {
				t.Errorf("resultJSON(%v) = %s, %v; want %s (%v)", st, got, err, want, werr)
			}
		case st != nil && textErr == nil && werr == nil:
			t.Errorf("resultJSON(%v) took the text path for a result Canonicalize accepts", st)
		case !bytes.Equal(got, text) || (err == nil) != (textErr == nil):
			t.Errorf("resultJSON(%v) = %s, %v; want structJSON's %s, %v", st, got, err, text, textErr)
		}
	}
}

// BenchmarkStructCanonical compares, for a Register payload held as a
// Struct, the old two steps (structJSON renders JSON text, then
// canonjson.Request parses and canonicalises it) with the direct path
// (canonjson.StructRequest writes the envelope from the Struct), under
// create_payment's options:
//
//	go test -run '^$' -bench StructCanonical -benchmem ./protocol/canonjson/ ./server/
func BenchmarkStructCanonical(b *testing.B) {
	opts := canonjson.Options{IntegerFields: []string{"amount_minor"}}
	for _, size := range []struct{ name, payload string }{{"bench", benchScenarioPayload}, {"typical", typicalPayload}, {"10KiB", largePayload}} {
		st := mustStruct(b, size.payload)
		b.Run(size.name+"/two-step", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				text, err := structJSON("payload", st)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := canonjson.Request("create_payment", text, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/direct", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := canonjson.StructRequest("create_payment", st, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	st := mustStruct(b, typicalResult)
	b.Run("result/two-step", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			text, err := structJSON("result", st)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := canonjson.Canonicalize(text, canonjson.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("result/direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonjson.CanonicalizeStruct(st, canonjson.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
