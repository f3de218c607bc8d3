package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Kind names one of the provider's three resources. It is the "object"
// field of a record and the prefix of an effect in the effect counts
// ("payment:<effect key>").
type Kind string

// The resources.
const (
	KindPayment     Kind = "payment"     // POST /payments; deduplicates by Idempotency-Key
	KindEmail       Kind = "email"       // POST /emails; no deduplication, keeps "reference"
	KindApplication Kind = "application" // POST /applications; no deduplication, keeps "reference"
	// KindCharge is a Stripe-style charge: POST /v1/charges takes a form
	// body (application/x-www-form-urlencoded, as stripe-node sends it)
	// and does NOT deduplicate; the effect is counted under the
	// Idempotency-Key header it came with, so a test sees every charge a
	// client's retries would make without a journal in front.
	KindCharge Kind = "charge"
)

// idPrefix is the prefix of a record id of each kind: pay_000001.
var idPrefix = map[Kind]string{KindPayment: "pay", KindEmail: "eml", KindApplication: "app", KindCharge: "ch"}

// status is the status every stored record of a kind has.
var status = map[Kind]string{KindPayment: "succeeded", KindEmail: "sent", KindApplication: "submitted", KindCharge: "succeeded"}

// Record is one stored effect. Records never change once stored.
//
// As JSON a record is the request body's fields with the provider's own
// fields on top: "id", "object" (the Kind), "status", "created_at"
// (RFC 3339, UTC), "effect_key", and "idempotency_key" for a payment
// (null without one). Numbers keep the exact text they were sent with.
type Record struct {
	ID        string    // pay_000001, eml_000001, app_000001
	Kind      Kind      // which resource
	Status    string    // "succeeded" (payment), "sent" (email), "submitted" (application)
	CreatedAt time.Time // when the effect was stored; search sees it IndexLag later
	// EffectKey is what the effect is counted under: a payment's
	// Idempotency-Key, an email's or application's "reference"; the id
	// when there is none.
	EffectKey string
	// IdempotencyKey is the Idempotency-Key header a payment or charge was
	// created with; empty for emails, applications and those without one.
	IdempotencyKey string
	// Fields is the request body as received (numbers as json.Number).
	// Treat it as read-only: it is shared with the provider's store.
	Fields map[string]any
}

// Field returns the request body's field name if it is a string, else "".
func (r Record) Field(name string) string {
	s, _ := r.Fields[name].(string)
	return s
}

// MarshalJSON renders the record as the provider's API does.
func (r Record) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(r.Fields)+6)
	for k, v := range r.Fields {
		m[k] = v
	}
	m["id"] = r.ID
	m["object"] = r.Kind
	m["status"] = r.Status
	m["created_at"] = r.CreatedAt.UTC().Format(time.RFC3339Nano)
	m["effect_key"] = r.EffectKey
	switch r.Kind {
	case KindPayment, KindCharge:
		if r.IdempotencyKey != "" {
			m["idempotency_key"] = r.IdempotencyKey
		} else {
			m["idempotency_key"] = nil
		}
	default:
		if _, ok := m["reference"]; !ok {
			m["reference"] = nil
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads a record as MarshalJSON writes it, so that clients
// of the HTTP API (ControlClient) get the same values back.
func (r *Record) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("fakeprovider: record is not a JSON object")
	}
	str := func(name string) string {
		s, _ := m[name].(string)
		delete(m, name)
		return s
	}
	*r = Record{
		ID:             str("id"),
		Kind:           Kind(str("object")),
		Status:         str("status"),
		EffectKey:      str("effect_key"),
		IdempotencyKey: str("idempotency_key"),
	}
	if created := str("created_at"); created != "" {
		t, err := time.Parse(time.RFC3339Nano, created)
		if err != nil {
			return fmt.Errorf("fakeprovider: record created_at: %w", err)
		}
		r.CreatedAt = t
	}
	if v, ok := m["reference"]; ok && v == nil {
		delete(m, "reference")
	}
	r.Fields = m
	return nil
}
