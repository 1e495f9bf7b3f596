#!/usr/bin/env bash
# End-to-end netflow throughput, side by side in one run on the same files:
#   netflow --workers 1 / 2     (rill, Release build)
#   pipeline_bench libpcap loop (plain pcap_next_ex: the ceiling for reading the file)
#   tshark -q -z conv,tcp -z conv,udp   (a tool users know)
# on ../shared/data/pcap/echo-connections.pcap and a pcapgen capture of $PACKETS packets
# (default 10,000,000: 1,000 flows x 10,000 packets, 2 ms jitter).
# Usage: bench/netflow_bench.sh [PACKETS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packets=${1:-10000000}
build="$root/build-release"
"$root/scripts/setup"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_BUILD_TESTS=OFF -DRILL_BUILD_BENCH=ON >/dev/null
cmake --build "$build" --target netflow pcapgen pipeline_bench >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gen="$tmp/gen.pcap"
flows=1000
"$build/examples/pcapgen/pcapgen" --output "$gen" --flows $flows --packets-per-flow $((packets / flows)) --jitter 2ms --quiet

now() { date +%s.%N; }
printf '| capture | tool | packets | seconds | packets/s |\n|---|---|---:|---:|---:|\n'
for f in "$root/../shared/data/pcap/echo-connections.pcap" "$gen"; do
  name=$(basename "$f"); [ "$f" = "$gen" ] && name="pcapgen ${packets}"
  for w in 1 2; do
    s=$(now); "$build/examples/netflow/netflow" -i "$f" -w $w -o /dev/null --summary "$tmp/s.json"; e=$(now)
    n=$(python3 -c "import json;print(json.load(open('$tmp/s.json'))['packets'])")
    python3 -c "print('| $name | netflow --workers $w | $n | %.3f | %.0f |' % ($e-$s, $n/($e-$s)))"
  done
  RILL_BENCH_PCAP="$f" "$build/bench/pipeline_bench" --benchmark_filter='BM_libpcap_read_loop|BM_pcap_reader_decode' \
      --benchmark_format=json --benchmark_min_time=0.5 > "$tmp/b.json" 2>/dev/null
  python3 - "$tmp/b.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["benchmarks"]:
    s = b["real_time"] / 1000.0
    n = b["items_per_second"] * s
    print(f"| {sys.argv[2]} | {b['name']} | {n:.0f} | {s:.3f} | {b['items_per_second']:.0f} |")
PY
  s=$(now); tshark -q -n -r "$f" -z conv,tcp -z conv,udp >/dev/null 2>&1; e=$(now)
  n=$(capinfos -c -M "$f" | awk '/Number of packets/ {print $NF}')
  python3 -c "print('| $name | tshark -z conv,tcp -z conv,udp | $n | %.3f | %.0f |' % ($e-$s, $n/($e-$s)))"
done
