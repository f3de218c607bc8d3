#!/usr/bin/env bash
# A/B of a server setting at one caller and a few: alternating bench
# processes (A B A B …, ROUNDS of each), one with the server's defaults and
# one with the environment given, e.g.
#
#   bash harness/bench/ab-server.sh GOMAXPROCS=1          # ROUNDS=3 by default
#
# Each process measures raw SQL and the fused path at c=1, 2, 4 and 32 in
# two rounds of its own, so the fused/raw ratios are paired within it; the
# script prints, per process, the load, fused/raw p50 at each level, fused
# ops/s ÷ raw ops/s at c=32 and the server's CPU per fused operation.
# Needs `make bench-build`.
set -euo pipefail
cd "$(dirname "$0")/.."
env_b=${1:?usage: harness/bench/ab-server.sh NAME=VALUE [more server env]}
rounds=${ROUNDS:-3}
url=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
printf '%-22s %-16s %s\n' server load "fused/raw p50 c=1 c=2 c=4 | ops/s c=32 | server CPU µs/op fused c=1 c=32"
for r in $(seq 1 "$rounds"); do
	for env in "" "$env_b"; do
		dir=$(mktemp -d)
		./bin/opjournal-bench --scenarios raw-sql,fused-grpc --concurrency 1,32 --one-caller-concurrency 2,4 \
			--rounds 2 --warmup 200ms --duration 1s --peers-bin "" --growth-rows 0 --purge-rows 0 \
			--results-dir "$dir" --results-md "" ${env:+--server-env "$env"} --database-url "$url" >"$dir/log" 2>&1
		jq -r --arg env "${env:-defaults}" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" '
			def med(s; c; f): [.[] | select(.system == s and .scenario == c and .store == "postgres") | f] | sort | .[length/2|floor];
			def at(c): map(select(.concurrency == c));
			def p50r(c): (at(c) | med("opjournal"; "fused-grpc"; .p50_ms)) / (at(c) | med("raw-sql"; "full-cycle"; .p50_ms));
			"r'"$r"' \($env)\t\($load)\t\(p50r(1)*100|round/100) \(p50r(2)*100|round/100) \(p50r(4)*100|round/100) | \(((at(32) | med("opjournal"; "fused-grpc"; .ops_per_sec)) / (at(32) | med("raw-sql"; "full-cycle"; .ops_per_sec)))*100|round/100) | \(at(1) | med("opjournal"; "fused-grpc"; .cpu_server_us_per_op) | round) \(at(32) | med("opjournal"; "fused-grpc"; .cpu_server_us_per_op) | round)"
		' "$dir/latest.json"
		rm -rf "$dir"
	done
done
