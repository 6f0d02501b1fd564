#!/usr/bin/env bash
# run.sh — end-to-end tests of the LPU node stack on a real node: a standalone
# kubelet, containerd 2.x with NRI, runc, podman (CDI), a simulated LPU node
# with real character devices, and our two daemons built from this checkout.
#
# usage: test/e2e/run.sh [--list] [GROUP|SCENARIO...]
#   --list    every scenario: its name, its old number (still accepted) and
#             what it checks
#   all       the node scenarios 1 2 3 4 5 orion perf image 6 (the default)
#   demo      node-ring-allocation (1), printing what each pod's container sees
#   security  the hostile tenant (lib/security.sh); not part of all
#   dra       d1..d12 on a real cluster (etcd, apiserver, scheduler, ...)
#   demo-dra  d1 d2, printing what each pod sees and its claim
#   install   on that cluster: the image, the chart (install, upgrade,
#             uninstall) and the plain manifests, installed as users do;
#             with Node Feature Discovery v0.19.0 (NFD_TARBALL, lib/nfd.sh)
#             labelling the node for the chart
#   crio      scenarios 1-4, CRI-O's annotation copy and the runtime's
#             security cases on CRI-O (lib/crio.sh); CRIO_BIN, PINNS_BIN
#   SCENARIO  a name from --list or its number; node ones run in the
#             canonical order, DRA ones on their own cluster
# env: BASE (private base dir; default a fresh /tmp/lpu-e2e.XXXX), KEEP=1
#      (leave $BASE on disk), PERF_ROUNDS, PERF_BLOCK, LPU_DRA (a prebuilt
#      lpu-dra for the DRA run instead of the checkout's), CONTAINERD=1.7
#      (the node on containerd 1.7 with deploy/runtime/containerd-1.7.toml
#      instead of 2.4.2 with the 2.x drop-in), NFD_TARBALL (nfd-master,
#      nfd-worker and CRDs for install; default
#      ../shared/tools/nfd-0.19.0-linux-amd64.tar.gz; absent: NFD skipped).
#
# Must run as root. Every assertion prints "ok - WHAT" or "not ok - SCENARIO:
# WHAT: saw ..." (or "expected X, saw Y");
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
# shellcheck source=lib/dra_prefilter.sh
source "$E2E_DIR/lib/dra_prefilter.sh"
# shellcheck source=lib/install.sh
source "$E2E_DIR/lib/install.sh"
# shellcheck source=lib/install_upgrade.sh
source "$E2E_DIR/lib/install_upgrade.sh"
# shellcheck source=lib/install_dra_cases.sh
source "$E2E_DIR/lib/install_dra_cases.sh"
# shellcheck source=lib/install_nodemode.sh
source "$E2E_DIR/lib/install_nodemode.sh"
# shellcheck source=lib/security.sh
source "$E2E_DIR/lib/security.sh"
# shellcheck source=lib/dra_shared.sh
source "$E2E_DIR/lib/dra_shared.sh"
# shellcheck source=lib/crio.sh
source "$E2E_DIR/lib/crio.sh"
# shellcheck source=lib/nfd.sh
source "$E2E_DIR/lib/nfd.sh"

# The scenarios: NAME ALIAS KIND PURPOSE. KIND node runs on the standalone
# kubelet node, dra on the cluster, crio on the CRI-O node (run.sh crio);
# the order is the canonical one. scenario_ALIAS runs one.
SCENARIOS='
node-ring-allocation     1        node pods of 4 and 2 LPUs see disjoint ring arcs, ring-ordered env, a read-only driver dir; one that does not fit is not admitted
forged-annotations       2        node pod-authored lpu.hyperaccel.ai/* annotations give nothing; an image'"'"'s own LPU_VISIBLE_DEVICES becomes none
kubelet-restart          3        node the plugin re-registers < 1 s after kubelet.sock returns; running pods keep their LPUs
runtime-restart          4        node lpu-nri reconnects after a runtime restart; with lpu-nri down an LPU pod is refused at PreStartContainer
device-health            5        node an ECC_ERROR LPU stops being offered and is offered again at READY
orion-xilinx             orion    node the Orion node (8 Alveo U55C, xilinx backend): render and xclmgmt nodes of ring-neighbour cards; card health
create-latency           perf     node container create latency, lpu-nri injecting 4 LPUs vs a no-op NRI plugin (docs/benchmarks/e2e.md)
oci-image                image    node deploy/container/build-oci.sh output imported with ctr; both daemons'"'"' --version run in it
hostile-tenant           security node forged, replayed, cross-node and legacy seals, privileged pods, a frozen lpu-nri, idle-connection floods
cdi-without-nri          6        node CDI: podman 4.3 with lpu-nri cdi generate, then containerd without NRI and the plugin in cdi mode
dra-strict-arcs          d1       dra  strict 4-arc claims: disjoint ring halves, a third pod Pending until one goes
dra-best-effort          d2       dra  firstAvailable: a 4-arc on an empty ring, else four singles in ring order
dra-extended-resource    d3       dra  hyperaccel.ai/lpu-arc-4: 1 through a DeviceClass extendedResourceName gives one 4-arc; the device-plugin request hyperaccel.ai/lpu: 3 gets 3 ring neighbours
dra-device-health        d4       dra  an ECC_ERROR LPU makes its arcs unallocatable within 1 s; back at READY a full-ring pod runs; kubectl lpu cordon does the same until uncordon, across an lpu-dra restart
dra-plugin-restart       d5       dra  lpu-dra restart: the running pod keeps its LPUs; the new process prepares and unprepares
dra-cdi-cleanup          d6       dra  deleting the pods leaves no CDI spec in the node'"'"'s CDI dir
nri-forged-annotations   d7       dra  lpu-nri on the DRA node: forged annotations give nothing, a pod without LPUs gets none
dra-shared-claims        d8       dra  a named ResourceClaim shared by pods that join after it was prepared; a pod not reserved is refused
dra-admin-access         d9       dra  an admin-access claim is not a holder: it and a tenant'"'"'s claim share an arc
dra-claim-status         d10      dra  lpu-dra writes the claim'"'"'s status.devices; kubectl lpu pods shows it prepared
dra-gang-scheduling      d11      dra  gangs of 4-arc pods run whole on disjoint arcs or hold nothing
dra-node-label-prefilter d12      dra  lpu-dra labels its node from what it publishes; the chart'"'"'s prefilter keeps an 8-arc pod off a node without one; a kubelet restart spares it
chart-install            install  install the image and the chart (install, upgrade, uninstall, mode dra), the plain manifests, NFD labels
crio-annotation-copy     crio_annotations crio CRI-O copies pod annotations into containers; a sealed pod annotation is refused
crio-hostile-tenant      crio_security    crio the hostile tenant'"'"'s runtime cases on CRI-O
'
ALL=(1 2 3 4 5 orion perf image 6)
CLUSTER=0

# scenarios KIND: the aliases of KIND's scenarios, in canonical order.
scenarios() { awk -v k="$1" 'NF && $3 == k { print $2 }' <<<"$SCENARIOS"; }
# scenario_field ALIAS FIELD: the scenario's name (1) or purpose (4).
scenario_field() {
  awk -v a="$1" -v f="$2" 'NF && $2 == a { if (f == 1) print $1; else { $1 = $2 = $3 = ""; sub(/^ +/, ""); print } }' <<<"$SCENARIOS"
}
# scenario_alias WORD: the alias of a scenario named WORD or numbered WORD.
scenario_alias() { awk -v w="$1" 'NF && ($1 == w || $2 == w) { print $2 }' <<<"$SCENARIOS"; }
# scenario_kind ALIAS: node, dra, install or crio.
scenario_kind() { awk -v a="$1" 'NF && $2 == a { print $3 }' <<<"$SCENARIOS"; }

list_scenarios() {
  printf '%-24s %-9s %s\n' NAME ALIAS PURPOSE
  awk 'NF { n = $1; a = $2; $1 = $2 = $3 = ""; sub(/^ +/, ""); printf "%-24s %-9s %s\n", n, a, $0 }' <<<"$SCENARIOS"
}

usage() {
  sed -n '/^# usage:/,/^# Must run/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
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
  [ "$rc" != 0 ] && [ "$FAIL" = 0 ] && nok "e2e run exits with status 0" "status $rc"
  echo "e2e: $PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ] || exit 1
  exit 0
}

# run_scenario ALIAS: one scenario, named in the log and in its failure
# lines. One that breaks off early must not stop the others (errexit is
# off inside a function called with ||).
run_scenario() {
  local rc=0
  SCENARIO_NAME=$(scenario_field "$1" 1)
  log "scenario $SCENARIO_NAME ($1): $(scenario_field "$1" 4)"
  "scenario_$1" || rc=$?
  [ "$rc" = 0 ] || nok "runs to its end" "it broke off with status $rc"
  SCENARIO_NAME=teardown
}

# run_in_order KIND WANT...: each wanted scenario of KIND once, in canonical order.
run_in_order() {
  local kind=$1 o
  shift
  for o in $(scenarios "$kind"); do
    if [[ " $* " == *" $o "* ]]; then run_scenario "$o"; fi
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
  run_in_order dra "$@"
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
  build_e2etool
  run_scenario install
}

main() {
  local want=() want_dra=() s a
  [ $# -eq 0 ] && set -- all
  DEMO=0
  for s in "$@"; do
    case $s in
      all) want+=("${ALL[@]}") ;;
      demo) DEMO=1 && want+=(1) ;;
      dra) mapfile -t -O "${#want_dra[@]}" want_dra < <(scenarios dra) ;;
      demo-dra) DEMO=1 && want_dra+=(d1 d2) ;;
      crio) [ $# = 1 ] || { echo "crio runs on its own node: run it alone" >&2; exit 2; }
        crio_binaries_present || { rmdir "$BASE" 2>/dev/null; exit 0; } ;;
      --list) rmdir "$BASE" 2>/dev/null; list_scenarios; exit 0 ;;
      -h | --help) usage ;;
      *)
        a=$(scenario_alias "$s")
        case $(scenario_kind "$a") in
          node) want+=("$a") ;;
          dra | install) want_dra+=("$a") ;;
          crio) echo "$s runs in run.sh crio only" >&2 && exit 2 ;;
          *) echo "unknown scenario: $s (run.sh --list names them)" >&2 && usage ;;
        esac ;;
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
  run_in_order node "${want[@]}"
}

main "$@"
