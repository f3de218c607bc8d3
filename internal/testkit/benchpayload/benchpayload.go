// Package benchpayload holds the payload the benchmarks and codec tests
// send, so that every figure measured with "a 1 KiB payload" measures the
// same one.
package benchpayload

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// Order is a payload of about 1 KiB as canonical JSON: an order with a
// customer, a few line items and a description.
func Order(tb testing.TB) *structpb.Struct {
	tb.Helper()
	items := make([]any, 0, 6)
	for i := range 6 {
		items = append(items, map[string]any{"sku": fmt.Sprintf("SKU-%05d", i), "name": "Item number " + fmt.Sprint(i), "qty": i + 1, "unit_minor": 1990 + i})
	}
	st, err := structpb.NewStruct(map[string]any{
		"order_id": "817", "amount_minor": 490000, "currency": "RUB",
		"customer":    map[string]any{"id": "c-93", "email": "buyer@example.com", "country": "RU", "tier": "gold"},
		"items":       items,
		"description": strings.Repeat("a payment for order 817 ", 15),
		"metadata":    map[string]any{"channel": "agent", "campaign": "autumn", "trace": "4bf92f3577b34da6a3ce929d0e0e4736"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
