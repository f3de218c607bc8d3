// Package fakeprovider is opjournal's test provider: a real HTTP server with
// its own store that performs effects (payments, emails, job applications),
// loses answers in every way a real provider does, and can be asked
// afterwards what really happened. Tests, demos and the soak harness count
// effects here, not words in the agent's answer.
//
// The three resources pass the operation key on in the two ways docs/spec.md
// describes ("Passing the key on"):
//
//   - POST /payments honours the Idempotency-Key header as Stripe does: a
//     repeat with the same key and body returns the first payment (200,
//     Idempotent-Replayed: true) and performs nothing; the same key with
//     another body is 422 idempotency_key_reused; a key whose first request
//     is still being processed is 409 idempotency_key_in_use.
//   - POST /emails and POST /applications do not deduplicate: every POST is
//     a new effect. They keep a searchable "reference" field, which the
//     journal fills with the operation key.
//
// Each effect is counted under its effect key: a payment's Idempotency-Key,
// an email's or application's reference, or the record id when there is
// none. GET /_control/effects gives the counts.
//
// Search (GET /payments?idempotency_key=K, GET /emails?reference=K, …) is
// eventually consistent: a record becomes visible IndexLag after it was
// stored, as with a real provider's search index. Lookups by id
// (GET /payments/{id}) and the control API see every record at once. This is
// what reconciliation has to live with: "not found yet" is not "absent".
//
// # Faults
//
// Fault rules (Fault, POST /_control/faults) make the provider lose or spoil
// answers for the next N matching requests (Count) or at random with a
// seeded, reproducible probability (Probability). For a create (POST) they
// apply only to a request that would store a new effect:
//
//	commit_then_timeout          store, then hold the answer (Delay, default 30s) — the effect exists
//	timeout_before_commit        hold (default 30s), store nothing, then 504 — no effect
//	reject                       422 rejected_by_fault, store nothing — a definite rejection
//	error_after_commit           store, then 500 — the effect exists
//	drop_connection_after_commit store, then close the connection with no answer
//	slow                         hold the key in flight (default 2s) whatever the client does, then store and answer
//	error                        503, store nothing
//
// For the GET routes (search, and by-id with a "/payments/*" path): error
// (503) and timeout (hold, then 504), so the verifier's answer can be made
// unclear too. Holds end early when the client disconnects or on Close.
//
// # HTTP API
//
//	POST /payments        {"amount_minor": int>0, "currency": str, "order_id": str, "card": str, …}
//	                      201 payment | 200 replay | 400 invalid | 402 card "declined"
//	                      | 409 key in flight | 413 body > 1 MiB | 422 key reused with another body
//	POST /emails          {"to": str, "subject": str, "reference": str, …}        202 email | 400
//	POST /applications    {"job_id": str, "candidate": str, "reference": str, …}  201 application | 400
//	GET  /payments?idempotency_key=K&order_id=O       200 {"data": [...]} (search; lags)
//	GET  /emails?reference=K&to=T                     200 {"data": [...]}
//	GET  /applications?reference=K&job_id=J&candidate=C  200 {"data": [...]}
//	GET  /payments/{id}, /emails/{id}, /applications/{id}  200 record | 404
//	GET  /healthz                                     200 {"status":"ok"}
//	POST   /_control/faults   Fault as JSON           201 FaultStatus | 400
//	GET    /_control/faults                           200 FaultList
//	DELETE /_control/faults                           200 FaultList as it was; clears rules and counters
//	GET    /_control/effects[?key=K]                  200 EffectCounts | KeyEffects
//	POST   /_control/reset                            200; clears records, keys and faults
//	GET|POST /_control/config  {"index_lag": "3s"}    200 {"index_lag": "3s"}
//
// Errors are {"error": code, "message": text}. A record is its request body
// plus "id", "object", "status", "created_at", "effect_key" and, for a
// payment, "idempotency_key" (see Record).
//
// # Use
//
// In a Go test, serve a Provider with httptest.NewServer and use its
// methods (AddFault, Count, Effects, …) directly; with the
// opjournal-fakeprovider binary, use a ControlClient. Go's http.Transport
// transparently re-sends a POST that carries an Idempotency-Key when a
// reused keep-alive connection drops: with drop_connection_after_commit the
// caller may then see the replay (200) rather than the error.
//
// The store is an in-memory map behind one mutex: this is a test double of
// an external system, not opjournal's durable store.
package fakeprovider
