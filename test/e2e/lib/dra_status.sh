# shellcheck shell=bash
# dra_status.sh — DRA scenario d10 (issue 20, item 4): lpu-dra writes the
# claim's status.devices after Prepare, and `kubectl lpu pods` reads it.
#
# The e2e runs lpu-dra as user lpu-dra (a client certificate), which has no
# node association, so the chart's associated-node:patch on
# resourceclaims/driver cannot match it; this scenario grants the
# arbitrary-node verb for the driver name instead (e2e only: in a cluster
# lpu-dra's pod token is bound to its node). The chart's rule itself is
# tested against the real API server in cmd/lpu-dra/internal/driver.

# status_lpus CLAIM: the LPU indices of lpu-dra's status.devices entries, in
# allocation order, comma-joined.
status_lpus() {
  kc get resourceclaim "$1" -o json | jq -r --arg d "$DRA_DRIVER" '
    [(.status.devices // [])[] | select(.driver == $d) | .data.lpus[]] | map(ltrimstr("lpu")) | join(",")'
}
status_written() { [ -n "$(status_lpus "$1")" ]; }

scenario_d10() {
  log "DRA d10: claim status.devices and kubectl lpu pods"
  local claim st env lpu_out paths
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF2
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lpu-dra-e2e-status}
rules:
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims/driver]
  resourceNames: [$DRA_DRIVER]
  verbs: [arbitrary-node:patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lpu-dra-e2e-status}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lpu-dra-e2e-status}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: lpu-dra}]
EOF2
  dra_pod st-2 template lpu-arc-2
  if ! wait_pod st-2 90; then
    nok "st-2: a 2-arc pod runs" "$(pod_why st-2)"
    return
  fi
  claim=$(claim_of st-2)
  if wait_for 20 status_written "$claim"; then
    st=$(status_lpus "$claim")
    env=$(ctr_env st-2 LPU_VISIBLE_DEVICES)
    expect "st-2: claim $claim status.devices lists the container's LPU_VISIBLE_DEVICES in ring order" \
      "status [$st], LPU_VISIBLE_DEVICES=$env" test "$st" = "$env"
    paths=$(kc get resourceclaim "$claim" -o json | jq -r --arg d "$DRA_DRIVER" \
      '[(.status.devices // [])[] | select(.driver == $d) | .data.deviceNodes[]] | join(" ")')
    expect "st-2: status.devices names the container's device nodes" "status [$paths], container [$(lpu_nodes st-2 | tr '\n' ' ')]" \
      test "$(tr ' ' '\n' <<<"$paths" | sed 's#.*/lpu##' | sort -n | tr '\n' ' ')" = "$(lpu_nodes st-2 | sort -n | tr '\n' ' ')"
  else
    nok "st-2: lpu-dra wrote claim $claim status.devices" "$(grep -i 'claim device status' "$LOGS/lpu-dra.log" | tail -2)"
  fi
  if CGO_ENABLED=0 go_build cmd/kubectl-lpu >>"$LOGS/kubectl.log"; then
    lpu_out=$("$BASE/bin/kubectl-lpu" pods -o json --kubeconfig "$CL/admin.kubeconfig" 2>&1)
    expect "kubectl lpu pods -o json: st-2 prepared with the status's LPUs" "$lpu_out" \
      test "$(jq -r '.[] | select(.name == "st-2") | "\(.prepared) \(.lpus | map(ltrimstr("lpu")) | join(","))"' <<<"$lpu_out" 2>/dev/null)" = "true ${st:-?}"
    expect "kubectl lpu pods: st-2 shown prepared" "$("$BASE/bin/kubectl-lpu" pods --kubeconfig "$CL/admin.kubeconfig" 2>&1)" \
      says "^default/st-2 .* prepared " "$BASE/bin/kubectl-lpu" pods --kubeconfig "$CL/admin.kubeconfig"
  else
    nok "build kubectl-lpu" "$(tail -3 "$LOGS/kubectl.log")"
  fi
  delete_pod st-2
  if wait_for 30 not status_written "$claim"; then ok "st-2: status.devices gone after the pod"; else nok "st-2: status.devices gone after the pod" "status [$(status_lpus "$claim")]"; fi
}
