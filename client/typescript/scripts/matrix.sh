#!/usr/bin/env bash
# The TypeScript client's tests on every Node.js version its `engines`
# names (scripts/node-versions.sh installs them from the npm registry):
#   - the whole suite on the oldest (engines' lower bound), with the
#     frameworks' current majors (package-lock.json);
#   - on the newer ones, the agent framework adapters' loops and approval
#     flows (what depends on the frameworks and on Node itself), the
#     protocol tests being the same JavaScript;
#   - on each, the loops against the frameworks' previous majors
#     (scripts/compat.sh, compat/*/package-lock.json).
# scripts/test.sh (make test) and `make test-ts` run it. OPJOURNAL_BIN and
# OPJOURNAL_FAKEPROVIDER_BIN name the real binaries (built if unset).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/node-versions.sh
majors=$(bash scripts/node-versions.sh --majors)
first=1
for m in $majors; do
	bin=$(bash scripts/node-versions.sh --path "$m")
	if [ "$first" = 1 ]; then
		echo "matrix.sh: Node.js $m: the whole suite" >&2
		PATH="$bin:$PATH" npm test
		first=0
	else
		echo "matrix.sh: Node.js $m: the framework adapters' loops and approval flows" >&2
		PATH="$bin:$PATH" node --test --test-reporter=dot dist/test/ai-sdk.test.js dist/test/openai-agents.test.js \
			dist/test/langchain.test.js dist/test/framework-approvals.test.js
	fi
	PATH="$bin:$PATH" bash scripts/compat.sh
done
