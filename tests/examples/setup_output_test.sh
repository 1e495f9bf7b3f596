#!/usr/bin/env bash
# scripts/netflow's stdout is exactly netflow's JSON rows, on a machine where scripts/setup
# has packages to install too.
#
# usage: setup_output_test.sh SOURCE_DIR BUILD_DIR   (BUILD_DIR holds examples/netflow/netflow)
#
# It runs the real scripts/netflow and scripts/setup with a PATH whose first directory
# fakes the tools that would change the machine or take minutes: dpkg-query (reports
# every package missing, so setup takes its install path), sudo, apt-get (both print
# noise on stdout and stderr, as apt-get does, and install nothing) and cmake (prints a
# configure/build log on stdout, builds nothing: RILL_NETFLOW_BUILD_DIR points
# scripts/netflow at BUILD_DIR's netflow). Checks: stdout of scripts/setup is empty; every
# stdout line of scripts/netflow parses as a JSON object, there is at least one, and the
# fake apt-get ran (the install path was taken).
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat >"$work/bin/dpkg-query" <<'F'
#!/bin/sh
exit 1
F
cat >"$work/bin/apt-get" <<'F'
#!/bin/sh
echo "Reading package lists... Done"
echo "Setting up fake-package (1.0) ..."
echo "apt-get: noise on stderr" >&2
echo "$*" >>"$FAKE_APT_LOG"
F
cat >"$work/bin/sudo" <<'F'
#!/bin/sh
echo "sudo: noise on stdout"
exec "$@"
F
cat >"$work/bin/cmake" <<'F'
#!/bin/sh
echo "-- Configuring done"
echo "[1/1] Linking CXX executable examples/netflow/netflow"
F
chmod +x "$work/bin"/*
export PATH="$work/bin:$PATH" FAKE_APT_LOG="$work/apt.log" RILL_NETFLOW_BUILD_DIR="$build"

fail() { echo "FAIL: $*" >&2; exit 1; }

"$src/scripts/setup" >"$work/setup.out" 2>"$work/setup.err"
[ -s "$work/setup.out" ] && fail "scripts/setup wrote to stdout: $(head -3 "$work/setup.out")"
grep -q "install" "$work/apt.log" || fail "scripts/setup did not take its install path"
rm -f "$work/apt.log"

"$src/scripts/netflow" >"$work/rows.jsonl" 2>"$work/netflow.err" ||
  fail "scripts/netflow exited $?: $(tail -5 "$work/netflow.err")"
grep -q "install" "$work/apt.log" || fail "scripts/netflow's setup did not take its install path"
python3 - "$work/rows.jsonl" <<'P'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
if not lines:
    sys.exit("FAIL: scripts/netflow wrote no rows on stdout")
for n, line in enumerate(lines, 1):
    try:
        row = json.loads(line)
    except ValueError:
        sys.exit(f"FAIL: stdout line {n} is not JSON: {line[:120]!r}")
    if not isinstance(row, dict) or "window_start_ns" not in row:
        sys.exit(f"FAIL: stdout line {n} is not a flow row: {line[:120]!r}")
print(f"ok: {len(lines)} rows, all JSON objects")
P
