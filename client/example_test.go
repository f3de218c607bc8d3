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
		Payload: map[string]any{"to": "customer-93@example.com", "template": "receipt", "order_id": "817"},
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

// A payment and its receipt email. The advice of docs/spec.md: an opaque key,
// made once per intent and stored with it (NewKey), with the business
// links in Refs; and a side effect inside the handler gets a key of its
// own, derived from its parent's (ChildKey). When the whole handler runs
// again (a retry), it derives the same child key, so the customer is
// charged once and gets one receipt.
func ExampleChildKey() {
	journal, stop := startJournal()
	defer stop()
	payments := newProvider("pay", "captured")
	defer payments.Close()
	mail := newProvider("msg", "sent")
	defer mail.Close()
	c, err := client.Dial(journal)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	call := func(url string) func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		return func(ctx context.Context, a client.Attempt) (client.Effect, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
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
			var p struct{ ID string }
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				return client.Effect{}, err
			}
			return client.Effect{ExternalID: p.ID}, nil
		}
	}

	// The orchestrator makes the key when the order asks for a payment,
	// and stores it with the order.
	paymentKey := client.NewKey()
	handle := func() {
		ctx := context.Background()
		paid, err := c.Execute(ctx, client.Op{
			Key: paymentKey, Action: "create_payment",
			Payload: map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"},
			Refs:    map[string]string{"order_id": "817", "customer": "c-93"},
		}, call(payments.URL+"/payments"))
		if err != nil || paid.Kind != client.Succeeded {
			log.Fatal(paid.Kind, err)
		}
		receiptKey, err := client.ChildKey(paymentKey, "receipt_email")
		if err != nil {
			log.Fatal(err)
		}
		sent, err := c.Execute(ctx, client.Op{
			Key: receiptKey, Action: "send_email", ParentKey: paymentKey,
			Payload: map[string]any{"to": "customer-93@example.com", "subject": "Receipt for order 817"},
		}, call(mail.URL+"/messages"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("payment", paid.ExternalID, "replayed:", paid.Replayed, "| receipt", sent.ExternalID, "replayed:", sent.Replayed,
			"| parent recorded:", sent.Operation.GetParentKey() == paymentKey)
	}
	handle()
	handle() // the handler runs again after a crash or a timeout upstream
	fmt.Println("charges:", payments.Effects(), "emails:", mail.Effects())
	// Output:
	// payment pay_1 replayed: false | receipt msg_1 replayed: false | parent recorded: true
	// payment pay_1 replayed: true | receipt msg_1 replayed: true | parent recorded: true
	// charges: 1 emails: 1
}

// A payment above the policy's threshold waits for a person's approval:
// Execute holds (calling nothing) until an operator approves the request
// hash they were shown, then charges once.
func ExampleOp_approvalWait() {
	j := startApprovalJournal() // a journal whose policy asks for an approval above 1,000.00
	defer j.stop()
	payments := newProvider("pay", "captured")
	defer payments.Close()
	c, err := client.Dial(j.addr, client.WithToken(j.agentToken))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	key := "payment:order-900:intent-01"
	payment := map[string]any{"order_id": "900", "amount_minor": 2500000, "currency": "RUB"}
	pay := func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		return call(ctx, http.DefaultClient, payments.URL+"/payments", a, payment)
	}
	go approveWhenAsked(j.operator, key) // a person, elsewhere, approves what they were shown

	op := client.Op{Key: key, Action: "create_payment", Payload: payment, ApprovalWait: 2 * time.Minute}
	out, err := c.Execute(ctx, op, pay) // holds until a person decides (or 2 minutes pass); pay runs only if approved
	if err != nil {
		log.Fatal(err)
	}
	switch out.Kind {
	case client.Succeeded: // approved in time: pay ran once
		fmt.Println("charged once:", out.ExternalID)
	case client.FailedFinal: // a person rejected it ("approval_rejected"), or nobody decided in time ("approval_timeout")
		fmt.Println("refused:", out.ErrorCode)
	case client.AwaitingApproval: // nobody decided within ApprovalWait; nothing was called: ask again later, same key and payload
		fmt.Println("awaits approval:", out.Operation.GetOperationKey(), out.Operation.GetRequestHash(), out.RetryAfter)
	}
	fmt.Println("provider effects:", payments.Effects())
	// Output:
	// charged once: pay_1
	// provider effects: 1
}
