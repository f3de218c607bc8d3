#!/usr/bin/env bash
# Makes the secrets compose.yaml reads: in deploy/compose/secrets/, or in the
# directory given as the first argument. Run it once; it refuses to replace
# secrets that exist (a new hash key would not recognise the replays of the
# operations hashed under the old one: rotate instead, README "Security").
#
#   deploy/compose/make-secrets.sh [DIR]
#
# It runs `opjournal token` and `opjournal hashkey`: $OPJOURNAL if set (a
# command, e.g. "bin/opjournal"), else opjournal on $PATH, else `go run` in
# this checkout, else the image (docker run). Tokens go to the tenant
# $OPJOURNAL_TENANT (default "demo").
#
# Writes (every file readable by you only, but auth.yaml, which holds
# digests only and must be readable by the container's user 65532):
#   auth.yaml       tokens file: agent, reconciler and operator entries
#   tokens.txt      the agent's and the operator's tokens
#   database.env    OPJOURNAL_DATABASE_URL (the migration's and the journal's)
#   hashkeys.env    OPJOURNAL_HASH_KEYS (the journal's)
#   postgres.env    POSTGRES_PASSWORD
#   reconciler.env  OPJOURNAL_TOKEN
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/secrets}
tenant=${OPJOURNAL_TENANT:-demo}

files=(auth.yaml tokens.txt database.env hashkeys.env postgres.env reconciler.env)
mkdir -p "$out"
for f in "${files[@]}"; do
	if [ -e "$out/$f" ]; then
		echo "make-secrets.sh: $out/$f exists; not replacing any secret (remove all of ${files[*]} in $out to start over, with a new database)" >&2
		exit 1
	fi
done

umask 077
tmp=$(mktemp -d "$out/.make-secrets.XXXXXX")
trap 'status=$?; [ $status -eq 0 ] || cat "$tmp/stderr" >&2 2>/dev/null; rm -rf "$tmp"' EXIT

if [ -n "${OPJOURNAL:-}" ]; then
	read -r -a opj <<<"$OPJOURNAL"
elif command -v opjournal >/dev/null 2>&1; then
	opj=(opjournal)
elif command -v go >/dev/null 2>&1 && [ -f "$root/go.mod" ]; then
	opj=(go -C "$root" run ./cmd/opjournal)
else # the image, as you, writing the tokens file in $tmp
	opj=(docker run --rm -u "$(id -u):$(id -g)" -v "$tmp:$tmp" "${OPJOURNAL_IMAGE:-ghcr.io/opjournal/opjournal:dev}")
fi

# token NAME ROLES: appends NAME's entry to the tokens file, prints the token.
token() {
	"${opj[@]}" token --name "$1" --tenant "$tenant" --roles "$2" --append "$tmp/auth.yaml" 2>>"$tmp/stderr"
}
agent=$(token agent "agent")
reconciler=$(token reconciler "reconciler")
operator=$(token operator "operator")

# The request-hash key: `opjournal hashkey` prints a key file; the journal
# takes the same key as OPJOURNAL_HASH_KEYS=id:secret.
keyfile=$("${opj[@]}" hashkey 2>>"$tmp/stderr")
key_id=$(printf '%s\n' "$keyfile" | sed -n 's/^ *- id: *//p' | head -1)
key_secret=$(printf '%s\n' "$keyfile" | sed -n 's/^ *secret: *//p' | head -1)
if [ -z "$key_id" ] || [ -z "$key_secret" ]; then
	echo "make-secrets.sh: could not read the key from \`opjournal hashkey\`" >&2
	exit 1
fi

# 192 random bits, hex: safe in a URL without escaping.
password=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')

cat >"$tmp/database.env" <<EOF
# The migration's and the journal's database (compose.yaml, env_file).
OPJOURNAL_DATABASE_URL=postgres://opjournal:$password@postgres:5432/opjournal?sslmode=disable
EOF
cat >"$tmp/hashkeys.env" <<EOF
# The journal's request-hash keys (id:secret, current first, comma-separated).
# Rotate by putting a new key first (opjournal hashkey) and keeping the old
# one until the retention of its operations has passed: README, Security.
OPJOURNAL_HASH_KEYS=$key_id:$key_secret
EOF
cat >"$tmp/postgres.env" <<EOF
POSTGRES_PASSWORD=$password
EOF
cat >"$tmp/reconciler.env" <<EOF
OPJOURNAL_TOKEN=$reconciler
EOF
cat >"$tmp/tokens.txt" <<EOF
# Bearer tokens of tenant "$tenant" (their digests are in auth.yaml).
# agent: Register, Claim, Mark… (the SDKs' token)
agent $agent
# operator: sign in to the console (http://127.0.0.1:8080/console/) and opjournal ops
operator $operator
EOF
chmod 0644 "$tmp/auth.yaml"
for f in "${files[@]}"; do
	mv "$tmp/$f" "$out/$f"
done
echo "make-secrets.sh: wrote ${files[*]} to $out" >&2
