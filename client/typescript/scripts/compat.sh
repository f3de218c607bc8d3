#!/usr/bin/env bash
# Runs the agent framework adapters' loop tests (built in ../dist by
# `npm run build`) against the previous majors of the frameworks the
# package's peerDependencies accept: each compat/<name>/ is an npm project
# whose lock file pins those versions. The tests are copied into
# compat/<name>/dist so that their imports of the frameworks resolve to
# compat/<name>/node_modules, and run with the `node` first on PATH.
# OPJOURNAL_BIN and OPJOURNAL_FAKEPROVIDER_BIN name the real binaries.
#
# What runs: each adapter's lost-answer loop (one charge per order), its
# loop under a budget (the refused calls charge nothing) and the
# frameworks' approval flows bound to the journal.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$root/dist/test/ai-sdk.test.js" ] || { echo "compat.sh: build first (npm run build)" >&2; exit 1; }
tests=(ai-sdk.test.js openai-agents.test.js langchain.test.js framework-approvals.test.js)
for dir in "$root"/compat/*/; do
	name=$(basename "$dir")
	if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
		echo "compat.sh: npm ci (compat/$name, exact versions from its package-lock.json)" >&2
		(cd "$dir" && npm ci --no-audit --no-fund >/dev/null)
	fi
	rm -rf "$dir/dist" && mkdir -p "$dir/dist/test"
	cp -r "$root/dist/src" "$root/dist/testutil" "$dir/dist/"
	for t in "${tests[@]}"; do cp "$root/dist/test/$t" "$dir/dist/test/"; done
	versions=$(cd "$dir" && node -e 'const l=require("./package-lock.json").packages;console.log(["ai","@openai/agents","@langchain/core","@langchain/langgraph"].map(n=>n+"@"+l["node_modules/"+n].version).join(" "))')
	echo "compat.sh: compat/$name ($versions) on Node.js $(node --version)" >&2
	# The documented-example tests import @opjournal/client by name, which
	# resolves only inside the package itself: the loops run here.
	(cd "$dir" && node --test --test-reporter=dot --test-name-pattern='lost answer|approval|member order|budget' "${tests[@]/#/dist/test/}")
done
