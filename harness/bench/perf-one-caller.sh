#!/usr/bin/env bash
# Counts the server's thread switches per fused operation at one caller
# (harness/bench/ANALYSIS.md, "One caller"): the bench drives fused gRPC at c=1,
# and perf stat counts the server process's software events for 8 s of the
# measured phase, once with the defaults and once with the environment
# given (GOMAXPROCS=1 if none), e.g.
#
#   bash harness/bench/perf-one-caller.sh OPJOURNAL_ADAPTIVE_GOMAXPROCS=false
#
# Needs `make bench-build` and Debian's linux-perf; hardware counters are
# not needed (they are not supported on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
url=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
variant=${1:-GOMAXPROCS=1}
for env in "" "$variant"; do
	: >"$log" # before the bench starts, so no earlier pid is read
	./bin/opjournal-bench --bin bin/opjournal --scenarios fused-grpc --concurrency 1 --rounds 1 --duration 14s --warmup 1s \
		--peers-bin "" --growth-rows 0 --purge-rows 0 --results-dir "$(mktemp -d)" --results-md "" \
		${env:+--server-env "$env"} --database-url "$url" >"$log" 2>&1 &
	bench=$!
	pid=""
	for _ in $(seq 1 150); do
		pid=$(grep -o 'server pid [0-9]*' "$log" | awk '{print $3}' || true)
		[ -n "$pid" ] && break
		sleep 0.2
	done
	[ -n "$pid" ] || { cat "$log"; exit 1; }
	sleep 4 # into the measured phase (1 s warm-up, then 14 s)
	echo "== server ${env:-with its defaults} (pid $pid)"
	perf stat -e task-clock,context-switches,cpu-migrations -p "$pid" sleep 8 2>&1 | grep -E "task-clock|context|migrations"
	wait "$bench"
	grep "fused-grpc  " "$log" | head -1
done
