// Package client is the Go SDK of opjournal: it runs an AI agent's
// irreversible action (a payment, an email, a job application, a ticket)
// through the operation journal so that retrying it is safe.
//
// Execute implements the whole protocol in one call:
//
//  1. Register the operation under its stable key and try to claim it, in
//     one round trip to the journal, BEFORE anything is sent to the provider.
//  2. If the journal already knows the answer, return it without calling fn:
//     a confirmed success is replayed (Outcome.Replayed), a confirmed
//     rejection stays final, the same key with other parameters is a
//     Conflict, a live lease elsewhere is InProgressElsewhere, and an
//     operation whose outcome is unknown is VerificationRequired: the
//     reconciler (or a person) must find out what happened first. A
//     request the policy says a person must approve first calls nothing:
//     Execute waits for the decision up to Op.ApprovalWait (Lookup's long
//     poll), then goes on once approved, or returns the refusal
//     (FailedFinal) or AwaitingApproval.
//  3. Otherwise call fn with the key and the attempt number. fn passes the key
//     to the provider (for example as an Idempotency-Key header).
//  4. Classify fn's outcome and record it: success is MarkSucceeded; only an
//     error wrapped with Rejected (the provider confirmed that nothing
//     happened) is MarkFailedFinal; every other error, a panic and a
//     canceled context are MarkUnknown, because the effect may have
//     happened. ClassifyHTTP applies the same rule to an HTTP answer.
//
// The outcome is recorded with a fresh context even when the caller's
// context is canceled. If the journal cannot record it, Execute returns a
// *NotRecordedError and never reports a success the journal has not stored;
// the operation then shows as unknown once its lease expires (the journal's
// safety net), so it is verified rather than retried blindly.
//
// A minimal tool call:
//
//	c, err := client.Dial("127.0.0.1:9090")
//	...
//	out, err := c.Execute(ctx, client.Op{
//		Key:     "payment:order-817:intent-01", // the business intent, made by code, not by the model
//		Action:  "create_payment",
//		Payload: map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"},
//	}, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
//		req, _ := http.NewRequestWithContext(ctx, "POST", providerURL, body)
//		req.Header.Set("Idempotency-Key", a.Key)
//		resp, err := http.DefaultClient.Do(req)
//		if err == nil {
//			defer resp.Body.Close()
//		}
//		if err := client.ClassifyHTTP(resp, err); err != nil {
//			return client.Effect{}, err // unknown, or rejected for a definite 4xx
//		}
//		... decode the payment; a lost or garbled body is an (unknown) error ...
//		return client.Effect{ExternalID: p.ID, Result: p}, nil
//	})
//	if err != nil {
//		return err // invalid Op, or the journal is unreachable or refused the request
//	}
//	if err := out.Err(); err != nil {
//		return err // conflict, in progress elsewhere, verification required, failed_final
//	}
//	use(out.Result) // the same stored result on every retry of this intent
//
// Keys name the business intent ("pay order 817, 4900 RUB"), never a network
// attempt: every retry of the intent, by this process or another one, uses
// the same key. Payloads are JSON objects; money travels as integers in
// minor units, and numbers beyond ±(2^53−1) are refused rather than rounded.
// Keep keys, results and error codes free of secrets and card data.
package client
