#!/usr/bin/env bash
# bench/netflow_vs_tcpdump.sh — issue 10's two netflow speed goals, side by side in one
# run: netflow on 1 and 2 workers (order alternating by round) and `tcpdump -n -r F -w
# /dev/null` on the same pcapgen capture (read once with cat before the rounds). Wall time
# around each command (date +%s%N). Every netflow run is checked against the capture's
# packet count (its --summary). Table (Markdown, stdout): medians and ranges, the
# 1-worker rate against tcpdump's (goal >= 0.5x) and the 2-worker speed-up (goal >= 1.7x),
# as a ratio of medians and as the median of per-round ratios. Progress on stderr.
#
#   bench/netflow_vs_tcpdump.sh
#   env: BUILD (build dir with examples/netflow/netflow and examples/pcapgen/pcapgen;
#        default build), ROUNDS (15), DATA (/tmp/rill-bench), FLOWS (50000), PER_FLOW (40)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
rounds=${ROUNDS:-15}
data=${DATA:-/tmp/rill-bench}
flows=${FLOWS:-50000}
per_flow=${PER_FLOW:-40}
packets=$((flows * per_flow))
die() { echo "netflow_vs_tcpdump: $*" >&2; exit 1; }
netflow=$build/examples/netflow/netflow
[ -x "$netflow" ] || die "$netflow missing (build first)"
command -v tcpdump >/dev/null || die "tcpdump missing (apt-get install tcpdump)"

mkdir -p "$data"
capture=$data/pcapgen-${flows}x${per_flow}.pcap
[ -s "$capture" ] || "$build/examples/pcapgen/pcapgen" --flows "$flows" --packets-per-flow "$per_flow" \
  --output "$capture" >&2
cat "$capture" >/dev/null
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT

# us CMD...: runs CMD with stdout and stderr discarded, prints its wall time in µs.
us() {
  local s e
  s=$(date +%s%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s%N)
  echo $(((e - s) / 1000))
}
# nf W: one netflow run on W workers; checks the packet count, prints the wall time.
nf() {
  local t
  t=$(us "$netflow" --workers "$1" --input "$capture" --output /dev/null --summary "$summary")
  grep -q "\"packets\": $packets," "$summary" || die "netflow --workers $1 did not count $packets packets"
  echo "$t"
}
for i in $(seq 1 "$rounds"); do
  if ((i % 2)); then a=$(nf 1); b=$(nf 2); else b=$(nf 2); a=$(nf 1); fi
  c=$(us tcpdump -n -r "$capture" -w /dev/null)
  echo "round $i: 1 worker $a µs, 2 workers $b µs, tcpdump $c µs, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  echo "$a $b $c"
done | python3 -c '
import statistics as st, sys
rows = [list(map(int, l.split())) for l in sys.stdin]
w1, w2, td = (list(x) for x in zip(*rows))
m = st.median
def cell(v): return f"{m(v) / 1e6:.3f} ({min(v) / 1e6:.3f}-{max(v) / 1e6:.3f})"
print("| netflow, 1 worker s | netflow, 2 workers s | tcpdump s | 1 worker / tcpdump rate | 2 workers vs 1 (paired) |")
print("| --- | --- | --- | ---: | ---: |")
print(f"| {cell(w1)} | {cell(w2)} | {cell(td)} | {m(td) / m(w1):.2f}x | {m(w1) / m(w2):.2f}x ({m([a / b for a, b in zip(w1, w2)]):.2f}) |")
'
