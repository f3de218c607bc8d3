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
// Fifteen folders at the top, in two modules. Imports run one way: the
// harnesses and the test kit import the product, never the reverse, and the
// product's clients (the gateway, the reconciler, the SDK) reach the journal
// over gRPC only. layering_test.go checks these rules; map_test.go checks
// that this map names only what exists and places every package.
// docs/architecture.md follows one command from the wire to the database,
// naming the files.
//
// The protocol, at the front door:
//
//	protocol/            THE protocol: the table of rules (table.go), the pure
//	                     engine that applies it (engine.go), the shared terms
//	                     every store writes in its SQL (predicate.go)
//	protocol/model/      the independent model the checkers hold the journal to
//	protocol/canonjson/  RFC 8785 canonical JSON and the request hash
//	protocol/hashkey/    the keys of the keyed request hash
//	protocol/policy/     the per-action policy file, enforced by the journal
//	protocol/cmd/protocolgen
//	                     the one generator of what derives from the table
//	protocol/testdata/   the vectors every SDK checks (keys, next steps, the
//	                     model's texts, tool keys)
//
// The product: what the images ship and users import (this module).
//
//	.                    (this package) the domain: operations, statuses,
//	                     errors, the limits
//	journal/             the service: validation, limits, redaction, policy ->
//	                     store calls; journal/webhook, the approval webhooks
//	                     (Standard Webhooks): signing, queue, retries, rescan
//	store/               the storage interface; one package per database
//	                     (store/postgres, store/sqlite); store/migrations,
//	                     the embedded schema migrations per database
//	server/              the gRPC service and its REST mirror, metrics, the
//	                     error table; server/auth (tokens file, JWTs,
//	                     principals, the role table) and server/console (the
//	                     operators' web console, mounted by the server)
//	gateway/             the HTTP reverse proxy and MCP server in front of providers
//	reconciler/          the worker that settles unknown operations
//	client/              the Go SDK (Execute, typed outcomes, ClassifyHTTP);
//	                     client/python and client/typescript, the other
//	                     languages' SDKs
//	proto/               the API: proto/opjournal/v1 (journal.proto and the Go
//	                     stubs generated beside it) and proto/openapi (the
//	                     OpenAPI document of the REST mirror)
//	cmd/                 the shipped binaries, wiring only: cmd/opjournal,
//	                     cmd/opjournal-gateway, cmd/opjournal-reconciler
//	internal/cli/        what the commands share: flags, environment, logging,
//	                     dialling the journal (purgeprint: only `opjournal purge`)
//	internal/ops/        the operators' command line (opjournal ops)
//	internal/tracing/    OpenTelemetry set-up and spans
//	internal/hostcheck/  the allowed-hosts check of both listeners
//	internal/httpheader/ which headers are hop-by-hop or hold secrets
//	internal/groupq/     the queue behind the stores' group commit
//	internal/adaptiveprocs/
//	                     one P while a server serves one request at a time
//	internal/protocodec/ the gRPC codec of the journal's messages
//	internal/protojsonrt/
//	                     what the generated REST encoders call at run time
//	internal/cmd/        tooling: genlimits, openapi3, protoc-gen-opjournal-json
//	                     (whose generator is internal/restjsongen)
//	internal/restjsongen/
//	                     the generator of the REST encoders
//	examples/            programs the docs show, run by tests
//	                     (examples/mcp-server: an MCP server behind the gateway)
//	deploy/              the Kubernetes manifests and compose's secrets script; its
//	                     test checks them, the Dockerfile and compose.yaml
//	docs/                the manual
//	scripts/             what make test and CI run (test.sh, deps.sh,
//	                     fresh-clone.sh) and request-path.sh, which measures
//	                     the code one command runs
//
// The test kit: the helpers of both modules' tests, in one place. No
// product package links it.
//
//	store/storetest/     the one conformance suite of every store
//	internal/testkit/    internal/testkit/fakeprovider (the test provider, with
//	                     fault injection and effect counts; its agenttool is the
//	                     agent's tool function that calls it), pgtest (a
//	                     PostgreSQL schema per test; pgtest/cmd/pgping: is it
//	                     up?), pgenv (which PostgreSQL), pgbouncer, testserver (a
//	                     real journal in process on free ports), procs (real
//	                     processes), tcpproxy (cuts connections on demand),
//	                     testclock (a clock moved by hand), await (waiting on a
//	                     condition, never on a sleep), testjwt (an OAuth
//	                     issuer), standardwebhooks (an independent verifier),
//	                     bench (the benchmark's load driver and result
//	                     formats) and benchpayload (the payload it sends)
//
// The harnesses: a module of their own (harness/go.mod), so that the
// product's go.mod lists none of their dependencies. They run the product
// from outside, through its real binaries.
//
//	harness/             harness/e2e (end-to-end tests against the real
//	                     binaries), harness/demo (make demo), harness/soak and
//	                     harness/soak/failover (make soak, make soak-failover),
//	                     harness/linearize (the linearizability check),
//	                     harness/bench (the benchmark's results, reports and
//	                     nested modules) and their binaries under harness/cmd
//	                     (opjournal-fakeprovider, opjournal-demo,
//	                     opjournal-soak, opjournal-soak-failover,
//	                     opjournal-bench, scaleout, partitionbench)
//
// Generated, committed, and checked by make generate-check: the Go stubs and
// the OpenAPI document in proto/, the clients' stubs and limits, the stores'
// SQL derived from the protocol table, and the protocol table in
// docs/protocol.md.
package opjournal
