#!/usr/bin/env bash
# run.sh — end-to-end tests of the LPU node stack on a real node: a standalone
# kubelet, containerd 2.x with NRI, runc, podman (CDI), a simulated LPU node
# with real character devices, and our two daemons built from this checkout.
#
# usage: test/e2e/run.sh [demo|all|SCENARIO...] | [demo-dra|dra|DRA-SCENARIO...]
#   demo      scenario 1, printing what each pod's container sees
#   all       1 2 3 4 5 orion perf image 6 (the default)
#   SCENARIO  any of 1 2 3 4 5 orion 6 perf image, run in that canonical order
#   security  the hostile tenant (lib/security.sh); not part of all
#   dra       d1..d11 on a real cluster (etcd, apiserver, scheduler, ...)
#   demo-dra  d1 d2, printing what each pod sees and its claim
#   install   on that cluster: the image, the chart (install, upgrade,
#             uninstall) and the plain manifests, installed as users do;
#             with Node Feature Discovery v0.19.0 (NFD_TARBALL, lib/nfd.sh)
#             labelling the node for the chart
#   crio      scenarios 1-4, CRI-O's annotation copy and the runtime's
#             security cases on CRI-O (lib/crio.sh); CRIO_BIN, PINNS_BIN
# env: BASE (private base dir; default a fresh /tmp/lpu-e2e.XXXX), KEEP=1
#      (leave $BASE on disk), PERF_ROUNDS, PERF_BLOCK, LPU_DRA (a prebuilt
#      lpu-dra for the DRA run instead of the checkout's), CONTAINERD=1.7
#      (the node on containerd 1.7 with deploy/runtime/containerd-1.7.toml
#      instead of 2.4.2 with the 2.x drop-in), NFD_TARBALL (nfd-master,
#      nfd-worker and CRDs for install; default
#      ../shared/tools/nfd-0.19.0-linux-amd64.tar.gz; absent: NFD skipped).
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
# shellcheck source=lib/cluster.sh
source "$E2E_DIR/lib/cluster.sh"
# shellcheck source=lib/dra.sh
source "$E2E_DIR/lib/dra.sh"
# shellcheck source=lib/dra_status.sh
source "$E2E_DIR/lib/dra_status.sh"
# shellcheck source=lib/dra_gang.sh
source "$E2E_DIR/lib/dra_gang.sh"
# shellcheck source=lib/install.sh
source "$E2E_DIR/lib/install.sh"
# shellcheck source=lib/install_upgrade.sh
source "$E2E_DIR/lib/install_upgrade.sh"
# shellcheck source=lib/security.sh
source "$E2E_DIR/lib/security.sh"
# shellcheck source=lib/dra_shared.sh
source "$E2E_DIR/lib/dra_shared.sh"
# shellcheck source=lib/crio.sh
source "$E2E_DIR/lib/crio.sh"
# shellcheck source=lib/nfd.sh
source "$E2E_DIR/lib/nfd.sh"

ALL=(1 2 3 4 5 orion perf image 6)
# security runs on the same node before 6, which takes that node down
ORDER=(1 2 3 4 5 orion perf image security 6)
DRA_ORDER=(d1 d2 d3 d4 d5 d6 d7 d8 d9 d10 d11)
CLUSTER=0

usage() {
  sed -n '4,26p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

STARTED=$SECONDS
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$CLUSTER" = 1 ]; then nfd_down; cluster_teardown; else teardown; fi
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

# run_in_order ORDER... -- WANT...: each wanted scenario once, in ORDER.
run_in_order() {
  local order=() want=() o s
  while [ "$1" != -- ]; do order+=("$1") && shift; done
  shift
  want=("$@")
  for o in "${order[@]}"; do
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

# main_dra WANT...: the DRA scenarios on their own single-node cluster. While
# the checkout has no cmd/lpu-dra the cluster still comes up and runs a pod,
# and the scenarios are skipped.
main_dra() {
  CLUSTER=1
  preflight
  setup_tools
  setup_cluster_tools
  build_binaries
  build_images
  make_node
  cluster_up
  cluster_smoke
  if ! build_lpu_dra; then
    echo "# skip DRA scenarios ${*}: the checkout has no cmd/lpu-dra"
    return 0
  fi
  dra_up
  dra_objects
  run_in_order "${DRA_ORDER[@]}" -- "$@"
  record_dra_rss
}

# main_install: the chart on a cluster node without the host daemons.
main_install() {
  CLUSTER=1
  preflight
  setup_tools
  setup_cluster_tools
  build_images
  echo "fake LPU runtime library" >"$DRIVER_DIR/$DRIVER_MARKER"
  cluster_up bare
  scenario_install || nok "scenario install" "broke off with status $?"
}

main() {
  local want=() want_dra=() s
  [ $# -eq 0 ] && set -- all
  DEMO=0
  for s in "$@"; do
    case $s in
      all) want+=("${ALL[@]}") ;;
      demo) DEMO=1 && want+=(1) ;;
      1 | 2 | 3 | 4 | 5 | 6 | orion | perf | image | security) want+=("$s") ;;
      dra) want_dra+=("${DRA_ORDER[@]}") ;;
      demo-dra) DEMO=1 && want_dra+=(d1 d2) ;;
      d1 | d2 | d3 | d4 | d5 | d6 | d7 | d8 | d9 | d10 | d11) want_dra+=("$s") ;;
      install) want_dra+=(install) ;;
      crio) [ $# = 1 ] || { echo "crio runs on its own node: run it alone" >&2; exit 2; }
        crio_binaries_present || { rmdir "$BASE" 2>/dev/null; exit 0; } ;;
      -h | --help) usage ;;
      *) echo "unknown scenario: $s" >&2 && usage ;;
    esac
  done
  if [ ${#want[@]} -gt 0 ] && [ ${#want_dra[@]} -gt 0 ]; then
    echo "the DRA scenarios run on their own cluster: run them in a separate run.sh" >&2
    exit 2
  fi
  trap finish EXIT
  trap 'exit 130' INT TERM
  [ "$1" = crio ] && { main_crio; return; }
  if [ "${want_dra[*]}" = install ]; then
    main_install
    return
  fi
  if [ ${#want_dra[@]} -gt 0 ]; then
    main_dra "${want_dra[@]}"
    return
  fi
  preflight
  setup_tools
  build_binaries
  build_images
  make_node
  node_up
  run_in_order "${ORDER[@]}" -- "${want[@]}"
}

main "$@"
