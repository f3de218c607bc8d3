#!/usr/bin/env bash
# The A/B of every speed-up on the request path, in one opjournal-bench run
# per operation, each variant a server without one speed-up, alternating
# with the base in rounds (bench/ANALYSIS.md, "Every speed-up earns its
# place"). The variants' binaries are built from a worktree of HEAD with the
# speed-up taken out (the patches below); the base from HEAD itself.
#
#   bash harness/bench/ab-speedups.sh            # ROUNDS=9 DURATION=1s by default
#
# Needs `make bench-build` (the bench itself) and PostgreSQL.
# ONLY=replay runs one operation's A/B.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-9}
duration=${DURATION:-1s}
url=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
out=${OUT:-harness/bench/results/ab}
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt/src" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
git worktree add -q --detach "$wt/src" HEAD
mkdir -p bin "$out"
build() { (cd "$wt/src" && go build -o "$OLDPWD/bin/$1" ./cmd/opjournal && git checkout -q -- .); }
# patch FILE PYTHON-REPLACEMENT: edit the worktree's FILE (old → new, which must match).
patch() { python3 - "$wt/src/$1" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:4]
s = open(p).read()
assert old in s, f"{p}: the code to take out is not there any more: {old!r}"
open(p, "w").write(s.replace(old, new))
PY
}
build opjournal-ab-base
patch server/codec.go 'func (codec) Marshal(v any) (mem.BufferSlice, error) { return protocodec.Marshal(v) }' 'func (codec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}'
patch server/codec.go 'return protocodec.Unmarshal(buf.ReadOnlyData(), m)' 'return proto.UnmarshalOptions{RecursionLimit: protocodec.RecursionLimit}.Unmarshal(buf.ReadOnlyData(), m)'
patch server/codec.go 'return protocodec.Unmarshal(b.([]byte), req.(proto.Message))' 'return proto.UnmarshalOptions{RecursionLimit: protocodec.RecursionLimit}.Unmarshal(b.([]byte), req.(proto.Message))'
build opjournal-ab-stock-codec
patch server/restencode.go '	if a, ok := v.(protoJSONAppender); ok {' '	if a, ok := v.(protoJSONAppender); ok && false {'
build opjournal-ab-stock-restenc
patch server/http.go '		if fast {
			if rb, ok := decodeREST(' '		if fast && false {
			if rb, ok := decodeREST('
build opjournal-ab-stock-restdec
patch journal/actioncache.go 'func (c *actionCache) get(tenant, key string) (string, bool) {' 'func (c *actionCache) get(tenant, key string) (string, bool) {
	if true {
		return "", false
	}'
build opjournal-ab-no-actioncache
patch journal/schemacache.go '	k := schemaKey{act.Name, hashKeyID, hash}' '	if true {
		return checkSchema(act, canonical)
	}
	k := schemaKey{act.Name, hashKeyID, hash}'
build opjournal-ab-no-schemacache
patch server/structjson.go 'func structFromJSON(raw []byte) (*structpb.Struct, error) {' 'func structFromJSON(raw []byte) (*structpb.Struct, error) {
	if st := new(structpb.Struct); true {
		return st, st.UnmarshalJSON(raw)
	}'
build opjournal-ab-stock-structdec

ab() { # OP VARIANT...
	local op=$1; shift
	[ -z "${ONLY:-}" ] || [ "$ONLY" = "$op" ] || return 0
	local args=()
	for v in "$@"; do args+=(--ab-server "$v"); done
	echo "== $op: $*"
	./bin/opjournal-bench --bin bin/opjournal-ab-base --database-url "$url" --scenarios ab --ab-op "$op" "${args[@]}" \
		--one-caller-concurrency 1 --concurrency 32 --rounds "$rounds" --duration "$duration" --warmup 200ms \
		--peers-bin "" --growth-rows 0 --purge-rows 0 --results-dir "$out/$op" --results-md "" 2>&1 |
		sed -n '/^ab: /p; /^| /p'
}
ab fused 'stock-codec=bin/opjournal-ab-stock-codec' 'no-governor=- --adaptive-gomaxprocs=false'
ab rest 'stock-restenc=bin/opjournal-ab-stock-restenc' 'stock-restdec=bin/opjournal-ab-stock-restdec'
ab replay 'no-replay-cache=- --replay-cache-size 0' 'no-schemacache=bin/opjournal-ab-no-schemacache' 'stock-codec=bin/opjournal-ab-stock-codec' \
	'stock-structdec=bin/opjournal-ab-stock-structdec'
ab full-cycle 'no-actioncache=bin/opjournal-ab-no-actioncache'
