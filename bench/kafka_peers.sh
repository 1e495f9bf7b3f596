#!/usr/bin/env bash
# bench/kafka_peers.sh — rill vs its peers on one real Kafka broker (issue 5), run by hand
# (not part of the tests: it needs the Kafka Streams jars from Maven).
#
# Part 1, consume -> map -> produce (RECORDS x 100-byte values, 4 partitions, one input topic
# for every peer, a fresh output topic and consumer group per run):
#   raw          librdkafka loop (bench/kafka_bench)
#   rill/1 rill/2  kafka_source -> map -> kafka_sink on 1 and 2 workers (bench/kafka_bench)
#   kstreams/1   Kafka Streams 4.1.1 (bench/kafka-streams Map: 1 stream thread, at-least-once,
#                one unmeasured warm-up run in the same JVM first, so its JIT is warm)
# PRIME=1 (default): kafka_bench --prime 1, the C++ peers' producers deliver one record to
# their output topic before the clock (librdkafka's first delivery to a topic it has not seen
# takes about 1 s; Kafka Streams' Java producer has no such delay); PRIME=0 leaves it in.
# ROUNDS rounds, peers interleaved (the Kafka Streams peer goes first in even rounds; each C++
# peer runs in its own process, their order rotating by round); each
# run's count and checksum are verified; the table gives the median and best records/s,
# the median CPU seconds per million records (user+sys of the peer's process over the timed
# interval: first consumed record -> N-th acknowledged delivery) and ratios to raw.
#
# Part 2, netflow's Kafka -> Kafka job vs the Kafka Streams FlowCount on one probe topic:
#   netflow --probe -i PCAP --topic P       the packets, keyed by 5-tuple (4 partitions)
#   netflow --from P --to F --window W --max-delay D --idle-exit 3s -w 1
#   FlowCount --in P --out F --window-ms W --grace-ms D --idle-exit-ms 3000 --threads 1
#   FlowCount ... --warmup 1                the same after one unmeasured run in the same JVM
# ROUNDS rounds, interleaved. Each is timed from outside with /usr/bin/time: records/s =
# packets / (wall - 3 s idle exit); CPU = user+sys of the whole process (start-up, group
# join, the idle wait and, for Kafka Streams, the JVM's start-up included); FlowCount also
# reports its in-process records/s and CPU from the first record to the end of close() (the
# only numbers of the warm peer, whose process ran the job twice). All outputs are
# read back: packets, bytes and conversations must equal PCAP's ground truth (NAME.truth.json),
# every 5-tuple's totals must equal the truth's, and the per-(window, 5-tuple) counts of all
# runs of a round must be equal. (netflow's kafka_sink is not primed: it pays librdkafka's
# 1 s first-delivery delay, inside its numbers.)
#
# EOS=1: part 2 runs at-least-once against exactly-once instead, three peers:
#   rill          netflow --from P --to F ... (at-least-once, as above)
#   rill-eos      the same with --exactly-once --instance 1 (rows and input offsets commit in
#                 Kafka transactions; netflow holds the rows until the input ends)
#   kstreams-eos  FlowCount ... --eos 1 (exactly_once_v2, commit interval 100 ms), a cold JVM
# their order rotating by round, timed and checked as above. Every output is read back with
# isolation.level=read_committed (Tool flows always reads so: committed rows only). The
# summary adds records/s ratios rill-eos / kstreams-eos and rill-eos / rill, and counts the
# Kafka Streams producer's OUT_OF_ORDER_SEQUENCE_NUMBER warnings per run (oos=N).
# KS_PRODUCER_CONFIG=k=v,k=v adds producer properties to every FlowCount run (--producer-config).
#
#   RILL_KAFKA_PORT=49092 scripts/kafka start
#   bench/kafka_peers.sh   # env: BROKERS BUILD RECORDS ROUNDS PRIME CONSUMER_CONFIG PARTS PCAP WINDOW_MS DELAY_MS
#                          #      KS_STORE WORK EOS KS_PRODUCER_CONFIG
#   EOS=1 PARTS=flows bench/kafka_peers.sh   # netflow at-least-once vs exactly-once vs FlowCount exactly_once_v2
#   RILL_KAFKA_PORT=49092 scripts/kafka stop
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
brokers=${BROKERS:-127.0.0.1:49092}
build=${BUILD:-$root/build-h3}
records=${RECORDS:-200000}
rounds=${ROUNDS:-3}
prime=${PRIME:-1}
parts=${PARTS:-map flows}  # which parts to run
# extra librdkafka consumer properties for the C++ map peers (kafka_bench --consumer-config),
# e.g. CONSUMER_CONFIG=queued.min.messages=1000000 (see RESULTS.md: librdkafka 2.0.2's default
# throttles a consume -> produce loop over 1 M records)
consumer_config=${CONSUMER_CONFIG:-}
pcap=${PCAP:-$root/../shared/data/pcap/echo-connections.pcap}
window_ms=${WINDOW_MS:-1000}
# max delay (Kafka Streams: grace), the same for both jobs. Kept above the capture's span
# (6.5 s for echo-connections) from when netflow's watermark followed the largest time over
# all the partitions a worker read (a partition read ahead made the others' packets late).
# Since 952451d the watermark is per partition and netflow drops none at its default 2 s
# either (tests/kafka NetflowKafka.RealCaptureDefaultDelayNothingLateAcrossPartitions).
delay_ms=${DELAY_MS:-10000}
ks_store=${KS_STORE:-rocksdb}  # FlowCount's window store: rocksdb (Kafka Streams' default) or memory
eos=${EOS:-0}  # part 2: 1 = netflow at-least-once vs exactly-once vs FlowCount exactly_once_v2
ks_producer_config=${KS_PRODUCER_CONFIG:-}
ks=$root/bench/kafka-streams
cp="$ks/target/rill-kafka-streams-bench.jar:$ks/target/lib/*"
tag=$(date +%s)-$$
work=${WORK:-/tmp/kafka_peers-$tag}
mkdir -p "$work"

die() { echo "kafka_peers: $*" >&2; exit 1; }
[ -x "$build/bench/kafka_bench" ] || die "$build/bench/kafka_bench missing (ninja -C $build kafka_bench netflow)"
if [[ " $parts " == *" flows "* ]]; then  # part 2 only (PARTS=map needs just kafka_bench)
  [ -x "$build/examples/netflow/netflow" ] || die "$build/examples/netflow/netflow missing"
  [ -f "$pcap.truth.json" ] || die "$pcap.truth.json missing"
fi
if [ ! -f "$ks/target/rill-kafka-streams-bench.jar" ]; then
  (cd "$ks" && mvn -B -q package) || die "mvn package in $ks failed"
fi
java -cp "$cp" dev.rill.bench.Tool ping --brokers "$brokers" >/dev/null 2>&1 ||
  die "no broker answers on $brokers (RILL_KAFKA_PORT=${brokers##*:} scripts/kafka start)"
tool() { java -cp "$cp" dev.rill.bench.Tool "$@"; }
nf=$build/examples/netflow/netflow

echo "kafka_peers: $(date -u +%FT%TZ), broker $brokers, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), work dir $work"

status=0
# ---------------- part 1: consume -> map -> produce ----------------
if [[ " $parts " == *" map "* ]]; then
in=peers-in-$tag
"$build/bench/kafka_bench" --brokers "$brokers" --make-input "$in" --records "$records"
results=$work/map.results
: >"$results"
# Each C++ peer in a process of its own (one process running raw, then rill/1, then rill/2
# handed each peer the heap and threads the one before it left), in an order that rotates
# by round, so no peer always runs right after the same other one.
run_one() { "$build/bench/kafka_bench" --brokers "$brokers" --in "$in" --records "$records" --runs 1 --prime "$prime" \
              --peers "$1" ${consumer_config:+--consumer-config "$consumer_config"} 2>&1 >/dev/null |
              tee -a "$work/map.log" | grep '^RESULT' >>"$results" || true; }
cpp_peers=(raw rill/1 rill/2)
run_cpp() { for i in 0 1 2; do run_one "${cpp_peers[$(( ($1 + i) % 3 ))]}"; done; }
run_ks() { java -cp "$cp" dev.rill.bench.Map --brokers "$brokers" --in "$in" --records "$records" \
             --threads 1 --warmup 1 --runs 1 --tag "$tag-$1" 2>&1 | tee -a "$work/map.log" | grep '^RESULT' >>"$results" || true; }
for r in $(seq "$rounds"); do
  echo "kafka_peers: map round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ $((r % 2)) -eq 1 ]; then run_cpp "$r"; run_ks "$r"; else run_ks "$r"; run_cpp "$r"; fi
done
python3 - "$results" "$records" "$rounds" <<'EOF' || status=1
import re, statistics, sys
path, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = {}
for line in open(path):
    d = dict(kv.split("=") for kv in line.split()[1:])
    runs.setdefault(d["peer"], []).append(d)
order = ["raw", "rill/1", "rill/2", "kstreams/1"]
stat = {}
print(f"\nconsume -> map -> produce, {n} records x 100 B, 4 partitions, {rounds} rounds interleaved")
print(f"{'peer':<11} {'runs ok':>7} {'median rec/s':>13} {'best rec/s':>11} {'median cpu s/M':>15} {'median/raw':>10} {'cpu/raw':>8}")
for p in order:
    rs = runs.get(p, [])
    ok = [r for r in rs if r["ok"] == "1"]
    if not ok:
        print(f"{p:<11} {len(ok)}/{len(rs)}  (no verified run)"); continue
    rate = [n / float(r["seconds"]) for r in ok]
    cpu = [float(r["cpu"]) * 1e6 / n for r in ok]
    stat[p] = (statistics.median(rate), max(rate), statistics.median(cpu))
for p in order:
    if p not in stat: continue
    m, b, c = stat[p]
    base = stat.get("raw")
    ratio = f"{m / base[0]:10.2f} {c / base[2]:8.2f}" if base else ""
    print(f"{p:<11} {sum(r['ok'] == '1' for r in runs[p])}/{len(runs[p])}     {m:13,.0f} {b:11,.0f} {c:15.2f} {ratio}")
for p in ("rill/1", "rill/2"):
    if p in stat and "kstreams/1" in stat:
        print(f"{p} / kstreams/1: records/s x{stat[p][0] / stat['kstreams/1'][0]:.2f}, cpu per record x{stat[p][2] / stat['kstreams/1'][2]:.2f}")
bad = sum(r["ok"] != "1" for rs in runs.values() for r in rs)
if bad: print(f"{bad} run(s) FAILED verification"); sys.exit(1)
EOF

fi

# ---------------- part 2: netflow Kafka -> Kafka vs Kafka Streams FlowCount ----------------
if [[ " $parts " == *" flows "* ]]; then
packets=nf-packets-$tag
# retention.ms=-1: the probe stamps each message with its capture time (2021 here), so with
# the broker's default 7-day retention the next retention check (every 5 min) deletes them all
tool create --brokers "$brokers" --topic "$packets" --partitions 4 --config retention.ms=-1
"$nf" --probe -i "$pcap" --brokers "$brokers" --topic "$packets" 2>"$work/probe.log" || { cat "$work/probe.log"; die "probe failed"; }
published=$(tool count --brokers "$brokers" --topic "$packets")
echo "kafka_peers: probe: $(tail -1 "$work/probe.log"); topic $packets holds $published records"
flows=$work/flows.results
: >"$flows"
# $2 = 1: --exactly-once (peer rill-eos; a group and so a transactional id of its own per run)
run_rill_nf() {
  local peer=rill eos_args=(); [ "${2:-0}" = 1 ] && { peer=rill-eos; eos_args=(--exactly-once --instance 1); }
  local out=nf-flows-$peer-$tag-$1
  tool create --brokers "$brokers" --topic "$out" --partitions 4 --config retention.ms=-1  # rows carry 2021 window times too
  /usr/bin/time -f "TIME %e %U %S" -o "$work/time.txt" "$nf" --brokers "$brokers" --from "$packets" --to "$out" \
    --group "nf-$peer-$tag-$1" --window "${window_ms}ms" --max-delay "${delay_ms}ms" --idle-exit 3s -w 1 "${eos_args[@]}" \
    2>"$work/nf-$peer-$1.log" || { cat "$work/nf-$peer-$1.log"; echo "kafka_peers: netflow run $1 ($peer) failed" >&2; }
  tool flows --brokers "$brokers" --topic "$out" --mode sum --dump "$work/$peer-$1.cells" >"$work/$peer-$1.totals"
  echo "$peer $1 $(cat "$work/time.txt") $(cat "$work/$peer-$1.totals") SUMMARY $(tail -1 "$work/nf-$peer-$1.log")" | tee -a "$flows"
}
# $2 = 0: a cold JVM (the whole process is timed); $2 = 1: FlowCount --warmup 1 first runs the
# job once in the same JVM, and only its in-process numbers of the second run count.
# $3 = 1: --eos 1 (peer kstreams-eos, a cold JVM)
run_ks_nf() {
  local peer=kstreams; [ "$2" = 1 ] && peer=kstreams-warm; [ "${3:-0}" = 1 ] && peer=kstreams-eos
  local out=nf-flows-$peer-$tag-$1
  tool create --brokers "$brokers" --topic "$out" --partitions 4 --config retention.ms=-1  # rows carry 2021 window times too
  /usr/bin/time -f "TIME %e %U %S" -o "$work/time.txt" java -cp "$cp" dev.rill.bench.FlowCount --brokers "$brokers" \
    --in "$packets" --out "$out" --app-id "ks-flows-$peer-$tag-$1" --window-ms "$window_ms" --grace-ms "$delay_ms" \
    --idle-exit-ms 3000 --threads 1 --store "$ks_store" --warmup "$2" --eos "${3:-0}" \
    ${ks_producer_config:+--producer-config "$ks_producer_config"} >"$work/$peer-$1.log" 2>&1 ||
    { cat "$work/$peer-$1.log"; echo "kafka_peers: FlowCount run $1 ($peer) failed" >&2; }
  tool flows --brokers "$brokers" --topic "$out" --mode latest --dump "$work/$peer-$1.cells" >"$work/$peer-$1.totals"
  local oos; oos=$(grep -c OUT_OF_ORDER_SEQUENCE_NUMBER "$work/$peer-$1.log" || true)
  echo "$peer $1 $(cat "$work/time.txt") $(cat "$work/$peer-$1.totals") oos=$oos SUMMARY $(grep '^FLOWCOUNT' "$work/$peer-$1.log")" | tee -a "$flows"
}
nf_peers=(rill rill-eos kstreams-eos)
run_nf_peer() {
  case $2 in
    rill) run_rill_nf "$1" 0 ;;
    rill-eos) run_rill_nf "$1" 1 ;;
    kstreams-eos) run_ks_nf "$1" 0 1 ;;
  esac
}
for r in $(seq "$rounds"); do
  echo "kafka_peers: netflow round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ "$eos" = 1 ]; then  # the order rotates by round: each peer goes first once in 3 rounds
    for i in 0 1 2; do run_nf_peer "$r" "${nf_peers[$(( (r - 1 + i) % 3 ))]}"; done
  elif [ $((r % 2)) -eq 1 ]; then run_rill_nf "$r"; run_ks_nf "$r" 0; run_ks_nf "$r" 1
  else run_ks_nf "$r" 1; run_ks_nf "$r" 0; run_rill_nf "$r"; fi
done
python3 - "$flows" "$pcap.truth.json" "$work" "$published" <<'EOF' || status=1
import json, re, statistics, sys
path, truth_path, work, published = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
truth = json.load(open(truth_path))
# a conversation: protocol and the unordered endpoint pair (netflow orders the endpoints by
# address and port, the truth file as text)
def conv_key(proto, a, b): return (proto,) + tuple(sorted((a, b)))
per_conv = {conv_key(c["proto"], c["a"], c["b"]): (c["packets"], c["bytes"]) for c in truth["conversations"]}
n = truth["packets"] - truth["non_ip"]
bad = 0
if published != truth["packets"]:
    print(f"probe topic holds {published} records, truth {truth['packets']} packets"); bad += 1
def cells(f):
    out = {}
    for line in open(f):
        w, proto, a, b, p, by = line.split()
        out[(w, conv_key(proto, a, b))] = (int(p), int(by))
    return out
rows = []
for line in open(path):
    peer, r, _, wall, user, sys_, *rest = line.split()
    kv = dict(x.split("=", 1) for x in rest if "=" in x and not x.startswith("{"))
    c = cells(f"{work}/{peer}-{r}.cells")
    conv = {}
    for (w, k), (p, by) in c.items():
        s = conv.setdefault(k, [0, 0]); s[0] += p; s[1] += by
    ok = (int(kv["packets"]) == n and int(kv["bytes"]) == truth["bytes"] and int(kv["conversations"]) == len(per_conv)
          and all(tuple(conv.get(k, (0, 0))) == v for k, v in per_conv.items()))
    x = dict(peer=peer, r=r, wall=float(wall), cpu=float(user) + float(sys_), ok=ok, cells=c,
             out_rows=int(kv["rows"]), ncells=int(kv["cells"]), in_rate=None, in_cpu=None)
    if peer.startswith("rill"):
        m = re.search(r'"late":(\d+)', line); x["extra"] = f"late={m.group(1) if m else '?'}"
        x["ext_rate"], x["ext_cpu"] = n / max(x["wall"] - 3, 1e-3), x["cpu"] * 1e6 / n
    else:
        m = re.search(r"dropped=(\d+) seconds=([\d.]+) cpu=([\d.]+)", line)
        x["extra"] = f"dropped={m.group(1)} oos={kv.get('oos', '?')}"
        x["in_rate"], x["in_cpu"] = n / float(m.group(2)), float(m.group(3)) * 1e6 / n
        # the warm peer's process ran the job twice: only its in-process numbers count
        x["ext_rate"], x["ext_cpu"] = (None, None) if peer == "kstreams-warm" else (n / max(x["wall"] - 3, 1e-3), x["cpu"] * 1e6 / n)
    rows.append(x)
    if not ok: bad += 1
f = lambda v, fmt: format(v, fmt) if v is not None else "-"
print(f"\nnetflow Kafka -> Kafka vs Kafka Streams FlowCount: {n} packets, truth {truth['bytes']} bytes, {len(per_conv)} conversations")
print("whole process (/usr/bin/time; records/s over wall - 3 s idle exit) | in-process (first record -> end of close)")
print(f"{'peer':<14} {'round':>5} {'wall s':>7} {'rec/s':>8} {'cpu s/M':>8} | {'rec/s':>8} {'cpu s/M':>8} | {'rows':>5} {'cells':>5} {'truth':>5}  notes")
for x in rows:
    print(f"{x['peer']:<14} {x['r']:>5} {x['wall']:7.2f} {f(x['ext_rate'], ',.0f'):>8} {f(x['ext_cpu'], '.2f'):>8} | "
          f"{f(x['in_rate'], ',.0f'):>8} {f(x['in_cpu'], '.2f'):>8} | {x['out_rows']:5} {x['ncells']:5} {'ok' if x['ok'] else 'BAD':>5}  {x['extra']}")
med = {}
for p in ("rill", "rill-eos", "kstreams", "kstreams-warm", "kstreams-eos"):
    xs = [x for x in rows if x["peer"] == p]
    if not xs: continue
    md = lambda k: statistics.median(x[k] for x in xs) if xs[0][k] is not None else None
    med[p] = {k: md(k) for k in ("ext_rate", "ext_cpu", "in_rate", "in_cpu")}
    print(f"{p:<14} median: whole process {f(med[p]['ext_rate'], ',.0f')} records/s, {f(med[p]['ext_cpu'], '.2f')} CPU s/M; "
          f"in-process {f(med[p]['in_rate'], ',.0f')} records/s, {f(med[p]['in_cpu'], '.2f')} CPU s/M")
if "rill" in med and "kstreams" in med:
    print(f"rill / kstreams (both whole process): records/s x{med['rill']['ext_rate'] / med['kstreams']['ext_rate']:.2f}, "
          f"CPU per record x{med['rill']['ext_cpu'] / med['kstreams']['ext_cpu']:.3f}")
if "rill" in med and "kstreams-warm" in med:
    print(f"rill (whole process) / kstreams-warm (in-process): records/s x{med['rill']['ext_rate'] / med['kstreams-warm']['in_rate']:.2f}, "
          f"CPU per record x{med['rill']['ext_cpu'] / med['kstreams-warm']['in_cpu']:.3f}")
if "rill-eos" in med and "kstreams-eos" in med:
    print(f"rill-eos / kstreams-eos (both whole process): records/s x{med['rill-eos']['ext_rate'] / med['kstreams-eos']['ext_rate']:.2f} (goal >= 2), "
          f"CPU per record x{med['rill-eos']['ext_cpu'] / med['kstreams-eos']['ext_cpu']:.3f}; "
          f"against kstreams-eos in-process: records/s x{med['rill-eos']['ext_rate'] / med['kstreams-eos']['in_rate']:.2f}")
if "rill-eos" in med and "rill" in med:
    print(f"rill-eos / rill (whole process): records/s x{med['rill-eos']['ext_rate'] / med['rill']['ext_rate']:.2f} (goal >= 0.8), "
          f"CPU per record x{med['rill-eos']['ext_cpu'] / med['rill']['ext_cpu']:.3f}")
for r in sorted({x["r"] for x in rows}):
    group = [x for x in rows if x["r"] == r]
    same = all(x["cells"] == group[0]["cells"] for x in group)
    print(f"round {r}: per-(window, 5-tuple) counts of {', '.join(x['peer'] for x in group)} {'equal' if same else 'DIFFER'} ({len(group[0]['cells'])} cells)")
    if not same: bad += 1
if bad: print(f"{bad} check(s) FAILED"); sys.exit(1)
EOF
fi
echo "kafka_peers: done $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), exit $status"
exit $status
