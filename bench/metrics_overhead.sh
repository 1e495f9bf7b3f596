#!/usr/bin/env bash
# Metrics on vs off, side by side, interleaved rounds (off, on, off, on, ...), medians of
# two rates: per wall-clock second, and per CPU second of the whole process (user +
# system, every thread); and the best of the rounds (the highest rate: the round least
# disturbed by other processes, as atomic_queue's benchmarks take):
#   netflow --workers 2 on a pcapgen capture of $PACKETS packets (default 3,000,000):
#     off: --stall-threshold 0        on: --metrics-port P (stall detector at 100 ms) and a
#     scraper fetching /metrics every second while it runs
#   pipeline_bench BM_pipeline_in_memory/W/0 vs /W/1 (W = 1, 2 workers)
# Pinning (taskset): the 2-worker runs on CPUs $RILL_BENCH_CPUS (default 0,1), the 1-worker
# pipeline on CPU $RILL_BENCH_CPU1 (default 1): its worker, and the control and endpoint
# threads, which sleep but for the stall watchdog's ticks (pipeline_bench's synthetic
# topology does not pin workers itself). The load average (/proc/loadavg) is printed
# before and after: on a shared machine it says how far to trust a difference.
# Writes the table to stdout and a chart to bench/metrics_overhead.png (python3-matplotlib).
# Each pipeline sample runs for at least $RILL_BENCH_MIN_TIME s (default 1).
# RILL_BENCH_CASES: a subset of "netflow pipeline_w1 pipeline_w2" (the default, all);
# RILL_BENCH_PNG: the chart's path (default bench/metrics_overhead.png).
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
cases=${RILL_BENCH_CASES:-netflow pipeline_w1 pipeline_w2}
cpus=${RILL_BENCH_CPUS:-0,1}
cpu1=${RILL_BENCH_CPU1:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gen="$tmp/gen.pcap"
"$build/examples/pcapgen/pcapgen" --output "$gen" --flows 1000 --packets-per-flow $((packets / 1000)) --jitter 2ms --quiet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

netflow_once() {  # mode (off|on) -> "packets/s packets/CPU-s" on stdout
  local extra=(--stall-threshold 0) scraper=""
  if [ "$1" = on ]; then
    extra=(--metrics-port "$port")
    (while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" || true; done) & scraper=$!
  fi
  local s e cpu
  s=$(date +%s.%N)
  # bash's time: user + system CPU seconds of netflow (all its threads).
  cpu=$( { TIMEFORMAT='%U %S'; time taskset -c "$cpus" "$build/examples/netflow/netflow" -i "$gen" -w 2 -o /dev/null \
             --summary "$tmp/s.json" "${extra[@]}" 2>/dev/null; } 2>&1 )
  e=$(date +%s.%N)
  [ -n "$scraper" ] && kill "$scraper" && wait "$scraper" 2>/dev/null || true
  python3 -c "import json; n = json.load(open('$tmp/s.json'))['packets']; u, s = '$cpu'.split(); print(n / ($e - $s), n / (float(u) + float(s)))"
}
pipeline_once() {  # workers mode(0|1) -> "records/s records/CPU-s" (cpu_time: the whole process)
  local on="$cpus"; [ "$1" = 1 ] && on="$cpu1"
  taskset -c "$on" "$build/bench/pipeline_bench" --benchmark_filter="BM_pipeline_in_memory/$1/$2/" --benchmark_format=json \
      --benchmark_repetitions=1 --benchmark_min_time="${RILL_BENCH_MIN_TIME:-1}" 2>/dev/null |
    python3 -c 'import json,sys; b = json.load(sys.stdin)["benchmarks"][0]; print(b["items_per_second"], 1e6 / (b["cpu_time"] / 1e3))'
}

: > "$tmp/samples.txt"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= rounds; r++)); do
  for mode in off on; do
    m=0; [ $mode = on ] && m=1
    for c in $cases; do
      case $c in
        netflow) echo "netflow $mode $(netflow_once $mode)" >> "$tmp/samples.txt" ;;
        pipeline_w1) echo "pipeline_w1 $mode $(pipeline_once 1 $m)" >> "$tmp/samples.txt" ;;
        pipeline_w2) echo "pipeline_w2 $mode $(pipeline_once 2 $m)" >> "$tmp/samples.txt" ;;
      esac
    done
  done
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average (1, 5, 15 min): before $load_before, after $load_after; $(nproc) CPUs"

# Debian's python3 (python3-matplotlib is installed for it, not for a pyenv one on PATH).
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$py" - "$tmp/samples.txt" "${RILL_BENCH_PNG:-$root/bench/metrics_overhead.png}" "$packets" "$rounds" "$load_before / $load_after" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, mode, wall, cpu = line.split()
    rows.setdefault(name, {}).setdefault(mode, {"wall": [], "cpu": []})
    rows[name][mode]["wall"].append(float(wall))
    rows[name][mode]["cpu"].append(float(cpu))
labels = {"netflow": f"netflow -w 2, pcapgen {int(sys.argv[3]):,} packets (packets/s)",
          "pipeline_w1": "BM_pipeline_in_memory, 1 worker (records/s)",
          "pipeline_w2": "BM_pipeline_in_memory, 2 workers (records/s)"}
print(f"| benchmark ({sys.argv[4]} interleaved rounds) | rate | off, median | on, median | on vs off | off, best | on, best | on vs off (best) | off min..max | on min..max |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
meds = []
pct = lambda off, on: 100 * (on - off) / off
for k in [k for k in ("netflow", "pipeline_w1", "pipeline_w2") if k in rows]:
    for kind, what in (("wall", "per wall s"), ("cpu", "per CPU s")):
        xs_off, xs_on = rows[k]["off"][kind], rows[k]["on"][kind]
        off, on = statistics.median(xs_off), statistics.median(xs_on)
        boff, bon = max(xs_off), max(xs_on)
        meds.append((labels[k], what, off, on, boff, bon))
        lo = lambda xs: f"{min(xs):,.0f}..{max(xs):,.0f}"
        print(f"| {labels[k]} | {what} | {off:,.0f} | {on:,.0f} | {pct(off, on):+.1f}% | {boff:,.0f} | {bon:,.0f} | "
              f"{pct(boff, bon):+.1f}% | {lo(xs_off)} | {lo(xs_on)} |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = len(meds) // 2
    fig, axes = plt.subplots(2, cols, figsize=(4 * cols, 6.4), squeeze=False)
    for i, (label, what, off, on, boff, bon) in enumerate(meds):
        ax = axes[i % 2][i // 2]
        ax.bar(["off\nmedian", "on\nmedian", "off\nbest", "on\nbest"], [off, on, boff, bon],
               color=["#999999", "#1f77b4", "#cccccc", "#6baed6"])
        ax.set_title(f"{label}\n{what}", fontsize=8)
        ax.set_ylim(0, max(off, on, boff, bon) * 1.18)
        ax.tick_params(labelsize=7)
        ax.text(1, on, f"{pct(off, on):+.1f}%", ha="center", va="bottom", fontsize=8)
        ax.text(3, bon, f"{pct(boff, bon):+.1f}%", ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"metrics overhead: {sys.argv[4]} interleaved rounds, medians and best (load average {sys.argv[5]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
except ImportError:
    print("(python3-matplotlib missing: no chart)", file=sys.stderr)
PY
