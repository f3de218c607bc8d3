#!/usr/bin/env bash
# Regenerates client/typescript/src/gen from proto/ offline: the plugin is
# the protoc-gen-es pinned in package-lock.json, buf is the repository's Go
# tool. `make generate` calls this; CI then checks `git diff --exit-code`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
GO=${GO:-go}

if [ ! -x "$here/node_modules/.bin/protoc-gen-es" ]; then
	echo "generate.sh: installing the pinned npm packages (npm ci)" >&2
	(cd "$here" && npm ci --no-audit --no-fund)
fi
cd "$root"
"$GO" tool buf generate --template client/typescript/buf.gen.yaml
# The texts a journaled tool's model reads, from protocol/testdata/model_texts.json.
node "$here/scripts/gen-model-texts.mjs"
