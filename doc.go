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
//	.                    (this package) the domain: operations, statuses, errors,
//	                     the protocol table (protocol.go) and its machinery
//	                     (transition.go), the limits
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
//	internal/cli/        what the commands share: flags, environment, logging,
//	                     dialling the journal (purgeprint: only `opjournal purge`)
//	internal/tracing/    OpenTelemetry set-up and spans
//	internal/hostcheck/  the allowed-hosts check of both listeners
//	internal/groupq/     the queue behind the stores' group commit
//	cmd/opjournal, cmd/opjournal-gateway, cmd/opjournal-reconciler
//	                     the shipped binaries: wiring only
//	clients/             the Python and TypeScript clients
//	deploy/              the Kubernetes manifests and compose's secrets script; its
//	                     test checks them, the Dockerfile and compose.yaml
//
// The harnesses: they run the product from outside, through its real
// binaries, and no product package imports them.
//
//	fakeprovider/        the test provider, with fault injection and effect
//	                     counts; fakeprovider/agenttool is the agent's tool
//	                     function that calls it
//	internal/demo/       the reproducible check (make demo, the e2e tests)
//	internal/soak/       the soak and fault harness (make soak);
//	                     internal/soak/failover, the PostgreSQL failover harness
//	internal/bench/      the benchmark's load driver and result formats
//	bench/               the benchmark's results and reports, and its nested
//	                     modules (bench/peers, bench/sqlitedrivers)
//	internal/linearize/  the linearizability check of the per-key protocol
//	e2e/                 end-to-end tests against the real binaries
//	cmd/opjournal-fakeprovider, cmd/opjournal-demo, cmd/opjournal-soak,
//	cmd/opjournal-soak-failover, cmd/opjournal-bench
//	                     the harnesses' binaries
//	store/storetest/, internal/{pgtest,pgenv,pgbouncer,testserver,procs,
//	tcpproxy,testclock,await}/
//	                     test helpers: the conformance suite, a schema per
//	                     test, real PgBouncer and journal processes, a clock
//	                     moved by hand, waiting on a condition
//
// Tooling: internal/cmd/ (genlimits, openapi3, protocoldoc, scaleout,
// partitionbench), scripts/ and the Makefile.
//
// Generated, committed, and checked by make generate-check: gen/ (from
// proto/), the clients' stubs and limits, and the protocol table in
// README.md.
package opjournal
