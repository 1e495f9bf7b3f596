#!/usr/bin/env python3
"""nexmark_gen (examples/nexmark) against the Rust `nexmark` crate 0.2.0's own binary.

The crate is the independent implementation: it has no options for its configuration,
so both run its defaults. Its base time is the wall clock at start, so nexmark_gen gets
the crate's first event time as --base-time-ms (event 0's time is the base time; with
--type/--offset the base is found by a run of nexmark_gen with base 0). Then, for the
first 100,000 events:

  - every event's kind and every field (ids, prices, names, times, strings) equals the
    crate's; the first difference of each field is reported with the event index;
  - the JSON lines are byte-identical (serde_json's field order and formatting);
  - nexmark_gen's binary file, decoded here from the format in event_file.hpp, holds the
    same events;
  - the kinds are 1 : 3 : 46 per 50 events (2,000 persons, 6,000 auctions, 92,000 bids).

Smaller runs check --type, --offset and --step the same way.

usage: nexmark_crate_test.py NEXMARK_GEN SCRIPTS_NEXMARK_RS
Exit status: 0 pass, 1 fail, 77 skipped (no cargo on this machine: scripts/nexmark_rs
exit 3).
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

EVENTS = 100_000
SKIP = 77


def run(cmd):
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.decode()[-2000:]}")
    return p.stdout


def first_time(line):
    return next(iter(json.loads(line).values()))["date_time"]


def compare(label, want_lines, got_lines):
    """Field-by-field comparison; returns the number of differing fields."""
    if len(want_lines) != len(got_lines):
        print(f"FAIL {label}: crate wrote {len(want_lines)} events, nexmark_gen {len(got_lines)}")
        return 1
    first_diff = {}
    for i, (w, g) in enumerate(zip(want_lines, got_lines)):
        if w == g:
            continue
        wj, gj = json.loads(w), json.loads(g)
        (wk, wv), (gk, gv) = next(iter(wj.items())), next(iter(gj.items()))
        if wk != gk:
            first_diff.setdefault("kind", (i, wk, gk))
            continue
        for f in wv.keys() | gv.keys():
            if wv.get(f) != gv.get(f):
                first_diff.setdefault(f"{wk}.{f}", (i, wv.get(f), gv.get(f)))
        if wj == gj:
            first_diff.setdefault("json text", (i, w[:120], g[:120]))
    for field, (i, w, g) in sorted(first_diff.items()):
        print(f"FAIL {label}: {field} differs first at event {i}: crate {w!r}, nexmark_gen {g!r}")
    return len(first_diff)


def decode_binary(data):
    """The binary format of examples/nexmark/include/nexmark/event_file.hpp, as JSON lines."""
    if data[:8] != b"NEXMARK\x01":
        sys.exit("FAIL: binary file does not start with the magic")
    pos, out = 8, []

    def u64():
        nonlocal pos
        v = struct.unpack_from("<Q", data, pos)[0]
        pos += 8
        return v

    def s():
        nonlocal pos
        n = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        v = data[pos:pos + n].decode()
        pos += n
        return v

    layouts = {
        0: ("Person", [("id", u64), ("name", s), ("email_address", s), ("credit_card", s),
                       ("city", s), ("state", s), ("date_time", u64), ("extra", s)]),
        1: ("Auction", [("id", u64), ("item_name", s), ("description", s), ("initial_bid", u64),
                        ("reserve", u64), ("date_time", u64), ("expires", u64), ("seller", u64),
                        ("category", u64), ("extra", s)]),
        2: ("Bid", [("auction", u64), ("bidder", u64), ("price", u64), ("channel", s), ("url", s),
                    ("date_time", u64), ("extra", s)]),
    }
    while pos < len(data):
        kind = data[pos]
        pos += 1
        name, fields = layouts[kind]
        rec = {f: read() for f, read in fields}
        out.append(json.dumps({name: rec}, separators=(",", ":")))
    return out


def main():
    gen, installer = sys.argv[1], sys.argv[2]
    p = subprocess.run([installer], stdout=subprocess.PIPE)
    if p.returncode == 3:
        print("SKIP: cargo is not installed on this machine, so the Rust nexmark crate (the "
              "reference) cannot be built; install Rust (rustup) and rerun scripts/setup")
        return SKIP
    if p.returncode != 0:
        print(f"FAIL: {installer} exited {p.returncode} (its log is above)")
        return 1
    crate = p.stdout.decode().strip()
    failures = 0

    want = run([crate, "--no-wait", "-n", str(EVENTS)]).decode().splitlines()
    base = first_time(want[0])
    got = run([gen, "-n", str(EVENTS), "--base-time-ms", str(base)]).decode().splitlines()
    failures += compare(f"{EVENTS} events", want, got)
    kinds = [next(iter(json.loads(line))) for line in got]
    counts = {k: kinds.count(k) for k in ("Person", "Auction", "Bid")}
    if counts != {"Person": 2000, "Auction": 6000, "Bid": 92000}:
        print(f"FAIL: kinds {counts}, expected 2000 persons, 6000 auctions, 92000 bids")
        failures += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "events.bin")
        run([gen, "-n", str(EVENTS), "--base-time-ms", str(base), "--format", "binary", "-o", path])
        with open(path, "rb") as f:
            decoded = decode_binary(f.read())
    # json.dumps escapes non-ASCII differently from serde; the generated text is ASCII.
    failures += compare("binary file", want, decoded)

    for args in (["--type", "bid", "--offset", "1000", "--step", "3"], ["--type", "person", "--offset", "7"],
                 ["--type", "auction", "--step", "5"], ["--offset", "12345", "--step", "7"]):
        want = run([crate, "--no-wait", "-n", "5000", *args]).decode().splitlines()
        zero = run([gen, "-n", "1", "--base-time-ms", "0", *args]).decode()
        b = first_time(want[0]) - first_time(zero)
        got = run([gen, "-n", "5000", "--base-time-ms", str(b), *args]).decode().splitlines()
        failures += compare(" ".join(args), want, got)

    if failures:
        return 1
    print(f"ok: {EVENTS} events equal to the crate's in every field, byte for byte as JSON and "
          f"through the binary file; --type/--offset/--step runs equal too")
    return 0


if __name__ == "__main__":
    sys.exit(main())
