package server

import (
	"encoding/json"
	"testing"
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
