// Package opjournal holds the domain of the operation journal: the operation
// record, its statuses and the error type every layer returns.
//
// The journal makes an AI agent's irreversible actions safe to retry. Each
// business intent gets a stable operation key; the journal records it before
// the external call, hands out leases fenced by an attempt number, and keeps
// the confirmed outcome so a retry returns it instead of acting twice. After a
// timeout the outcome is Unknown, never "failed": only reconciliation with the
// provider, or a person, decides it.
//
// Layout (the architecture, by folder):
//
//	canonjson/   RFC 8785 canonical JSON and the request hash
//	policy/      per-action policy file, enforced by the server
//	journal/     the service: validation, limits, policy -> store calls
//	store/       the storage interface, its conformance suite (storetest)
//	             and one package per database (postgres, sqlite)
//	migrations/  embedded schema migrations per database
//	server/      gRPC service, REST gateway, metrics, error mapping
//	cmd/         binaries; wiring only
package opjournal
