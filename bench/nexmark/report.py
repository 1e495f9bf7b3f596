#!/usr/bin/python3
"""results.tsv of bench/nexmark.sh -> a markdown table (medians over the rounds) and a PNG
bar chart (events/s and CPU-s per million events, per query and engine).
usage: report.py RESULTS.tsv OUT.md OUT.png"""
import csv
import statistics
import sys
from collections import defaultdict


def main():
    tsv, md, png = sys.argv[1:4]
    runs = defaultdict(list)
    with open(tsv) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            runs[(r["query"], r["engine"], int(r["par"]))].append(r)
    queries = list(dict.fromkeys(k[0] for k in runs))
    med = {}
    for k, rs in runs.items():
        ev = int(rs[0]["events"])
        med[k] = dict(
            eps=statistics.median(float(r["events_per_s"]) for r in rs),
            eps_run=statistics.median(ev / float(r["from_first_event_s"]) for r in rs),
            cpu=statistics.median(float(r["cpu_s"]) for r in rs) / (ev / 1e6),
            rss=statistics.median(int(r["max_rss_kb"]) for r in rs) / 1024,
            n=len(rs), ok=all(r["ok"] == "yes" for r in rs), rows=rs[0]["rows"], events=ev)
    lines = ["| query | events | rows | engine | workers | events/s (median) | events/s from first event | CPU-s / M events | peak RSS MiB | checked | rill ÷ Flink events/s | rill ÷ Flink, from first event | Flink ÷ rill CPU-s |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for q in queries:
        for par in (1, 2):
            for eng in ("rill", "flink"):
                m = med.get((q, eng, par))
                if not m:
                    continue
                ratio_eps = ratio_run = ratio_cpu = ""
                f, r = med.get((q, "flink", par)), med.get((q, "rill", par))
                if eng == "rill" and f:
                    ratio_eps = f"{m['eps'] / f['eps']:.1f}×"
                    ratio_run = f"{m['eps_run'] / f['eps_run']:.1f}×"
                    ratio_cpu = f"{f['cpu'] / m['cpu']:.1f}×"
                lines.append(f"| {q} | {m['events']:,} | {int(m['rows']):,} | {'Flink' if eng == 'flink' else 'rill'} | {par} | "
                             f"{m['eps']:,.0f} | {m['eps_run']:,.0f} | {m['cpu']:.2f} | {m['rss']:.0f} | "
                             f"{'oracle ok' if m['ok'] else 'MISMATCH'} ({m['n']} runs) | {ratio_eps} | {ratio_run} | {ratio_cpu} |")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [("rill", 1), ("rill", 2), ("flink", 1), ("flink", 2)]
    width = 0.2
    for ax, key, title in ((axes[0], "eps", "events/s (median, higher is better)"),
                           (axes[1], "cpu", "CPU-s per million events (lower is better)")):
        for i, (eng, par) in enumerate(labels):
            xs = [j + (i - 1.5) * width for j in range(len(queries))]
            ys = [med.get((q, eng, par), {}).get(key, 0) for q in queries]
            ax.bar(xs, ys, width, label=f"{'Flink' if eng == 'flink' else 'rill'} ×{par}")
        ax.set_xticks(range(len(queries)), queries)
        ax.set_title(title)
        if key == "eps":
            ax.set_yscale("log")
    axes[0].legend()
    ev = next(iter(med.values()))["events"]
    fig.suptitle(f"NEXMark, {ev:,} events, rill vs Flink (local MiniCluster), one 2-core machine")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
