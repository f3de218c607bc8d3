package server

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// BenchmarkRESTBodyChecks compares the REST guard's checks of a register
// body parsed once (bodyMembers, then the field hints and the payload's
// members on the same parse) with the three parses it made before:
//
//	go test -run '^$' -bench RESTBodyChecks -benchmem ./server/
func BenchmarkRESTBodyChecks(b *testing.B) {
	body := []byte(`{"operation_key":"payment:order-817:intent-01","action_type":"create_payment","payload":` + typicalPayload +
		`,"refs":{"order_id":"817"},"claim":{"worker_id":"agent-1"}}`)
	b.Run("three-parses", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if msg := checkJSONObject(body); msg != "" {
				b.Fatal(msg)
			}
			if err := checkBody("Register", body); err != nil {
				b.Fatal(err)
			}
			var members map[string]json.RawMessage
			if err := json.Unmarshal(body, &members); err != nil {
				b.Fatal(err)
			}
			if _, err := fieldsOf(registerFields, members); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			members, msg := bodyMembers(body)
			if msg != "" {
				b.Fatal(msg)
			}
			if err := checkMembers("Register", members); err != nil {
				b.Fatal(err)
			}
			if _, err := fieldsOf(registerFields, members); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRESTDecode compares what a REST register body costs from the
// guard to the canonical payload the journal hashes: the old path (the
// guard's parse and checks, the payload's text check, protojson's decode
// into a Struct, the Struct canonicalised) against the
// fast path (one jsontext pass, the message filled from the members, the
// payload's text canonicalised once; the field hints run only on a body
// it declines):
//
//	go test -run '^$' -bench RESTDecode -benchmem ./server/
func BenchmarkRESTDecode(b *testing.B) {
	body := []byte(`{"operation_key":"payment:order-817:intent-01","action_type":"create_payment","payload":` + typicalPayload +
		`,"refs":{"order_id":"817"},"claim":{"worker_id":"agent-1"}}`)
	opts := canonjson.Options{IntegerFields: []string{"amount_minor"}}
	b.Run("gateway", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			members, msg := bodyMembers(body)
			if msg != "" {
				b.Fatal(msg)
			}
			if err := checkMembers("Register", members); err != nil {
				b.Fatal(err)
			}
			fields, err := fieldsOf(registerFields, members)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := canonjson.Request("create_payment", fields["payload"], opts); err != nil {
				b.Fatal(err)
			}
			var req pb.RegisterRequest
			if err := protojson.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
			if _, _, err := canonjson.StructRequest("create_payment", req.GetPayload(), opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			members, ok := parseMembers(body)
			if !ok || depth(body) > maxBodyDepth {
				b.Fatal("not on the fast path")
			}
			rb, ok := decodeREST("Register", body, members)
			if !ok {
				b.Fatal("not on the fast path")
			}
			var req pb.RegisterRequest
			proto.Merge(&req, rb.msg)
			if _, _, err := canonjson.Request("create_payment", rb.structs["payload"], opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
