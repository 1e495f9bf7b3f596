#!/usr/bin/env bash
# bench/before_after.sh — one change, two builds, side by side in one run: netflow on a
# pcapgen capture (1 and 2 workers) and, with BROKERS set, kafka_bench's raw loop and
# rill/1 on a real broker. Each run is its own process; within a round the two builds
# alternate and the order flips every round (neither build always runs second). Every
# netflow run is checked against the capture's packet count (--summary), every
# kafka_bench run by its own count and checksum (it exits non-zero otherwise).
# Table (Markdown, stdout): per case the median wall time (netflow) or records/s
# (kafka) of each build and the ratio new/base of the medians. Progress on stderr.
#
#   BASE=/work/wt-base/build NEW=build bench/before_after.sh
#   env: BASE NEW (build dirs with examples/netflow/netflow, examples/pcapgen/pcapgen,
#        bench/kafka_bench), ROUNDS (5), DATA (/tmp/rill-bench), FLOWS (50000),
#        PER_FLOW (40), BROKERS (unset: no Kafka part), RECORDS (1000000)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${BASE:?BASE=build dir of the base commit}
new=${NEW:-$root/build}
rounds=${ROUNDS:-5}
data=${DATA:-/tmp/rill-bench}
flows=${FLOWS:-50000}
per_flow=${PER_FLOW:-40}
packets=$((flows * per_flow))
records=${RECORDS:-1000000}
die() { echo "before_after: $*" >&2; exit 1; }
for b in "$base" "$new"; do [ -x "$b/examples/netflow/netflow" ] || die "$b/examples/netflow/netflow missing"; done

mkdir -p "$data"
capture=$data/pcapgen-${flows}x${per_flow}.pcap
[ -s "$capture" ] || "$new/examples/pcapgen/pcapgen" --flows "$flows" --packets-per-flow "$per_flow" \
  --jitter 2ms --quiet --output "$capture" >&2 || die "pcapgen failed"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

netflow_run() {  # build label workers: appends "netflow/W label seconds"
  local s; s=$(mktemp)
  local t0 t1
  t0=$(date +%s.%N)
  "$1/examples/netflow/netflow" --input "$capture" --output /dev/null --workers "$3" --summary "$s" >/dev/null 2>&1 ||
    { echo "before_after: netflow $2/$3 failed" >&2; rm -f "$s"; return; }
  t1=$(date +%s.%N)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["packets"]==int(sys.argv[2]) else 1)' \
    "$s" "$packets" || { echo "before_after: netflow $2/$3 count mismatch" >&2; rm -f "$s"; return; }
  rm -f "$s"
  echo "netflow/$3 $2 $(echo "$t1 - $t0" | bc)" >>"$results"
}
kafka_in=before-after-in-$records
kafka_run() {  # build label peer: appends "kafka:peer label records_per_s"
  local line
  line=$("$1/bench/kafka_bench" --brokers "$BROKERS" --in "$kafka_in" --records "$records" --runs 1 --prime 1 \
           --peers "$3" 2>&1 >/dev/null | grep -E "^RESULT .* ok=1" | tail -1) ||
    { echo "before_after: kafka_bench $2 $3 failed" >&2; return; }
  local secs; secs=$(echo "$line" | grep -oE 'seconds=[0-9.]+' | cut -d= -f2)
  [ -n "$secs" ] && echo "kafka:$3 $2 $(echo "$records / $secs" | bc)" >>"$results"
}
if [ -n "${BROKERS:-}" ]; then
  "$new/bench/kafka_bench" --brokers "$BROKERS" --make-input "$kafka_in" --records "$records" >&2 || die "make-input failed"
fi

for ((r = 1; r <= rounds; r++)); do
  echo "before_after: round $r/$rounds (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if ((r % 2)); then order=("$base base" "$new new"); else order=("$new new" "$base base"); fi
  for w in 1 2; do
    for e in "${order[@]}"; do netflow_run ${e% *} ${e##* } "$w"; done
  done
  if [ -n "${BROKERS:-}" ]; then
    for p in raw rill/1; do
      for e in "${order[@]}"; do kafka_run ${e% *} ${e##* } "$p"; done
    done
  fi
done

python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    case, label, v = line.split()
    rows.setdefault(case, {}).setdefault(label, []).append(float(v))
print("| case | base median | new median | new / base | runs |")
print("|---|---|---|---|---|")
for case in sorted(rows):
    b, n = rows[case].get("base", []), rows[case].get("new", [])
    if not b or not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    unit = "s" if case.startswith("netflow") else " records/s"
    fmt = (lambda x: f"{x:.3f}{unit}") if unit == "s" else (lambda x: f"{x:,.0f}{unit}")
    print(f"| {case} | {fmt(mb)} | {fmt(mn)} | {mn / mb:.3f} | {len(b)}+{len(n)} |")
EOF
