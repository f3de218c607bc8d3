// Package policy loads and validates the per-action policy that the
// opjournal server enforces.
//
// Every side effect an agent asks the journal to perform belongs to an
// action type (create_payment, send_email, submit_application, ...). The
// policy for that action type decides:
//
//   - that the operation must carry an operation key (operation_key),
//   - how long a worker's lease on an attempt lasts, and the most a caller
//     may ask for (lease_seconds),
//   - that retries reuse the same operation key, and whether an attempt
//     whose outcome is unknown (or whose lease expired) may be retried
//     with that key at once (retry_same_key, for providers that deduplicate
//     by our key) or must wait for reconciliation (reconcile_before_retry,
//     the default),
//   - the fixed terminal states (succeeded, failed_final),
//   - how long an operation may stay in flight before it is declared
//     unknown (unknown_after_seconds), and that an unresolved operation goes
//     to human review (on_unresolved),
//   - how long records are kept (retention),
//   - which request members must be exact integers, such as money in minor
//     units (integer_fields),
//   - how the reconciler settles an operation whose outcome is unknown
//     (reconcile): when to check, how to back off, how long the provider's
//     search may lag, whether its "not found" proves absence, and how to
//     ask it (an HTTP verifier whose URL and headers take secrets from the
//     environment as ${VAR}, expanded at request time by ExpandEnv, never
//     from the policy file), and
//   - where an operator sees the provider's own record of an operation
//     (provider_link, a URL template the console links to).
//
// These are decisions about real-world safety: whether a timed-out payment
// may be sent again is a property of the payment provider, not of the
// prompt. So the policy is configuration owned by the operator of the
// server, loaded from a file the server trusts, and never a parameter the
// model chooses per call. An action type with no policy is refused.
//
// Parse is strict. Unknown fields, wrong types, duplicate keys, YAML
// anchors and aliases, multiple documents and out-of-range values are
// errors, and every error is reported as "SOURCE:LINE: field.path: problem"
// so that an operator can fix the file without guessing. Default returns
// the policy shipped with opjournal (default.yaml in this directory).
package policy
