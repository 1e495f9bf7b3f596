#!/usr/bin/env python3
"""DuckDB oracle for bench/nexmark.sh (q0, q1, q2, q5, q7; SQL and column types as
tests/examples/nexmark_queries_test.py and nexmark_window_queries_test.py).

  oracle.py count Q EVENTS.jsonl...            -> prints the oracle's row count
  oracle.py compare Q ROWS.jsonl EVENTS.jsonl... -> the rows must be the oracle's multiset
                                                  (EXCEPT ALL both ways); exit 1 if not
Run with the python of scripts/duckdb_venv.
"""
import sys

import duckdb

ORACLE = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # Windowed (tests/examples/nexmark_window_queries_test.py): bids per auction in
    # [k*2 s, k*2 s + 10 s); per window the auctions whose count is the window's maximum.
    "q5": """WITH w AS (SELECT auction,
                               unnest(range(CAST(date_time // 2000 AS BIGINT) - 4,
                                            CAST(date_time // 2000 AS BIGINT) + 1)) * 2000 AS ws
                        FROM bid),
                  c AS (SELECT auction, ws, count(*) AS num FROM w GROUP BY auction, ws),
                  m AS (SELECT ws, max(num) AS maxn FROM c GROUP BY ws)
             SELECT c.auction, c.num, c.ws AS window_start, c.ws + 10000 AS window_end
             FROM c JOIN m ON c.ws = m.ws AND c.num >= m.maxn""",
    # The bids with the highest price of their [k*10 s, (k+1)*10 s) window.
    "q7": """WITH m AS (SELECT date_time // 10000 AS k, max(price) AS maxprice FROM bid GROUP BY k)
             SELECT B.auction, B.bidder, B.price, B.date_time, B.extra
             FROM bid B JOIN m ON B.date_time // 10000 = m.k AND B.price = m.maxprice""",
}
ROW_COLUMNS = {
    "q0": "{'auction': 'UBIGINT', 'bidder': 'UBIGINT', 'price': 'UBIGINT', "
          "'date_time': 'UBIGINT', 'extra': 'VARCHAR'}",
    "q1": "{'auction': 'UBIGINT', 'bidder': 'UBIGINT', 'price': 'DECIMAL(38,3)', "
          "'date_time': 'UBIGINT', 'extra': 'VARCHAR'}",
    "q2": "{'auction': 'UBIGINT', 'price': 'UBIGINT'}",
    "q5": "{'auction': 'UBIGINT', 'num': 'BIGINT', 'window_start': 'BIGINT', 'window_end': 'BIGINT'}",
}
ROW_COLUMNS["q7"] = ROW_COLUMNS["q0"]
BID = ("STRUCT(auction UBIGINT, bidder UBIGINT, price UBIGINT, channel VARCHAR, url VARCHAR, "
       "date_time UBIGINT, extra VARCHAR)")


def main():
    mode, q = sys.argv[1], sys.argv[2]
    rows = sys.argv[3] if mode == "compare" else None
    events = sys.argv[4:] if mode == "compare" else sys.argv[3:]
    db = duckdb.connect()
    files = "[" + ", ".join(f"'{e}'" for e in events) + "]"
    db.execute(f"CREATE VIEW bid AS SELECT Bid.* FROM read_json({files}, "
               f"format = 'newline_delimited', columns = {{'Bid': '{BID}'}}) WHERE Bid IS NOT NULL")
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
