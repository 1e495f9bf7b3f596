#!/usr/bin/env bash
# bench/pipeline_before_after.sh — the in-memory pipeline benchmarks of two builds, side by
# side in one run: BM_pipeline_stages (source -> sink, + map, + flat_map, + window_sort,
# rebalance; 1 and 2 workers) and BM_pipeline_in_memory. Each run is its own process with
# one repetition; within a round the two builds alternate and the order flips every round.
# Every run checks its own record count and checksum (a failed check is an error row).
# Table (Markdown, stdout): per case the median ns/record of each build and new/base; a
# chart of the same (python3-matplotlib) in $PNG, default bench/pipeline_before_after.png.
#
#   BASE=/work/wt-base/build NEW=build ROUNDS=7 bench/pipeline_before_after.sh
#   env: BASE NEW (build dirs with bench/pipeline_bench), ROUNDS (5),
#        FILTER (benchmark regex, default 'stages|in_memory'), PNG (chart path),
#        PIN (a prefix for every run, e.g. 'taskset -c 0,1'; default none)
# A case the new build has under NAME_acked and the base under NAME (a variant added by
# the new build) is compared with the base's NAME, in a row of its own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
png=${PNG:-$root/bench/pipeline_before_after.png}
base=${BASE:?BASE=build dir of the base commit}
new=${NEW:-build}
rounds=${ROUNDS:-5}
filter=${FILTER:-stages|in_memory}
for b in "$base" "$new"; do [ -x "$b/bench/pipeline_bench" ] || { echo "missing $b/bench/pipeline_bench" >&2; exit 1; }; done
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
run() {  # build label round
  ${PIN:-} "$1/bench/pipeline_bench" --benchmark_filter="$filter" --benchmark_out="$results/$2.$3.json" \
    --benchmark_out_format=json >/dev/null 2>&1 ||
    echo "pipeline_before_after: $2 round $3 failed" >&2
}
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  if ((r % 2)); then run "$base" base "$r"; run "$new" new "$r"; else run "$new" new "$r"; run "$base" base "$r"; fi
done
# Debian's python3 (python3-matplotlib is installed for it, not for a pyenv one on PATH).
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$py" - "$results" "$png" "$rounds" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    label = f.split('.')[0]
    for b in json.load(open(os.path.join(d, f)))['benchmarks']:
        name = b['name'].replace('/process_time', '')  # the same case, CPU time of all threads or not
        if b.get('error_occurred'):
            rows.setdefault(name, {}).setdefault(label + '_err', []).append(1)
            continue
        ns = b['ns_per_record'] * 1e9 if 'ns_per_record' in b else 1e9 / b['items_per_second']
        rows.setdefault(name, {}).setdefault(label, []).append(ns)
chart = []
print('| case | base ns/record | new ns/record | new/base |')
print('|---|---:|---:|---:|')
for name in list(rows):
    v = rows[name]
    if 'base' not in v and 'new' in v and '_acked' in name:
        b = rows.get(name.replace('_acked', ''), {})
        if 'base' in b:
            v['base'] = b['base']
for name, v in rows.items():
    if 'base' not in v or 'new' not in v:
        print(f'| {name} | error | error | |'); continue
    mb, mn = statistics.median(v['base']), statistics.median(v['new'])
    print(f'| {name} | {mb:.0f} | {mn:.0f} | {mn / mb:.3f} |')
    chart.append((name.replace('/real_time', ''), mb, mn))
try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(chart) + 1.2))
    y = range(len(chart))
    ax.barh([i + 0.2 for i in y], [c[1] for c in chart], height=0.4, color='#999999', label='base')
    ax.barh([i - 0.2 for i in y], [c[2] for c in chart], height=0.4, color='#1f77b4', label='new')
    for i, c in enumerate(chart):
        ax.text(max(c[1], c[2]), i, f' {c[2] / c[1]:.3f}', va='center', fontsize=7)
    ax.set_yticks(list(y))
    ax.set_yticklabels([c[0] for c in chart], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel('ns/record, median (lower is better); new/base at the bar end')
    ax.set_title(f'pipeline_bench: base vs new, {sys.argv[3]} alternating rounds', fontsize=9)
    ax.set_xlim(0, max(max(c[1], c[2]) for c in chart) * 1.12)
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
except ImportError:
    print('(python3-matplotlib missing: no chart)', file=sys.stderr)
PY
