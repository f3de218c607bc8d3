# opjournal — developer entry points. `make test` is the whole suite; CI runs it.
GO ?= go
# Debian's interpreter: a pyenv shim first on PATH would not see python3-grpcio.
PYTHON ?= /usr/bin/python3

.PHONY: all build binaries generate lint model-check test test-short fuzz serve vet fmt-check generate-check ci demo demo-gateway soak test-python test-ts screenshots

all: build

## build: the product (this module) and the harnesses (harness/, a module of its own)
build:
	$(GO) build ./...
	cd harness && $(GO) build ./...

## HARNESS: run a go command in the harness module (harness/go.mod), from this folder
HARNESS = cd harness && $(GO)

BINARIES = opjournal opjournal-reconciler opjournal-gateway

## binaries: build the commands into bin/: the product's, and the demo and the test provider (harnesses)
binaries:
	@mkdir -p bin
	$(GO) build -o bin/ $(addprefix ./cmd/,$(BINARIES))
	$(HARNESS) build -o ../bin/ ./cmd/opjournal-demo ./cmd/opjournal-fakeprovider

## demo: the reproducible check of docs/spec.md against the real processes
demo: binaries
	./bin/opjournal-demo --bin-dir bin

## demo-gateway: the same check with an agent that calls only opjournal-gateway
## (the seven steps of docs/spec.md through the HTTP door, then the payment as an MCP tool call)
demo-gateway: binaries
	./bin/opjournal-demo --gateway --bin-dir bin

## soak: the soak and fault harness against the real processes (harness/soak/doc.go);
## e.g. make soak DURATION=10m AGENTS=96 SEED=42 SOAK_FLAGS="--keep --log-dir soak-logs"
DURATION ?= 2m
AGENTS ?= 16
SEED ?= 0
SOAK_FLAGS ?=
soak: binaries
	$(HARNESS) build -o ../bin/ ./cmd/opjournal-soak
	./bin/opjournal-soak --bin-dir bin --duration $(DURATION) --agents $(AGENTS) --seed $(SEED) $(SOAK_FLAGS)

## bench: the benchmark suite (harness/bench/RESULTS.md): opjournal through the real server vs the protocol's
## three statements in raw SQL, DBOS Transact and River (harness/bench/peers, its own module), on PostgreSQL
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
BENCH_FLAGS ?=
.PHONY: bench bench-quick bench-quick-twice bench-build
bench-build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/opjournal ./cmd/opjournal-gateway
	$(HARNESS) build -o ../bin/ ./cmd/opjournal-bench ./cmd/opjournal-fakeprovider
	cd harness/bench/peers && $(GO) build -o ../../../bin/opjournal-bench-peers .

## bench: the full run (7 alternating rounds of 1.5 s per point after 0.5 s of warm-up, growth at 1M
## operations; about 15 min); writes harness/bench/results/{latest,summary}.json, harness/bench/results/chart.svg and
## harness/bench/RESULTS.md. Both runs end with the hot path's targets as MET/MISS/SKIP lines
## (internal/testkit/bench/targets.go), each the median of its rounds with their spread; they exit 0
## on a MISS unless BENCH_FLAGS=--require-targets (then status 3)
bench: bench-build
	./bin/opjournal-bench --database-url '$(BENCH_DATABASE_URL)' --rounds 7 --warmup 500ms --duration 1500ms $(BENCH_FLAGS)

## bench-quick: a ~6 min run of the targets' levels (c=1, 2, 4 and 32; 21 alternating rounds of
## 0.3 s per point after 0.1 s of warm-up, 0.5 s at 4 callers or fewer; growth at 50k, 9 purges of 20k) into
## harness/bench/results/quick/. Many short rounds rather than a few long ones: a stall of the shared disk or
## CPU then spoils one round in many, which the median drops, and a ratio's two sides run under a
## second apart (harness/bench/ANALYSIS.md, "Figures that hold still"). Both runs measure a point again
## while the hypervisor steals more than 10% of the CPU, waiting up to 4 min in all for it
BENCH_QUICK_FLAGS = --database-url '$(BENCH_DATABASE_URL)' --concurrency 1,32 --gateway-concurrency 1 \
	--rounds 21 --warmup 100ms --duration 300ms --few-callers-duration 500ms --growth-rows 50000 --purge-rows 20000 --purge-rounds 9 \
	--results-md ""
bench-quick: bench-build
	./bin/opjournal-bench $(BENCH_QUICK_FLAGS) --results-dir harness/bench/results/quick $(BENCH_FLAGS)

## bench-quick-twice: bench-quick twice (~13 min on a quiet host), into harness/bench/results/quick-1/ and quick-2/, then
## opjournal-bench compare of the two: every ratio must agree within 10% (exit status 4 if one does not)
bench-quick-twice: bench-build
	./bin/opjournal-bench $(BENCH_QUICK_FLAGS) --results-dir harness/bench/results/quick-1 $(BENCH_FLAGS)
	./bin/opjournal-bench $(BENCH_QUICK_FLAGS) --results-dir harness/bench/results/quick-2 $(BENCH_FLAGS)
	./bin/opjournal-bench compare harness/bench/results/quick-1 harness/bench/results/quick-2

## generate: regenerate the Go stubs in proto/ from its .proto files (offline; buf and plugins are Go tools pinned in go.mod),
## the Python client's client/python/opjournal/v1 (Debian's protoc and grpc_python_plugin) and
## the TypeScript client's client/typescript/src/gen (protoc-gen-es from the lock file); the OpenAPI 3.1
## document proto/openapi/opjournal.openapi.json (protoc-gen-openapiv2, then internal/cmd/openapi3) and the
## REST client types generated from it, harness/e2e/openapi-ts/src/opjournal.d.ts (openapi-typescript from its lock file)
generate:
	$(GO) tool buf lint
	rm -f proto/opjournal/v1/*.go proto/openapi/*.swagger.json
	$(GO) tool buf generate
	$(GO) run ./internal/cmd/openapi3 -o proto/openapi/opjournal.openapi.json proto/openapi/opjournal.swagger.json
	rm proto/openapi/opjournal.swagger.json
	cd harness/e2e/openapi-ts && { [ -x node_modules/.bin/openapi-typescript ] || npm ci --no-audit --no-fund; } && npm run --silent generate
	bash client/python/generate.sh
	GO=$(GO) bash client/typescript/generate.sh
	$(GO) run ./internal/cmd/genlimits .
	$(GO) run ./protocol/cmd/protocolgen

## generate-check: fail if what is generated is not what `make generate` produces
GENERATED = proto store/postgres/testdata/statements.sql store/sqlite/terms.go harness/e2e/openapi-ts/src/opjournal.d.ts client/python/opjournal/v1 client/typescript/src/gen client/python/opjournal/_limits.py client/typescript/src/limits.ts docs/protocol.md
generate-check: generate
	git diff --exit-code -- $(GENERATED)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || (git status --porcelain -- $(GENERATED); echo "generated code has untracked files: run make generate and commit"; exit 1)

## serve: run the service on the embedded SQLite store with the shipped policy
serve:
	$(GO) run ./cmd/opjournal serve

## test-python: the Python client's tests alone, against the real binary
test-python:
	@mkdir -p bin
	$(GO) build -o bin/opjournal ./cmd/opjournal
	OPJOURNAL_BIN=$(CURDIR)/bin/opjournal $(PYTHON) -m unittest discover -s client/python/tests -v

## test-ts: the TypeScript client's tests against the real opjournal and opjournal-fakeprovider binaries,
## on every Node.js version its engines names, with the frameworks' current and previous majors
## (client/typescript/scripts/matrix.sh)
test-ts:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/opjournal
	$(HARNESS) build -o ../bin/ ./cmd/opjournal-fakeprovider
	cd client/typescript && bash scripts/node-versions.sh && \
		{ [ -d node_modules ] || PATH="$$(bash scripts/node-versions.sh --path 22):$$PATH" npm ci --no-audit --no-fund; } && \
		OPJOURNAL_BIN=$(CURDIR)/bin/opjournal OPJOURNAL_FAKEPROVIDER_BIN=$(CURDIR)/bin/opjournal-fakeprovider bash scripts/matrix.sh

## test-install: every client installs and runs from a fresh clone of HEAD with the commands its
## README gives (scripts/fresh-clone.sh; Go, Debian's Python packages, npm's registry or cache);
## FRESH_CLONE_OVERLAY="client docs" adds the checkout's uncommitted version of those paths
.PHONY: test-install
test-install:
	bash scripts/fresh-clone.sh

## screenshots: the console's pages as the browser test sees them, into docs/console/ (shown in docs/operating.md)
screenshots:
	@mkdir -p docs/console
	OPJOURNAL_SCREENSHOTS=$(CURDIR)/docs/console $(HARNESS) test -count=1 -run 'TestConsole(Approvals|Budgets)?InABrowser' ./e2e/

## test: the whole suite, PostgreSQL included (see scripts/test.sh for how it finds one)
test:
	bash scripts/test.sh

vet:
	$(GO) vet ./...
	$(HARNESS) vet ./...

## lint: staticcheck (a Go tool pinned in go.mod) and go.mod/go.sum tidy, in both modules; CI runs it
lint:
	$(GO) tool staticcheck ./...
	$(GO) mod tidy -diff
	$(HARNESS) tool staticcheck ./...
	$(HARNESS) mod tidy -diff

## model-check: the model-based test of every store (store/storetest/model.go)
## with many more random sequences than make test runs; e.g. CHECKS=20000
CHECKS ?= 3000
model-check:
	TEST_DATABASE_URL='$(BENCH_DATABASE_URL)' $(GO) test -count=1 -timeout 60m -run 'TestModel' ./store/... -rapid.checks=$(CHECKS) -rapid.steps=60 -v 2>&1 | grep -E 'rapid|^(ok|FAIL|---)'

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^proto/')); test -z "$$out" || (echo "gofmt needed:"; echo "$$out"; exit 1)

## fuzz: run each fuzz target for FUZZTIME (seed corpora already run in `make test`)
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzCanonicalize -fuzztime=$(FUZZTIME) ./protocol/canonjson/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./protocol/policy/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./server/auth/
	$(GO) test -run='^$$' -fuzz=FuzzRESTBody -fuzztime=$(FUZZTIME) ./server/
	$(GO) test -run='^$$' -fuzz=FuzzSameHashSameUpstreamRequest -fuzztime=$(FUZZTIME) ./gateway/

## linearize: the linearizability check of the per-key protocol (harness/linearize) run longer:
## LINEARIZE_SCALE times the runs of `make test` (SQLite, PostgreSQL batched and one statement per
## call, two servers on one database, the duplicate-report race, real processes killed with SIGKILL,
## PgBouncer, budgets on two servers over PostgreSQL and on SQLite); an Illegal history fails with the path of porcupine's HTML visualization
## (LINEARIZE_OUT=DIR, default opjournal-linearize in the temporary directory); LINEARIZE_SEED=N draws a failed run's
## commands again (the interleaving is the machine's); e.g. make linearize LINEARIZE_SCALE=50
LINEARIZE_SCALE ?= 10
.PHONY: linearize
linearize:
	LINEARIZE_SCALE=$(LINEARIZE_SCALE) TEST_DATABASE_URL='$(BENCH_DATABASE_URL)' \
		$(HARNESS) test -count=1 -timeout 120m -run 'TestLinearizable|TestModelAgreesSequentially' ./linearize/

ci: vet fmt-check lint generate-check test

## test-pgbouncer: the runs through a real PgBouncer in transaction pooling mode alone (they are
## part of `make test` too): the conformance suite, the model test, migrations and the purge lock,
## and a short soak (Debian's pgbouncer; scripts/deps.sh installs it)
.PHONY: test-pgbouncer soak-pgbouncer
test-pgbouncer:
	$(GO) test -count=1 -run 'ThroughPgBouncer' ./internal/testkit/pgbouncer/ ./store/postgres/
	$(HARNESS) test -count=1 -run 'ThroughPgBouncer' ./soak/

## soak-pgbouncer: `make soak` with every journal replica behind PgBouncer (transaction mode)
soak-pgbouncer:
	$(MAKE) soak SOAK_FLAGS="--pgbouncer $(SOAK_FLAGS)"

## soak-failover: the failover harness (harness/soak/failover): throwaway PostgreSQL 15 primary + streaming
## standby, two journal replicas on one multi-host URL, the reconciler and agents under load; kill -9
## of the primary and promotion of the standby FAILOVERS times per mode. MODE=sync|async|both;
## DURATION is the load per mode (75s unless given); e.g. make soak-failover MODE=async DURATION=5m.
## MANAGER=patroni: three Patroni nodes and one etcd decide instead, under every fault of
## harness/soak/failover's scenarios (SCENARIOS=switchover,kill-node,… to choose; FAILOVERS is ignored)
MODE ?= both
MANAGER ?= harness
SCENARIOS ?=
FAILOVERS ?= 2
FAILOVER_FLAGS ?=
FAILOVER_DURATION = $(if $(filter command line environment,$(origin DURATION)),$(DURATION),75s)
.PHONY: soak-failover
soak-failover: binaries
	$(HARNESS) build -o ../bin/ ./cmd/opjournal-soak-failover
	./bin/opjournal-soak-failover --bin-dir bin --mode $(MODE) --manager $(MANAGER) --duration $(FAILOVER_DURATION) --failovers $(FAILOVERS) \
		$(if $(SCENARIOS),--scenarios $(SCENARIOS)) $(FAILOVER_FLAGS)

## container-base-images: the base images the Dockerfile names (golang:$GO_VERSION, distroless static nonroot),
## built locally from Debian's packages and this machine's Go where no registry is reachable; kept once built
## (scripts/container-base-images.sh; root)
## container-test: the Dockerfile built with podman as it is and the image run: serve on a fresh PostgreSQL
## database, Register and replay, a reconciler pass against the demo image's test provider, non-root and
## without a shell, SQLite in its volume (scripts/container-test.sh; root; docs/deployment.md, "With podman")
.PHONY: container-base-images container-test
container-base-images:
	bash scripts/container-base-images.sh
container-test:
	bash scripts/container-test.sh
