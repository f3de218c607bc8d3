#!/usr/bin/env bash
# The whole protocol over REST with curl and jq: register → claim →
# markSucceeded → replay → conflict, then an unknown outcome, its
# reconciliation by hand (a late confirmation) and the history.
#
#   go run ./cmd/opjournal serve &          # in another terminal
#   bash examples/curl.sh [http://127.0.0.1:8080]
#
# With authentication, export OPJOURNAL_TOKEN=<token>.
#
# The first six calls are the README's walk-through ("The protocol with
# curl"), request for request. With OPJOURNAL_TRANSCRIPT=FILE every call is
# also appended to FILE as one JSON line {method, path, request, status,
# response}: the e2e test (TestCurlExample) checks the README's shown
# answers against it.
set -euo pipefail
BASE=${1:-${OPJOURNAL_URL:-http://127.0.0.1:8080}}
KEY=${KEY:-payment:order-817:intent-$(date +%s)}
auth=()
if [ -n "${OPJOURNAL_TOKEN:-}" ]; then auth=(-H "Authorization: Bearer $OPJOURNAL_TOKEN"); fi

call() { # METHOD PATH [JSON] → prints the body and, on its own last line, the HTTP status
	local method=$1 path=$2 body=${3:-} out
	local args=(-sS -X "$method" -w '\n%{http_code}' "${auth[@]}" "$BASE$path")
	[ -n "$body" ] && args+=(-H 'Content-Type: application/json' -d "$body")
	out=$(curl "${args[@]}")
	if [ -n "${OPJOURNAL_TRANSCRIPT:-}" ]; then
		jq -cn --arg method "$method" --arg path "$path" --arg request "$body" \
			--arg status "$(tail -n1 <<<"$out")" --arg response "$(sed '$d' <<<"$out")" \
			'{method: $method, path: $path, request: (if $request == "" then null else ($request | fromjson) end),
			  status: ($status | tonumber), response: ($response | fromjson)}' >>"$OPJOURNAL_TRANSCRIPT"
	fi
	printf '%s\n' "$out"
}
step() { printf '\n== %s\n' "$*"; }
expect() { # WANT_STATUS RESPONSE JQ → fails unless the status matches; prints the jq view
	local want=$1 resp=$2 filter=$3 status body
	status=$(tail -n1 <<<"$resp"); body=$(sed '$d' <<<"$resp")
	jq -c "$filter" <<<"$body"
	if [ "$status" != "$want" ]; then echo "expected HTTP $want, got $status: $body" >&2; exit 1; fi
}

payload='{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}'

step "register $KEY (before calling the provider)"
expect 200 "$(call POST /v1/operations:register "{\"operation_key\": \"$KEY\", \"action_type\": \"create_payment\", \"payload\": $payload}")" \
	'{created, status: .operation.status, request_hash: .operation.request_hash}'

step "claim it: the attempt number is the fencing token"
r=$(call POST /v1/operations:claim "{\"operation_key\": \"$KEY\", \"worker_id\": \"agent-1\"}")
expect 200 "$r" '{claimed, attempt, lease_until}'
attempt=$(sed '$d' <<<"$r" | jq -r .attempt)

step "a second worker is told to wait"
expect 200 "$(call POST /v1/operations:claim "{\"operation_key\": \"$KEY\", \"worker_id\": \"agent-2\"}")" '{claimed, retry_after_seconds}'

step "the provider charged the card (pay_5f2c): record it"
expect 200 "$(call POST /v1/operations:markSucceeded "{\"operation_key\": \"$KEY\", \"attempt\": $attempt, \"external_id\": \"pay_5f2c\", \"result\": {\"payment_id\": \"pay_5f2c\", \"status\": \"captured\"}}")" \
	'{status: .operation.status, external_id: .operation.external_id}'

step "a retry of the same intent (other key order, 4.9e5) replays the stored result"
expect 200 "$(call POST /v1/operations:register "{\"operation_key\": \"$KEY\", \"action_type\": \"create_payment\", \"payload\": {\"currency\": \"RUB\", \"amount_minor\": 4.9e5, \"order_id\": \"817\"}}")" \
	'{created, status: .operation.status, result: .operation.result}'

step "the same key with another amount is a conflict: nothing changes"
expect 422 "$(call POST /v1/operations:register "{\"operation_key\": \"$KEY\", \"action_type\": \"create_payment\", \"payload\": {\"order_id\": \"817\", \"amount_minor\": 500000, \"currency\": \"RUB\"}}")" .error

step "a second intent times out: its outcome is unknown"
KEY2="$KEY-b"
r=$(call POST /v1/operations:register "{\"operation_key\": \"$KEY2\", \"action_type\": \"create_payment\", \"payload\": $payload, \"claim\": {\"worker_id\": \"curl-agent\"}}")
expect 200 "$r" '{created, claimed, attempt}'
expect 200 "$(call POST /v1/operations:markUnknown "{\"operation_key\": \"$KEY2\", \"attempt\": 1, \"error_code\": \"timeout\"}")" '{status: .operation.status}'

step "a retry is NOT claimed under reconcile_before_retry: the provider is asked first"
expect 200 "$(call POST /v1/operations:claim "{\"operation_key\": \"$KEY2\", \"worker_id\": \"curl-agent\"}")" '{claimed, status: .operation.status}'

step "the stale attempt may no longer fail it"
expect 409 "$(call POST /v1/operations:markFailedFinal "{\"operation_key\": \"$KEY2\", \"attempt\": 1, \"error_code\": \"late\"}")" .error.code

step "the reconciler (here: you) finds the payment at the provider and confirms it"
expect 200 "$(call POST /v1/operations:markSucceeded "{\"operation_key\": \"$KEY2\", \"attempt\": 1, \"external_id\": \"pay_77aa\", \"actor\": \"curl-reconciler\"}")" '{status: .operation.status}'

step "its history"
expect 200 "$(call GET "/v1/operations:events?operation_key=$KEY2")" '.events[] | [.from_status, .to_status, .attempt, .actor, .reason]'

step "lookup"
expect 200 "$(call GET "/v1/operations:lookup?operation_key=$KEY")" '.operation | {operation_key, status, attempt_count, external_id}'
printf '\nall steps answered as expected\n'
