#!/usr/bin/env bash
# Metrics on vs off, side by side, interleaved rounds (off, on, off, on, ...), medians:
#   netflow --workers 2 on a pcapgen capture of $PACKETS packets (default 3,000,000):
#     off: --stall-threshold 0        on: --metrics-port P (stall detector at 100 ms) and a
#     scraper fetching /metrics every second while it runs
#   pipeline_bench BM_pipeline_in_memory/W/0 vs /W/1 (W = 1, 2 workers)
# Writes the table to stdout and a chart to bench/metrics_overhead.png (python3-matplotlib).
# Usage: bench/metrics_overhead.sh [PACKETS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packets=${1:-3000000}
rounds=${2:-5}
build="${RILL_BUILD_DIR:-$root/build-release}"  # RILL_BUILD_DIR: reuse a Release tree
if [ -z "${RILL_BENCH_NO_BUILD:-}" ]; then  # RILL_BENCH_NO_BUILD=1: use the binaries in $build as they are
  "$root/scripts/setup"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_BUILD_TESTS=OFF -DRILL_BUILD_BENCH=ON >/dev/null
  cmake --build "$build" --target netflow pcapgen pipeline_bench >/dev/null
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gen="$tmp/gen.pcap"
"$build/examples/pcapgen/pcapgen" --output "$gen" --flows 1000 --packets-per-flow $((packets / 1000)) --jitter 2ms --quiet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

netflow_once() {  # mode (off|on) -> packets/s on stdout
  local extra=(--stall-threshold 0) scraper=""
  if [ "$1" = on ]; then
    extra=(--metrics-port "$port")
    (while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" || true; done) & scraper=$!
  fi
  local s e
  s=$(date +%s.%N)
  "$build/examples/netflow/netflow" -i "$gen" -w 2 -o /dev/null --summary "$tmp/s.json" "${extra[@]}"
  e=$(date +%s.%N)
  [ -n "$scraper" ] && kill "$scraper" && wait "$scraper" 2>/dev/null || true
  python3 -c "import json; print(json.load(open('$tmp/s.json'))['packets'] / ($e - $s))"
}
pipeline_once() {  # workers mode(0|1) -> records/s
  "$build/bench/pipeline_bench" --benchmark_filter="BM_pipeline_in_memory/$1/$2/" --benchmark_format=json \
      --benchmark_repetitions=1 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["items_per_second"])'
}

: > "$tmp/samples.txt"
for ((r = 1; r <= rounds; r++)); do
  for mode in off on; do
    echo "netflow $mode $(netflow_once $mode)" >> "$tmp/samples.txt"
    m=0; [ $mode = on ] && m=1
    for w in 1 2; do echo "pipeline_w$w $mode $(pipeline_once $w $m)" >> "$tmp/samples.txt"; done
  done
done

# Debian's python3 (python3-matplotlib is installed for it, not for a pyenv one on PATH).
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$py" - "$tmp/samples.txt" "$root/bench/metrics_overhead.png" "$packets" "$rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, mode, v = line.split()
    rows.setdefault(name, {}).setdefault(mode, []).append(float(v))
labels = {"netflow": f"netflow -w 2, pcapgen {int(sys.argv[3]):,} packets (packets/s)",
          "pipeline_w1": "BM_pipeline_in_memory, 1 worker (records/s)",
          "pipeline_w2": "BM_pipeline_in_memory, 2 workers (records/s)"}
print(f"| benchmark ({sys.argv[4]} interleaved rounds, medians) | metrics off | metrics on | on vs off | off min..max | on min..max |")
print("|---|---:|---:|---:|---:|---:|")
meds = []
for k in ("netflow", "pipeline_w1", "pipeline_w2"):
    off, on = statistics.median(rows[k]["off"]), statistics.median(rows[k]["on"])
    meds.append((labels[k], off, on))
    lo = lambda xs: f"{min(xs):,.0f}..{max(xs):,.0f}"
    print(f"| {labels[k]} | {off:,.0f} | {on:,.0f} | {100 * (on - off) / off:+.1f}% | {lo(rows[k]['off'])} | {lo(rows[k]['on'])} |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (label, off, on) in zip(axes, meds):
        ax.bar(["off", "on"], [off, on], color=["#999999", "#1f77b4"])
        ax.set_title(label, fontsize=8)
        ax.set_ylim(0, max(off, on) * 1.15)
        ax.text(1, on, f"{100 * (on - off) / off:+.1f}%", ha="center", va="bottom")
    fig.suptitle("metrics overhead: medians of interleaved rounds")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
except ImportError:
    print("(python3-matplotlib missing: no chart)", file=sys.stderr)
PY
