# bench/soak/lib.sh — what bench/soak.sh and bench/soak_enrich.sh share; sourced, not run.
# Expects $root (the repository), $out (the soak's folder) and $libs (the Kafka client
# jars of scripts/kafka) to be set when a function is called.
#   soak_seconds TEXT   a duration "90", "90s", "20m" or "1h" in whole seconds, on stdout
#   log MESSAGE...      a UTC-stamped line on stderr and in $out/events.log
#   tool ARGS...        bench/soak/SoakTool.java (create, produce, dump, dump-positions)
#   rss_kb PID          VmRSS of PID in kB (0 once it is gone)
#   anon_kb PID         RssAnon of PID in kB: VmRSS without the pages of mapped files
#                       (code and libraries, paged in as their code first runs), 0 once gone
soak_seconds() {
  case "$1" in
    *h) echo $(( ${1%h} * 3600 )) ;;
    *m) echo $(( ${1%m} * 60 )) ;;
    *s) echo "${1%s}" ;;
    *) echo "$1" ;;
  esac
}
log() { echo "[$(date -u +%T)] $*" | tee -a "$out/events.log" >&2; }
tool() { java -cp "$libs/*" "$root/bench/soak/SoakTool.java" "$@"; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
anon_kb() { awk '/RssAnon/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
