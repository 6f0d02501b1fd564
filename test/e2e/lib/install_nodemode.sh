#!/usr/bin/env bash
# Per-node mode (chart values nodeModes): one node moved from the device
# plugin to DRA by its label while a device-plugin pod keeps running on it.
# Sourced by run.sh; uses lib/install.sh, lib/dra.sh and lib/cluster.sh.

MODE_LABEL=hyperaccel.ai/lpu.mode

# ds_gone NAME: DaemonSet NAME wants no pod on any node and has none left.
ds_gone() {
  kc get ds -n "$CHART_NS" "$1" -o json 2>/dev/null | jq -e '.status.desiredNumberScheduled == 0 and (.status.numberMisscheduled // 0) == 0' >/dev/null &&
    kc get pods -n "$CHART_NS" -o json | jq -e --arg n "$1" '[.items[] | select((.metadata.ownerReferences // [])[0].name == $n)] | length == 0' >/dev/null
}

# moved_to_dra: the node runs lpu-nri and lpu-dra of the -dranode
# DaemonSets, and the device plugin's DaemonSet left it.
moved_to_dra() { ds_gone lpu-node && named_ds_ready lpu-node-dranode && named_ds_ready lpu-node-dranode-dra; }

# published_lpus: every LPU index in the node's published devices.
published_lpus() {
  kc get resourceslices -o json | jq -r --arg n "$KNODE" --arg d "$DRA_DRIVER" '
    [.items[] | select(.spec.nodeName == $n and .spec.driver == $d) | (.spec.devices // [])[]
     | (.attributes["lpus"] // .attributes[$d + "/lpus"]).string // empty] | join(",")' | tr ',' '\n' | sed 's/lpu//' | grep . | sort -un | tr '\n' ' '
}

# arc_beside DEVS HELD: DEVS is a 4-arc of RING sharing no LPU with HELD.
arc_beside() { is_arc_of 4 "$1" && disjoint "$1" "$2"; }

# disjoint "A B" "C D": no word of the first is in the second.
disjoint() {
  local w
  for w in $1; do grep -qw -- "$w" <<<"$2" && return 1; done
  return 0
}

# published_without LPUS: the node's slices publish devices, and none holds
# one of LPUS.
published_without() { local p; p=$(published_lpus) && [ -n "$p" ] && disjoint "$1" "$p"; }

# install_node_mode HELM CHART: mode devicePlugin with nodeModes.enabled; a
# pod asking hyperaccel.ai/lpu: 4 runs; the node is labelled
# hyperaccel.ai/lpu.mode=dra: the device plugin's DaemonSet leaves, lpu-nri
# and lpu-dra of the -dranode DaemonSets arrive, the device-plugin pod keeps
# running with its LPUs, lpu-dra publishes none of them, and a pod with the
# chart's lpu-arc-4 claim gets the other four; helm uninstall.
install_node_mode() {
  local helm=$1 chart=$2 out state=$BASE/chart-mode-state dp_devs devs
  cluster_chart_install "node mode" "$helm" "$chart" "$state" --set nodeModes.enabled=true || return 0
  # the release-mode DaemonSet's node selector only: the -dranode ones
  # select the mode label, which this case sets later
  for out in $(kc get ds -n "$CHART_NS" lpu-node -o json | jq -r '.spec.template.spec.nodeSelector // {} | to_entries[] | "\(.key)=\(.value)"'); do
    kc label node "$KNODE" "$out" --overwrite >>"$LOGS/kubectl.log" 2>&1
  done
  expect "node mode: without $MODE_LABEL the node runs the release's mode, devicePlugin (DaemonSet lpu-node Ready)" \
    "$(kc get pods -n "$CHART_NS" -o wide 2>&1 | tr '\n' ';')" wait_for 180 named_ds_ready lpu-node
  dra_pod mode-dp extended hyperaccel.ai/lpu=4
  if ! wait_pod mode-dp 90; then
    nok "node mode: a pod asking hyperaccel.ai/lpu: 4 runs" "$(pod_why mode-dp)"
    mode_cleanup "$helm" "$state"
    return
  fi
  dp_devs=$(ctr_devs mode-dp)
  ok "node mode: a device-plugin pod runs with /dev/lpu{$dp_devs}"

  kc label node "$KNODE" "$MODE_LABEL=dra" --overwrite >>"$LOGS/kubectl.log" 2>&1
  expect "node mode: labelled $MODE_LABEL=dra, the device plugin's DaemonSet leaves and lpu-node-dranode (lpu-nri) and lpu-node-dranode-dra (lpu-dra) run" \
    "$(kc get ds,pods -n "$CHART_NS" -o wide 2>&1 | tr '\n' ';')" wait_for 180 moved_to_dra
  expect "node mode: the device-plugin pod keeps running with the same LPUs (/dev/lpu{$dp_devs})" \
    "phase $(phase mode-dp), devices [$(ctr_devs mode-dp)]" runs_with mode-dp "$dp_devs" "$(ctr_devs mode-dp)"
  expect "node mode: lpu-dra publishes none of the LPUs the device-plugin pod holds (published: $(published_lpus))" \
    "published [$(published_lpus)], held [$dp_devs]; $(kc logs -n "$CHART_NS" -l hyperaccel.ai/daemon=lpu-dra --tail 3 2>&1 | tr '\n' ' ')" \
    wait_for 60 published_without "$dp_devs"
  dra_pod mode-dra template "$TPL_STRICT4"
  if wait_pod mode-dra 90; then
    devs=$(ctr_devs mode-dra)
    sim_ring "$state" || nok "node mode: ring of the simulated node" "no ring under $state/simulated-node"
    expect "node mode: a $TPL_STRICT4 claim pod gets a contiguous 4-arc beside it (/dev/lpu{$devs}), none of the device-plugin pod's" \
      "devices [$devs], held [$dp_devs], ring [${RING[*]}]" arc_beside "$devs" "$dp_devs"
  else
    nok "node mode: a pod with claim template $TPL_STRICT4 runs beside the device-plugin pod" "$(pod_why mode-dra)"
  fi
  mode_cleanup "$helm" "$state"
}

# mode_cleanup HELM STATE: the case's pods, the release and the label go.
mode_cleanup() {
  local out
  delete_pod mode-dra
  delete_pod mode-dp
  out=$("$1" uninstall lpu-node --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --wait --timeout 60s 2>&1) ||
    nok "node mode: helm uninstall" "$(tail -3 <<<"$out")"
  kc label node "$KNODE" "$MODE_LABEL-" >>"$LOGS/kubectl.log" 2>&1
  if wait_for 60 empty kc get pods -n "$CHART_NS" -o name; then
    ok "node mode: helm uninstall removed the DaemonSets' pods"
  else
    nok "node mode: helm uninstall removed the DaemonSets' pods" "$(kc get pods -n "$CHART_NS" -o name | tr '\n' ' ')"
  fi
  node_clean "node mode uninstall" "$2" "$BASE/no-nfd"
  stop_daemon api-relay 2
}
