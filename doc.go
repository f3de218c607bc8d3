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
// # Layout
//
// The packages fall into four groups, and imports run one way: harnesses
// and tooling import the product, never the reverse, and the product's
// clients (the gateway, the reconciler, the SDK) reach the journal over gRPC
// only. layering_test.go checks these rules. docs/architecture.md follows one
// command from the wire to the database, naming the files.
//
// The product: what the images ship and users import.
//
//	protocol/            THE protocol: the table of rules (table.go), the pure
//	                     engine that applies it (engine.go), the shared terms
//	                     every store writes in its SQL (predicate.go);
//	                     protocol/model, the independent model the checkers
//	                     hold the journal to; protocol/cmd/protocolgen, the
//	                     one generator of what derives from the table
//	.                    (this package) the domain: operations, statuses, errors,
//	                     the limits
//	canonjson/           RFC 8785 canonical JSON and the request hash
//	hashkey/             the keys of the keyed request hash
//	policy/              the per-action policy file, enforced by the journal
//	auth/                tokens file, principals, the role table
//	journal/             the service: validation, limits, redaction, policy -> store calls
//	store/               the storage interface; one package per database
//	                     (store/postgres, store/sqlite)
//	migrations/          embedded schema migrations per database
//	server/              gRPC service, REST mirror, metrics, error table;
//	                     mounts the console
//	console/             the operators' web console
//	webhook/             the approval webhooks (Standard Webhooks): signing,
//	                     queue, retries, rescan
//	client/              the Go SDK (Execute, typed outcomes, ClassifyHTTP)
//	gateway/             the HTTP reverse proxy and MCP server in front of providers
//	reconciler/          the worker that settles unknown operations
//	ops/                 the operators' command line (opjournal ops)
//	gen/                 generated from proto/: the Go stubs (gen/opjournal/v1)
//	                     and the OpenAPI document (gen/openapi)
//	internal/cli/        what the commands share: flags, environment, logging,
//	                     dialling the journal (purgeprint: only `opjournal purge`)
//	internal/tracing/    OpenTelemetry set-up and spans
//	internal/hostcheck/  the allowed-hosts check of both listeners
//	internal/httpheader/ which headers are hop-by-hop or hold secrets
//	internal/groupq/     the queue behind the stores' group commit
//	internal/adaptiveprocs/
//	                     one P while a server serves one request at a time
//	internal/protocodec/ the gRPC codec of the journal's messages
//	internal/protojsonrt/
//	                     what the generated REST encoders call at run time
//	cmd/opjournal, cmd/opjournal-gateway, cmd/opjournal-reconciler
//	                     the shipped binaries: wiring only
//	clients/             the Python and TypeScript clients
//	examples/            programs the docs show, run by tests
//	                     (examples/mcp-server: an MCP server behind the gateway)
//	deploy/              the Kubernetes manifests and compose's secrets script; its
//	                     test checks them, the Dockerfile and compose.yaml
//
// The harnesses: a module of their own (harness/go.mod), so that the
// product's go.mod lists none of their dependencies. They run the product
// from outside, through its real binaries, and no product package imports
// them.
//
//	harness/             the harness module: harness/e2e (end-to-end tests
//	                     against the real binaries), harness/demo (make demo),
//	                     harness/soak and harness/soak/failover (make soak,
//	                     make soak-failover), harness/linearize (the
//	                     linearizability check), and their binaries under
//	                     harness/cmd (opjournal-demo, opjournal-soak,
//	                     opjournal-soak-failover, opjournal-bench, scaleout,
//	                     partitionbench)
//	bench/               the benchmark's results and reports, and its nested
//	                     modules (bench/peers, bench/sqlitedrivers)
//
// Beside the product, for the tests of both modules and the quick starts:
//
//	fakeprovider/        the test provider, with fault injection and effect
//	                     counts; fakeprovider/agenttool is the agent's tool
//	                     function that calls it
//	cmd/opjournal-fakeprovider
//	                     its binary
//	internal/bench/      the benchmark's load driver and result formats
//	internal/benchpayload/
//	                     the payload the benchmarks and codec tests send
//
// The test helpers: the conformance suite every store runs
// (store/storetest), a schema per test, real PgBouncer and journal
// processes, a clock moved by hand, waiting on a condition.
//
//	store/storetest/     the one conformance suite of every store
//	internal/pgtest/     a PostgreSQL schema per test (pgtest/cmd/pgping: is it up?)
//	internal/pgenv/      which PostgreSQL the tests and harnesses use
//	internal/pgbouncer/  a real PgBouncer process
//	internal/testserver/ a real journal in process on free ports
//	internal/procs/      real processes: start, wait for ready, stop
//	internal/tcpproxy/   a TCP proxy that cuts connections on demand
//	internal/testclock/  a clock moved by hand
//	internal/await/      waiting on a condition, never on a sleep
//	internal/testjwt/    an OAuth issuer: a JWKS file and fresh access tokens
//	internal/standardwebhooks/
//	                     an independent verifier of Standard Webhooks
//
// Tooling: internal/cmd/ (genlimits, openapi3, scaleout, partitionbench,
// protoc-gen-opjournal-json, whose generator is internal/restjsongen),
// scripts/ and the Makefile.
//
//	internal/cmd/        the tools above
//	internal/restjsongen/
//	                     the generator of the REST encoders
//
// Generated, committed, and checked by make generate-check: gen/ (from
// proto/), the clients' stubs and limits, the stores' SQL derived from the
// protocol table, and the protocol table in docs/protocol.md.
package opjournal
