#!/usr/bin/env bash
# Measures two builds against each other in one sitting: runs one bench
# workload alternately with build A and build B (A, B, A, B, ...), records
# every run's figures and the machine's load, and prints a Markdown table
# with a row per run and the medians of each build. On PostgreSQL the
# run's own WAL without full-page images is the steadiest figure: full
# pages come with the server's checkpoints, CPU and rates with the load.
# Usage:
#
#   bench/pairs.sh A B [bench flags...]
#   bench/pairs.sh -table RESULTS      # print the table of a results file again
#
# A and B are each a bench binary, or the root of a source tree (a checkout
# with its go.work). A tree is built once with the bench of this script's
# own folder against the tree's modules, so both builds are measured by
# the same bench and differ only in the library; to measure with a tree's
# own bench, build it and pass the binary.
#
#   bench/pairs.sh /src/before /src/after -workload burst -persistence postgres -n 100000 -lead 30s
#
# Environment: PAIRS (5) pairs to run; PAIRS_OUT the results file, one JSON
# line per run (default pairs-<UTC time>.jsonl in the current folder);
# PAIRS_REST (5) seconds of pause before each run, so that one run's
# aftermath (autovacuum, checkpoints) falls less into the next.
# Needs jq. Exits non-zero if any run failed (it could not run, or a
# message was lost, duplicated or early); the table shows which, and the
# medians leave them out.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

# table prints the Markdown table of a results file.
table() {
	jq -rs '
	def med: map(select(. != null)) | sort |
		if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def cell(d): if . == null then "–" elif type == "string" then . else (. * pow(10; d) | round / pow(10; d) | tostring) end;
	def figs: {
		rate: .msgs_per_s, p99: .lateness_ms.p99, bus: .cpu_us_per_msg,
		db: .server_cpu_ms_per_1k,
		sess: (if .server_session_cpu_ms != null and .n > 0 then .server_session_cpu_ms * 1000 / .n else null end),
		log: .log_bytes_per_msg, runlog: .run_log_bytes_per_msg,
		records: (if .run_log_fpi_bytes_per_msg != null then .run_log_bytes_per_msg - .run_log_fpi_bytes_per_msg else null end)};
	def row($name; $load; $f; $checks):
		"| \($name) | \($load) | \($f.rate | cell(0)) | \($f.p99 | cell(2)) | \($f.bus | cell(1)) | \($f.db | cell(1)) | \($f.sess | cell(1)) | \($f.log | cell(0)) | \($f.runlog | cell(0)) | \($f.records | cell(0)) | \($checks) |";
	(map(select(.pair == 0)) | (.[0] | "bench flags: `\(.args)`"), "", (.[] | "- \(.side): \(.build)")),
	"",
	"| run | load 1, 5, 15 min | drain msgs/s | p99 ms | bus CPU µs/msg | DB CPU µs/msg (server) | DB CPU µs/msg (run’s sessions) | log B/msg (server) | log B/msg (run’s own) | of it records (no full pages) | early, dup., missing |",
	"|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
	(map(select(.pair > 0)) | .[] |
		if .result == null then "| \(.pair)\(.side) | \(.load) | failed (exit \(.exit)): \(.error // "" | gsub("[|\n]"; " ")) |||||||||"
		else row("\(.pair)\(.side)"; .load; .result | figs;
			"\(.result.early), \(.result.duplicates), \(.result.missing)" + (if .exit != 0 then " (exit \(.exit))" else "" end)) end),
	(map(select(.pair > 0 and .result != null and .exit == 0)) | group_by(.side) |
		map(. as $runs | {side: .[0].side, n: length, m: (["rate", "p99", "bus", "db", "sess", "log", "runlog", "records"] |
			map(. as $k | {key: $k, value: ($runs | map(.result | figs | .[$k]) | med)}) | from_entries)}) |
		(.[] | row("median \(.side) (\(.n) runs)"; ""; .m; "")),
		(if length == 2 then (.[0].m as $a | .[1].m as $b | row("B ÷ A"; "";
			(["rate", "p99", "bus", "db", "sess", "log", "runlog", "records"] |
				map(. as $k | {key: $k, value: (if $a[$k] and $b[$k] and $a[$k] != 0 then $b[$k] / $a[$k] * 1000 | round / 1000 | tostring else null end)}) |
				from_entries); "")) else empty end))
	' "$1"
}

if [[ ${1:-} == -table ]]; then
	table "${2:?usage: pairs.sh -table RESULTS}"
	exit 0
fi
if (($# < 2)); then
	sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
fi
command -v jq >/dev/null || { echo "pairs.sh: needs jq" >&2; exit 2; }

src_a=$1 src_b=$2
shift 2
pairs=${PAIRS:-5}
rest=${PAIRS_REST:-5}
out=${PAIRS_OUT:-pairs-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# build NAME SRC: the bench binary of SRC into $work/NAME, and a line that
# says what it is on standard output.
build() {
	local name=$1 src=$2
	if [[ -f $src && -x $src ]]; then
		cp "$src" "$work/$name"
		echo "binary $src (sha256 $(sha256sum "$src" | cut -c1-12))"
		return
	fi
	local tree
	tree=$(cd "$src" && pwd)
	[[ -f $tree/go.work ]] || { echo "pairs.sh: $src is neither a bench binary nor a tree with a go.work" >&2; return 1; }
	# The tree's workspace with its paths made absolute, and this folder's
	# bench in place of the tree's.
	mkdir -p "$work/$name.ws"
	sed -E "s#(^|[[:space:]])\./bench([[:space:]]|\$)#\1$here\2#; s#(^|[[:space:]])\./#\1$tree/#g; s#^([[:space:]]*)\.\$#\1$tree#; s#=> \.\$#=> $tree#" \
		"$tree/go.work" >"$work/$name.ws/go.work"
	[[ -f $tree/go.work.sum ]] && cp "$tree/go.work.sum" "$work/$name.ws/"
	GOWORK=$work/$name.ws/go.work go build -C "$here" -o "$work/$name" . >&2
	local dirty=""
	[[ -n $(git -C "$tree" status --porcelain --untracked-files=no 2>/dev/null) ]] && dirty=" with uncommitted changes"
	echo "tree $tree at $(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo '?')$dirty, bench of $here at $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
}

desc_a=$(build A "$src_a")
desc_b=$(build B "$src_b")
{
	jq -nc --arg side A --arg build "$desc_a" --arg args "$*" '{pair: 0, side: $side, build: $build, args: $args}'
	jq -nc --arg side B --arg build "$desc_b" --arg args "$*" '{pair: 0, side: $side, build: $build, args: $args}'
} >>"$out"
echo "A: $desc_a" >&2
echo "B: $desc_b" >&2
echo "bench flags: $*; $pairs pairs; results in $out" >&2

status=0
for ((pair = 1; pair <= pairs; pair++)); do
	for side in A B; do
		sleep "$rest"
		load=$(cut -d' ' -f1-3 /proc/loadavg)
		started=$(date -u +%FT%TZ)
		t0=$(date +%s)
		rc=0
		"$work/$side" "$@" >"$work/stdout" 2>"$work/stderr" || rc=$?
		secs=$(($(date +%s) - t0))
		line=$(grep -m1 '^{' "$work/stdout" || true)
		((rc == 0)) || status=1
		jq -nc --argjson pair "$pair" --arg side "$side" --arg load "$load" --arg started "$started" \
			--argjson secs "$secs" --argjson exit "$rc" --arg error "$(tail -c 300 "$work/stderr")" \
			--argjson result "${line:-null}" \
			'{pair: $pair, side: $side, started: $started, seconds: $secs, load: $load, exit: $exit, result: $result}
			 + (if $exit != 0 then {error: $error} else {} end)' >>"$out"
		echo "pair $pair $side: exit $rc in ${secs}s, load $load" >&2
	done
done
table "$out"
exit $status
