#!/usr/bin/env python3
"""bench/soak.sh's check: netflow's Kafka-mode rows against file mode's, RSS, error lines.

compare.py OUT DURATION ELAPSED_S LOOPS BROKER_RESTARTS KILLS PROBE_FAILURES A_EXIT B_EXIT
reads OUT/file_rows.jsonl, OUT/kafka_rows.jsonl, OUT/rss.csv and OUT/{A,B,probe}.log,
prints one Markdown table row (with its header) and the error lines grouped (numbers as
#). A (window, conversation) is identified by window_start_ns, proto and both endpoints;
a file-mode row is missing when no Kafka row of it has at least its packet count.
Exit 0 when nothing is missing and no Kafka row names a (window, conversation) file mode
does not have.
"""
import collections, csv, json, re, sys
out, dur, elapsed, loops, restarts, kills, pfail, a_st, b_st = sys.argv[1:]
def key(r): return (r['window_start_ns'], r['proto'], r['a_ip'], r['a_port'], r['b_ip'], r['b_port'])
file_rows = [json.loads(l) for l in open(f'{out}/file_rows.jsonl') if l.strip()]
kafka_rows = [json.loads(l) for l in open(f'{out}/kafka_rows.jsonl') if l.strip()]
want = {key(r): r['packets'] for r in file_rows}
got = collections.defaultdict(list)
for r in kafka_rows: got[key(r)].append(r['packets'])
exact = sum(1 for k, n in want.items() if n in got.get(k, []))
over = sum(1 for k, n in want.items() if got.get(k) and max(got[k]) > n)
missing = sum(1 for k, n in want.items() if not got.get(k) or max(got[k]) < n)
extra = sum(1 for k in got if k not in want)
dups = len(kafka_rows) - len(got)
file_packets = next((json.loads(l).get('packets') for l in reversed(open(f'{out}/file_summary.json').readlines())
                     if l.startswith('{')), '?')
rss = list(csv.DictReader(open(f'{out}/rss.csv')))
def at(t, col='A_rss_kb'):
    best = min(rss, key=lambda r: abs(int(r['t_s']) - t))
    return int(best[col]), int(best['t_s'])
a5, t5 = at(300)
aend, tend = int(rss[-1]['A_rss_kb']), int(rss[-1]['t_s'])
# RssAnon: the process's own memory, without the library pages its code faults in later.
n5 = at(300, 'A_anon_kb')[0] if 'A_anon_kb' in rss[0] else 0
nend = int(rss[-1].get('A_anon_kb') or 0)
anon = f"{n5/1024:.1f} -> {nend/1024:.1f} MiB ({(nend-n5)/n5*100:+.1f}%)" if n5 else "-"
b_peak = max(int(r['B_rss_kb']) for r in rss)
errs = collections.Counter()
for name in ('A', 'B', 'probe'):
    try:
        for l in open(f'{out}/{name}.log', errors='replace'):
            l = l.strip()
            if not l or l.startswith('{') or l.startswith('==='): continue
            errs[(name, re.sub(r'\d+', '#', l)[:160])] += 1
    except FileNotFoundError:
        pass
print(f"| duration | loops (packets) | broker restarts | SIGKILLs of B | probe failures | file rows | Kafka rows | exact | more (replayed) | missing | extra | duplicate rows | A RSS min {t5//60} -> end ({tend} s) | A RssAnon min {t5//60} -> end | B peak RSS | A, B exit |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {dur} ({elapsed} s) | {loops} ({file_packets} in file mode) | {restarts} | {kills} | {pfail} | {len(want)} | {len(kafka_rows)} | {exact} | {over} | {missing} | {extra} | {dups} | {a5/1024:.1f} -> {aend/1024:.1f} MiB ({(aend-a5)/a5*100:+.1f}%) | {anon} | {b_peak/1024:.1f} MiB | {a_st}, {b_st} |")
print()
print("error lines (process, line with numbers as #, count):")
for (name, l), n in sorted(errs.items(), key=lambda x: -x[1]):
    print(f"  {name} x{n}: {l}")
json.dump({'missing': missing, 'extra': extra}, open(f'{out}/check.json', 'w'))
sys.exit(0 if missing == 0 and extra == 0 else 1)
