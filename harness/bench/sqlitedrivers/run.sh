#!/bin/sh
# Measures the SQLite drivers side by side on the store's fused cycle
# (see ../SQLITE.md). Each round runs every driver once, in a rotated
# order, so that a slow stretch of a noisy host hits them all; benchstat
# then gives each driver's median and spread over the rounds.
#
#   harness/bench/sqlitedrivers/run.sh [rounds] [benchtime] [outdir]
set -eu
rounds=${1:-5}
benchtime=${2:-3s}
out=${3:-/tmp/sqlitedrivers}
cd "$(dirname "$0")"
mkdir -p "$out"
drivers="moderncsql mattnsql ncrucessql zombiezen"
for d in $drivers; do
	echo "building $d" >&2
	go test -c -o "$out/$d.test" "./$d"
	: >"$out/$d.txt"
done
i=0
while [ "$i" -lt "$rounds" ]; do
	i=$((i + 1))
	# Rotate the order by one driver each round.
	order=$(echo $drivers | tr ' ' '\n' | awk -v r="$i" '{a[NR]=$0} END {for (k=0; k<NR; k++) print a[(k+r-1)%NR+1]}')
	for d in $order; do
		echo "round $i/$rounds: $d" >&2
		# Without its pkg: line each file names the same benchmarks, so
		# benchstat puts the drivers in columns side by side.
		(cd "$out" && "./$d.test" -test.run '^$' -test.bench Fused -test.benchtime "$benchtime") |
			grep -v '^pkg:' >>"$out/$d.txt"
	done
done
cd "$out"
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da \
	modernc=moderncsql.txt mattn=mattnsql.txt ncruces=ncrucessql.txt zombiezen=zombiezen.txt | tee benchstat.txt
