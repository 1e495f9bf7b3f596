#!/usr/bin/env python3
"""NEXMark q0, q1 and q2 on rill (examples/nexmark/nexmark_query) against DuckDB.

nexmark_gen writes 200,000 events twice: as JSON lines (the Rust crate's format, checked
against the crate by nexmark_crate_test) and as a binary event file. rill runs each query
over the binary file, with 1 and 2 workers; DuckDB (PyPI duckdb, in the venv that
scripts/duckdb_venv makes) runs SQL written from the query definitions over the JSON
lines. rill's rows are read into DuckDB and compared with EXCEPT ALL both ways. rill also reads the stream as two files (nexmark_gen --offset 0/1 --step 2), one
split per worker. The rows must be the same multiset (any order; q1's prices compared as exact
decimals), and the summary's row count must equal the oracle's; its checksum must not depend on
the workers or files.

Bad input: nexmark_query on the binary file cut inside a record exits 1 and names the
file, the byte offset of the cut record and its index (offsets found here by walking the
records with the format of event_file.hpp), after writing the rows of every record
before it; on a JSON file it exits 2 and says it is not an event file. Bad arguments
of both programs exit 2 and name the option.

usage: nexmark_queries_test.py NEXMARK_GEN NEXMARK_QUERY SCRIPTS_DUCKDB_VENV
"""

import collections
import decimal
import json
import os
import struct
import subprocess
import sys
import tempfile

EVENTS = 200_000

ORACLE = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
}

# rill's row columns, typed as the oracle's results (q1's price: DECIMAL(.., 3), exact).
ROW_COLUMNS = {
    "q0": "{'auction': 'UBIGINT', 'bidder': 'UBIGINT', 'price': 'UBIGINT', "
          "'date_time': 'UBIGINT', 'extra': 'VARCHAR'}",
    "q1": "{'auction': 'UBIGINT', 'bidder': 'UBIGINT', 'price': 'DECIMAL(38,3)', "
          "'date_time': 'UBIGINT', 'extra': 'VARCHAR'}",
    "q2": "{'auction': 'UBIGINT', 'price': 'UBIGINT'}",
}

BID = ("STRUCT(auction UBIGINT, bidder UBIGINT, price UBIGINT, channel VARCHAR, url VARCHAR, "
       "date_time UBIGINT, extra VARCHAR)")


def ensure_duckdb(venv_script):
    try:
        import duckdb  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("NEXMARK_QUERIES_TEST_REEXEC"):
        sys.exit("FAIL: duckdb does not import even in the venv of scripts/duckdb_venv")
    p = subprocess.run([venv_script], stdout=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"FAIL: {venv_script} exited {p.returncode} (its log is above)")
    py = p.stdout.decode().strip()
    os.environ["NEXMARK_QUERIES_TEST_REEXEC"] = "1"
    # The script that was run (this one, or a test that imports this function).
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])


def run(cmd, want_rc=0):
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != want_rc:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {want_rc}: "
                 f"{p.stderr.decode()[-2000:]}")
    return p


def summary(stderr):
    """The summary line; the runtime's stall reports ("rill: stall: ...", a slow turn under
    a sanitizer or a loaded machine) may come before it on stderr."""
    return json.loads(next(line for line in stderr.decode().splitlines()
                           if line.startswith('{"query"')))


def rows_of(path):
    with open(path) as f:
        return collections.Counter(
            tuple(json.loads(line, parse_float=decimal.Decimal).values()) for line in f)


def record_starts(data):
    """Byte offsets of the records of a binary event file (event_file.hpp's format)."""
    layouts = {0: "QSSSSSQS", 1: "QSSQQQQQQS", 2: "QQQSSQS"}
    pos, starts = 8, []
    while pos < len(data):
        starts.append(pos)
        kind = data[pos]
        pos += 1
        for f in layouts[kind]:
            pos += 8 if f == "Q" else 4 + struct.unpack_from("<I", data, pos)[0]
    return starts


def main():
    gen, query, venv_script = sys.argv[1:4]
    ensure_duckdb(venv_script)
    import duckdb

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        js, binary = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "events.bin")
        run([gen, "-n", str(EVENTS), "-o", js])
        run([gen, "-n", str(EVENTS), "--format", "binary", "-o", binary])
        # The same stream as two files (every other event each): one split per worker.
        parts = [os.path.join(tmp, f"part{i}.bin") for i in (0, 1)]
        for i, part in enumerate(parts):
            run([gen, "-n", str(EVENTS // 2), "--offset", str(i), "--step", "2",
                 "--format", "binary", "-o", part])

        db = duckdb.connect()
        db.execute(f"CREATE TABLE events AS SELECT * FROM read_json('{js}', "
                   f"format = 'newline_delimited', columns = {{'Bid': '{BID}'}})")
        db.execute("CREATE VIEW bid AS SELECT Bid.* FROM events WHERE Bid IS NOT NULL")
        n_bids = db.execute("SELECT count(*) FROM bid").fetchone()[0]
        if n_bids != EVENTS // 50 * 46:
            print(f"FAIL: DuckDB read {n_bids} bids, expected {EVENTS // 50 * 46}")
            failures += 1

        for q, sql in ORACLE.items():
            db.execute(f"CREATE TABLE want_{q} AS {sql}")
            n_want = db.execute(f"SELECT count(*) FROM want_{q}").fetchone()[0]
            checksums = set()
            for workers, inputs in ((1, [binary]), (2, [binary]), (2, parts)):
                out = os.path.join(tmp, f"{q}-{workers}-{len(inputs)}.jsonl")
                p = run([query, "--query", q, "--output", out, "--workers", str(workers),
                         *[a for f in inputs for a in ("--input", f)]])
                s = summary(p.stderr)
                label = f"{q} --workers {workers}, {len(inputs)} file(s)"
                # rill's rows into DuckDB with the oracle's column types; multiset difference
                # both ways (EXCEPT ALL keeps duplicates).
                db.execute(f"CREATE OR REPLACE TABLE got AS SELECT * FROM read_json('{out}', "
                           f"format = 'newline_delimited', columns = {ROW_COLUMNS[q]})")
                missing = db.execute(f"SELECT * FROM want_{q} EXCEPT ALL SELECT * FROM got").fetchall()
                extra = db.execute(f"SELECT * FROM got EXCEPT ALL SELECT * FROM want_{q}").fetchall()
                if missing or extra:
                    print(f"FAIL {label}: {len(missing)} oracle rows missing, {len(extra)} rows "
                          f"not in the oracle; e.g. missing {missing[:2]}, extra {extra[:2]}")
                    failures += 1
                elif s["rows"] != n_want or s["events"] != EVENTS or s["errors"]:
                    print(f"FAIL {label}: summary {s}, oracle {n_want} rows")
                    failures += 1
                else:
                    print(f"ok {label}: {s['rows']} rows equal to DuckDB's")
                checksums.add(s["checksum"])
            if len(checksums) != 1:
                print(f"FAIL {q}: the row checksum differs between runs: {checksums}")
                failures += 1

        # A file cut inside record 1000: rows of records 0..999 are written, then exit 1.
        with open(binary, "rb") as f:
            data = f.read()
        starts = record_starts(data)
        if len(starts) != EVENTS:
            print(f"FAIL: the binary file holds {len(starts)} records, expected {EVENTS}")
            failures += 1
        cut = os.path.join(tmp, "cut.bin")
        with open(cut, "wb") as f:
            f.write(data[:starts[1000] + 20])
        out = os.path.join(tmp, "cut.jsonl")
        p = run([query, "--query", "q0", "--input", cut, "--output", out], want_rc=1)
        msg = f"{cut}: truncated record (file ends inside it) at byte {starts[1000]} (event 1000)"
        bids_before = sum(1 for i in range(1000) if i % 50 >= 4)
        got = sum(rows_of(out).values())
        if msg not in p.stderr.decode() or got != bids_before:
            print(f"FAIL truncated input: {got} rows (expected {bids_before}), stderr "
                  f"{p.stderr.decode()[-500:]!r}, expected to contain {msg!r}")
            failures += 1
        p = run([query, "--input", js], want_rc=2)
        if f"{js}: not a NEXMark event file" not in p.stderr.decode():
            print(f"FAIL JSON as input: stderr {p.stderr.decode()!r}")
            failures += 1

        # Bad arguments name the option (exit 2); an output that cannot be created, the path.
        for cmd, rc, text in (([gen, "--rate", "0"], 2, "--rate"),
                              ([gen, "--format", "xml"], 2, "--format"),
                              ([gen, "-o", os.path.join(tmp, "no", "such", "dir")], 1,
                               "cannot create --output"),
                              ([query, "--query", "q9"], 2, "--query"),
                              ([query, "--workers", "0"], 2, "--workers")):
            p = run(cmd, want_rc=rc)
            if text not in p.stderr.decode():
                print(f"FAIL {' '.join(cmd)}: stderr {p.stderr.decode()!r} does not name {text!r}")
                failures += 1

    if failures:
        return 1
    print(f"ok: q0, q1, q2 over {EVENTS} events equal to DuckDB's rows; bad input named")
    return 0


if __name__ == "__main__":
    sys.exit(main())
