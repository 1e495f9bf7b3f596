#!/usr/bin/env python3
"""bench/soak_enrich.sh's check: every input message enriched, RSS, counters, error lines.

check_enrich.py OUT DURATION ELAPSED_S SERVICE_KILLS BROKER_RESTARTS B_KILLS B_REFUSED A_EXIT B_EXIT
reads OUT/keys.txt ("PARTITION OFFSET VALUE" per input message), OUT/enriched.jsonl (the
output values {"key","enriched","partition","offset"}), OUT/expected.json (the fresh
service's answer per key), OUT/producer.json, OUT/rss.csv, OUT/{A,B}.json (the Kafka
mode's summary lines) and OUT/{A,B,service,producer}.log; prints one Markdown table row
(with its header), A's heap snapshots (malloc_stats blocks in A.log), the enrich counters
of A and B, and the error lines grouped (numbers as #). Writes the positions of missing and wrong rows to OUT/missing.txt and OUT/wrong.txt.
Exit 0 when nothing is missing and no row is wrong or names an input that does not exist.
"""
import collections, csv, json, re, sys
out, dur, elapsed, svc_kills, restarts, kills, refused, a_st, b_st = sys.argv[1:]
expected = json.load(open(f'{out}/expected.json'))
inputs = {}  # (partition << 40 | offset) -> lookup key
for l in open(f'{out}/keys.txt'):
    p, o, v = l.rstrip('\n').split(' ', 2)
    inputs[int(p) << 40 | int(o)] = v
seen = collections.Counter()
wrong, extra, rows = [], 0, 0
for l in open(f'{out}/enriched.jsonl'):
    if not l.strip(): continue
    r = json.loads(l)
    rows += 1
    pos = r['partition'] << 40 | r['offset']
    v = inputs.get(pos)
    if v is None:
        extra += 1
        continue
    seen[pos] += 1
    if r['key'] != v or r['enriched'] != expected.get(v, '<no expectation>'):
        wrong.append(f"{r['partition']} {r['offset']} {l.strip()}")
missing = [pos for pos in inputs if pos not in seen]
dups = sum(n - 1 for n in seen.values())
with open(f'{out}/missing.txt', 'w') as f:
    for pos in sorted(missing): f.write(f'{pos >> 40} {pos & ((1 << 40) - 1)} {inputs[pos]}\n')
open(f'{out}/wrong.txt', 'w').write(''.join(w + '\n' for w in wrong))
prod = json.load(open(f'{out}/producer.json')) if open(f'{out}/producer.json').read().strip() else {}

rss = list(csv.DictReader(open(f'{out}/rss.csv')))
def at(t, col='A_rss_kb'):
    best = min(rss, key=lambda r: abs(int(r['t_s']) - t))
    return int(best[col]), int(best['t_s'])
a5, t5 = at(300)
last = [r for r in rss if int(r['A_rss_kb']) > 0][-1]
aend, tend = int(last['A_rss_kb']), int(last['t_s'])
# RssAnon: the process's own memory, without the library pages its code faults in later.
n5 = at(300, 'A_anon_kb')[0] if 'A_anon_kb' in rss[0] else 0
nend = int(last.get('A_anon_kb') or 0)
anon = f"{n5 / 1024:.1f} -> {nend / 1024:.1f} MiB ({(nend - n5) / n5 * 100:+.1f}%)" if n5 else "-"
svc_peak = max(int(r['service_rss_kb']) for r in rss)

# A's heap snapshots (soak_enrich.sh heap_stats): label -> (RSS kB, arena bytes, in use bytes)
heap, label, in_total = {}, None, False
for l in open(f'{out}/A.log', errors='replace'):
    m = re.match(r'=== heap (.*) at \d+ s, RSS (\d+) kB ===', l)
    if m:
        label, in_total = m.group(1), False
        heap[label] = [int(m.group(2)), None, None]
    elif label and l.startswith('Total (incl. mmap):'):
        in_total = True
    elif label and in_total and (m := re.match(r'(system|in use) bytes\s*=\s*(\d+)', l)):
        heap[label][1 if m.group(1) == 'system' else 2] = int(m.group(2))
malloc_line = re.compile(r'^(Arena \d+:|system bytes|in use bytes|Total \(incl\. mmap\):|max mmap)')

def summaries(name):
    s = []
    for l in open(f'{out}/{name}.json', errors='replace'):
        if l.startswith('{'): s.append(json.loads(l))
    return s
counters = ('consumed', 'delivered', 'requests', 'retries', 'failed_batches', 'enrich_failed', 'timeouts',
            'timeout_unknown', 'failed_unsent', 'expired_unsent', 'held', 'delivery_failed', 'commits')

errs = collections.Counter()
for name in ('A', 'B', 'service', 'producer'):
    try:
        for l in open(f'{out}/{name}.log', errors='replace'):
            l = l.strip()
            if not l or l.startswith('{') or l.startswith('===') or 'enrichment: progress' in l: continue
            if l.startswith('enrichment_service: stats') or malloc_line.match(l): continue
            errs[(name, re.sub(r'\d+', '#', l)[:200])] += 1
    except FileNotFoundError:
        pass

print(f"| duration | produced (acked, failed) | service SIGKILLs | broker restarts | SIGKILLs of B | input records checked | output rows | duplicates | wrong | missing | extra | A RSS at {t5} s -> end ({tend} s) | A RssAnon | service peak RSS | A, B exit |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {dur} ({elapsed} s) | {prod.get('sent', '?')} ({prod.get('acked', '?')}, {prod.get('failed', '?')}) | {svc_kills} | {restarts} | {kills} (+{refused} refused starts) | {len(inputs)} | {rows} | {dups} | {len(wrong)} | {len(missing)} | {extra} | {a5 / 1024:.1f} -> {aend / 1024:.1f} MiB ({(aend - a5) / a5 * 100:+.1f}%) | {anon} | {svc_peak / 1024:.1f} MiB | {a_st}, {b_st} |")
print()
if heap:
    print("A's heap (glibc malloc_stats through gdb):")
    print("| when | RSS | arenas (system bytes) | in use |")
    print("|---|---|---|---|")
    for k, (r, sysb, used) in heap.items():
        mib = lambda b: f'{b / 1048576:.1f} MiB' if b is not None else '?'
        print(f"| {k} | {r / 1024:.1f} MiB | {mib(sysb)} | {mib(used)} |")
    print()
print("Kafka mode summaries (A, then each run of B that ended with one):")
print('| process | ' + ' | '.join(counters) + ' |')
print('|---' * (len(counters) + 1) + '|')
for name in ('A', 'B'):
    for s in summaries(name):
        print(f'| {name} | ' + ' | '.join(str(s.get(c, '')) for c in counters) + ' |')
print()
print("error lines (process, line with numbers as #, count):")
for (name, l), n in sorted(errs.items(), key=lambda x: -x[1]):
    print(f"  {name} x{n}: {l}")
json.dump({'missing': len(missing), 'wrong': len(wrong), 'extra': extra, 'duplicates': dups},
          open(f'{out}/check.json', 'w'))
sys.exit(0 if not missing and not wrong and extra == 0 else 1)
