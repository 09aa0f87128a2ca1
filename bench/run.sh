#!/usr/bin/env bash
# Runs the standard bench set and prints a Markdown table; `make bench`
# calls it. Usage:
#
#   bench/run.sh [persistence [transport]]     # default: memory memory
#
# Environment: BENCH_JSON=file appends every run's JSON line to file;
# BENCH_QUICK=1 runs smaller sizes (a smoke test, not figures to publish);
# BENCH_FLAGS adds flags to every run (e.g. "-postgres-url ...").
# Exits non-zero if any run lost, duplicated or advanced a message, or
# could not run.
set -euo pipefail
cd "$(dirname "$0")"

persistence=${1:-memory}
transport=${2:-memory}
json=${BENCH_JSON:-/dev/null}
extra=${BENCH_FLAGS:-}

bin=$(mktemp -d)/bench
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" .

if [[ ${BENCH_QUICK:-} == 1 ]]; then
	sizes=(-n 20000 -n 20000 -n 1000 -n 1000 -n 5000)
	backlog=50000 over=2s idle=1s schedules=1000
else
	sizes=(-n 200000 -n 100000 -n 5000 -n 5000 -n 50000)
	backlog=1000000 over=10s idle=5s schedules=10000
fi

runs=(
	"-workload schedule ${sizes[0]} ${sizes[1]}"
	"-workload burst ${sizes[2]} ${sizes[3]}"
	"-workload spread ${sizes[4]} ${sizes[5]} -over $over"
	"-workload backlog ${sizes[6]} ${sizes[7]} -over $over -backlog $backlog -idle $idle"
	"-workload throughput ${sizes[8]} ${sizes[9]} -concurrency 8"
	"-workload runtime-recurring -n $schedules -tick-for 1m -idle $idle"
)

echo "go: $(go version | cut -d' ' -f3-), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$bin" -markdown-header
status=0
for args in "${runs[@]}"; do
	# shellcheck disable=SC2086 # word splitting of the flag lists is intended
	if out=$("$bin" $args -persistence "$persistence" -transport "$transport" $extra -markdown); then
		:
	else
		rc=$?
		status=1
		echo "| run failed (exit $rc): $args |" >&2
	fi
	grep '^{' <<<"${out:-}" >>"$json" || true
	grep '^|' <<<"${out:-}" || true
done
exit $status
