# shellcheck shell=bash
# common.sh — logging, assertions, waiting and process helpers shared by the
# end-to-end scripts. Sourced by test/e2e/run.sh; expects BASE to be set.

PASS=0
FAIL=0

# log MSG...: progress notes go to stderr, prefixed so they never look like
# an assertion line.
log() { printf '# [%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# ok WHAT / nok WHAT DETAIL: the only two kinds of assertion output.
ok() {
  PASS=$((PASS + 1))
  printf 'ok - %s\n' "$1"
}
nok() {
  FAIL=$((FAIL + 1))
  printf 'not ok - %s: %s\n' "$1" "$(printf '%s' "$2" | tr '\n' ' ' | cut -c1-600)"
}

# expect WHAT DETAIL CMD...: ok when CMD succeeds, else not ok with DETAIL.
expect() {
  local what=$1 detail=$2
  shift 2
  if "$@"; then ok "$what"; else nok "$what" "$detail"; fi
}

# fatal WHAT DETAIL: a step the rest of the run depends on failed; count it
# and leave (the EXIT trap tears the node down and prints the summary).
fatal() {
  nok "$1" "$2"
  exit 1
}

# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  "$@" >/dev/null 2>&1
}

# now_ns: wall clock in nanoseconds.
now_ns() { date +%s%N; }

# start_daemon NAME LOGFILE CMD...: start CMD in the background as a simple
# command so that $! is the daemon's own PID, and record it in $BASE/pids.
start_daemon() {
  local name=$1 logf=$2
  shift 2
  "$@" >>"$logf" 2>&1 </dev/null 9>&- &
  echo $! >"$BASE/pids/$name"
  log "started $name (pid $!): $*"
}

# pid_of NAME: the recorded PID of a daemon we started, or nothing.
pid_of() { [ -f "$BASE/pids/$1" ] && cat "$BASE/pids/$1"; }

# running NAME: the daemon we started under NAME is alive.
running() {
  local p
  p=$(pid_of "$1") || return 1
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null
}

# stop_daemon NAME [GRACE]: SIGTERM the recorded PID, SIGKILL it after GRACE
# seconds (kubelet and containerd sometimes hang on SIGTERM), forget it.
stop_daemon() {
  local name=$1 grace=${2:-5} p i
  p=$(pid_of "$name") || return 0
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
      log "$name (pid $p) ignored SIGTERM for ${grace}s: SIGKILL"
      kill -KILL "$p" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$BASE/pids/$name"
}

# free_port: an unused loopback TCP port.
free_port() {
  local p
  for ((p = 20000 + RANDOM % 20000; ; p++)); do
    ss -ltnH "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
}

# metric URL NAME [LABEL-MATCH]: the value of a Prometheus sample whose line
# starts with NAME and contains LABEL-MATCH (sums matching samples).
metric() {
  curl -s --max-time 2 "$1" 2>/dev/null |
    awk -v n="$2" -v m="${3:-}" '$0 !~ /^#/ && index($1, n) == 1 && (substr($1, length(n) + 1, 1) ~ /^[{ ]?$/) && index($0, m) { s += $NF; f = 1 } END { if (f) printf "%g\n", s }'
}
