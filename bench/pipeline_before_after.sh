#!/usr/bin/env bash
# bench/pipeline_before_after.sh — the in-memory pipeline benchmarks of two builds, side by
# side in one run: BM_pipeline_stages (source -> sink, + map, + flat_map, + window_sort,
# rebalance; 1 and 2 workers) and BM_pipeline_in_memory. Each run is its own process with
# one repetition; within a round the two builds alternate and the order flips every round.
# Every run checks its own record count and checksum (a failed check is an error row).
# Table (Markdown, stdout): per case the median ns/record of each build and new/base.
#
#   BASE=/work/wt-base/build NEW=build ROUNDS=7 bench/pipeline_before_after.sh
#   env: BASE NEW (build dirs with bench/pipeline_bench), ROUNDS (5),
#        FILTER (benchmark regex, default 'stages|in_memory')
set -euo pipefail
base=${BASE:?BASE=build dir of the base commit}
new=${NEW:-build}
rounds=${ROUNDS:-5}
filter=${FILTER:-stages|in_memory}
for b in "$base" "$new"; do [ -x "$b/bench/pipeline_bench" ] || { echo "missing $b/bench/pipeline_bench" >&2; exit 1; }; done
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
run() {  # build label round
  "$1/bench/pipeline_bench" --benchmark_filter="$filter" --benchmark_out="$results/$2.$3.json" \
    --benchmark_out_format=json >/dev/null 2>&1 ||
    echo "pipeline_before_after: $2 round $3 failed" >&2
}
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  if ((r % 2)); then run "$base" base "$r"; run "$new" new "$r"; else run "$new" new "$r"; run "$base" base "$r"; fi
done
python3 - "$results" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    label = f.split('.')[0]
    for b in json.load(open(os.path.join(d, f)))['benchmarks']:
        if b.get('error_occurred'):
            rows.setdefault(b['name'], {}).setdefault(label + '_err', []).append(1)
            continue
        ns = b['ns_per_record'] * 1e9 if 'ns_per_record' in b else 1e9 / b['items_per_second']
        rows.setdefault(b['name'], {}).setdefault(label, []).append(ns)
print('| case | base ns/record | new ns/record | new/base |')
print('|---|---:|---:|---:|')
for name, v in rows.items():
    if 'base' not in v or 'new' not in v:
        print(f'| {name} | error | error | |'); continue
    mb, mn = statistics.median(v['base']), statistics.median(v['new'])
    print(f'| {name} | {mb:.0f} | {mn:.0f} | {mn / mb:.3f} |')
PY
