#!/usr/bin/env bash
# NEXMark on rill and on Apache Flink, side by side on this machine (issue 12).
#
#   bench/nexmark.sh [EVENTS]        # default 10,000,000 events
#
# Generates one event stream with nexmark_gen as two files (every other event each, one
# split per worker / source subtask), as JSON lines (Flink's input) and binary (rill's
# input), and for Flink with parallelism 1 on an event-time query (q3, q4, q5, q7, q8, q11)
# the whole stream as one JSON file; runs each query in its own process: rill's nexmark_query with 1 and 2 workers
# and the Flink peer (bench/nexmark/flink, a local MiniCluster in one JVM) with
# parallelism 1 and 2; checks every run's row count against DuckDB's (bench/nexmark/oracle.py)
# and its checksum against rill's 1-worker run; before that, at CHECK_EVENTS (default
# 200,000) the Flink rows are compared with DuckDB's row by row (EXCEPT ALL both ways).
# Runs are interleaved (query x engine, REPS rounds); the table quotes medians.
# Measures: events/s (events / the program's own elapsed time; Flink's includes starting
# the MiniCluster and the job; the table also gives events / the time from the first event
# read to the end), CPU-s per million events and peak RSS of the whole
# process (/usr/bin/time -v: user + sys; the JVM's start and JIT included).
# Writes $OUT/results.tsv, $OUT/nexmark.md (markdown table) and $OUT/nexmark.png.
# Env: QUERIES (default "q0 q1 q2 q3 q4 q5 q7 q8 q11"), REPS (3), OUT (/tmp/rill-nexmark), BUILD (build/),
#      CHECK_EVENTS (200000; 0 skips the row-by-row check), FLINK_HEAP (1g).
# Benchmark only: not part of scripts/test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
events=${1:-10000000}
queries=${QUERIES:-q0 q1 q2 q3 q4 q5 q7 q8 q11}
reps=${REPS:-3}
out=${OUT:-/tmp/rill-nexmark}
build=${BUILD:-$root/build}
check_events=${CHECK_EVENTS:-200000}
heap=${FLINK_HEAP:-1g}
mkdir -p "$out"

echo "== building rill (nexmark_gen, nexmark_query) in $build" >&2
[ -f "$build/build.ninja" ] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
nice -n 19 cmake --build "$build" -j2 --target nexmark_gen nexmark_query >&2
gen=$build/examples/nexmark/nexmark_gen
query=$build/examples/nexmark/nexmark_query
echo "== building the Flink peer (Maven)" >&2
flink=$root/bench/nexmark/flink
(cd "$flink" && nice -n 19 mvn -B -q compile dependency:copy-dependencies -DincludeScope=runtime >&2)
cp="$flink/target/classes:$flink/target/dependency/*"
java_flink() { java -Xms"$heap" -Xmx"$heap" -cp "$cp" rill.nexmark.NexmarkFlink "$@"; }
py=$("$root/scripts/duckdb_venv")
oracle=$root/bench/nexmark/oracle.py

event_time() { case "$1" in q0|q1|q2) return 1;; esac; return 0; }
windowed() { local q; for q in $queries; do event_time $q && return 0; done; return 1; }
generate() {  # N DIR: the stream of N events as part0/1.{jsonl,bin} (and full.jsonl)
  local n=$1 dir=$2 i
  mkdir -p "$dir"
  if windowed && [ ! -s "$dir/full.jsonl" ]; then "$gen" -n "$n" -o "$dir/full.jsonl"; fi
  for i in 0 1; do
    [ -s "$dir/part$i.jsonl" ] || "$gen" -n $((n / 2)) --offset $i --step 2 -o "$dir/part$i.jsonl"
    [ -s "$dir/part$i.bin" ] || "$gen" -n $((n / 2)) --offset $i --step 2 --format binary -o "$dir/part$i.bin"
  done
}
# Flink's input: the two files, one split per source subtask. With parallelism 1 an
# event-time query (windows, interval joins) reads the stream as one file: one source
# subtask reads its splits one after the other, so the second file would be behind the
# watermark of the first and its records dropped as late.
flink_inputs() {  # DIR QUERY PARALLELISM
  if [ "$3" = 1 ] && event_time "$2"; then echo "$1/full.jsonl"
  else echo "$1/part0.jsonl $1/part1.jsonl"; fi
}
summary() { grep '^{"query"' "$1" | tail -1; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

if [ "$check_events" -gt 0 ]; then
  echo "== row-by-row check against DuckDB at $check_events events" >&2
  cdir=$out/check-$check_events
  generate "$check_events" "$cdir"
  for q in $queries; do
    for p in 1 2; do
      rm -f "$cdir/$q-flink-$p.rows".*
      java_flink --query $q --parallelism $p --output "$cdir/$q-flink-$p.rows" \
        $(flink_inputs "$cdir" $q $p) 2>"$cdir/$q-flink-$p.err" >/dev/null
      cat "$cdir/$q-flink-$p.rows".* >"$cdir/$q-flink-$p.jsonl"
      "$py" "$oracle" compare $q "$cdir/$q-flink-$p.jsonl" "$cdir/part0.jsonl" "$cdir/part1.jsonl"
      "$query" --query $q --workers $p --input "$cdir/part0.bin" --input "$cdir/part1.bin" \
        --output "$cdir/$q-rill-$p.jsonl" 2>"$cdir/$q-rill-$p.err"
      "$py" "$oracle" compare $q "$cdir/$q-rill-$p.jsonl" "$cdir/part0.jsonl" "$cdir/part1.jsonl"
      a=$(field "$(summary "$cdir/$q-flink-$p.err")" checksum)
      b=$(field "$(summary "$cdir/$q-rill-$p.err")" checksum)
      [ "$a" = "$b" ] || { echo "FAIL $q p$p: Flink checksum $a, rill $b" >&2; exit 1; }
    done
  done
fi

echo "== generating $events events in $out/events-$events" >&2
dir=$out/events-$events
generate "$events" "$dir"
declare -A want
for q in $queries; do
  want[$q]=$("$py" "$oracle" count $q "$dir/part0.jsonl" "$dir/part1.jsonl")
  echo "oracle $q: ${want[$q]} rows" >&2
done

tsv=$out/results.tsv
printf 'rep\tquery\tengine\tpar\tevents\trows\tchecksum\telapsed_s\tevents_per_s\tcpu_s\tmax_rss_kb\tok\tfrom_first_event_s\n' >"$tsv"
declare -A ref
for rep in $(seq 1 "$reps"); do
  for q in $queries; do
    for run in rill:1 flink:1 rill:2 flink:2; do
      engine=${run%:*} par=${run#*:}
      log=$out/run.err
      if [ $engine = rill ]; then
        /usr/bin/time -v -o "$out/time.txt" "$query" --query $q --workers $par \
          --input "$dir/part0.bin" --input "$dir/part1.bin" 2>"$log"
      else
        /usr/bin/time -v -o "$out/time.txt" java -Xms"$heap" -Xmx"$heap" -cp "$cp" \
          rill.nexmark.NexmarkFlink --query $q --parallelism $par \
          $(flink_inputs "$dir" $q $par) 2>"$log" >/dev/null
      fi
      s=$(summary "$log")
      rows=$(field "$s" rows) sum=$(field "$s" checksum) el=$(field "$s" elapsed_s) ev=$(field "$s" events)
      user=$(awk -F': ' '/User time/{print $2}' "$out/time.txt")
      sys=$(awk -F': ' '/System time/{print $2}' "$out/time.txt")
      rss=$(awk -F': ' '/Maximum resident/{print $2}' "$out/time.txt")
      cpu=$(python3 -c "print(round($user + $sys, 2))")
      if [ $engine = flink ]; then ff=$(field "$s" from_first_event_s); else ff=$el; fi
      eps=$(python3 -c "print(round($ev / $el))")
      [ -n "${ref[$q]:-}" ] || ref[$q]=$sum
      ok=yes
      if [ "$rows" != "${want[$q]}" ] || [ "$sum" != "${ref[$q]}" ] || [ "$ev" != "$events" ]; then
        ok=NO
        echo "MISMATCH $q $engine p$par: rows $rows (oracle ${want[$q]}), checksum $sum (first run ${ref[$q]}), events $ev" >&2
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $rep $q $engine $par $ev $rows $sum $el $eps $cpu $rss $ok $ff >>"$tsv"
      echo "rep $rep $q $engine p$par: $eps events/s, cpu ${cpu}s, rss ${rss} kB, $ok" >&2
    done
  done
done
/usr/bin/python3 "$root/bench/nexmark/report.py" "$tsv" "$out/nexmark.md" "$out/nexmark.png"
cat "$out/nexmark.md"
grep -q 'NO$' "$tsv" && { echo "some runs did not match the oracle" >&2; exit 1; }
exit 0
