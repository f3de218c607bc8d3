#!/usr/bin/env bash
# The whole test suite: `make test` runs this, and so does CI (.ci/run).
#
# PostgreSQL is required, never skipped. The server used is, in order:
#   1. $TEST_DATABASE_URL, if set;
#   2. a server on 127.0.0.1:5432 (database "test", created if missing);
#   3. a throwaway cluster started here, if PostgreSQL's binaries are installed;
# otherwise the script fails and says how to get one.
#
# Extra arguments go to `go test` (e.g. scripts/test.sh -run Conformance ./store/...).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
log() { printf 'test.sh: %s\n' "$*" >&2; }

pg_ready() { # URL
	"$GO" run ./internal/testkit/pgtest/cmd/pgping "$1" >/dev/null 2>&1
}

cleanup_cluster=""
trap '[ -n "$cleanup_cluster" ] && eval "$cleanup_cluster"' EXIT

if [ -n "${TEST_DATABASE_URL:-}" ]; then
	log "PostgreSQL: \$TEST_DATABASE_URL"
	pg_ready "$TEST_DATABASE_URL" || { log "TEST_DATABASE_URL does not answer"; exit 1; }
else
	local_addr=${PG_LOCAL_ADDR:-127.0.0.1:5432} # overridable to exercise the fallback
	local_url="postgres://postgres@$local_addr/test?sslmode=disable"
	admin_url="postgres://postgres@$local_addr/postgres?sslmode=disable"
	if pg_ready "$admin_url"; then
		if ! pg_ready "$local_url"; then
			log "creating database \"test\" on $local_addr"
			"$GO" run ./internal/testkit/pgtest/cmd/pgping -create test "$admin_url"
		fi
		log "PostgreSQL: $local_addr"
		export TEST_DATABASE_URL="$local_url"
	else
		pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
		if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
			log "no PostgreSQL: set TEST_DATABASE_URL, start a server on 127.0.0.1:5432,"
			log "or install one (Debian: apt-get install postgresql) so a throwaway cluster can be started."
			exit 1
		fi
		dir=$(mktemp -d /tmp/opjournal-pg.XXXXXX)
		port=$(( 20000 + RANDOM % 20000 ))
		run_as=()
		if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; run_as=(runuser -u postgres --); fi
		log "starting a throwaway PostgreSQL cluster in $dir on port $port"
		"${run_as[@]}" "$pgbin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >/dev/null
		"${run_as[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null
		cleanup_cluster="${run_as[*]} $pgbin/pg_ctl -D $dir/data -m fast stop >/dev/null; rm -rf $dir"
		"$GO" run ./internal/testkit/pgtest/cmd/pgping -create test "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
		export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
	fi
fi

full=0
if [ $# -eq 0 ]; then set -- ./...; full=1; fi
# What the suite needs beyond Go (PgBouncer, Chromium, Debian's Python
# packages, ...), installed BEFORE the first test on a full run: go test
# itself uses them, so on a fresh machine installing afterwards would fail
# the first run and never reach the install. A targeted run (arguments)
# skips it. DEPS is overridable for the test of this
# order (TestTestScriptInstallsBeforeItTests).
DEPS=${DEPS:-scripts/deps.sh}
if [ "$full" = 1 ]; then
	bash "$DEPS"
fi
# e2e's stripe-node test runs the npm package from its lock file.
(cd harness/e2e/stripe-node && { [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null; })
# The product's packages, then the harnesses' (harness/, a module of its
# own: end-to-end tests, the demo, soak, the linearizability checker, the
# bench). A targeted run's packages under ./harness/ run in that module;
# the flags go to both.
# -count=1: never trust a cached pass; the database may have changed.
flags=() root_pkgs=() harness_pkgs=()
for a in "$@"; do
	case "$a" in
	./harness/*) harness_pkgs+=("./${a#./harness/}") ;;
	./*) root_pkgs+=("$a") ;;
	*) flags+=("$a") ;;
	esac
done
if [ "$full" = 1 ]; then harness_pkgs=(./...); fi
if [ ${#root_pkgs[@]} -gt 0 ] || [ ${#harness_pkgs[@]} -eq 0 ]; then
	"$GO" test -count=1 -timeout 12m "${flags[@]}" "${root_pkgs[@]}"
fi
if [ ${#harness_pkgs[@]} -gt 0 ]; then
	log "the harnesses: harness/ (its own module)"
	(cd harness && "$GO" test -count=1 -timeout 12m "${flags[@]}" "${harness_pkgs[@]}")
fi

# The other languages' clients against the real binary, on a full run only
# (arguments mean a targeted go test). Never skipped: without their
# packages the run fails and says what to install.
if [ "$full" = 1 ]; then
	mkdir -p bin
	"$GO" build -o bin/opjournal ./cmd/opjournal
	"$GO" -C harness build -o ../bin/opjournal-fakeprovider ./cmd/opjournal-fakeprovider # the agent framework adapters' tests count effects there
	PYTHON=${PYTHON:-/usr/bin/python3} # deps.sh installed Debian's grpcio and protobuf for it
	log "Python client: client/python/tests"
	OPJOURNAL_BIN="$PWD/bin/opjournal" "$PYTHON" -m unittest discover -s client/python/tests

	log "TypeScript client: client/typescript, on each Node.js version of its engines (scripts/matrix.sh)"
	bin_path="$PWD/bin/opjournal" fake_path="$PWD/bin/opjournal-fakeprovider"
	(cd client/typescript && OPJOURNAL_BIN="$bin_path" OPJOURNAL_FAKEPROVIDER_BIN="$fake_path" bash scripts/matrix.sh)
	log "REST client generated from the OpenAPI document: harness/e2e/openapi-ts"; (cd harness/e2e/openapi-ts && { [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null; } && OPJOURNAL_BIN="$bin_path" npm test)
fi
