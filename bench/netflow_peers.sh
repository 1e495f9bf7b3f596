#!/usr/bin/env bash
# bench/netflow_peers.sh — netflow vs the flow tools Debian ships, on one pcapgen capture
# (issue 10), run by hand (not part of the tests):
#   tcpdump -n -r F -w /dev/null     read and write back every record: the read ceiling
#   nfpcapd -r F -w DIR               nfdump 1.7's pcap -> nfcapd flow collector
#   argus -r F -w FILE                argus 3.0's flow auditor (bidirectional 5-tuple flows)
#   netflow --workers 1 / 2           rill's main job, --output /dev/null
#   netflow --workers 2 --two-phase   the same, folded on the decoding worker first
#   netflow --workers 2 --ipfix       the same, every flow record also sent as IPFIX to
#                                     an nfcapd on 127.0.0.1 (started per run, -B 64 MiB)
# The capture (PACKETS = FLOWS x PER_FLOW packets, 2 ms jitter) is made once with pcapgen
# and kept under $DATA. ROUNDS rounds; every peer runs once per round, each in a process
# of its own, in an order that rotates by one place per round (no peer always follows the
# same other one). Each peer's output directory/file is removed before and after its run.
# Every run is checked: exit status 0, and the packet count the peer reports (nfpcapd's
# "Processed:", argus' file read back with racount, netflow's --summary) equals PACKETS;
# netflow/ipfix also needs nfdump to read back every record its summary says it sent
# (UDP: a collector that falls behind drops datagrams). A run that fails the check is
# reported and left out of the table. netflow/ipfix's time is netflow's alone.
# Wall time from bash's `time` (ms resolution); CPU = user + sys of the peer's process.
# Table (Markdown, stdout): per peer the median and best wall time, packets/s at the
# median, packets/s relative to tcpdump's, median CPU; then netflow's 2-worker/1-worker
# speed-up of the medians. Progress and failures go to stderr.
#
# PEERS (a space-separated subset of the names above, default all) picks the peers: issue
# 10's two netflow speed goals need only tcpdump, netflow/1 and netflow/2. BASE (a second
# netflow binary, e.g. main's before a change) adds the peers base/1 and base/2, asked for
# by name in PEERS: an A/B in the same rounds, with the new/base ratio of the medians.
#
#   bench/netflow_peers.sh            # env: DATA ROUNDS NETFLOW PCAPGEN FLOWS PER_FLOW BUILD PEERS BASE
#   PEERS="tcpdump netflow/1 netflow/2" ROUNDS=15 bench/netflow_peers.sh
#   BASE=/tmp/nf-base PEERS="tcpdump netflow/1 netflow/2 base/1 base/2" ROUNDS=15 bench/netflow_peers.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${DATA:-/tmp/rill-bench}
rounds=${ROUNDS:-5}
build=${BUILD:-$root/build}
netflow=${NETFLOW:-$build/examples/netflow/netflow}
pcapgen=${PCAPGEN:-$build/examples/pcapgen/pcapgen}
flows=${FLOWS:-50000}
per_flow=${PER_FLOW:-40}
packets=$((flows * per_flow))

die() { echo "netflow_peers: $*" >&2; exit 1; }
all_peers="tcpdump nfpcapd argus netflow/1 netflow/2 netflow/two-phase netflow/ipfix"
base=${BASE:-}
read -ra peers <<<"${PEERS:-$all_peers}"
[ ${#peers[@]} -gt 0 ] || die "PEERS is empty"
for p in "${peers[@]}"; do
  case $p in
    base/1 | base/2) [ -n "$base" ] || die "PEERS: $p needs BASE (a second netflow binary)"
                     [ -x "$base" ] || die "BASE: $base is not an executable" ;;
    *) [[ " $all_peers " == *" $p "* ]] || die "PEERS: unknown peer '$p' (known: $all_peers base/1 base/2)" ;;
  esac
done
for tool in tcpdump nfpcapd argus racount nfcapd nfdump python3; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/setup installs it)"
done
[ -x "$netflow" ] || die "$netflow missing (cmake --build BUILD --target netflow; or NETFLOW=...)"

mkdir -p "$data"
capture=$data/pcapgen-${flows}x${per_flow}.pcap
if [ ! -s "$capture" ]; then
  [ -x "$pcapgen" ] || die "$pcapgen missing (cmake --build BUILD --target pcapgen; or PCAPGEN=...)"
  "$pcapgen" --output "$capture.tmp" --flows "$flows" --packets-per-flow "$per_flow" --jitter 2ms --quiet
  mv "$capture.tmp" "$capture"
fi
work=$(mktemp -d "$data/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results  # one line per verified run: peer wall user sys

echo "netflow_peers: $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$capture ($packets packets), $rounds rounds, netflow $netflow" >&2

out=$work/out  # the peer's output (directory or file), removed around every run
log=$work/log
# Runs peer $1 once under `time`; prints "wall user sys" (seconds) on success.
run_peer() {
  local t=$work/time rc=0
  rm -rf "$out"
  TIMEFORMAT='%3R %3U %3S'
  case $1 in
    tcpdump) { time tcpdump -n -r "$capture" -w /dev/null >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
    nfpcapd) mkdir -p "$out"; { time nfpcapd -r "$capture" -w "$out" >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
    argus) { time argus -r "$capture" -w "$out" >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
    netflow/ipfix)
      mkdir -p "$out"
      local port
      port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      nfcapd -b 127.0.0.1 -p "$port" -B 67108864 -w "$out" >"$work/nfcapd.log" 2>&1 & local nfcapd=$!
      for _ in $(seq 200); do grep -q Startup "$work/nfcapd.log" && break; sleep 0.05; done  # <= 10 s
      { time "$netflow" --input "$capture" --output /dev/null --workers 2 --ipfix "127.0.0.1:$port" \
          --summary "$work/summary.json" >"$log" 2>&1 || rc=$?; } 2>"$t"
      sleep 1; kill -TERM "$nfcapd"; wait "$nfcapd" || true ;;
    netflow/two-phase) { time "$netflow" --input "$capture" --output /dev/null --workers 2 --two-phase \
                           --summary "$work/summary.json" >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
    netflow/*) { time "$netflow" --input "$capture" --output /dev/null --workers "${1#netflow/}" \
                   --summary "$work/summary.json" >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
    base/*) { time "$base" --input "$capture" --output /dev/null --workers "${1#base/}" \
                --summary "$work/summary.json" >"$log" 2>&1 || rc=$?; } 2>"$t" ;;
  esac
  local seen=""
  case $1 in
    tcpdump) seen=$packets ;;  # tcpdump reports no count; its exit status is the check
    nfpcapd) seen=$(sed -n 's/^Total: Processed: \([0-9]*\),.*/\1/p' "$log") ;;
    argus) [ -s "$out" ] && seen=$(racount -r "$out" 2>/dev/null | awk '$1 == "sum" {print $3}') ;;
    netflow/* | base/*) seen=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['packets'])" \
                        "$work/summary.json" 2>/dev/null || true) ;;
  esac
  if [ "$1" = netflow/ipfix ] && [ "$seen" = "$packets" ]; then
    local sent got
    sent=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ipfix']['records'])" "$work/summary.json")
    got=$(nfdump -R "$out" -q -o "fmt:%pkt" | wc -l)
    [ "$sent" = "$got" ] || { echo "netflow_peers: netflow/ipfix: sent $sent records, nfcapd kept $got" >&2; seen=""; }
  fi
  rm -rf "$out" "$work/summary.json"
  if [ "$rc" != 0 ] || [ "$seen" != "$packets" ]; then
    echo "netflow_peers: $1 failed (exit $rc, packets ${seen:-?} of $packets):" >&2
    tail -5 "$log" >&2
    return 1
  fi
  cat "$t"
}

: >"$results"
for r in $(seq "$rounds"); do
  line="round $r/$rounds:"
  for i in "${!peers[@]}"; do
    p=${peers[$(( (r - 1 + i) % ${#peers[@]} ))]}
    if t=$(run_peer "$p"); then
      echo "$p $t" >>"$results"
      line+=" $p ${t%% *}s"
    fi
  done
  echo "netflow_peers: $line" >&2
done

python3 - "$results" "$packets" "$rounds" "$capture" "${peers[@]}" <<'EOF'
import statistics, sys
path, n, rounds, capture = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
chosen = set(sys.argv[5:])
runs = {}
for line in open(path):
    peer, wall, user, sys_ = line.split()
    runs.setdefault(peer, []).append((float(wall), float(user) + float(sys_)))
label = {"tcpdump": "tcpdump -n -r F -w /dev/null", "nfpcapd": "nfpcapd -r F -w DIR",
         "argus": "argus -r F -w FILE",
         "netflow/1": "netflow --workers 1", "netflow/2": "netflow --workers 2",
         "netflow/two-phase": "netflow --workers 2 --two-phase",
         "netflow/ipfix": "netflow --workers 2 --ipfix 127.0.0.1:P (nfcapd)",
         "base/1": "BASE --workers 1", "base/2": "BASE --workers 2"}
med = {p: statistics.median(w for w, _ in rs) for p, rs in runs.items()}
print(f"{n:,} packets ({capture.rsplit('/', 1)[-1]}), {rounds} rounds interleaved, order rotating\n")
print("| peer | runs ok | median wall s | best wall s | packets/s (median) | vs tcpdump | median CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for p in [p for p in label if p in chosen]:
    rs = runs.get(p, [])
    if not rs:
        print(f"| {label[p]} | 0/{rounds} | | | | | |"); continue
    rate = n / med[p]
    rel = f"{rate / (n / med['tcpdump']):.2f}" if "tcpdump" in med else ""
    cpu = statistics.median(c for _, c in rs)
    print(f"| {label[p]} | {len(rs)}/{rounds} | {med[p]:.3f} | {min(w for w, _ in rs):.3f} | "
          f"{rate:,.0f} | {rel} | {cpu:.3f} |")
if "netflow/1" in med and "netflow/2" in med:
    print(f"\nnetflow 2 workers vs 1: {med['netflow/1'] / med['netflow/2']:.2f}x (median wall times)")
if "base/1" in med and "base/2" in med:
    print(f"BASE 2 workers vs 1: {med['base/1'] / med['base/2']:.2f}x (median wall times)")
for w in ("1", "2"):
    if f"netflow/{w}" in med and f"base/{w}" in med:
        print(f"netflow / BASE, {w} worker{'s' if w == '2' else ''}: {med[f'netflow/{w}'] / med[f'base/{w}']:.3f} (median wall times)")
if "netflow/1" in med and "netflow/two-phase" in med:
    print(f"netflow 2 workers --two-phase vs 1: {med['netflow/1'] / med['netflow/two-phase']:.2f}x")
EOF
