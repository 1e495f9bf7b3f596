#!/usr/bin/env bash
# The five-role streamed-sockets latency test on loopback.
#   scripts/streamed_sockets.sh [--bytes N] [--rate GB/s] [--tick us] [--real-rate N/s] [--no-disk]
#                               [--nagle] [--reactor-reads] [--bin PATH] [--work DIR]
#                               [--base-port P] [--latency-out FILE]
# Starts terminator, processor, forwarder, indexer and generator in reverse order of the
# data flow, each once the ones it connects to listen (any order works, sinks retry until
# their peer listens, but a retry waits a backoff of 10 ms or more).
# Prints the generator's latency line and the terminator's GB/s, then checks that the
# indexer's and forwarder's segment files have the same MD5 (unless --no-disk).
# Default: 1 GiB as fast as possible, 1000 real requests/s, disk on. --reactor-reads: the
# receiving roles read through Asio's reactor instead of blocking reads (streamed_sockets
# --reactor-reads).
# Exit status: 0 ok; 1 a role failed (its log is printed and the other roles are stopped)
# or the copies differ; 2 bad arguments (the message names the option and the value).
# --bytes must be a multiple of 32 (the record size), 32 B to 1 PiB. Logs go to --work DIR
# (kept), or to a temporary directory removed after a successful run; a failed or stopped
# run keeps the logs there and removes the segment files. --latency-out: the
# generator writes every real request's round trip there (ns, one per line).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bytes=$((1 << 30)); rate=0; tick=(); real=1000; disk=1; nagle=(); reads=(); bin=""; work=""; base=7100; lat_out=()
usage() { echo "streamed_sockets.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --bytes|--rate|--tick|--real-rate|--bin|--work|--base-port|--latency-out)
      [ $# -ge 2 ] || usage "$1 needs a value";;
  esac
  case $1 in
    --bytes) bytes=$2; shift 2;;
    --rate) rate=$2; shift 2;;
    --tick) tick=(--tick "$2"); shift 2;;
    --real-rate) real=$2; shift 2;;
    --no-disk) disk=0; shift;;
    --nagle) nagle=(--nagle); shift;;
    --reactor-reads) reads=(--reactor-reads); shift;;
    --bin) bin=$2; shift 2;;
    --work) work=$2; shift 2;;
    --base-port) base=$2; shift 2;;
    --latency-out) lat_out=(--latency-out "$2"); shift 2;;
    *) usage "unknown argument $1";;
  esac
done
num='^[0-9]+([.][0-9]+)?$'
# whole OPTION VALUE MIN MAX: a whole number in MIN..MAX (at most 18 digits are compared,
# so a huge value is "out of range", never a shell arithmetic error).
whole() {
  [[ $2 =~ ^[0-9]+$ ]] || usage "$1 must be a whole number in $3..$4, got '$2'"
  [ ${#2} -le 18 ] && [ "$((10#$2))" -ge "$3" ] && [ "$((10#$2))" -le "$4" ] \
    || usage "$1 $2 is out of range: must be in $3..$4"
}
whole --bytes "$bytes" 32 $((1 << 50))
[ $((10#$bytes % 32)) = 0 ] || usage "--bytes must be a multiple of 32 (the record size), got '$bytes'"
[[ $rate =~ $num ]] && awk "BEGIN { exit !($rate <= 1000) }" \
  || usage "--rate must be a number of GB/s in 0..1000 (0 = as fast as possible), got '$rate'"
[[ $real =~ $num ]] && awk "BEGIN { exit !($real >= 0.001 && $real <= 1000000) }" \
  || usage "--real-rate must be a number in 0.001..1000000, got '$real'"
[ ${#tick[@]} = 0 ] || whole --tick "${tick[1]}" 1 1000000000
whole --base-port "$base" 1 65530
# Checked before any role starts (the generator would find out only after the others).
[ ${#lat_out[@]} = 0 ] || { : >>"${lat_out[1]}"; } 2>/dev/null \
  || usage "--latency-out ${lat_out[1]}: cannot write that file"
if [ -z "$bin" ]; then
  for b in "$root"/build*/examples/streamed_sockets/streamed_sockets; do [ -x "$b" ] && bin=$b && break; done
fi
[ -x "$bin" ] || { echo "streamed_sockets binary not found (build it or pass --bin)" >&2; exit 2; }
own_work=0
[ -n "$work" ] || { work=$(mktemp -d /tmp/streamed_sockets.XXXXXX); own_work=1; }
mkdir -p "$work"; rm -rf "$work/indexer" "$work/forwarder"
L=127.0.0.1
p_gen=$base p_idx=$((base+1)) p_fwd=$((base+2)) p_proc=$((base+3)) p_term=$((base+4)) p_tap=$((base+5))
dir_idx=(); dir_fwd=()
if [ $disk = 1 ]; then dir_idx=(--dir "$work/indexer"); dir_fwd=(--dir "$work/forwarder"); fi

pids=()
declare -A role_of
# On a failure or a signal: stop the roles and remove the segment files (a stopped 3 GiB
# run leaves a GB of them); the logs stay in $work.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work/indexer" "$work/forwarder"
}
trap cleanup EXIT
# start ROLE PORT... -- ARGS: runs one role in the background, then waits until it listens
# on every PORT (or has exited: the wait below reports it). Each role starts after the
# ones it connects to listen, so its sinks connect at the first try instead of after a
# backoff; the generator, last, starts its clock once its two connections are up.
start() {
  local role=$1 ports=() p i
  shift
  while [ "$1" != -- ]; do ports+=("$1"); shift; done
  shift
  # (bash starts a background job with SIGINT and SIGQUIT ignored; each role sets them back.)
  "$bin" --role "$role" "$@" >"$work/$role.log" 2>&1 & pids+=($!); role_of[$!]=$role
  for p in "${ports[@]}"; do
    for ((i = 0; i < 2000; i++)); do  # up to about 10 s
      awk -v p="$(printf ':%04X' "$p")" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' \
        /proc/net/tcp && break
      kill -0 "${pids[-1]}" 2>/dev/null || break
      sleep 0.005
    done
  done
}
start terminator $p_term $p_tap -- --in listen:$L:$p_term --back listen:$L:$p_tap "${reads[@]}"
start processor $p_proc -- --in listen:$L:$p_proc --out connect:$L:$p_term --back connect:$L:$p_gen "${nagle[@]}" "${reads[@]}"
start forwarder $p_fwd -- --in listen:$L:$p_fwd --out connect:$L:$p_proc "${dir_fwd[@]}" "${nagle[@]}" "${reads[@]}"
start indexer $p_idx -- --in listen:$L:$p_idx --out connect:$L:$p_fwd --out connect:$L:$p_tap "${dir_idx[@]}" "${nagle[@]}" "${reads[@]}"
start generator -- --out connect:$L:$p_idx --back listen:$L:$p_gen --bytes "$bytes" --rate "$rate" "${tick[@]}" --real-rate "$real" "${lat_out[@]}" "${nagle[@]}"

# Wait for the roles as they end; a role that fails stops the rest (the others would wait
# for their peer forever) and its log is shown. Polled every 100 ms with `kill -0`, then
# `wait PID` for the status of each one gone (bash keeps the status of every background
# pid): `wait -n` forgets a child bash reaped while it waited for another one ("no such
# job"), so a killed role could go unnamed. The pause between polls is a timed `read` on
# a pipe nobody writes to, a builtin: a forked `sleep` takes a vCPU from the roles for
# about 1 ms at every poll (bench/RESULTS.md "a stall the run script made").
exec {nap}<> <(:)
status=0
left=("${pids[@]}")
while [ ${#left[@]} -gt 0 ]; do
  rest=(); failed=0
  for p in "${left[@]}"; do
    if kill -0 "$p" 2>/dev/null; then rest+=("$p"); continue; fi
    if wait "$p" 2>/dev/null; then continue; else rc=$?; fi
    echo "streamed_sockets.sh: the ${role_of[$p]} exited with status $rc; stopping the other roles. Its log ($work/${role_of[$p]}.log):" >&2
    cat "$work/${role_of[$p]}.log" >&2
    failed=1
  done
  [ $failed = 0 ] || exit 1
  left=("${rest[@]}")
  [ ${#left[@]} = 0 ] || read -r -t 0.1 -u "$nap" || true
done
exec {nap}<&-
trap - EXIT
cat "$work"/generator.log "$work"/indexer.log "$work"/forwarder.log "$work"/processor.log "$work"/terminator.log
# CPU of the five processes (bash `times`: children's user and system time), before the MD5.
times >"$work/times"  # no pipe: a subshell would report its own (zero) children
tail -1 "$work/times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/);
  printf "cpu: user %.2f s, sys %.2f s (all five processes)\n", u[1] * 60 + u[2], s[1] * 60 + s[2] }'
if [ $disk = 1 ]; then
  a=$(cat "$work"/indexer/*.seg | md5sum | cut -d' ' -f1)
  b=$(cat "$work"/forwarder/*.seg | md5sum | cut -d' ' -f1)
  n=$(cat "$work"/indexer/*.seg | wc -c)
  echo "md5 indexer  $a ($n bytes, $(ls "$work"/indexer | wc -l) segment files)"
  echo "md5 forwarder $b"
  if [ "$a" = "$b" ] && [ "$n" = "$bytes" ]; then echo "md5: MATCH"; else echo "md5: MISMATCH"; status=1; fi
  rm -rf "$work/indexer" "$work/forwarder"
fi
[ $status != 0 ] || [ $own_work = 0 ] || rm -rf "$work"
exit $status
