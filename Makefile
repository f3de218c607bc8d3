# opjournal — developer entry points. `make test` is the whole suite; CI runs it.
GO ?= go

.PHONY: all build binaries generate lint test test-short fuzz serve vet fmt-check generate-check ci demo

all: build

build:
	$(GO) build ./...

BINARIES = opjournal opjournal-fakeprovider opjournal-reconciler opjournal-demo

## binaries: build the commands into bin/
binaries:
	@mkdir -p bin
	$(GO) build -o bin/ $(addprefix ./cmd/,$(BINARIES))

## demo: the article's reproducible check against the real processes
demo: binaries
	./bin/opjournal-demo --bin-dir bin

## generate: regenerate gen/ from proto/ (offline; buf and plugins are Go tools pinned in go.mod)
generate:
	$(GO) tool buf lint
	rm -rf gen/opjournal gen/openapi/*.json
	$(GO) tool buf generate

## generate-check: fail if gen/ is not what `make generate` produces
generate-check: generate
	git diff --exit-code -- gen
	@test -z "$$(git status --porcelain -- gen)" || (git status --porcelain -- gen; echo "gen/ has untracked files: run make generate and commit"; exit 1)

## serve: run the service on the embedded SQLite store with the shipped policy
serve:
	$(GO) run ./cmd/opjournal serve

## test: the whole suite, PostgreSQL included (see scripts/test.sh for how it finds one)
test:
	bash scripts/test.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || (echo "gofmt needed:"; echo "$$out"; exit 1)

## fuzz: run each fuzz target for FUZZTIME (seed corpora already run in `make test`)
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzCanonicalize -fuzztime=$(FUZZTIME) ./canonjson/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./policy/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./auth/
	$(GO) test -run='^$$' -fuzz=FuzzRESTBody -fuzztime=$(FUZZTIME) ./server/

ci: vet fmt-check generate-check test
