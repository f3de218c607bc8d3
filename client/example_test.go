package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/opjournal/opjournal/client"
)

// A payment: the first Execute charges once; the retry of the same intent
// (same key, same parameters) is a replay of the stored result and does
// not call the provider again.
func ExampleClient_Execute() {
	journal, stop := startJournal() // an opjournal server on a temporary SQLite file
	defer stop()
	payments := newProvider("pay", "captured") // a payment API that honours Idempotency-Key
	defer payments.Close()

	c, err := client.Dial(journal)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	op := client.Op{
		Key:     "payment:order-817:intent-01", // the business intent, not the attempt
		Action:  "create_payment",
		Payload: map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"},
	}
	pay := func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		body, _ := json.Marshal(op.Payload)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, payments.URL+"/payments", bytes.NewReader(body))
		if err != nil {
			return client.Effect{}, client.Rejected("bad_request", err) // nothing was sent
		}
		req.Header.Set("Idempotency-Key", a.Key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			defer resp.Body.Close()
		}
		if err := client.ClassifyHTTP(resp, err); err != nil {
			return client.Effect{}, err // unknown (timeout, 5xx, 409, 429…) or rejected (other 4xx)
		}
		var p struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			return client.Effect{}, err // the answer was lost: unknown, not failed
		}
		return client.Effect{ExternalID: p.ID, Result: p}, nil
	}

	for range 2 { // the agent retries the same intent
		out, err := c.Execute(context.Background(), op, pay)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Kind, "replayed:", out.Replayed, out.ExternalID, string(out.Result))
	}
	fmt.Println("requests:", payments.Requests(), "charges:", payments.Effects())
	// Output:
	// succeeded replayed: false pay_1 {"id":"pay_1","status":"captured"}
	// succeeded replayed: true pay_1 {"id":"pay_1","status":"captured"}
	// requests: 1 charges: 1
}

// An email whose answer is lost: the provider sends it, but the call times
// out. The outcome is unknown, not failed, so the retry does not send a
// second email: it waits for verification (reconciliation or a person).
func ExampleClient_Execute_email() {
	journal, stop := startJournal()
	defer stop()
	mail := newProvider("msg", "sent")
	defer mail.Close()
	mail.LoseNextAnswer() // the email goes out, the answer never arrives

	c, err := client.Dial(journal)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	op := client.Op{
		Key:     "email:order-817:receipt",
		Action:  "send_email",
		Payload: map[string]any{"template": "receipt", "order_id": "817"},
	}
	send := func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, mail.URL+"/messages", nil)
		if err != nil {
			return client.Effect{}, client.Rejected("bad_request", err)
		}
		req.Header.Set("Idempotency-Key", a.Key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			defer resp.Body.Close()
		}
		if err := client.ClassifyHTTP(resp, err); err != nil {
			return client.Effect{}, err
		}
		return client.Effect{ExternalID: "sent"}, nil
	}

	for range 2 {
		out, err := c.Execute(context.Background(), op, send)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Kind, out.ErrorCode, out.Operation.GetStatus())
	}
	fmt.Println("emails sent:", mail.Effects())
	// Output:
	// verification_required timeout STATUS_UNKNOWN
	// verification_required timeout STATUS_UNKNOWN
	// emails sent: 1
}
