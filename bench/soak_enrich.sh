#!/usr/bin/env bash
# bench/soak_enrich.sh [DURATION] — the enrichment example's Kafka mode under injected
# faults (not in CI).
#
#   producer (SoakTool produce, RATE/s) -> topic keys (4 partitions)
#     -> enrichment A (long-lived) + enrichment B (SIGKILLed and restarted) in group G
#        -- POST /enrich over loopback --> enrichment_service (SIGKILLed and restarted)
#     -> topic enriched (4 partitions): {"key","enriched","partition","offset"}
#
# For DURATION (default 20m; s, m or h) the producer writes lookup keys ("443/tcp",
# "10.1.2.3", ...) at a steady rate; the script SIGKILLs the enrichment service every
# 1-2 min and starts it again on the same port 3-6 s later, restarts the broker every
# 2-3 min (scripts/kafka restart: data and offsets kept) and SIGKILLs and restarts
# enrichment B every 3-4 min (only while the service is up: the Kafka mode checks the
# service at start). Then it waits for the input to be consumed, stops A and B gracefully
# (SIGTERM: outstanding batches finish, deliveries, final commit), reads both topics back
# and asks a fresh enrichment_service for the answer to every distinct key.
#
# Checks (bench/soak/check_enrich.py; at-least-once): every input message (partition,
# offset) of topic keys has at least one output row naming it, every such row carries the
# input's key and the fresh service's answer (wrong = 0), rows beyond one per input are
# counted as duplicates, missing must be 0. RSS of A (the long-lived process) at minute 5
# and at the end, and beside it A's heap (glibc's malloc_stats(), called through gdb when
# gdb is installed: bytes in use, and bytes the arenas hold from the system), which tells
# a leak (in use grows) from freed peaks the allocator keeps (only the arenas grow). Error
# lines of every process, grouped (numbers replaced by #), to be explained by the injected
# faults. Prints a Markdown table and writes everything to $RILL_SOAK_DIR.
#
# Environment: RILL_KAFKA_PORT (default 29094, its own broker: scripts/kafka; soak.sh uses
# 29092), RILL_BUILD (default build), RILL_SOAK_DIR (default $RILL_BUILD/soak_enrich; the
# broker's state in $RILL_SOAK_DIR.kafka unless RILL_KAFKA_DIR is set), RILL_SOAK_RATE
# (input messages per second, default 2000), RILL_SOAK_SERVICE_PORT (default 29180; the
# fresh service of the check uses the next port), RILL_SOAK_LATENCY (the service's --latency
# in ms, default 5), RILL_SOAK_SEED (default 42), RILL_SOAK_HEAP (default 1: the heap
# snapshots above; each stops A for a second or two while gdb attaches; 0 = none).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dur_text=${1:-20m}
source "$root/bench/soak/lib.sh"
dur=$(soak_seconds "$dur_text")
export RILL_KAFKA_PORT=${RILL_KAFKA_PORT:-29094}
build=${RILL_BUILD:-$root/build}
en=$build/examples/enrichment/enrichment
svc=$build/examples/enrichment_service/enrichment_service
out=${RILL_SOAK_DIR:-$build/soak_enrich}
export RILL_KAFKA_DIR=${RILL_KAFKA_DIR:-$out.kafka}
rate=${RILL_SOAK_RATE:-2000}
svc_port=${RILL_SOAK_SERVICE_PORT:-29180}
latency=${RILL_SOAK_LATENCY:-5}
RANDOM=${RILL_SOAK_SEED:-42}
brokers=127.0.0.1:$RILL_KAFKA_PORT
url=http://127.0.0.1:$svc_port/enrich
group=soak-enrich
libs=${RILL_KAFKA_CACHE:-$HOME/.cache/rill-kafka}/${RILL_KAFKA_VERSION:-4.1.1}/libs
# 23 lookup keys (a count prime to the 4 partitions, so every partition sees every key):
# services(5) names, one port with no name (null), address classes, one key that is neither.
keys=(22/tcp 25/tcp 53/udp 53/tcp 80/tcp 110/tcp 123/udp 143/tcp 443/tcp 993/tcp 3306/tcp
      5432/tcp 6379/tcp 8080/tcp 65000/tcp 10.1.2.3 192.168.0.7 172.16.5.4 8.8.8.8 192.0.2.7
      127.0.0.1 224.0.0.251 not-a-key)
for b in "$en" "$svc"; do
  [ -x "$b" ] || { echo "soak_enrich: $b not built (ninja -C build enrichment enrichment_service)" >&2; exit 2; }
done

rm -rf "$out"; mkdir -p "$out"
alive() { kill -0 "$1" 2>/dev/null; }
# heap_stats PID LABEL: glibc's malloc_stats() in the process, through gdb (the block goes
# to the process's stderr: A.log; check_enrich.py reads the "Total" lines after LABEL).
# /proc/PID/exe: the binary may have been rebuilt since the process started.
heap_stats() {
  [ "${RILL_SOAK_HEAP:-1}" = 1 ] && command -v gdb >/dev/null || return 0
  echo "=== heap $2 at $(now) s, RSS $(rss_kb "$1") kB ===" >>"$out/A.log"
  timeout 120 gdb "/proc/$1/exe" -p "$1" -batch -ex 'call ((void(*)(void))malloc_stats)()' >>"$out/gdb.log" 2>&1 || true
}

# start_service PORT LOG: starts it in the background ($svc_pid) and waits for its
# "listening on" line (up to 10 s).
start_service() {
  : >"$out/service.out"
  "$svc" --port "$1" --latency "$latency" >"$out/service.out" 2>>"$2" &
  svc_pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$out/service.out" && return 0; sleep 0.1; done
  log "enrichment_service on port $1 did not start: $(tail -1 "$2")"; exit 1
}
start_enrichment() {  # NAME: starts it in the background ($! is its pid)
  "$en" --brokers "$brokers" --from keys --to enriched --group "$group" --url "$url" \
        --progress --progress-interval 30s >>"$out/$1.json" 2>>"$out/$1.log" &
}

"$root/scripts/kafka" stop >/dev/null 2>&1 || true
"$root/scripts/kafka" start >"$out/broker.log" 2>&1
tool create "$brokers" keys 4
tool create "$brokers" enriched 4
log "broker up on $brokers; topics keys, enriched (4 partitions each)"
start_service "$svc_port" "$out/service.log"
log "enrichment_service pid $svc_pid on $url (latency $latency ms)"
start_enrichment A; A=$!
start_enrichment B; B=$!
log "enrichment A pid $A, B pid $B"

tool produce "$brokers" keys "$rate" "$dur" "${keys[@]}" >"$out/producer.json" 2>"$out/producer.log" &
P=$!
log "producer pid $P: $rate/s for $dur s"

t0=$(date +%s)
now() { echo $(( $(date +%s) - t0 )); }
next_svc_kill=$(( 60 + RANDOM % 61 )); svc_up_at=0
next_broker=$(( 120 + RANDOM % 61 ))
next_kill=$(( 180 + RANDOM % 61 ))
svc_kills=0; broker_restarts=0; kills=0; b_restarts_refused=0; a_died=""
echo "t_s,A_rss_kb,A_anon_kb,B_rss_kb,service_rss_kb,broker_rss_kb" >"$out/rss.csv"
sample() {
  local bpid; bpid=$(cat "$RILL_KAFKA_DIR/pid" 2>/dev/null || echo 0)
  local s=0; [ "$svc_pid" -gt 0 ] && s=$(rss_kb "$svc_pid")
  echo "$(now),$(rss_kb "$A"),$(anon_kb "$A"),$(rss_kb "$B"),$s,$(rss_kb "$bpid")" >>"$out/rss.csv"
}
last_sample=-5; heap5=""
while alive "$P"; do
  t=$(now)
  if [ $((t - last_sample)) -ge 5 ]; then sample; last_sample=$t; fi
  if [ -z "$heap5" ] && [ "$t" -ge 300 ]; then heap_stats "$A" "minute 5"; heap5=1; fi
  if [ -z "$a_died" ] && ! alive "$A"; then
    wait "$A" && st=0 || st=$?; a_died="exit $st at $t s"; log "enrichment A ended ($a_died)"
  fi
  if [ "$svc_pid" -gt 0 ] && [ "$t" -ge "$next_svc_kill" ]; then
    kill -KILL "$svc_pid"; wait "$svc_pid" 2>/dev/null || true
    echo "=== SIGKILL at $t s ===" >>"$out/service.log"
    svc_kills=$((svc_kills + 1)); svc_pid=0
    svc_up_at=$(( t + 3 + RANDOM % 4 ))
    log "SIGKILLed the enrichment service, back at $svc_up_at s"
  elif [ "$svc_pid" -eq 0 ] && [ "$t" -ge "$svc_up_at" ]; then
    start_service "$svc_port" "$out/service.log"
    log "enrichment service back, pid $svc_pid"
    next_svc_kill=$(( $(now) + 60 + RANDOM % 61 ))
  elif [ "$svc_pid" -gt 0 ] && [ "$t" -ge "$next_broker" ]; then
    log "restarting the broker"
    if ! "$root/scripts/kafka" restart >>"$out/broker.log" 2>&1; then
      log "broker restart failed (was it stopped from outside?): $(tail -1 "$out/broker.log")"
      exit 1
    fi
    broker_restarts=$((broker_restarts + 1))
    log "broker back"
    next_broker=$(( $(now) + 120 + RANDOM % 61 ))
  elif [ "$svc_pid" -gt 0 ] && [ "$t" -ge "$next_kill" ]; then
    kill -KILL "$B"; wait "$B" 2>/dev/null || true
    kills=$((kills + 1))
    echo "=== SIGKILL at $t s ===" >>"$out/B.log"
    start_enrichment B; B=$!
    log "SIGKILLed enrichment B, restarted as pid $B"
    next_kill=$(( $(now) + 180 + RANDOM % 61 ))
  elif ! alive "$B"; then  # B refused to start (exit 2: service or broker unreachable)
    wait "$B" && st=0 || st=$?
    b_restarts_refused=$((b_restarts_refused + 1))
    echo "=== exit $st at $t s, started again ===" >>"$out/B.log"
    start_enrichment B; B=$!
    log "enrichment B had ended (exit $st), started again as pid $B"
  fi
  sleep 1
done
wait "$P" && p_status=0 || p_status=$?
[ "$svc_pid" -eq 0 ] && { start_service "$svc_port" "$out/service.log"; log "enrichment service back, pid $svc_pid"; }
sample
elapsed=$(now)
# 60 s: a SIGKILLed member's partitions move on after its session timeout (10 s in the
# Kafka mode), and the last messages take a few batches.
log "input done after $elapsed s (producer exit $p_status: $(cat "$out/producer.json")); waiting 60 s"
sleep 60
sample
heap_stats "$A" end
kill -TERM "$A" "$B" 2>/dev/null || true
wait "$A" && a_status=0 || a_status=$?
wait "$B" && b_status=0 || b_status=$?
[ -n "$a_died" ] && a_status="$a_died"
log "enrichment A exit $a_status, B exit $b_status"
kill -TERM "$svc_pid"; wait "$svc_pid" || true

tool dump-positions "$brokers" keys >"$out/keys.txt"
tool dump "$brokers" enriched >"$out/enriched.jsonl"
"$root/scripts/kafka" stop >>"$out/broker.log" 2>&1 || true
# The expected answers: one request with every distinct key to a fresh service.
start_service $((svc_port + 1)) "$out/fresh_service.log"
python3 - "http://127.0.0.1:$((svc_port + 1))/enrich" "$out/expected.json" "${keys[@]}" <<'PY'
import json, sys, urllib.request
url, dst, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
req = urllib.request.Request(url, json.dumps(keys).encode(), {'Content-Type': 'application/json'})
vals = json.load(urllib.request.urlopen(req, timeout=10))
json.dump(dict(zip(keys, vals)), open(dst, 'w'))
PY
kill -TERM "$svc_pid"; wait "$svc_pid" || true

python3 "$root/bench/soak/check_enrich.py" "$out" "$dur_text" "$elapsed" "$svc_kills" "$broker_restarts" \
        "$kills" "$b_restarts_refused" "$a_status" "$b_status"
