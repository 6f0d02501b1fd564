# shellcheck shell=bash
# install.sh — issue 14's "installed the way users install it", scaffolding:
# on the cluster of lib/cluster.sh (without the host lpu-nri and lpu-dra),
# import the image deploy/container/build-oci.sh builds, `helm install` the
# chart in mode devicePlugin on a simulated node (values `simulate: 8`, the
# chart's own way to run without LPUs), wait for both DaemonSet containers
# Ready, run an LPU pod scheduled by the real scheduler, `helm uninstall`.
# Sourced by test/e2e/run.sh after lib/dra.sh.
#
# Not done yet (see the report of this step): `kubectl apply` of the plain
# manifests, `helm upgrade` with a changed config rolling without an LPU
# container ever starting bare, the node left clean after uninstall (sockets,
# CDI specs, NFD file; the seal key stays), and mode dra.

CHART_NS=lpu-system
CHART_STATE=$BASE/chart-state          # the chart's stateDir (a hostPath)
CHART_NFD=$BASE/chart-nfd

# ds_ready: every DaemonSet of the release has all its pods ready.
ds_ready() {
  local j
  j=$(kc get ds -n "$CHART_NS" -o json 2>/dev/null) || return 1
  jq -e '(.items | length) > 0 and all(.items[]; .status.desiredNumberScheduled > 0 and .status.numberReady == .status.desiredNumberScheduled)' <<<"$j" >/dev/null
}

scenario_install() {
  local script=$REPO/deploy/container/build-oci.sh chart=$REPO/deploy/helm/lpu-node
  local tar=$BASE/oci/lpu-node.tar ref=localhost/lpu-node:e2e helm out env n
  helm=${HELM:-$(command -v helm)}
  if [ ! -f "$script" ] || [ ! -d "$chart" ] || [ -z "$helm" ]; then
    echo "# skip install: needs deploy/container/build-oci.sh, deploy/helm/lpu-node and helm"
    return 0
  fi
  log "install: build-oci.sh image, helm install (mode devicePlugin, simulate 8), DaemonSet Ready, an LPU pod"
  mkdir -p "$BASE/oci" "$CHART_STATE" "$CHART_NFD"
  if ! out=$(IMAGE=localhost/lpu-node bash "$script" "$tar" e2e 2>&1); then
    nok "install: build-oci.sh builds the image" "$(tail -5 <<<"$out")"
    return
  fi
  echo "$out" >"$LOGS/build-oci.log"
  out=$(ctrc -n k8s.io images import "$tar" 2>&1)
  if wait_for 20 cri inspecti "$ref"; then
    ok "install: image $ref imported into the node's containerd"
  else
    nok "install: image $ref imported into the node's containerd" "$out"
    return
  fi
  if ! out=$("$helm" install lpu-node "$chart" --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --create-namespace \
    --set image.repository=localhost/lpu-node --set image.tag=e2e --set image.pullPolicy=Never \
    --set simulate=8 --set config.stateDir="$CHART_STATE" --set config.nri.socket="$(nri_sock a)" \
    --set config.cdi.specDir="$DRA_CDI" --set nfd.featuresDir="$CHART_NFD" \
    --set "config.injection.mounts[0].hostPath=$DRIVER_DIR" \
    --set "config.injection.mounts[0].containerPath=$DRIVER_CTR_DIR" 2>&1); then
    nok "install: helm install the chart" "$(tail -5 <<<"$out")"
    return
  fi
  ok "install: helm install lpu-node (chart $(sed -n 's/^version: //p' "$chart/Chart.yaml"))"
  # the node carries the labels the DaemonSets select on, as a person (or
  # NFD, which this cluster does not run) would set them
  local sel
  for sel in $(kc get ds -n "$CHART_NS" -o json | jq -r '.items[].spec.template.spec.nodeSelector // {} | to_entries[] | "\(.key)=\(.value)"' | sort -u); do
    kc label node "$KNODE" "$sel" --overwrite >/dev/null || nok "install: label node $sel" "$(kc label node "$KNODE" "$sel" --overwrite 2>&1)"
  done
  if wait_for 180 ds_ready; then
    ok "install: the DaemonSet's pods are Ready on $KNODE"
  else
    nok "install: the DaemonSet's pods are Ready" "$(kc get pods -n "$CHART_NS" -o wide 2>&1 | tail -3 | tr '\n' ';') $(kc get events -n "$CHART_NS" -o jsonpath='{range .items[-3:]}{.reason}: {.message} | {end}')"
  fi
  if wait_for 60 eval "[ \"\$(kc get node $KNODE -o jsonpath='{.status.allocatable.hyperaccel\.ai/lpu}')\" = 8 ]"; then
    ok "install: node $KNODE advertises hyperaccel.ai/lpu: 8"
    dra_pod chart-four extended hyperaccel.ai/lpu=4
    if wait_pod chart-four 90; then
      env=$(ctr_env chart-four LPU_VISIBLE_DEVICES)
      n=$(visible_list "$env" | wc -w)
      expect "install: a pod asking hyperaccel.ai/lpu: 4 runs with 4 LPUs (LPU_VISIBLE_DEVICES=$env)" "LPU_VISIBLE_DEVICES=$env" test "$n" = 4
    else
      nok "install: a pod asking hyperaccel.ai/lpu: 4 runs" "$(pod_why chart-four)"
    fi
    delete_pod chart-four
  else
    nok "install: node advertises hyperaccel.ai/lpu: 8" "allocatable: $(kc get node "$KNODE" -o jsonpath='{.status.allocatable}')"
  fi
  out=$("$helm" uninstall lpu-node --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --wait --timeout 60s 2>&1) ||
    nok "install: helm uninstall" "$(tail -3 <<<"$out")"
  if wait_for 60 eval "[ -z \"\$(kc get pods -n $CHART_NS -o name 2>/dev/null)\" ]"; then
    ok "install: helm uninstall removed the DaemonSet's pods"
  else
    nok "install: helm uninstall removed the DaemonSet's pods" "$(kc get pods -n "$CHART_NS" -o name | tr '\n' ' ')"
  fi
  echo "# install: not yet covered: plain manifests, helm upgrade without a bare LPU container, node clean after uninstall, mode dra"
}
