# shellcheck shell=bash
# dra_prefilter.sh — scenario d12: the node-label prefilter (docs/dra.md,
# "Node-label prefilter"). lpu-dra, with the chart's ClusterRole, keeps
# lpu.hyperaccel.ai/largest-free-arc and free-lpus on its Node from what it
# publishes; the chart's MutatingAdmissionPolicy gives pods of the chart's
# claim templates a required node affinity on them, so the scheduler drops
# a node that cannot fit before the DRA filter; a running pod's own claim
# never takes its node's labels below what it was admitted with, so a
# kubelet restart does not end it. Sourced by test/e2e/run.sh.

LBL_ARC=lpu.hyperaccel.ai/largest-free-arc
LBL_FREE=lpu.hyperaccel.ai/free-lpus

# node_label KEY: the value of the node's label KEY (empty when absent).
node_label() { kc get node "$KNODE" -o json | jq -r --arg k "$1" '.metadata.labels[$k] // ""'; }
# labels_are ARC FREE: the node's two labels are ARC and FREE.
labels_are() { [ "$(node_label "$LBL_ARC")" = "$1" ] && [ "$(node_label "$LBL_FREE")" = "$2" ]; }
labels_seen() { echo "$LBL_ARC=$(node_label "$LBL_ARC") $LBL_FREE=$(node_label "$LBL_FREE")"; }
# expect_labels WHAT SECONDS ARC FREE: within SECONDS the labels are ARC and
# FREE; a failure shows what they are then.
expect_labels() {
  if wait_for "$2" labels_are "$3" "$4"; then ok "$1"; else nok "$1" "expected $LBL_ARC=$3 $LBL_FREE=$4, saw $(labels_seen)"; fi
}

# prefilter_policy apply|delete: the chart's MutatingAdmissionPolicy
# *-dra-prefilter, its binding and the ConfigMap of parameters it reads,
# rendered for mode=dra.
prefilter_policy() {
  local helm=${HELM:-$(command -v helm)}
  "$helm" template e2e "$CHART" -n default --kube-version 1.37.2 --set mode=dra |
    awk 'BEGIN{RS="\n---"} (/\nkind: MutatingAdmissionPolicy(Binding)?\n/ && /name: e2e-lpu-node-dra-prefilter\n/) ||
      (/\nkind: ConfigMap\n/ && /name: e2e-lpu-node-policy-params\n/) {print "---"; print}' |
    kc "$1" -f - >>"$LOGS/kubectl.log" 2>&1
}

# has_prefilter NAME NOTIN: pod NAME's every required term carries
# largest-free-arc NotIn exactly the values NOTIN (comma-separated).
has_prefilter() {
  [ "$(kc get pod "$1" -o json | jq -r --arg k "$LBL_ARC" '
    [.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[]
     | [.matchExpressions[]? | select(.key == $k and .operator == "NotIn") | .values | join(",")] | first // "none"]
    | unique | join(";")')" = "$2" ]
}
# dry_run_gets_prefilter: a dry-run pod of lpu-arc-8 gets the affinity (the
# policy is live: admission policies load asynchronously).
dry_run_gets_prefilter() {
  pod_manifest pf-probe default busybox "" "  resourceClaims:
  - {name: lpus, resourceClaimTemplateName: lpu-arc-8}" "    resources:
      claims: [{name: lpus}]" | kc apply --dry-run=server -o json -f - 2>/dev/null |
    jq -e --arg k "$LBL_ARC" '[.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions[] | select(.key == $k)] | length == 1' >/dev/null
}
# unschedulable_by_affinity NAME: Pending Unschedulable, the scheduler
# naming the node affinity.
unschedulable_by_affinity() {
  unschedulable "$1" && says "affinity" kc get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}'
}
# failed_by_affinity NAME: the kubelet rejected pod NAME at admission.
failed_by_affinity() { [ "$(phase "$1")" = Failed ] || says NodeAffinity kc get pod "$1" -o jsonpath='{.status.reason}'; }

# ---------------------------------------------------------------- d12
scenario_d12() {
  log "DRA d12: node-label prefilter"
  local t0 restarts
  delete_all_pods
  if ! wait_for 30 labels_are 8 8; then
    nok "prefilter: lpu-dra labels its empty node largest-free-arc 8, free-lpus 8" "$(labels_seen); $(grep -i 'label' "$LOGS/lpu-dra.log" | tail -2)"
    return
  fi
  ok "prefilter: lpu-dra labels its empty node largest-free-arc 8, free-lpus 8"
  if ! prefilter_policy apply || ! wait_for 30 dry_run_gets_prefilter; then
    nok "prefilter: the chart's dra-prefilter policy gives an lpu-arc-8 pod its node affinity" "$(tail -3 "$LOGS/kubectl.log")"
    prefilter_policy delete
    return
  fi
  ok "prefilter: the chart's dra-prefilter policy gives an lpu-arc-8 pod its node affinity"

  dra_pod pf-two template lpu-arc-2
  if wait_pod pf-two 60; then
    expect "pf-two: its required affinity is largest-free-arc NotIn 0,1" "$(kc get pod pf-two -o jsonpath='{.spec.affinity}')" has_prefilter pf-two 0,1
    check_dra_container pf-two 2
  else
    nok "pf-two: an lpu-arc-2 pod runs with the prefilter" "$(pod_why pf-two)"
  fi
  # 6 free in a row (the e2e's lpu-dra config publishes every arc size; with
  # the chart's sizes 1, 2, 4, 8 it would be 4), written after a fall's 5 s;
  # its own claim holds 2, below that.
  expect_labels "prefilter: with a 2-arc prepared the labels fall to 6 and 6" 20 6 6
  dra_pod pf-eight template lpu-arc-8
  if wait_for 30 unschedulable_by_affinity pf-eight; then
    ok "pf-eight: an 8-arc pod waits Pending, rejected by the node affinity before the DRA filter"
  else
    nok "pf-eight: an 8-arc pod waits Pending, rejected by the node affinity" "$(pod_why pf-eight)"
  fi
  t0=$(now_ns)
  delete_pod pf-two
  expect_labels "prefilter: the labels rise to 8 and 8 as the 2-arc goes" 30 8 8
  log "labels back at 8 $((($(now_ns) - t0) / 1000000)) ms after pf-two's delete began"
  if wait_pod pf-eight 90; then
    ok "pf-eight: runs once the labels say the ring is free ($((($(now_ns) - t0) / 1000000)) ms after pf-two's delete began)"
    check_dra_container pf-eight 8
  else
    nok "pf-eight: runs once the ring is free" "$(pod_why pf-eight); $(labels_seen)"
  fi
  # The whole ring is held, yet its pod was admitted with NotIn 0..7.
  sleep 6
  expect_labels "prefilter: with the whole ring prepared the labels stay 8 (never below what a running pod was admitted with)" 1 8 8

  # A hand edit is undone.
  kc label node "$KNODE" --overwrite "$LBL_ARC=0" >>"$LOGS/kubectl.log" 2>&1
  expect_labels "prefilter: a largest-free-arc edited to 0 by hand is put back within 10 s" 10 8 8
  kc label node "$KNODE" "$LBL_FREE-" >>"$LOGS/kubectl.log" 2>&1
  expect_labels "prefilter: a free-lpus label removed by hand is put back within 10 s" 10 8 8

  # The kubelet re-admits every pod when it restarts, required node
  # affinity included: pf-eight must still match its node.
  restarts=$(kc get pod pf-eight -o jsonpath='{.status.containerStatuses[0].restartCount}')
  kubelet_stop
  registered_kubelet_start
  wait_for 60 node_ready || nok "prefilter: the kubelet restarted and the node is Ready" "$(tail -3 "$KUBELET_LOG")"
  sleep 10
  if failed_by_affinity pf-eight; then
    nok "pf-eight: still runs after a kubelet restart (not rejected by its node affinity)" "$(pod_why pf-eight)"
  else
    expect "pf-eight: still runs after a kubelet restart (not rejected by its node affinity)" "$(pod_why pf-eight)" \
      runs_with pf-eight "$restarts" "$(kc get pod pf-eight -o jsonpath='{.status.containerStatuses[0].restartCount}')"
  fi
  wait_for 30 kubelet_saw_dra || log "no kubelet registration line for $DRA_DRIVER after the restart yet"
  prefilter_policy delete
  delete_all_pods
  expect_labels "prefilter: the labels are 8 and 8 again with no pod" 30 8 8
}
