package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

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

// restContext is the context of a REST call whose body, on the fast
// path, carried text for the Struct field named.
func restContext(field string, text []byte) context.Context {
	return context.WithValue(context.Background(), restBodyKey{}, &restBody{structs: map[string]json.RawMessage{field: text}})
}

// sameRefusal says two refusals name the same value for the same reason.
func sameRefusal(a, b error) bool {
	var ea, eb *canonjson.Error
	if !errors.As(a, &ea) || !errors.As(b, &eb) {
		return a == nil && b == nil
	}
	return ea.Path == eb.Path && ea.Msg == eb.Msg
}

// TestOnePayloadPath: a payload becomes the same canonical request
// envelope, or the same refusal, whether it arrives as a Struct (gRPC, or
// a REST body protojson decoded) or as the JSON text of a REST body on the
// fast path: the property the edge's one canonicalisation rests on, over
// generated documents whose numbers a double holds exactly (the only ones
// a Struct can carry as they were written).
func TestOnePayloadPath(t *testing.T) {
	t.Parallel()
	s := testJournalServer()
	rapid.Check(t, func(rt *rapid.T) {
		st := genStruct(rt, 4)
		text, err := protojson.Marshal(st)
		if err != nil {
			rt.Skip("protojson refuses the generated Struct")
		}
		action := rapid.SampledFrom([]string{"create_payment", "send_email", "wire_money"}).Draw(rt, "action")
		fromStruct, refusedS := s.canonicalPayload(context.Background(), action, st)
		fromText, refusedT := s.canonicalPayload(restContext("payload", text), action, nil)
		if !bytes.Equal(fromStruct, fromText) || !sameRefusal(refusedS, refusedT) {
			rt.Fatalf("%s: from the Struct %s, %v; from the text %s %s, %v", action, fromStruct, refusedS, text, fromText, refusedT)
		}
		resS, refS := canonicalResult(context.Background(), st)
		resT, refT := canonicalResult(restContext("result", text), nil)
		if !bytes.Equal(resS, resT) || !sameRefusal(refS, refT) {
			rt.Fatalf("result: from the Struct %s, %v; from the text %s, %v", resS, refS, resT, refT)
		}
	})
}

// TestCanonicalPayloadRefusals: what the edge refuses, with the value's
// path, and that a call without a payload has neither an envelope nor a
// refusal (the journal then says the payload is required).
func TestCanonicalPayloadRefusals(t *testing.T) {
	t.Parallel()
	s := testJournalServer()
	nan := mustStruct(t, `{"a":1}`)
	nan.Fields["a"] = structpb.NewNumberValue(math.NaN())
	for _, tc := range []struct {
		name, action string
		st           *structpb.Struct
		wantPath     string
	}{
		{"fraction of money", "create_payment", mustStruct(t, `{"amount_minor":4900.5}`), "/amount_minor"},
		{"money beyond 2^53", "create_payment", mustStruct(t, `{"amount_minor":9007199254740992}`), "/amount_minor"},
		{"NaN", "create_payment", nan, "/a"},
	} {
		env, refused := s.canonicalPayload(context.Background(), tc.action, tc.st)
		var ce *canonjson.Error
		if env != nil || !errors.As(refused, &ce) || ce.Path != tc.wantPath {
			t.Errorf("%s: %s, %v; want a refusal at %s", tc.name, env, refused, tc.wantPath)
		}
	}
	if env, refused := s.canonicalPayload(context.Background(), "create_payment", nil); env != nil || refused != nil {
		t.Errorf("no payload: %s, %v; want neither", env, refused)
	}
	want, _, _ := canonjson.Request("create_payment", []byte(benchScenarioPayload), s.svc.PayloadOptions("create_payment"))
	if env, refused := s.canonicalPayload(context.Background(), "create_payment", mustStruct(t, benchScenarioPayload)); refused != nil || !bytes.Equal(env, want) {
		t.Errorf("the bench's payload: %s, %v; want %s", env, refused, want)
	}
}

// BenchmarkStructCanonical measures the edge's canonicalisation of a
// Register payload held as a Struct (canonjson.StructRequest), under
// create_payment's options, and of a result:
//
//	go test -run '^$' -bench StructCanonical -benchmem ./protocol/canonjson/ ./server/
func BenchmarkStructCanonical(b *testing.B) {
	opts := canonjson.Options{IntegerFields: []string{"amount_minor"}}
	for _, size := range []struct{ name, payload string }{{"bench", benchScenarioPayload}, {"typical", typicalPayload}, {"10KiB", largePayload}} {
		st := mustStruct(b, size.payload)
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := canonjson.StructRequest("create_payment", st, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	st := mustStruct(b, typicalResult)
	b.Run("result", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonjson.CanonicalizeStruct(st, canonjson.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
