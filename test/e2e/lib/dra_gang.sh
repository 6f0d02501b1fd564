# shellcheck shell=bash
# dra_gang.sh — scenario d11: gang scheduling (Workload API, GenericWorkload
# on in lib/cluster.sh's control plane) with lpu-dra's arcs on the real node.
# The chart's example deploy/helm/lpu-node/examples/gang-2x4.yaml is applied
# as shipped, only its image made runnable here. Sourced by test/e2e/run.sh
# after lib/dra.sh.

GANG_EXAMPLE=$CHART/examples/gang-2x4.yaml

# gang_manifest [SED...]: the example with the e2e image (host network, as
# every e2e pod), then each extra sed expression (renames, sizes), each
# container named as its pod.
gang_manifest() {
  local e=(-e "s|^      image: example/lpu-worker.*|      image: $IMG:busybox\n      imagePullPolicy: Never\n      command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]|"
    -e 's|^  schedulingGroup:|  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  tolerations: [{operator: Exists}]\n  schedulingGroup:|') x
  for x in "$@"; do e+=(-e "$x"); done
  # e2e helpers find a pod's container by name = pod name; the example's is "main".
  sed "${e[@]}" "$GANG_EXAMPLE" | awk '/^  name: /{n=$2} /^    - name: main$/{sub(/main$/, n)} {print}'
}
# without_doc NAME: the manifest on stdin without the document of object NAME.
without_doc() { awk -v n="$1" 'BEGIN{RS="\n---\n"; ORS="\n---\n"} $0 !~ ("\n  name: " n "\n") {print}'; }

scheduled_at() { kc get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime}' 2>/dev/null; }
node_of() { kc get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
# holds_nothing POD...: none is bound, and the claims made for them are not
# allocated and have no CDI spec on the node.
holds_nothing() {
  local p c
  for p in "$@"; do
    [ "$(phase "$p")" = Pending ] && [ -z "$(node_of "$p")" ] || return 1
    c=$(kc get pod "$p" -o jsonpath='{.status.resourceClaimStatuses[*].resourceClaimName}' 2>/dev/null)
    for c in $c; do
      [ -z "$(kc get resourceclaim "$c" -o jsonpath='{.status.allocation}')" ] || return 1
      [ -z "$(cdi_specs_for "$(kc get resourceclaim "$c" -o jsonpath='{.metadata.uid}')")" ] || return 1
    done
  done
}
still_held_back() { # POD... stay holding nothing for 15 s
  local _
  for _ in $(seq 15); do
    holds_nothing "$@" || return 1
    sleep 1
  done
}

# ---------------------------------------------------------------- d11
# A 2 × 4-arc gang: one pod alone waits (bound to nothing, no claim
# allocated); with its sibling both start on disjoint contiguous arcs and
# kubectl lpu shows the group whole. Then a 2 × 8 gang (more than the node's
# ring) and a gang whose minCount exceeds its pods stay Pending holding
# nothing: an 8-arc pod still runs beside them.
scenario_d11() {
  log "DRA d11: gang scheduling (Workload API) with arcs"
  local a b ta tb t0 lpu_out why
  delete_all_pods
  if ! kc api-resources --api-group scheduling.k8s.io 2>/dev/null | grep -qw podgroups; then
    nok "d11: the apiserver serves scheduling.k8s.io PodGroups" "$(kc api-resources --api-group scheduling.k8s.io 2>&1 | tail -2)"
    return
  fi
  gang_manifest | without_doc lpu-gang-1 | kc apply -f - >>"$LOGS/kubectl.log" 2>&1 ||
    { nok "d11: apply the example without lpu-gang-1" "$(tail -3 "$LOGS/kubectl.log")"; return; }
  if still_held_back lpu-gang-0; then
    ok "gang: lpu-gang-0 alone stays Pending 15 s, unbound, its claim unallocated"
  else
    nok "gang: lpu-gang-0 alone stays Pending, unbound, its claim unallocated" "$(pod_why lpu-gang-0)"
  fi
  t0=$(date +%s)
  gang_manifest | kc apply -f - >>"$LOGS/kubectl.log" 2>&1 ||
    { nok "d11: apply $GANG_EXAMPLE" "$(tail -3 "$LOGS/kubectl.log")"; return; }
  # A gang waits out the scheduler's backoff of its first, lone attempt; on
  # a loaded machine that took 150 s once, hence the long bound.
  if wait_pod lpu-gang-0 240 && wait_pod lpu-gang-1 30; then
    log "both gang pods running $(($(date +%s) - t0)) s after the second was applied"
    check_dra_container lpu-gang-0 4
    a=$GOT
    check_dra_container lpu-gang-1 4
    b=$GOT
    expect "gang: the two pods hold disjoint arcs, 8 LPUs in all" "lpu-gang-0 [$a], lpu-gang-1 [$b]" \
      test "$(tr ' ' '\n' <<<"$a $b" | sort -un | wc -l)" = 8
    ta=$(date -d "$(scheduled_at lpu-gang-0)" +%s) tb=$(date -d "$(scheduled_at lpu-gang-1)" +%s)
    expect "gang: both pods bound within 2 s of each other" "PodScheduled at $ta and $tb" test $((ta > tb ? ta - tb : tb - ta)) -le 2
  else
    nok "gang: both pods of the example run" "lpu-gang-0: $(pod_why lpu-gang-0) | lpu-gang-1: $(pod_why lpu-gang-1)"
  fi
  if CGO_ENABLED=0 go_build cmd/kubectl-lpu >>"$LOGS/kubectl.log"; then
    lpu_out=$("$BASE/bin/kubectl-lpu" pods -o json --kubeconfig "$CL/admin.kubeconfig" 2>&1)
    expect "kubectl lpu pods -o json: both pods in PodGroup lpu-gang-workers, whole, minCount 2" "$lpu_out" \
      test "$(jq -r '[.[] | select(.name | startswith("lpu-gang-")) | "\(.podGroup.name) \(.podGroup.whole) \(.podGroup.minCount)"] | unique | join(";")' <<<"$lpu_out" 2>/dev/null)" = "lpu-gang-workers true 2"
  else
    nok "build kubectl-lpu" "$(tail -3 "$LOGS/kubectl.log")"
  fi
  gang_manifest | kc delete -f - --wait=true --timeout=60s --grace-period=1 >>"$LOGS/kubectl.log" 2>&1
  delete_all_pods

  # a gang too big for the node, and one that can never reach its minCount
  if ! { gang_manifest s/lpu-gang/big-gang/g s/lpu-arc-4/lpu-arc-8/ && echo --- &&
    gang_manifest s/lpu-gang/short-gang/g 's/minCount: 2/minCount: 3/'; } | kc apply -f - >>"$LOGS/kubectl.log" 2>&1; then
    nok "d11: apply the unfit gangs" "$(tail -3 "$LOGS/kubectl.log")"
    return
  fi
  sleep 5
  if still_held_back big-gang-0 big-gang-1; then
    why=$(kc get pod big-gang-0 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
    ok "gang: 2 × 8-arc on an 8-LPU node stays Pending holding nothing (${why:-no reason yet})"
  else
    nok "gang: 2 × 8-arc stays Pending holding nothing" "big-gang-0: $(pod_why big-gang-0) | big-gang-1: $(pod_why big-gang-1)"
  fi
  expect "gang: minCount 3 with 2 pods stays Pending holding nothing" "$(pod_why short-gang-0)" \
    holds_nothing short-gang-0 short-gang-1
  dra_pod solo-8 template lpu-arc-8
  if wait_pod solo-8 60; then
    check_dra_container solo-8 8
  else
    nok "gang: an 8-arc pod runs beside the Pending gangs (they hold nothing)" "$(pod_why solo-8)"
  fi
  for a in big-gang short-gang; do
    gang_manifest "s/lpu-gang/$a/g" | kc delete -f - --wait=true --timeout=60s --grace-period=1 >>"$LOGS/kubectl.log" 2>&1
  done
  delete_all_pods
}
