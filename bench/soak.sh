#!/usr/bin/env bash
# bench/soak.sh [DURATION] — netflow's Kafka mode under injected faults (not in CI).
#
#   probe (netflow --probe, one run per capture loop) -> topic packets (4 partitions)
#     -> analysis A (long-lived) + analysis B (SIGKILLed and restarted) in group soak
#     -> topic flows (4 partitions)
#
# For DURATION (default 20m; s, m or h) the script publishes a looping capture (the
# capture again and again, loop k shifted by k * SHIFT seconds so event time moves on),
# restarts the broker every 2-3 min (scripts/kafka restart: data and offsets kept) and
# SIGKILLs and restarts analysis B every 3-4 min. Then it waits for the input to be
# consumed, stops A and B gracefully (SIGTERM: windows fire, rows delivered, offsets
# committed), reads the flows topic back and runs file mode on the same loops.
#
# Checks (bench/soak/compare.py; at-least-once): every (window, conversation) row of file mode has a Kafka row
# with the same packet count or more (none missing; "more" = a replayed packet counted
# twice in one window); no Kafka row names a (window, conversation) file mode does not
# have; rows beyond one per (window, conversation) are counted as duplicates. RSS of A
# (the long-lived process) at minute 5 and at the end. Error lines of every process,
# grouped (numbers replaced by #), to be explained by the injected faults.
# Prints a Markdown table and writes everything to $RILL_SOAK_DIR.
#
# Environment: RILL_KAFKA_PORT (default 29092, its own broker: scripts/kafka),
# RILL_BUILD (default build), RILL_SOAK_DIR (default $RILL_BUILD/soak; the broker's state
# in $RILL_SOAK_DIR.kafka unless RILL_KAFKA_DIR is set),
# RILL_SOAK_CAPTURE (default ../shared/data/pcap/bro.org.pcap: 751 packets, 17.5 s),
# RILL_SOAK_SHIFT (seconds between loops, default 20), RILL_SOAK_SEED (default 42),
# RILL_SOAK_MAX_DELAY (netflow's --max-delay in both modes, default 2s as netflow's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dur_text=${1:-20m}
source "$root/bench/soak/lib.sh"
dur=$(soak_seconds "$dur_text")
export RILL_KAFKA_PORT=${RILL_KAFKA_PORT:-29092}
build=${RILL_BUILD:-$root/build}
nf=$build/examples/netflow/netflow
out=${RILL_SOAK_DIR:-$build/soak}
# The broker's state under the soak's folder (not /tmp, which other users' clean-ups reach).
export RILL_KAFKA_DIR=${RILL_KAFKA_DIR:-$out.kafka}
capture=${RILL_SOAK_CAPTURE:-$root/../shared/data/pcap/bro.org.pcap}
shift_s=${RILL_SOAK_SHIFT:-20}
max_delay=${RILL_SOAK_MAX_DELAY:-2s}
RANDOM=${RILL_SOAK_SEED:-42}
brokers=127.0.0.1:$RILL_KAFKA_PORT
libs=${RILL_KAFKA_CACHE:-$HOME/.cache/rill-kafka}/${RILL_KAFKA_VERSION:-4.1.1}/libs
[ -x "$nf" ] || { echo "soak: $nf not built (cmake --build build --target netflow)" >&2; exit 2; }
[ -f "$capture" ] || { echo "soak: capture $capture not found" >&2; exit 2; }

rm -rf "$out"; mkdir -p "$out/loops"; : >"$out/published"
# Loop k of the capture: classic pcap, every timestamp + k * shift_s seconds.
make_loop() {
  python3 - "$capture" "$1" "$shift_s" "$out/loops/loop$1.pcap" <<'PY'
import struct, sys
src, k, shift, dst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = bytearray(open(src, 'rb').read())
assert struct.unpack('<I', d[:4])[0] in (0xa1b2c3d4, 0xa1b23c4d), 'classic little-endian pcap only'
off = 24
while off + 16 <= len(d):
    sec, frac, incl, orig = struct.unpack_from('<IIII', d, off)
    struct.pack_into('<I', d, off, sec + k * shift)
    off += 16 + incl
open(dst, 'wb').write(d)
PY
}

"$root/scripts/kafka" stop >/dev/null 2>&1 || true
"$root/scripts/kafka" start >"$out/broker.log" 2>&1
tool create "$brokers" packets 4
tool create "$brokers" flows 4
log "broker up on $brokers; topics packets, flows (4 partitions each)"

start_analysis() {  # NAME: starts it in the background ($! is its pid)
  "$nf" --brokers "$brokers" --from packets --to flows --group soak -w 1 --max-delay "$max_delay" >/dev/null 2>>"$out/$1.log" &
}
start_analysis A; A=$!
start_analysis B; B=$!
b_starts=1
log "analysis A pid $A, B pid $B"

t0=$(date +%s)
now() { echo $(( $(date +%s) - t0 )); }
next_broker=$(( 120 + RANDOM % 61 ))
next_kill=$(( 180 + RANDOM % 61 ))
broker_restarts=0; kills=0; loops=0; probe_failures=0
echo "t_s,A_rss_kb,A_anon_kb,B_rss_kb,broker_rss_kb" >"$out/rss.csv"
while [ "$(now)" -lt "$dur" ]; do
  make_loop "$loops"
  # A probe that found no broker read nothing ("the capture was not read"): send the loop
  # again (up to 3 times). Any other failure would publish part of a loop twice if sent
  # again: counted, and the check then shows it.
  for try in 1 2 3; do
    "$nf" --probe -i "$out/loops/loop$loops.pcap" --brokers "$brokers" --topic packets -w 1 \
         2>"$out/probe.last" && st=0 || st=$?
    cat "$out/probe.last" >>"$out/probe.log"
    [ "$st" -eq 0 ] && { echo "$loops" >>"$out/published"; break; }
    probe_failures=$((probe_failures + 1))
    log "probe of loop $loops failed (exit $st, try $try): $(grep -v '^{' "$out/probe.last" | tail -1)"
    grep -q "the capture was not read" "$out/probe.last" || break
    sleep 5
  done
  loops=$((loops + 1))
  bpid=$(cat "$RILL_KAFKA_DIR/pid" 2>/dev/null || echo 0)
  echo "$(now),$(rss_kb "$A"),$(anon_kb "$A"),$(rss_kb "$B"),$(rss_kb "$bpid")" >>"$out/rss.csv"
  if [ "$(now)" -ge "$next_broker" ]; then
    log "restarting the broker"
    if ! "$root/scripts/kafka" restart >>"$out/broker.log" 2>&1; then
      log "broker restart failed (was it stopped from outside?): $(tail -1 "$out/broker.log")"
      exit 1
    fi
    broker_restarts=$((broker_restarts + 1))
    log "broker back"
    next_broker=$(( $(now) + 120 + RANDOM % 61 ))
  fi
  if [ "$(now)" -ge "$next_kill" ]; then
    kill -KILL "$B"; wait "$B" 2>/dev/null || true
    kills=$((kills + 1))
    echo "=== SIGKILL at $(now) s ===" >>"$out/B.log"
    start_analysis B; B=$!
    b_starts=$((b_starts + 1))
    log "SIGKILLed analysis B, restarted as pid $B"
    next_kill=$(( $(now) + 180 + RANDOM % 61 ))
  fi
  sleep 2
done
elapsed=$(now)
a_end=$(rss_kb "$A")
# 60 s: a SIGKILLed member's partitions move on only after its session timeout (45 s).
log "input done after $elapsed s: $loops loops; waiting 60 s for the analysis to catch up"
sleep 60
kill -TERM "$A" "$B"
wait "$A" && a_status=0 || a_status=$?
wait "$B" && b_status=0 || b_status=$?
log "analysis A exit $a_status, B exit $b_status"

tool dump "$brokers" flows >"$out/kafka_rows.jsonl"
inputs=()  # file mode reads the loops the probe published in full
while read -r k; do inputs+=(-i "$out/loops/loop$k.pcap"); done <"$out/published"
"$nf" "${inputs[@]}" -w 1 --max-delay "$max_delay" -o "$out/file_rows.jsonl" 2>"$out/file_summary.json"
"$root/scripts/kafka" stop >>"$out/broker.log" 2>&1 || true

python3 "$root/bench/soak/compare.py" "$out" "$dur_text" "$elapsed" "$loops" "$broker_restarts" "$kills" \
        "$probe_failures" "$a_status" "$b_status"
