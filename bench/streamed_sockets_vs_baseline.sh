#!/usr/bin/env bash
# rill's five-role streamed-sockets chain against the no-framework chain, run by run.
#   bench/streamed_sockets_vs_baseline.sh [--pairs N] [--bytes N] [--half-bytes N]
#                                         [--half-rate GB/s] [--build DIR] [--only full|half]
#                                         [--also DIR]
# Two phases, each N pairs (default 5), rill and bench/tcp_chain_baseline alternating
# (rill first in odd pairs, the baseline first in even pairs):
#   full: as fast as possible, disk on (--bytes, default 1 GiB);
#   half: paced at half the baseline's median full-speed GB/s (or --half-rate), disk on,
#         one write per 250 us (--half-bytes, default 1 GiB).
# Every run: GB/s at the terminator, CPU-s per GB of the five processes (user + sys),
# p50/p99/p99.9 of the real requests' round trip, and the MD5 of the indexer's against
# the forwarder's segment files (MATCH = equal and every byte there). Prints one line per
# run, then the medians and the ratios rill / baseline, then the pooled round trip: every
# real request of every run of a program sorted together, p50/p99/p99.9 = the values at
# 0-based index floor(q N) (the generators' --latency-out).
# Binaries: DIR/examples/streamed_sockets/streamed_sockets and DIR/bench/tcp_chain_baseline
# (default DIR = build). --also DIR: a second rill build (say, main's) run in every round
# too, between the other two (rounds go rill, also, baseline, then the reverse), with its
# own medians, its ratios to the baseline and rill / also. Exit status: 0 every run ok;
# 1 a run failed or a copy differed; 2 bad arguments.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pairs=5 bytes=$((1 << 30)) half_bytes=$((1 << 30)) half_rate="" build="$root/build" only="" also=""
usage() { echo "streamed_sockets_vs_baseline.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage "$1 needs a value"
  case $1 in
    --pairs) pairs=$2;; --bytes) bytes=$2;; --half-bytes) half_bytes=$2;;
    --half-rate) half_rate=$2;; --build) build=$2;; --only) only=$2;; --also) also=$2;;
    *) usage "unknown argument $1";;
  esac
  shift 2
done
[[ $pairs =~ ^[1-9][0-9]?$ ]] || usage "--pairs must be 1..99, got '$pairs'"
[[ $only =~ ^(|full|half)$ ]] || usage "--only must be full or half, got '$only'"
rill_bin=$build/examples/streamed_sockets/streamed_sockets
base_bin=$build/bench/tcp_chain_baseline
[ -x "$rill_bin" ] && [ -x "$base_bin" ] || usage "build $rill_bin and $base_bin first"
also_bin=""
if [ -n "$also" ]; then
  also_bin=$also/examples/streamed_sockets/streamed_sockets
  [ -x "$also_bin" ] || usage "--also: no $also_bin"
fi
work=$(mktemp -d /tmp/ss_vs_base.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0

# md5 DIR_A_GLOB DIR_B_GLOB BYTES -> MATCH | MISMATCH
md5_of() { cat $1 | md5sum | cut -d' ' -f1; }
compare() {
  local a b n
  a=$(md5_of "$1"); b=$(md5_of "$2"); n=$(cat $1 | wc -c)
  if [ "$a" = "$b" ] && [ "$n" = "$3" ]; then echo MATCH; else echo MISMATCH; fi
}
# Fields of one run: GB/s CPU-s/GB p50 p99 p999 md5
lat_fields() { sed -n 's|^latency:.*= \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\) ms.*|\3 \5 \6|p' "$1"; }
gbps() { sed -n 's|^terminator: .* = \([0-9.]*\) GB/s.*|\1|p' "$1"; }

run_rill() {  # bytes rate [binary] [who] -> fields
  local log=$work/rill.log extra=(--latency-out "$work/$phase_now.${4:-rill}.lat.$run_now")
  [ "$2" = 0 ] || extra+=(--rate "$2" --tick 250)
  if ! "$root/scripts/streamed_sockets.sh" --bin "${3:-$rill_bin}" --bytes "$1" "${extra[@]}" \
       --work "$work/rill" >"$log" 2>&1; then
    echo "rill run failed:" >&2; cat "$log" >&2; status=1
  fi
  local cpu md5
  cpu=$(sed -n 's|^cpu: user \([0-9.]*\) s, sys \([0-9.]*\) s.*|\1 \2|p' "$log" \
        | awk -v b="$1" '{ printf "%.2f", ($1 + $2) / (b / 1e9) }')
  md5=$(sed -n 's|^md5: ||p' "$log")
  echo "$(gbps "$log") $cpu $(lat_fields "$log") ${md5:-none}"
}
run_also() { run_rill "$1" "$2" "$also_bin" also; }
run_base() {
  local log=$work/base.log extra=(--latency-out "$work/$phase_now.base.lat.$run_now")
  [ "$2" = 0 ] || extra+=(--rate "$2" --tick 250)
  rm -rf "$work/base"
  if ! "$base_bin" --bytes "$1" "${extra[@]}" --dir "$work/base" --keep >"$log" 2>&1; then
    echo "baseline run failed:" >&2; cat "$log" >&2; status=1
  fi
  local cpu md5
  cpu=$(sed -n 's|.* = \([0-9.]*\) CPU-s/GB|\1|p' "$log")
  md5=$(compare "$work/base/indexer-*.seg" "$work/base/forwarder-*.seg" "$1")
  rm -rf "$work/base"
  echo "$(gbps "$log") $cpu $(lat_fields "$log") $md5"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v c="$2" '{ print $c }' "$1"; }
summary() {  # phase
  local r=$work/$1.rill b=$work/$1.base a=$work/$1.also
  local names=("GB/s" "CPU-s/GB" "p50 ms" "p99 ms" "p99.9 ms")
  if [ -z "$also_bin" ]; then
    echo "== $1: medians of $pairs pairs (rill | baseline | ratio rill/baseline)"
  else
    echo "== $1: medians of $pairs rounds (rill | also | baseline | rill/baseline | also/baseline | rill/also)"
  fi
  for c in 1 2 3 4 5; do
    local mr mb ma=0
    mr=$(col "$r" $c | median); mb=$(col "$b" $c | median)
    [ -z "$also_bin" ] || ma=$(col "$a" $c | median)
    awk -v n="${names[$((c - 1))]}" -v r="$mr" -v b="$mb" -v a="$ma" -v three="${also_bin:+1}" \
      'BEGIN { if (!three) printf "  %-9s %9.3f | %9.3f | %.2fx\n", n, r, b, (b > 0 ? r / b : 0)
               else printf "  %-9s %9.3f | %9.3f | %9.3f | %.2fx | %.2fx | %.2fx\n", n, r, a, b,
                           (b > 0 ? r / b : 0), (b > 0 ? a / b : 0), (a > 0 ? r / a : 0) }'
  done
  pooled "$1"
  echo "  md5: rill $(col "$r" 6 | sort | uniq -c | xargs),${also_bin:+ also $(col "$a" 6 | sort | uniq -c | xargs),} baseline $(col "$b" 6 | sort | uniq -c | xargs)"
  grep -q MISMATCH "$r" "$b" ${also_bin:+"$a"} && status=1 || true
}

# pooled PHASE: every real request's round trip of every run of each program, sorted
# together; p50/p99/p99.9 in ms, and rill / baseline.
quantiles() {  # files... -> "N p50 p99 p999" (ms)
  cat "$@" | sort -n | awk '{ v[NR - 1] = $1 } END {
    if (NR == 0) { print "0 0 0 0"; exit }
    printf "%d %.3f %.3f %.3f\n", NR, v[int(0.5 * NR)] / 1e6, v[int(0.99 * NR)] / 1e6, v[int(0.999 * NR)] / 1e6 }'
}
pooled() {
  local who q b
  b=$(quantiles "$work/$1".base.lat.*)
  echo "  pooled round trip over every request (N p50 p99 p99.9 ms; ratio of p99 to the baseline's):"
  for who in rill ${also_bin:+also} base; do
    q=$(quantiles "$work/$1.$who".lat.*)
    awk -v w="$who" -v q="$q" -v b="$b" 'BEGIN { split(q, x, " "); split(b, y, " ")
      printf "    %-5s N %d  %.3f / %.3f / %.3f ms  p99 %.2fx\n", w, x[1], x[2], x[3], x[4], (y[3] > 0 ? x[3] / y[3] : 0) }'
  done
}

phase() {  # name bytes rate
  : >"$work/$1.rill"; : >"$work/$1.base"; : >"$work/$1.also"
  echo "== $1: --bytes $2 --rate $3 (0 = as fast as possible), $pairs pairs"
  echo "   run       GB/s CPU-s/GB p50ms p99ms p99.9ms md5"
  phase_now=$1
  for i in $(seq 1 "$pairs"); do
    run_now=$i
    local order=(rill ${also_bin:+also} base)
    [ $((i % 2)) = 1 ] || order=(base ${also_bin:+also} rill)
    for who in "${order[@]}"; do
      local f
      f=$(run_$who "$2" "$3")
      echo "$f" >>"$work/$1.$who"
      echo "   $i $who $f"
    done
  done
  summary "$1"
}

echo "streamed_sockets_vs_baseline: $(date -u +%FT%TZ), commit $(git -C "$root" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "$also_bin" ] || echo "rill: $rill_bin; also: $also_bin"
if [ "$only" != half ]; then
  phase full "$bytes" 0
  [ -n "$half_rate" ] || half_rate=$(col "$work/full.base" 1 | median | awk '{ printf "%.3f", $1 / 2 }')
fi
if [ "$only" != full ]; then
  [ -n "$half_rate" ] || usage "--only half needs --half-rate"
  phase half "$half_bytes" "$half_rate"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
