#!/usr/bin/env python3
"""A real Prometheus server (Debian package prometheus) scrapes a running netflow.

   pcapgen (16 flows x 64 packets = 1024) --> FIFO --> netflow --metrics-port P
                                                          ^ scraped every 1 s
   prometheus (127.0.0.1, config and TSDB in a temp dir) --'
   test: GET /api/v1/query?query=sum(rill_records_in_total{operator="source"})

The FIFO stays open while Prometheus is asked, so netflow is still running (its source
waits for more bytes) when the value is scraped; 1024 is a multiple of the source's
slice of 256 records, so every packet written is counted before the source waits. The
value Prometheus answers must equal the packets pcapgen wrote (its documented layout)
and the packets netflow's own summary reports once the FIFO is closed. Every server
binds 127.0.0.1 on a port chosen here and is stopped at the end; the run is bounded
(60 s for the value to appear).

usage: prometheus_scrape_test.py NETFLOW PCAPGEN
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

PACKETS = 16 * 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def main():
    netflow, pcapgen = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="rill_prom_") as tmp:
        pcap = os.path.join(tmp, "in.pcap")
        subprocess.run([pcapgen, "--output", pcap, "--flows", "16", "--packets-per-flow", "64"],
                       check=True, stdout=subprocess.DEVNULL)
        fifo = os.path.join(tmp, "in.fifo")
        os.mkfifo(fifo)
        rill_port, prom_port = free_port(), free_port()
        summary = os.path.join(tmp, "summary.json")
        nf = subprocess.Popen([netflow, "--input", fifo, "--metrics-port", str(rill_port),
                               "--workers", "2", "--output", os.devnull, "--summary", summary],
                              stderr=subprocess.PIPE, text=True)
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: rill\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{rill_port}']\n")
        prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        writer = None
        try:
            writer = open(fifo, "wb")  # returns once netflow opened the FIFO for reading
            with open(pcap, "rb") as f:
                writer.write(f.read())
            writer.flush()
            expr = 'sum(rill_records_in_total{job="rill",operator="source"})'
            value, deadline, last = None, time.monotonic() + 60, None
            while time.monotonic() < deadline:
                try:
                    last = query(prom_port, expr)
                    result = last["data"]["result"]
                    if result and float(result[0]["value"][1]) == PACKETS:
                        value = float(result[0]["value"][1])
                        break
                except OSError:
                    pass  # Prometheus not listening yet
                time.sleep(0.5)
            assert nf.poll() is None, "netflow ended before the scrape: " + nf.stderr.read()
            assert value == PACKETS, f"Prometheus answered {last} for {expr}, want {PACKETS}"
            up = query(prom_port, 'up{job="rill"}')["data"]["result"]
            assert up and up[0]["value"][1] == "1", f"target not up: {up}"
            writer.close()
            writer = None
            _, err = nf.communicate(timeout=60)
            assert nf.returncode == 0, f"netflow exit {nf.returncode}: {err}"
            with open(summary) as f:
                packets = json.load(f)["packets"]
            assert packets == PACKETS == value, f"summary {packets}, Prometheus {value}, written {PACKETS}"
            print(f"prometheus_scrape_test: Prometheus {value:.0f} == netflow summary {packets} == written {PACKETS}")
        finally:
            if writer:
                writer.close()
            for p in (prom, nf):
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()


if __name__ == "__main__":
    main()
