package journal_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// BenchmarkRegisterReplay measures the service's Register of a key that
// exists, on SQLite: "pending" is a retry of an operation not yet
// terminal (a store read every time; the payload_schema is validated
// once per request, schemacache.go), "succeeded" one of a terminal
// operation (answered by the replay cache).
//
//	go test -run '^$' -bench RegisterReplay -count 10 ./journal/
func BenchmarkRegisterReplay(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "j.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc := journal.New(st, policy.Default(), journal.Limits{})
	ctx := context.Background()
	payload := json.RawMessage(`{"order_id":"817","amount_minor":490000,"currency":"RUB","customer":{"id":"c-93","email":"buyer@example.com"},"description":"a payment for order 817"}`)
	pending := journal.RegisterRequest{Key: "pay-pending", Action: "create_payment", Payload: payload}
	done := journal.RegisterRequest{Key: "pay-done", Action: "create_payment", Payload: payload, Claim: &journal.ClaimOptions{WorkerID: "w"}}
	if _, err := svc.Register(ctx, pending); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Register(ctx, done); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Key: "pay-done", Attempt: 1, ExternalID: "pay_1"}); err != nil {
		b.Fatal(err)
	}
	for name, req := range map[string]journal.RegisterRequest{"pending": pending, "succeeded": done} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.Register(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
