#!/usr/bin/env python3
"""DuckDB oracle for bench/nexmark.sh (q0, q1, q2, q3, q4, q5, q7, q8, q11): the SQL and column types of
tests/examples/nexmark_queries_test.py and nexmark_window_queries_test.py, imported.

  oracle.py count Q EVENTS.jsonl...            -> prints the oracle's row count
  oracle.py compare Q ROWS.jsonl EVENTS.jsonl... -> the rows must be the oracle's multiset
                                                  (EXCEPT ALL both ways); exit 1 if not
Run with the python of scripts/duckdb_venv.
"""
import os
import sys

import duckdb

# The SQL and the row column types are the query tests' own, so the benchmark checks
# against exactly what the tests check against.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "examples"))
import nexmark_queries_test as plain  # noqa: E402
import nexmark_window_queries_test as windowed  # noqa: E402

ORACLE = {**plain.ORACLE, **windowed.ORACLE}
ROW_COLUMNS = {**plain.ROW_COLUMNS, **windowed.ROW_COLUMNS}
BID = plain.BID
PERSON = windowed.PERSON
AUCTION = windowed.AUCTION


def main():
    mode, q = sys.argv[1], sys.argv[2]
    rows = sys.argv[3] if mode == "compare" else None
    events = sys.argv[4:] if mode == "compare" else sys.argv[3:]
    db = duckdb.connect()
    files = "[" + ", ".join(f"'{e}'" for e in events) + "]"
    # The kinds a query reads (q3, q4, q8 join persons or auctions), each a view of its events.
    kinds = {"q3": ("Person", "Auction"), "q4": ("Auction", "Bid"), "q8": ("Person", "Auction")}
    types = {"Person": PERSON, "Auction": AUCTION, "Bid": BID}
    for kind in kinds.get(q, ("Bid",)):
        db.execute(f"CREATE VIEW {kind.lower()} AS SELECT {kind}.* FROM read_json({files}, "
                   f"format = 'newline_delimited', columns = {{'{kind}': '{types[kind]}'}}) "
                   f"WHERE {kind} IS NOT NULL")
    if mode == "count":
        print(db.execute(f"SELECT count(*) FROM ({ORACLE[q]})").fetchone()[0])
        return 0
    db.execute(f"CREATE TABLE want AS {ORACLE[q]}")
    db.execute(f"CREATE TABLE got AS SELECT * FROM read_json('{rows}', "
               f"format = 'newline_delimited', columns = {ROW_COLUMNS[q]})")
    n = db.execute("SELECT count(*) FROM want").fetchone()[0]
    missing = db.execute("SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got)").fetchone()[0]
    extra = db.execute("SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want)").fetchone()[0]
    if missing or extra:
        print(f"FAIL {q} {rows}: {missing} oracle rows missing, {extra} rows not in the oracle")
        return 1
    print(f"ok {q} {rows}: {n} rows equal to DuckDB's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
