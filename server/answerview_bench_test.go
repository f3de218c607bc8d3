package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// BenchmarkFusedAnswerEncoding is the server's own share of
// BenchmarkFusedAnswer's answers: converting the operation of a Register
// (with claim) and of a MarkSucceeded answer, 1 KiB payload, and
// marshalling both, in the BASIC view (the default) and the FULL one.
//
//	go test -run '^$' -bench FusedAnswerEncoding ./server/
func BenchmarkFusedAnswerEncoding(b *testing.B) {
	var items []string
	for i := range 6 {
		items = append(items, fmt.Sprintf(`{"name":"Item number %d","qty":%d,"sku":"SKU-%05d","unit_minor":%d}`, i, i+1, i, 1990+i))
	}
	payload := `{"amount_minor":490000,"currency":"RUB","customer":{"country":"RU","email":"buyer@example.com","id":"c-93","tier":"gold"},` +
		`"description":"` + strings.Repeat("a payment for order 817 ", 15) + `","items":[` + strings.Join(items, ",") + `],` +
		`"metadata":{"campaign":"autumn","channel":"agent","trace":"4bf92f3577b34da6a3ce929d0e0e4736"},"order_id":"817"}`
	now := time.Now()
	claimed := &opjournal.Operation{Key: "op_1", Action: "create_payment", RequestHash: strings.Repeat("ab", 32), Payload: json.RawMessage(payload),
		Status: opjournal.StatusInProgress, AttemptCount: 1, LeaseOwner: "bench", LeaseUntil: now.Add(30 * time.Second),
		AttemptStartedAt: now, FirstAttemptAt: now, CreatedAt: now, UpdatedAt: now}
	done := *claimed
	done.Status, done.ExternalID, done.Result, done.LeaseUntil = opjournal.StatusSucceeded, "pay_5f2c", json.RawMessage(`{"payment_id":"pay_5f2c","status":"captured"}`), time.Time{}
	for _, v := range []struct {
		name string
		full bool
	}{{"basic", false}, {"full", true}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				reg, err := operationPBView(claimed, v.full, true)
				if err != nil {
					b.Fatal(err)
				}
				ms, err := operationPBView(&done, v.full, v.full)
				if err != nil {
					b.Fatal(err)
				}
				r, err := proto.Marshal(&pb.RegisterResponse{Operation: reg, Created: true, Claimed: true, Attempt: 1})
				if err != nil {
					b.Fatal(err)
				}
				m, err := proto.Marshal(&pb.MarkSucceededResponse{Operation: ms})
				if err != nil {
					b.Fatal(err)
				}
				n = len(r) + len(m)
			}
			b.ReportMetric(float64(n), "resp-B/op")
		})
	}
}
