# shellcheck shell=bash
# install_dra_cases.sh — issue 33's two defects, on the chart installed in
# mode dra (lib/install.sh's install_dra):
#   - dra_other_vendor: a pod whose claim is another DRA driver's starts
#     untouched (no required-plugins annotation) while lpu-nri is down, and
#     an LPU claim pod beside it waits for lpu-nri, then runs;
#   - dra_node_config: with a named node config (two rings of 4), the node
#     labelled for it runs that config's lpu-dra, whose published arcs and
#     a claim's LPUs follow the config's rings, not the simulated ring of 8.
# Sourced by test/e2e/run.sh after lib/install.sh.

OTHER_DRIVER=gpu.example.com
CONFIG_LABEL=hyperaccel.ai/lpu.config

# other_vendor_objects: the second driver's DeviceClass and a claim template
# in default (no LPU class: the chart's claim policies let it be).
other_vendor_objects() {
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: $OTHER_DRIVER}
spec:
  selectors:
  - cel: {expression: 'device.driver == "$OTHER_DRIVER"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-one, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: $OTHER_DRIVER}
EOF
}

# other_slices_published: the fake driver's devices are in a ResourceSlice.
other_slices_published() {
  [ "$(kc get resourceslices -o json 2>/dev/null | jq --arg d "$OTHER_DRIVER" \
    '[.items[] | select(.spec.driver == $d) | (.spec.devices // [])[]] | length')" -gt 0 ]
}

# nri_ds: the chart's lpu-nri DaemonSet in mode dra (the one without lpu-dra).
nri_ds() {
  kc get ds -n "$CHART_NS" -o json | jq -r '.items[] | select(all(.spec.template.spec.containers[]; .name != "lpu-dra")) | .metadata.name' | head -1
}

# ds_pods_gone DS: no pod of the chart's DaemonSet DS is left, and its
# lpu-nri no longer answers readiness.
ds_pods_gone() {
  [ "$(kc get pods -n "$CHART_NS" -o json | jq --arg d "$1" '[.items[] | select(any(.metadata.ownerReferences[]?; .name == $d))] | length')" = 0 ] &&
    ! injector_up "$2"
}

# not_annotated NAME: the pod carries no required-plugins annotation.
not_annotated() {
  [ -z "$(kc get pod "$1" -o jsonpath='{.metadata.annotations.required-plugins\.noderesource\.dev}')" ]
}

# waits_for_lpu_nri NAME: the pod's container is refused by the runtime's
# validator because lpu-nri is not there.
waits_for_lpu_nri() {
  says 'required plugin' kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.waiting.message}'
}

dra_other_vendor() {
  local state=$1 ds msg
  start_daemon fakedra "$LOGS/fakedra.log" "$BASE/bin/fakedra" --driver "$OTHER_DRIVER" --node "$KNODE" \
    --kubeconfig "$CL/admin.kubeconfig" --plugin-dir "$KUBELET_C/root/plugins/$OTHER_DRIVER" --registry-dir "$DRA_REGISTRY_DIR"
  other_vendor_objects
  if ! wait_for 60 other_slices_published; then
    nok "dra other vendor: a second DRA driver ($OTHER_DRIVER) publishes its devices" "$(tail -3 "$LOGS/fakedra.log" | tr '\n' ' ')"
    stop_daemon fakedra 2
    return
  fi
  ok "dra other vendor: a second DRA driver ($OTHER_DRIVER) publishes its devices on $KNODE"
  ds=$(nri_ds)
  kc -n "$CHART_NS" patch ds "$ds" --type merge -p '{"spec":{"template":{"spec":{"nodeSelector":{"e2e-lpu-nri":"off"}}}}}' >>"$LOGS/kubectl.log" 2>&1
  # readiness says "gone" at once, but a stopping lpu-nri keeps serving the
  # runtime for its drain (plugin.DefaultDrain): wait for its pod to go
  expect "dra other vendor: lpu-nri ($ds) is down on $KNODE" "$(kc get pods -n "$CHART_NS" -o wide 2>&1 | tr '\n' ';')" \
    wait_for 90 ds_pods_gone "$ds" "$state"
  dra_pod gpu-pod template gpu-one
  dra_pod lpu-gated template "$TPL_STRICT4"
  expect "dra other vendor: the $OTHER_DRIVER claim pod runs while lpu-nri is down" "$(pod_why gpu-pod)" wait_pod gpu-pod 90
  expect "dra other vendor: ... with no required-plugins annotation (the gate left it alone)" \
    "annotations: $(kc get pod gpu-pod -o jsonpath='{.metadata.annotations}')" not_annotated gpu-pod
  msg=$(kc get pod lpu-gated -o jsonpath='{.status.containerStatuses[0].state.waiting.message}' 2>/dev/null)
  expect "dra other vendor: the LPU claim pod beside it is refused by the runtime's validator" "$(pod_why lpu-gated) $msg" \
    wait_for 60 waits_for_lpu_nri lpu-gated
  kc -n "$CHART_NS" patch ds "$ds" --type json -p '[{"op":"remove","path":"/spec/template/spec/nodeSelector/e2e-lpu-nri"}]' >>"$LOGS/kubectl.log" 2>&1
  expect "dra other vendor: with lpu-nri back the LPU claim pod runs" "$(pod_why lpu-gated)" wait_pod lpu-gated 180
  delete_pod gpu-pod
  delete_pod lpu-gated
  kc delete resourceclaimtemplate gpu-one -n default >>"$LOGS/kubectl.log" 2>&1
  kc delete deviceclass "$OTHER_DRIVER" >>"$LOGS/kubectl.log" 2>&1
  stop_daemon fakedra 5
}

# config_arcs: lpu-dra publishes arcs of two rings of 4 for the node (a
# ring1 arc, no 8-arc), as config ring4 says.
config_arcs() {
  kc get resourceslices -o json 2>/dev/null | jq -e --arg d "$DRA_DRIVER" --arg n "$KNODE" \
    '[.items[] | select(.spec.driver == $d and .spec.nodeName == $n) | (.spec.devices // [])[].name] as $a
     | ($a | length) > 0 and ($a | any(startswith("ring1-"))) and ($a | all(test("size8") | not))' >/dev/null
}

# config_ring_arc LIST: LIST (comma-separated indexes) runs along one ring
# of config ring4: even LPUs or odd ones, in ring order from any start.
config_ring_arc() {
  local l=" ${1//,/ } "
  [[ " 0 2 4 6 0 2 4 6 " == *"$l"* || " 1 3 5 7 1 3 5 7 " == *"$l"* ]]
}

# named_ds_ready NAME: the DaemonSet NAME runs ready on the node.
named_ds_ready() {
  kc get ds -n "$CHART_NS" "$1" -o json 2>/dev/null | jq -e '.status.desiredNumberScheduled > 0 and .status.numberReady == .status.desiredNumberScheduled' >/dev/null
}

dra_node_config() {
  local helm=$1 chart=$2 out env devs
  local rings='[["lpu0","lpu2","lpu4","lpu6"],["lpu1","lpu3","lpu5","lpu7"]]'
  kc delete pods -l e2e-upg=1 --wait=true --timeout=60s >>"$LOGS/kubectl.log" 2>&1
  if ! out=$("$helm" upgrade lpu-node "$chart" --reuse-values --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" \
    --set-json "nodeConfigs.configs.ring4={\"topology\":{\"source\":\"config\",\"rings\":$rings}}" 2>&1); then
    nok "dra node config: helm upgrade with nodeConfigs.configs.ring4" "$(tail -3 <<<"$out")"
    return
  fi
  kc label node "$KNODE" "$CONFIG_LABEL=ring4" --overwrite >>"$LOGS/kubectl.log" 2>&1
  expect "dra node config: the node labelled $CONFIG_LABEL=ring4 runs lpu-dra of config ring4" \
    "$(kc get pods -n "$CHART_NS" -o wide 2>&1 | tr '\n' ';')" wait_for 180 named_ds_ready "lpu-node-dra-ring4"
  expect "dra node config: its published arcs follow the config's two rings of 4 (a ring1 arc, no 8-arc)" \
    "devices: $(kc get resourceslices -o json | jq -r --arg n "$KNODE" '[.items[] | select(.spec.nodeName == $n) | (.spec.devices // [])[].name] | join(" ")')" \
    wait_for 60 config_arcs
  dra_pod cfg-arc template "$TPL_STRICT4"
  if wait_pod cfg-arc 90; then
    env=$(ctr_env cfg-arc LPU_VISIBLE_DEVICES)
    devs=$(ctr_devs cfg-arc)
    expect "dra node config: a $TPL_STRICT4 claim gets one config ring in ring order (LPU_VISIBLE_DEVICES=$env, /dev/lpu{$devs})" \
      "LPU_VISIBLE_DEVICES=$env" config_ring_arc "$env"
  else
    nok "dra node config: a pod with claim template $TPL_STRICT4 runs" "$(pod_why cfg-arc)"
  fi
  delete_pod cfg-arc
  kc label node "$KNODE" "$CONFIG_LABEL-" >>"$LOGS/kubectl.log" 2>&1
}
