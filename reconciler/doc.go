// Package reconciler settles operations whose outcome is unknown.
//
// After a timeout, a dropped connection or a vanished worker (an expired
// lease), the journal cannot know whether the provider performed the
// effect: the operation is UNKNOWN, and with on_timeout:
// reconcile_before_retry nothing retries it blindly. A Reconciler, usually
// run as the opjournal-reconciler binary, asks the provider what really
// happened and tells the journal. It talks to the journal only through the
// gRPC API (JournalService), never to its database, so any number of
// reconcilers can run beside any number of servers.
//
// # The loop
//
// Every PollInterval, RunOnce pages through ListOperations{due_for_check}:
// unknown operations (expired leases included) that are not under review
// and whose next check is due. For each (at most Concurrency at a time),
// with the action's policy (policy.Action.Reconcile):
//
//  1. Within initial_delay of becoming unknown, before any check: leave it
//     for a later pass (the attempt's effect may still be landing).
//  2. No verifier for the action: escalate to a person (needs_review). For a
//     retry_same_key action the caller's retry with the same key settles it,
//     so the escalation waits until unknown_after_seconds.
//  3. Ask the provider with the action's Verifier (an HTTPVerifier built
//     from the policy, by operation key or external_id).
//  4. Unclear answer (an error): record a check and back off; once the
//     operation has been unknown for unknown_after_seconds, escalate.
//  5. Found and completed: MarkSucceeded with the latest attempt number and
//     the provider's external_id.
//  6. Found, not completed: record a check and back off (escalate after
//     unknown_after_seconds).
//  7. Not found: if the provider's search is not definitive
//     (definitive_absence: false), record a check (escalate after
//     unknown_after_seconds). If it is, but visibility_lag has not passed
//     since the attempt ended, record a check due when the lag is over.
//     Otherwise ReleaseForRetry: the operation goes back to pending and the
//     caller's next retry claims it and calls the provider again.
//
// The backoff after the n-th inconclusive check is interval × 2^n, capped at
// max_interval, with ±20 % jitter, at least one second.
//
// # Why an unclear answer is never absence
//
// Releasing an operation for retry is the one decision that can cause a
// duplicate effect: if the first attempt did charge the card, the retry
// charges it again. So only a definite "not found" from a provider whose
// search is complete and current, after its indexing lag, releases. A
// timeout, a 5xx, a redirect, a body that cannot be read, a search that
// answers 404, a missing environment variable: each means "we do not know",
// so the operation stays unknown and, if it stays so for
// unknown_after_seconds, a person decides. A wrong "unknown" costs a delay;
// a wrong "absent" costs a second payment.
//
// # Concurrency
//
// Every transition is conditional on the server (the attempt number fences
// ReleaseForRetry and RecordCheck; MarkSucceeded with the same external_id
// is a no-op), so two reconcilers, or a reconciler racing a retry or an
// operator, cannot both apply a transition. The loser gets STALE_ATTEMPT,
// INVALID_STATE or NOT_FOUND (or a MarkSucceeded that someone else's
// already settled) and counts the operation as skipped. UNAVAILABLE and
// other failures leave the operation due; the next pass retries it.
//
// # Secrets
//
// Verifier URLs and headers take secrets from the environment (${VAR}),
// expanded at request time. Logs and journal notes never contain header
// values, expanded URLs, payloads or provider answers: only the key, the
// action, the decision, the attempt and a note in the reconciler's words.
package reconciler
