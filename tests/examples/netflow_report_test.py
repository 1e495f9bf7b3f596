#!/usr/bin/env python3
"""netflow --report FILE.html, opened in headless Chromium (Debian package chromium).

netflow runs on its bundled captures with --output rows.jsonl --report report.html. The
page must load nothing from the network (no src/href to http(s)), lay out (the packets
chart's rendered size, written on <body> by the page's own script after load, is
non-zero in Chromium's --dump-dom) and name the top conversation by bytes, which the test
computes itself from the JSON rows. A screenshot is left in the build tree
(tests/examples/netflow_report.png) for a person to look at.

usage: netflow_report_test.py NETFLOW OUT_DIR
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def chromium(args, tmp):
    # --no-sandbox: tests may run as root, where Chromium's sandbox refuses to start.
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={os.path.join(tmp, 'profile')}", "--window-size=1100,1500"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=120)


def main():
    netflow, out_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="rill_report_") as tmp:
        rows_path, page = os.path.join(tmp, "rows.jsonl"), os.path.join(tmp, "report.html")
        r = subprocess.run([netflow, "--output", rows_path, "--report", page, "--summary",
                            os.path.join(tmp, "summary.json")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        html = open(page, encoding="utf-8").read()
        assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html), "the page fetches from the network"

        by_conv = collections.Counter()
        with open(rows_path) as f:
            for line in f:
                row = json.loads(line)
                by_conv[(row["proto"], row["a_ip"], row["a_port"], row["b_ip"], row["b_port"])] += row["bytes"]
        (proto, a_ip, a_port, b_ip, b_port), top_bytes = by_conv.most_common(1)[0]

        dom = chromium(["--dump-dom", "file://" + page], tmp)
        assert dom.returncode == 0, dom.stderr
        m = re.search(r'data-chart-width="(\d+)" data-chart-height="(\d+)"', dom.stdout)
        assert m, "no chart size in the DOM (the page's script did not run):\n" + dom.stdout[:2000]
        width, height = int(m.group(1)), int(m.group(2))
        assert width > 0 and height > 0, (width, height)
        text = re.sub(r"<[^>]+>", " ", dom.stdout)
        first_row = re.search(r'id="top-conversations".*?<tr>.*?</tr>\s*<tr>(.*?)</tr>', dom.stdout, re.S)
        assert first_row, "no conversation table"
        for want in (a_ip, b_ip, str(top_bytes)):
            assert want in first_row.group(1), f"{want} not in the first conversation row: {first_row.group(1)}"
        assert a_ip in text

        shot = os.path.join(tmp, "shot.png")
        s = chromium([f"--screenshot={shot}", "file://" + page], tmp)
        assert s.returncode == 0 and os.path.getsize(shot) > 10000, s.stderr
        os.makedirs(out_dir, exist_ok=True)
        shutil.copy(shot, os.path.join(out_dir, "netflow_report.png"))
        print(f"netflow_report_test: chart {width}x{height} px; top conversation {proto} {a_ip}:{a_port} - "
              f"{b_ip}:{b_port}, {top_bytes} bytes; screenshot {os.path.join(out_dir, 'netflow_report.png')}")


if __name__ == "__main__":
    main()
