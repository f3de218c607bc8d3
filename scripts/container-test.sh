#!/usr/bin/env bash
# The container image, built and run (`make container-test`; CI runs it once,
# .ci/run). With podman (scripts/podman.sh), as root, on this machine:
#
#   1. the base images the Dockerfile names, built locally when missing
#      (scripts/container-base-images.sh: no registry is reachable here);
#   2. the Dockerfile as it is: `podman build` of the default target (runtime)
#      and of the demo target, with host networking for the Go module proxy;
#   3. the image's configuration: user 65532:65532, entrypoint, command,
#      ports and defaults; no shell (`--entrypoint /bin/sh` cannot start);
#      `serve` refuses to start without the tokens file;
#   4. deploy/compose/make-secrets.sh with the image as its opjournal;
#   5. on a fresh PostgreSQL database of the host: `migrate`, then the
#      image's default command (serve) with the tokens file mounted where the
#      image expects it, as compose runs it (read-only root, no capabilities,
#      no-new-privileges); its process must be uid/gid 65532 with no
#      capabilities, and `podman exec … sh` must fail;
#   6. Register, the effect, Register again (a replay with the stored result)
#      over REST, the same operation over gRPC (`opjournal ops list` from the
#      image), and the rows in PostgreSQL;
#   7. an operation left unknown after a real payment at the test provider
#      (opjournal-fakeprovider from the demo image), settled by a reconciler
#      pass from the image (`--entrypoint /usr/local/bin/opjournal-reconciler
#      --once`): succeeded with the provider's id, one effect;
#   8. the image's own default store, SQLite in its volume: Register and replay;
#   9. SIGTERM (podman stop): serve exits 0.
#
# Containers, the database and the secrets it made are removed at the end;
# the images stay (tagged as the Dockerfile's header names them), older
# builds' untagged layers are pruned. Environment:
#   OPJOURNAL_IMAGE, OPJOURNAL_DEMO_IMAGE  tags (ghcr.io/opjournal/opjournal:dev, :demo)
#   PG_ADMIN_URL   a PostgreSQL URL that may CREATE DATABASE
#                  (postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
#   KEEP=1         keep the containers, database and secrets (to look at a failure)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
IMAGE=${OPJOURNAL_IMAGE:-ghcr.io/opjournal/opjournal:dev}
DEMO_IMAGE=${OPJOURNAL_DEMO_IMAGE:-ghcr.io/opjournal/opjournal:demo}
PG_ADMIN_URL=${PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
TIMEOUT=${TIMEOUT:-60} # seconds to wait for any one condition

start=$SECONDS
step_start=$SECONDS
log() { printf 'container-test: %s\n' "$*" >&2; }
step() {
	log "  ($((SECONDS - step_start)) s)"
	step_start=$SECONDS
	log "== $*"
}
fail() {
	log "FAIL: $*"
	exit 1
}
podman() { bash "$root/scripts/podman.sh" "$@"; }

for tool in curl jq psql; do
	command -v "$tool" >/dev/null || fail "$tool is missing (scripts/deps.sh installs it: curl, jq, postgresql-client)"
done
[ "$(id -u)" = 0 ] || fail "run as root (podman builds and runs the images as root here)"

# ---- cleanup ----------------------------------------------------------------
run_id=opjournal-ct-$$
work=$(mktemp -d "/tmp/$run_id.XXXXXX")
chmod 0755 "$work"
db=""
containers=()
cleanup() {
	local status=$?
	if [ $status -ne 0 ]; then
		for c in "${containers[@]}"; do
			log "---- logs of $c"
			podman logs "$c" 2>&1 | tail -40 | sed 's/^/    /' >&2 || true
		done
	fi
	if [ "${KEEP:-}" = 1 ]; then
		log "KEEP=1: kept containers ${containers[*]:-none}, database ${db:-none}, secrets in $work"
		return
	fi
	for c in "${containers[@]}"; do podman rm -f -v "$c" >/dev/null 2>&1 || true; done
	if [ -n "$db" ]; then psql -qX "$PG_ADMIN_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
	# Earlier builds' layers, untagged by this build's tags: only the tagged
	# images (these two and the base images) stay on the disk.
	podman image prune -f >/dev/null 2>&1 || true
	if [ $status -eq 0 ]; then log "PASS in $((SECONDS - start)) s"; else log "FAILED after $((SECONDS - start)) s"; fi
}
trap cleanup EXIT

# ---- 1 and 2: the images ------------------------------------------------------
log "== base images"
bash scripts/container-base-images.sh
step "podman build -t $IMAGE . (the runtime target)"
t=$SECONDS
podman build --network=host -t "$IMAGE" . >"$work/build.log" 2>&1 || {
	tail -40 "$work/build.log" >&2
	fail "podman build"
}
log "  built in $((SECONDS - t)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f MB", $1/1e6}')"
step "podman build --target demo -t $DEMO_IMAGE ."
podman build --network=host --target demo -t "$DEMO_IMAGE" . >"$work/build-demo.log" 2>&1 || {
	tail -40 "$work/build-demo.log" >&2
	fail "podman build --target demo"
}

# ---- 3: the image's configuration ---------------------------------------------
step "the image: user, entrypoint, command, ports, defaults, no shell"
cfg=$(podman image inspect --format '{{json .Config}}' "$IMAGE")
want() { # JQ EXPECTED
	local got
	got=$(jq -c "$1" <<<"$cfg")
	[ "$got" = "$2" ] || fail "image config $1 is $got, want $2"
}
want .User '"65532:65532"'
want .Entrypoint '["/usr/local/bin/opjournal"]'
want .Cmd '["serve"]'
want '.ExposedPorts | keys' '["8080/tcp","9090/tcp"]'
want '.Volumes | keys' '["/var/lib/opjournal"]'
want '[.Env[] | select(startswith("OPJOURNAL_"))] | sort' \
	'["OPJOURNAL_AUTH_FILE=/etc/opjournal/auth.yaml","OPJOURNAL_DATABASE_URL=sqlite:///var/lib/opjournal/opjournal.db","OPJOURNAL_GRPC_ADDR=0.0.0.0:9090","OPJOURNAL_HTTP_ADDR=0.0.0.0:8080"]'
for sh in /bin/sh sh; do # the path, and a lookup in the image's PATH
	if podman run --rm --entrypoint "$sh" "$IMAGE" -c 'echo reachable' >"$work/sh.out" 2>&1; then
		fail "the image runs a shell: --entrypoint $sh started"
	fi
	grep -q reachable "$work/sh.out" && fail "the image runs a shell: $sh printed"
done
# The gateway: the one binary the steps below do not run.
podman run --rm --entrypoint /usr/local/bin/opjournal-gateway "$IMAGE" --version >/dev/null ||
	fail "/usr/local/bin/opjournal-gateway --version does not run in the image"
# Secure by default: the image's own command, without the tokens file, stops
# at once, naming it (it never listens on 0.0.0.0 without authentication).
if timeout "$TIMEOUT" bash "$root/scripts/podman.sh" run --rm --network=host "$IMAGE" >"$work/noauth.out" 2>&1; then
	fail "serve started without the tokens file"
fi
grep -q /etc/opjournal/auth.yaml "$work/noauth.out" || fail "serve without the tokens file did not name it: $(tail -3 "$work/noauth.out")"

# ---- 4: secrets, made by the image ----------------------------------------------
step "deploy/compose/make-secrets.sh with the image as opjournal"
secrets=$work/secrets
mkdir -p "$secrets"
# As make-secrets.sh's own fallback runs the image: as the caller, so that
# the files it writes are the caller's.
OPJOURNAL="bash $root/scripts/podman.sh run --rm -u $(id -u):$(id -g) -v $secrets:$secrets $IMAGE" \
	OPJOURNAL_TENANT=container-test deploy/compose/make-secrets.sh "$secrets"
agent_token=$(awk '$1 == "agent" {print $2}' "$secrets/tokens.txt")
operator_token=$(awk '$1 == "operator" {print $2}' "$secrets/tokens.txt")
if [ -z "$agent_token" ] || [ -z "$operator_token" ]; then fail "make-secrets.sh wrote no agent or operator token"; fi
[ "$(stat -c %a "$secrets/auth.yaml")" = 644 ] || fail "auth.yaml is not 0644: the image's user could not read it"

# ---- 5: PostgreSQL, migrate, serve ----------------------------------------------
step "a fresh database; opjournal migrate from the image"
db="opjournal_ct_$$_$RANDOM"
psql -qX -v ON_ERROR_STOP=1 "$PG_ADMIN_URL" -c "CREATE DATABASE $db" >/dev/null
db_url=${PG_ADMIN_URL%%\?*}
db_url="${db_url%/*}/$db?sslmode=disable"
sql() { psql -qtAX -v ON_ERROR_STOP=1 "$db_url" -c "$1"; }
# As compose runs the image: read-only root, no capabilities, no privilege
# escalation, a small /tmp.
hardened=(--network=host --read-only --cap-drop=ALL --security-opt=no-new-privileges --tmpfs /tmp:size=16m)
OPJOURNAL_DATABASE_URL=$db_url podman run --rm "${hardened[@]}" -e OPJOURNAL_DATABASE_URL "$IMAGE" migrate >"$work/migrate.out" 2>&1 ||
	{ cat "$work/migrate.out" >&2; fail "opjournal migrate"; }
[ "$(sql "SELECT count(*) FROM information_schema.tables WHERE table_name = 'operations'")" = 1 ] ||
	fail "migrate left no operations table"

# started NAME: waits for the JSON "serving" line of container NAME and prints it.
started() {
	local c=$1 deadline=$((SECONDS + TIMEOUT)) line
	while :; do
		line=$(podman logs "$c" 2>&1 | jq -cR 'fromjson? | select(.msg == "serving")' | head -1)
		if [ -n "$line" ]; then
			printf '%s\n' "$line"
			return
		fi
		[ "$(podman inspect --format '{{.State.Running}}' "$c")" = true ] || fail "$c exited before serving"
		[ $SECONDS -lt $deadline ] || fail "$c did not log its serving line within $TIMEOUT s"
		sleep 0.2 # polling podman logs: the condition is the serving line
	done
}

step "the test provider from the demo image"
containers+=("$run_id-provider")
podman run -d --name "$run_id-provider" "${hardened[@]}" --entrypoint /usr/local/bin/opjournal-fakeprovider \
	"$DEMO_IMAGE" --addr 127.0.0.1:0 >/dev/null
provider_url="http://$(started "$run_id-provider" | jq -r .addr)"
log "  provider at $provider_url"

step "serve from the image (its default command) on PostgreSQL, tokens file mounted"
journal=$run_id-journal
containers+=("$journal")
# The image's defaults listen on 0.0.0.0:9090 and :8080; on the host's
# network (other jobs share it), free loopback ports instead, through the
# variables the image documents.
OPJOURNAL_DATABASE_URL=$db_url PROVIDER_URL=$provider_url podman run -d --name "$journal" "${hardened[@]}" \
	-v "$secrets/auth.yaml:/etc/opjournal/auth.yaml:ro" \
	--env-file "$secrets/hashkeys.env" -e OPJOURNAL_DATABASE_URL -e PROVIDER_URL \
	-e OPJOURNAL_GRPC_ADDR=127.0.0.1:0 -e OPJOURNAL_HTTP_ADDR=127.0.0.1:0 \
	"$IMAGE" >/dev/null
serving=$(started "$journal")
grpc_addr=$(jq -r .grpc_addr <<<"$serving")
base="http://$(jq -r .http_addr <<<"$serving")"
[ "$(jq -r '.store, .auth' <<<"$serving" | paste -sd' ')" = "postgres true" ] ||
	fail "serve is not on PostgreSQL with authentication: $serving"
log "  gRPC $grpc_addr, REST $base"

step "non-root, no capabilities, no shell"
pid=$(podman inspect --format '{{.State.Pid}}' "$journal")
status=/proc/$pid/status
[ "$(awk '/^Uid:/ {print $2,$3,$4,$5}' "$status")" = "65532 65532 65532 65532" ] || fail "serve's uids: $(grep ^Uid: "$status")"
[ "$(awk '/^Gid:/ {print $2,$3,$4,$5}' "$status")" = "65532 65532 65532 65532" ] || fail "serve's gids: $(grep ^Gid: "$status")"
[ "$(awk '/^CapEff:/ {print $2}' "$status")" = 0000000000000000 ] || fail "serve has capabilities: $(grep ^CapEff: "$status")"
[ "$(awk '/^NoNewPrivs:/ {print $2}' "$status")" = 1 ] || fail "serve may gain privileges: $(grep ^NoNewPrivs: "$status")"
[ "$(podman top "$journal" user huser group hgroup | sed -n 2p | tr -s ' ')" = "nonroot 65532 nonroot 65532" ] ||
	fail "podman top: $(podman top "$journal" user huser group hgroup)"
for sh in sh /bin/sh /bin/bash; do
	if podman exec "$journal" "$sh" -c 'echo reachable' >"$work/exec.out" 2>&1 || grep -q reachable "$work/exec.out"; then
		fail "podman exec $journal $sh ran a shell"
	fi
done

# ---- 6: Register and replay ------------------------------------------------------
# call METHOD PATH [JSON]: the body, then the HTTP status on its own line, as the agent.
call() {
	local args=(-sS -X "$1" -w '\n%{http_code}' -H "Authorization: Bearer $agent_token" "$base$2")
	[ -n "${3:-}" ] && args+=(-H 'Content-Type: application/json' -d "$3")
	curl "${args[@]}"
}
# st: an operation's status as the journal's tables spell it, whether the
# JSON says "succeeded" or the enum's name, "STATUS_SUCCEEDED".
jq_defs='def st: ascii_downcase | ltrimstr("status_");'
# expect STATUS RESPONSE JQ WANT: the status, and the body's JQ view.
expect() {
	local status body got
	status=$(tail -n1 <<<"$2")
	body=$(sed '$d' <<<"$2")
	[ "$status" = "$1" ] || fail "HTTP $status, want $1: $body"
	got=$(jq -c "$jq_defs $3" <<<"$body")
	[ "$got" = "$4" ] || fail "$3 is $got, want $4 (body $body)"
}
# register_replay: Register, claim, the effect recorded, Register again: the
# replay carries the stored result and the same request hash.
register_replay() {
	local key=$1 payload='{"order_id":"817","amount_minor":490000,"currency":"EUR"}' r hash
	r=$(call POST /v1/operations:register "{\"operation_key\":\"$key\",\"action_type\":\"create_payment\",\"payload\":$payload}")
	expect 200 "$r" '[.created, (.operation.status | st)]' '[true,"pending"]'
	hash=$(sed '$d' <<<"$r" | jq -r .operation.request_hash)
	expect 200 "$(call POST /v1/operations:claim "{\"operation_key\":\"$key\",\"worker_id\":\"container-test\"}")" '[.claimed, .attempt]' '[true,1]'
	expect 200 "$(call POST /v1/operations:markSucceeded "{\"operation_key\":\"$key\",\"attempt\":1,\"external_id\":\"pay_ct1\",\"result\":{\"payment_id\":\"pay_ct1\"}}")" \
		'.operation.status | st' '"succeeded"'
	# The same intent, its keys in another order and the amount as 4.9e5.
	expect 200 "$(call POST /v1/operations:register "{\"operation_key\":\"$key\",\"action_type\":\"create_payment\",\"payload\":{\"currency\":\"EUR\",\"amount_minor\":4.9e5,\"order_id\":\"817\"}}")" \
		"[.created, (.operation.status | st), .operation.result, .operation.request_hash == \"$hash\"]" '[false,"succeeded",{"payment_id":"pay_ct1"},true]'
	expect 422 "$(call POST /v1/operations:register "{\"operation_key\":\"$key\",\"action_type\":\"create_payment\",\"payload\":{\"order_id\":\"817\",\"amount_minor\":1,\"currency\":\"EUR\"}}")" \
		'.error | type' '"object"'
}

step "Register and replay over REST (port 8080's variable), then gRPC (9090's) with opjournal ops"
expect 401 "$(curl -sS -w '\n%{http_code}' -X POST "$base/v1/operations:register" -d '{}')" '.error | type' '"object"'
key1=payment:container-test:1
register_replay "$key1"
OPJOURNAL_TOKEN=$operator_token podman run --rm "${hardened[@]}" -e OPJOURNAL_TOKEN "$IMAGE" \
	ops list --journal-addr "$grpc_addr" --all -o json >"$work/ops.json"
[ "$(jq -sc "$jq_defs"' [.[] | [.operation_key, (.status | st), .external_id]]' "$work/ops.json")" = "[[\"$key1\",\"succeeded\",\"pay_ct1\"]]" ] ||
	fail "opjournal ops list over gRPC: $(cat "$work/ops.json")"
[ "$(sql "SELECT tenant, status, attempt_count, external_id FROM operations")" = "container-test|succeeded|1|pay_ct1" ] ||
	fail "the operations table: $(sql 'SELECT tenant, operation_key, status FROM operations')"

# ---- 7: a reconciler pass -----------------------------------------------------
step "an unknown outcome settled by a reconciler pass from the image"
key2=payment:container-test:2
payload='{"order_id":"818","amount_minor":1200,"currency":"EUR"}'
expect 200 "$(call POST /v1/operations:register "{\"operation_key\":\"$key2\",\"action_type\":\"create_payment\",\"payload\":$payload,\"claim\":{\"worker_id\":\"container-test\"}}")" \
	'[.created, .claimed, .attempt]' '[true,true,1]'
# The provider charges, and the answer is "lost": the agent reports unknown.
payment=$(curl -sS -f -X POST -H "Idempotency-Key: $key2" -H 'Content-Type: application/json' -d "$payload" "$provider_url/payments")
payment_id=$(jq -r .id <<<"$payment")
expect 200 "$(call POST /v1/operations:markUnknown "{\"operation_key\":\"$key2\",\"attempt\":1,\"error_code\":\"timeout\"}")" '.operation.status | st' '"unknown"'
# One pass at a time until the operation is due (the policy's initial_delay)
# and settled; each pass is a container of its own.
deadline=$((SECONDS + TIMEOUT)) passes=0 settled=""
while [ -z "$settled" ]; do
	[ $SECONDS -lt $deadline ] || fail "no reconciler pass settled $key2 within $TIMEOUT s ($passes passes)"
	passes=$((passes + 1))
	PROVIDER_URL=$provider_url podman run --rm "${hardened[@]}" --env-file "$secrets/reconciler.env" -e PROVIDER_URL \
		--entrypoint /usr/local/bin/opjournal-reconciler "$IMAGE" \
		--journal-addr "$grpc_addr" --once -o json --log-level warn >"$work/pass.json" 2>"$work/pass.err" ||
		{ cat "$work/pass.err" >&2; fail "opjournal-reconciler --once"; }
	if [ "$(jq -r .succeeded "$work/pass.json")" -ge 1 ]; then settled=$(cat "$work/pass.json"); fi
done
log "  settled by pass $passes: $settled"
expect 200 "$(call GET "/v1/operations:lookup?operation_key=$key2")" '[(.operation.status | st), .operation.external_id]' "[\"succeeded\",\"$payment_id\"]"
[ "$(curl -sS -f "$provider_url/_control/effects?key=$key2" | jq -c '.count')" = 1 ] ||
	fail "the provider's effects for $key2: $(curl -sS "$provider_url/_control/effects?key=$key2")"
[ "$(sql "SELECT status || ' ' || external_id FROM operations WHERE operation_key = '$key2'")" = "succeeded $payment_id" ] ||
	fail "the row of $key2 is not succeeded with $payment_id"
[ "$(sql "SELECT count(*) FROM operation_events WHERE operation_key = '$key2' AND to_status = 'succeeded' AND actor LIKE 'reconciler%'")" = 1 ] ||
	fail "no history entry of the reconciler settling $key2: $(sql "SELECT from_status, to_status, actor FROM operation_events WHERE operation_key = '$key2'")"

# ---- 8: the default store: SQLite in the image's volume --------------------------
step "serve on the image's default store (SQLite in the volume /var/lib/opjournal)"
sqlite_journal=$run_id-sqlite
containers+=("$sqlite_journal")
podman run -d --name "$sqlite_journal" "${hardened[@]}" -v "$secrets/auth.yaml:/etc/opjournal/auth.yaml:ro" \
	-e OPJOURNAL_GRPC_ADDR=127.0.0.1:0 -e OPJOURNAL_HTTP_ADDR=127.0.0.1:0 "$IMAGE" >/dev/null
serving_sqlite=$(started "$sqlite_journal")
[ "$(jq -r .store <<<"$serving_sqlite")" = sqlite ] || fail "the default store is not SQLite: $serving_sqlite"
base_pg=$base
base="http://$(jq -r .http_addr <<<"$serving_sqlite")"
register_replay payment:container-test:sqlite
base=$base_pg

# ---- 9: SIGTERM ---------------------------------------------------------------------
step "podman stop (SIGTERM): serve exits 0"
for c in "$journal" "$sqlite_journal"; do
	podman stop -t 30 "$c" >/dev/null
	[ "$(podman inspect --format '{{.State.ExitCode}}' "$c")" = 0 ] || fail "$c exited $(podman inspect --format '{{.State.ExitCode}}' "$c") on SIGTERM"
done
step "done"
