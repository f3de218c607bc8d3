// Package reconciler will hold the worker that settles unknown operations:
// it asks each provider what really happened (by operation key or
// external_id) before any retry, marks confirmed effects succeeded, releases
// proven absences for retry, and hands unresolved operations to a person.
//
// It talks to the journal only through the gRPC API (JournalService), never
// to the database, so it runs as its own binary beside any number of
// servers. The journal side it relies on is in place: MarkSucceeded accepts
// a stale attempt's confirmation, and an expired lease reads as unknown.
// The worker itself arrives with the reconciliation issue.
package reconciler
