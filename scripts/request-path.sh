#!/usr/bin/env bash
# The packages and files one command crosses from the wire to SQL: a
# Register with a claim through the real server (server/requestpath_test.go),
# run under coverage once with one call and once with CALLS more; the code
# that ran at least CALLS times more ran on every call. Prints the product's
# packages and files (the generated messages and the test kit apart).
#
#   bash scripts/request-path.sh            # CALLS=200
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
calls=${CALLS:-200}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in 0 "$calls"; do
	REQUEST_PATH_CALLS=$n "$GO" test -count=1 -covermode=count -coverpkg=github.com/opjournal/opjournal/... \
		-coverprofile="$dir/$n.out" -run '^TestRequestPath$' ./server/ >"$dir/$n.log" 2>&1 || { cat "$dir/$n.log"; exit 1; }
done
# A line of a profile: FILE:START,END STATEMENTS COUNT.
awk -v calls="$calls" 'FNR == 1 { next } FILENAME ~ /\/0\.out$/ { base[$1] = $3; next }
	$3 - base[$1] >= calls { f = $1; sub(/:[0-9].*/, "", f); print f }' "$dir/0.out" "$dir/$calls.out" |
	sed 's#^github.com/opjournal/opjournal/##' | sort -u >"$dir/files"
grep -v -e '^proto/' -e '^internal/testkit/' "$dir/files" >"$dir/product" || true
echo "product packages: $(xargs -n1 dirname <"$dir/product" | sort -u | wc -l)"
xargs -n1 dirname <"$dir/product" | sort -u | sed 's/^/  /'
echo "product files: $(wc -l <"$dir/product")"
sed 's/^/  /' "$dir/product"
echo "generated files: $(grep -c '^proto/' "$dir/files" || true)"
grep '^proto/' "$dir/files" | sed 's/^/  /' || true
