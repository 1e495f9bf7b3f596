#!/usr/bin/env python3
"""netflow --ipfix against a real collector: nfdump's nfcapd (Debian package nfdump).

   capture --> netflow --ipfix 127.0.0.1:P --output rows.jsonl
                  |  IPFIX over UDP (two uniflow records per row: a->b, b->a)
                  v
               nfcapd -b 127.0.0.1 -p P -B 8M -w DIR  (stopped with SIGTERM: writes its file)
   test: nfdump -6 -r DIR/nfcapd.* == the records netflow's own JSON rows say it sent

For each capture (IPv4 UDP and ICMP, IPv4 TCP with flags, IPv6 TCP), every JSON row gives
one expected record per direction that has packets: protocol, source and destination
address and port (ICMP: nfdump reads the destination port as type.code, so ICMP ports are
not compared), packets, bytes and TCP flags (nfdump's 8-letter string, CEUAPRSF). The
records nfdump reads back must be exactly those (as multisets: same flow count, same
fields), and netflow's summary must count as many records sent, with no send error.
Every server binds 127.0.0.1 on a port chosen here and is stopped at the end.

usage: netflow_ipfix_test.py NETFLOW SHARED_PCAP_DIR
"""
import collections
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

CAPTURES = ["dns_icmp.pcap", "bro.org.pcap", "ftp-ipv6.pcap"]
NFDUMP_PROTO = {"tcp": "TCP", "udp": "UDP", "icmp": "ICMP", "icmpv6": "ICMP6"}


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flag_string(bits):
    """nfdump's rendering of the TCP flags byte: C E U A P R S F, '.' when unset."""
    return "".join(c if bits & (0x80 >> i) else "." for i, c in enumerate("CEUAPRSF"))


def expected_records(rows):
    out = collections.Counter()
    for r in rows:
        icmp = r["proto"] in ("icmp", "icmpv6")
        for src, dst, side in (("a", "b", "a_to_b"), ("b", "a", "b_to_a")):
            if r[side + "_packets"] == 0:
                continue
            sport = 0 if icmp else (r[src + "_port"] or 0)
            dport = 0 if icmp else (r[dst + "_port"] or 0)
            out[(NFDUMP_PROTO[r["proto"]], r[src + "_ip"], sport, r[dst + "_ip"], dport,
                 r[side + "_packets"], r[side + "_bytes"], flag_string(r[side + "_tcp_flags"]))] += 1
    return out


def nfdump_records(path):
    text = subprocess.run(["nfdump", "-r", path, "-q", "-6", "-o", "fmt:%pr|%sa|%sp|%da|%dp|%pkt|%byt|%flg"],
                          check=True, capture_output=True, text=True).stdout
    out = collections.Counter()
    for line in text.splitlines():
        if not line.strip():
            continue
        pr, sa, sp, da, dp, pkt, byt, flg = [f.strip() for f in line.split("|")]
        icmp = pr in ("ICMP", "ICMP6")
        out[(pr, sa, 0 if icmp else int(sp), da, 0 if icmp else int(dp), int(pkt), int(byt), flg)] += 1
    return out


def run_one(netflow, capture, tmp):
    port = free_udp_port()
    flows = os.path.join(tmp, "flows")
    os.makedirs(flows)
    log = open(os.path.join(tmp, "nfcapd.log"), "w+")
    # -B: a receive buffer far above the largest capture's records (a few hundred KiB),
    # so a collector descheduled on a loaded machine drops nothing.
    nfcapd = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-B", "8388608", "-w", flows],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        while "Startup" not in open(log.name).read():  # listening once it says so
            if time.time() > deadline or nfcapd.poll() is not None:
                raise SystemExit(f"nfcapd did not start: {open(log.name).read()}")
            time.sleep(0.05)
        rows_path, summary_path = os.path.join(tmp, "rows.jsonl"), os.path.join(tmp, "summary.json")
        nf = subprocess.run([netflow, "--input", capture, "--workers", "2", "--ipfix", f"127.0.0.1:{port}",
                             "--output", rows_path, "--summary", summary_path], capture_output=True, text=True)
        if nf.returncode != 0:
            raise SystemExit(f"netflow exited {nf.returncode}: {nf.stderr}")
        time.sleep(1.5)  # the datagrams are on loopback; let nfcapd take them in
    finally:
        nfcapd.send_signal(signal.SIGTERM)  # closes and renames its file
        nfcapd.wait(timeout=30)
    files = [f for f in glob.glob(os.path.join(flows, "nfcapd.*")) if not f.endswith("current")]
    if len(files) != 1:
        raise SystemExit(f"expected one nfcapd file, found {files}; log: {open(log.name).read()}")
    rows = [json.loads(line) for line in open(rows_path)]
    summary = json.load(open(summary_path))
    want, got = expected_records(rows), nfdump_records(files[0])
    if want != got:
        print(f"nfcapd's log:\n{open(log.name).read()}")
    return want, got, summary


def main():
    netflow, shared = sys.argv[1], sys.argv[2]
    failures = 0
    for name in CAPTURES:
        capture = os.path.join(shared, name)
        if not os.path.exists(capture):
            print(f"SKIP: shared corpus not found at {shared}")
            return 77
        with tempfile.TemporaryDirectory(prefix="rill_ipfix_") as tmp:
            want, got, summary = run_one(netflow, capture, tmp)
        sent = summary["ipfix"]["records"]
        ok = want == got and sent == sum(want.values()) and summary["ipfix"]["errors"] == 0
        print(f"{name}: netflow sent {sent} records ({sum(want.values())} expected from its rows), "
              f"nfdump read {sum(got.values())}: {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures += 1
            for k in sorted((want - got).keys()):
                print("  only in netflow's rows:", k)
            for k in sorted((got - want).keys()):
                print("  only in nfdump's file:", k)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
