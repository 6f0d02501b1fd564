#!/usr/bin/env bash
# run.sh — end-to-end tests of the LPU node stack on a real node: a standalone
# kubelet, containerd 2.x with NRI, runc, podman (CDI), a simulated LPU node
# with real character devices, and our two daemons built from this checkout.
#
# usage: test/e2e/run.sh [demo|all|SCENARIO...]
#   demo      scenario 1, printing what each pod's container sees
#   all       1 2 3 4 5 orion perf image 6 (the default)
#   SCENARIO  any of 1 2 3 4 5 orion 6 perf image, run in that canonical order
# env: BASE (private base dir; default a fresh /tmp/lpu-e2e.XXXX), KEEP=1
#      (leave $BASE on disk), PERF_ROUNDS, PERF_BLOCK.
#
# Must run as root. Every assertion prints "ok - ..." or "not ok - ...: ...";
# the last line is "e2e: N passed, M failed"; the exit status is non-zero when
# anything failed. All state lives under $BASE; only processes this script
# started are stopped (by PID); the node is torn down on exit, also on failure.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$E2E_DIR/../.." && pwd)
BASE=${BASE:-$(mktemp -d /tmp/lpu-e2e.XXXX)}
mkdir -p "$BASE"
BASE=$(cd "$BASE" && pwd)

# shellcheck source=lib/common.sh
source "$E2E_DIR/lib/common.sh"
# shellcheck source=lib/node.sh
source "$E2E_DIR/lib/node.sh"
# shellcheck source=lib/scenarios.sh
source "$E2E_DIR/lib/scenarios.sh"
# shellcheck source=lib/perf.sh
source "$E2E_DIR/lib/perf.sh"

ORDER=(1 2 3 4 5 orion perf image 6)

usage() {
  sed -n '4,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

STARTED=$SECONDS
finish() {
  local rc=$?
  trap - EXIT INT TERM
  teardown
  if [ -s "$BASE/bench" ]; then
    log "measurements ($BASE/bench):"
    sed 's/^/#   /' "$BASE/bench" >&2
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$FAIL" -gt 0 ] || [ "$rc" != 0 ]; then
    # keep logs for a post-mortem, drop the bulky runtime state
    rm -rf "$BASE"/ctd-*/root "$BASE"/podman/storage "$BASE/images" 2>/dev/null
    log "logs kept in $BASE/logs"
  else
    rm -rf "$BASE"
  fi
  log "took $((SECONDS - STARTED))s"
  [ "$rc" != 0 ] && [ "$FAIL" = 0 ] && nok "e2e run" "exited with status $rc"
  echo "e2e: $PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ] || exit 1
  exit 0
}

main() {
  local want=() s o
  [ $# -eq 0 ] && set -- all
  DEMO=0
  for s in "$@"; do
    case $s in
      all) want+=("${ORDER[@]}") ;;
      demo) DEMO=1 && want+=(1) ;;
      1 | 2 | 3 | 4 | 5 | 6 | orion | perf | image) want+=("$s") ;;
      -h | --help) usage ;;
      *) echo "unknown scenario: $s" >&2 && usage ;;
    esac
  done
  trap finish EXIT
  trap 'exit 130' INT TERM
  preflight
  setup_tools
  build_binaries
  build_images
  make_node
  node_up
  for o in "${ORDER[@]}"; do
    for s in "${want[@]}"; do
      if [ "$s" = "$o" ]; then
        # a scenario reports its own failures; one that breaks off early must
        # not stop the others (errexit is off inside a function called with ||)
        "scenario_$o" || nok "scenario $o" "broke off with status $?"
        break
      fi
    done
  done
}

main "$@"
