# shellcheck shell=bash
# common.sh — logging, assertions, waiting and process helpers shared by the
# end-to-end scripts. Sourced by test/e2e/run.sh; expects BASE to be set.

PASS=0
FAIL=0

# log MSG...: progress notes go to stderr, prefixed so they never look like
# an assertion line.
log() { printf '# [%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# SCENARIO_NAME: the scenario running now (its name in run.sh's table);
# failure lines name it.
SCENARIO_NAME=${SCENARIO_NAME:-setup}

# ok WHAT / nok WHAT SEEN: the only two kinds of assertion output. WHAT says
# what must hold, SEEN what was seen instead:
#   not ok - SCENARIO_NAME: WHAT: saw SEEN
# (SEEN already saying "expected X, saw Y" stands as it is).
ok() {
  PASS=$((PASS + 1))
  printf 'ok - %s\n' "$1"
}
nok() {
  local seen=$2
  case $seen in "expected "* | "saw "*) ;; *) seen="saw $seen" ;; esac
  fail_line "$1" "$seen"
}
# fail_line WHAT TEXT: count a failure, print its line.
fail_line() {
  FAIL=$((FAIL + 1))
  printf 'not ok - %s: %s: %s\n' "$SCENARIO_NAME" "$1" "$(printf '%s' "$2" | tr '\n' ' ' | cut -c1-600)"
}

# expect WHAT SEEN CMD...: ok when CMD succeeds, else not ok, saying what
# was seen (SEEN).
expect() {
  local what=$1 seen=$2
  shift 2
  if "$@"; then ok "$what"; else nok "$what" "$seen"; fi
}

# expect_eq WHAT WANT GOT: ok when GOT is WANT, else "expected WANT, saw GOT".
expect_eq() {
  if [ "$3" = "$2" ]; then ok "$1"; else nok "$1" "expected '$2', saw '$3'"; fi
}

# fatal STEP ERROR: a step the rest of the run depends on failed; count it
# and leave (the EXIT trap tears the node down and prints the summary).
fatal() {
  fail_line "$1" "$2"
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

# ---------------------------------------------------------------- predicates
# Named conditions for wait_for and expect, called as PREDICATE ARGS...
# (never a string of code): each says in its name what it checks.

# not CMD...: CMD fails.
not() { ! "$@"; }
# empty CMD...: CMD prints nothing.
empty() { [ -z "$("$@" 2>/dev/null)" ]; }
# none_listed CMD...: CMD succeeds and prints nothing.
none_listed() {
  local out
  out=$("$@" 2>/dev/null) && [ -z "$out" ]
}
# prints WANT CMD...: CMD prints exactly WANT.
prints() {
  local want=$1
  shift
  [ "$("$@" 2>/dev/null)" = "$want" ]
}
# above N CMD...: CMD prints a number greater than N.
above() {
  local n=$1 v
  shift
  v=$("$@" 2>/dev/null)
  [ "${v:-0}" -gt "$n" ] 2>/dev/null
}
# at_least N CMD...: CMD prints a number of at least N.
at_least() {
  local n=$1 v
  shift
  v=$("$@" 2>/dev/null)
  [ "${v:-0}" -ge "$n" ] 2>/dev/null
}
# has TEXT PATTERN: a line of TEXT matches PATTERN (grep; case-blind with -i
# as a third argument).
has() { grep -q ${3:+"$3"} -- "$2" <<<"$1"; }
# says PATTERN CMD...: CMD's output has a line matching PATTERN.
says() {
  local p=$1
  shift
  has "$("$@" 2>/dev/null)" "$p"
}
# has_lines TEXT LINE...: every LINE is a whole line of TEXT.
has_lines() {
  local text=$1 l
  shift
  for l in "$@"; do grep -qxF -- "$l" <<<"$text" || return 1; done
}
# json_true JSON FILTER: jq's FILTER holds (is neither false nor null) on JSON.
json_true() { jq -e "$2" <<<"$1" >/dev/null 2>&1; }
# lines_above N PATTERN FILE: more than N lines of FILE match PATTERN.
lines_above() { [ "$(grep -c -- "$2" "$3" 2>/dev/null)" -gt "$1" ]; }
# sorted_words "B A": the words in numeric order, one space after each.
sorted_words() { tr ' ' '\n' <<<"$1" | grep . | sort -n | tr '\n' ' '; }
# same_set "A B" "B A": the same words, in any order.
# same_nonempty A B...: A is not empty and every B is A.
same_nonempty() {
  local a=$1 b
  [ -n "$a" ] || return 1
  shift
  for b in "$@"; do [ "$b" = "$a" ] || return 1; done
}
same_set() { [ "$(sorted_words "$1")" = "$(sorted_words "$2")" ]; }

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

# go_build PKG [GO-BUILD-FLAGS...]: the checkout's ./PKG built into
# $BASE/bin/<its last element>; go's output on failure.
go_build() {
  local pkg=$1
  shift
  (cd "$REPO" && GOFLAGS=-buildvcs=false go build "$@" -o "$BASE/bin/$(basename "$pkg")" "./$pkg" 2>&1)
}

# e2e_ready SOCKET: lpu-nri's readiness socket answers "connected"
# (e2etool ready, through pkg/ready).
e2e_ready() { "$BASE/bin/e2etool" ready "$1" >/dev/null 2>&1; }

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

# listening PORT [ADDRESS]: something listens on TCP PORT (at ADDRESS).
listening() { says "${2:-.}" ss -ltnH "sport = :$1"; }

# free_port: an unused loopback TCP port.
free_port() {
  local p
  for ((p = 20000 + RANDOM % 20000; ; p++)); do
    listening "$p" || { echo "$p"; return; }
  done
}

# metric URL NAME [LABEL-MATCH]: the value of a Prometheus sample whose line
# starts with NAME and contains LABEL-MATCH (sums matching samples).
metric() {
  curl -s --max-time 2 "$1" 2>/dev/null |
    awk -v n="$2" -v m="${3:-}" '$0 !~ /^#/ && index($1, n) == 1 && (substr($1, length(n) + 1, 1) ~ /^[{ ]?$/) && index($0, m) { s += $NF; f = 1 } END { if (f) printf "%g\n", s }'
}
