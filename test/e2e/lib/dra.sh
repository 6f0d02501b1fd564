# shellcheck shell=bash
# dra.sh — the DRA scenarios on the real cluster of lib/cluster.sh: the
# kube-scheduler allocates ring arcs published by lpu-dra, the kubelet has
# lpu-dra prepare them, containerd applies the CDI spec and lpu-nri checks
# the container. As in scenarios.sh every check looks at what the container
# sees (crictl exec) or what the API server says (pod phase, claim status,
# ResourceSlices), never at lpu-dra's view of itself.
# Sourced by test/e2e/run.sh after lib/cluster.sh and lib/scenarios.sh.

DRA_CLASS=lpu.hyperaccel.ai           # DeviceClass: all our arcs
ARC_EXT=hyperaccel.ai/lpu-arc-4       # extended resource name: one 4-arc
COUNT_EXT=hyperaccel.ai/lpu           # the device plugin's resource, served by the count devices

# a CEL selector on one of our attributes
sel() { printf '{cel: {expression: %s}}' "'$1'"; }
attr() { printf 'device.attributes["%s"].%s' "$DRA_DRIVER" "$1"; }

TPL_STRICT4=lpu-arc-4                  # the chart's names for issue 10's two templates
TPL_BE4=lpu-4-best-effort

# dra_objects: the DeviceClasses and claim templates of the chart rendered
# for mode=dra (lpu-arc-<k>, lpu-<k>-best-effort for k in 1, 2, 4, 8), plus
# one template only the tests use (the odd ring positions, for setup).
dra_objects() {
  local helm=${HELM:-$(command -v helm)} objs="" t
  if [ -z "$helm" ] || [ ! -d "$CHART" ]; then fatal "DRA objects" "no helm or no chart at $CHART (test/e2e/tools.sh helm)"; fi
  objs=$("$helm" template e2e "$CHART" -n default --kube-version 1.37.2 --set mode=dra |
    awk 'BEGIN{RS="\n---"} /\nkind: (DeviceClass|ResourceClaimTemplate)\n/ {print "---"; print}') || fatal "DRA objects" "helm template failed"
  grep -q "extendedResourceName: $ARC_EXT" <<<"$objs" || fatal "DRA objects" "the chart renders no DeviceClass with $ARC_EXT for mode=dra"
  grep -q "extendedResourceName: $COUNT_EXT\$" <<<"$objs" || fatal "DRA objects" "the chart renders no DeviceClass with $COUNT_EXT for mode=dra"
  printf '%s\n' "$objs" | kc apply -f - >>"$LOGS/kubectl.log" 2>&1 || fatal "chart DRA objects" "$(tail -3 "$LOGS/kubectl.log")"
  for t in "$TPL_STRICT4" "$TPL_BE4" lpu-arc-1 lpu-arc-8; do
    kc get resourceclaimtemplate "$t" -n default >/dev/null 2>&1 || fatal "DRA objects" "the chart has no claim template $t"
  done
  log "DRA objects from the chart ($CHART, mode=dra)"
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF || fatal "claim templates" "$(tail -3 "$LOGS/kubectl.log")"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: e2e-odd-singles, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: lpus
        exactly:
          deviceClassName: $DRA_CLASS
          allocationMode: ExactCount
          count: 4
          selectors: [$(sel "$(attr size) == 1 && $(attr start) % 2 == 1")]
EOF
}

# dra_pod NAME template TEMPLATE | extended NAME=COUNT | none [METADATA]: a
# pod whose single container (also called NAME) uses a claim from TEMPLATE,
# asks for an extended resource, or nothing.
dra_pod() {
  local name=$1 kind=$2 arg=${3:-} claims="" res="" meta=""
  case $kind in
    template)
      claims="  resourceClaims:
  - {name: lpus, resourceClaimTemplateName: $arg}"
      res="    resources:
      claims: [{name: lpus}]" ;;
    extended)
      res="    resources:
      limits: {${arg%=*}: ${arg#*=}}" ;;
    none) meta=$arg ;;
  esac
  pod_manifest "$name" default busybox "$meta" "  tolerations: [{operator: Exists}]
$claims" "$res" | kc apply -f - >>"$LOGS/kubectl.log" 2>&1
}

phase() { kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
pod_running() { [ "$(phase "$1")" = Running ] && has_running "$1"; }
wait_pod() { wait_for "${2:-60}" pod_running "$1"; }
# runs_with NAME BEFORE AFTER: the pod runs, and holds LPUs AFTER, the same
# BEFORE as it did (none is not the same).
runs_with() { pod_running "$1" && same_nonempty "$3" "$2"; }
# runs_or_waits NAME: the pod runs, or its container waits with a message.
runs_or_waits() { pod_running "$1" || says . kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.waiting.message}'; }
# pod_why NAME: phase, scheduling condition and the last events, for failures.
pod_why() {
  echo "phase=$(phase "$1") $(kc get pod "$1" -o jsonpath='{range .status.conditions[*]}{.type}={.status}:{.reason}:{.message} {end}' 2>/dev/null)"
  kc get events -n default --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[-3:]}{.reason}: {.message} | {end}' 2>/dev/null
}
unschedulable() {
  [ "$(phase "$1")" = Pending ] &&
    [ "$(kc get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')" = Unschedulable ]
}
# delete_pod NAME: delete and wait until the kubelet let go of the container.
delete_pod() {
  kc delete pod "$1" --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1
  wait_for 30 not has_running "$1"
}
delete_all_pods() {
  kc delete pods --all -n default --grace-period=1 --wait=true --timeout=90s >/dev/null 2>&1
  wait_for 60 cluster_pods_gone || log "pods left: $(kc get pods -o name | tr '\n' ' ')"
  # the claims go with their pods; their specs must follow
  wait_for 30 empty kc get resourceclaims -n default -o name
}

# claim_of NAME: the ResourceClaim allocated for pod NAME (template or
# extended resource).
claim_of() {
  kc get pod "$1" -o json | jq -r '(.status.resourceClaimStatuses // [])[0].resourceClaimName //
    .status.extendedResourceClaimStatus.resourceClaimName // empty'
}
# claim_results CLAIM: "request device" per allocated device.
claim_results() {
  kc get resourceclaim "$1" -o json | jq -r --arg d "$DRA_DRIVER" \
    '(.status.allocation.devices.results // [])[] | select(.driver == $d) | "\(.request) \(.device)"'
}
# device_lpus DEVICE: the LPU indices of one of our devices ("lpus" attribute), in ring order.
device_lpus() {
  kc get resourceslices -o json | jq -r --arg n "$1" --arg d "$DRA_DRIVER" '
    [.items[] | select(.spec.driver == $d) | (.spec.devices // [])[] | select(.name == $n)][0]
    | (.attributes["lpus"] // .attributes[$d + "/lpus"]).string // empty' | tr ',' ' ' | sed 's/lpu//g'
}
# claim_lpus CLAIM: every LPU index the claim was allocated, in result order.
claim_lpus() {
  local dev out=""
  while read -r _ dev; do
    [ -n "$dev" ] && out+="$(device_lpus "$dev") "
  done < <(claim_results "$1")
  echo "${out% }" | tr -s ' '
}
# ring_pos_sorted "A B C": the indices appear in ring-0 order (not
# necessarily adjacent).
ring_pos_sorted() {
  local -a s
  read -r -a s <<<"$1"
  local want
  want=$(for i in "${RING[@]}"; do grep -qw "$i" <<<"$1" && printf '%s ' "$i"; done)
  [ "${want% }" = "${s[*]}" ]
}
# ring_pos_listed VALUE "N...": LPU_VISIBLE_DEVICES VALUE lists exactly the
# LPUs N..., in ring position order.
ring_pos_listed() { ring_pos_sorted "$(visible_list "$1")" && same_set "$(visible_list "$1")" "$2"; }
# one_arc RESULTS: the claim's allocation results are a single arc device.
one_arc() { [ "$(wc -l <<<"$1")" = 1 ] && has "$1" "/arc "; }
# cdi_specs_for UID: CDI spec files in the node's CDI dir naming the claim.
cdi_specs_for() { grep -rl -- "$1" "$DRA_CDI" 2>/dev/null; find "$DRA_CDI" -type f -name "*$1*" 2>/dev/null; }

# check_dra_container NAME COUNT [arc|any]: check_lpu_container's checks for
# a claim, plus: the container holds exactly what its claim was allocated
# (so lpu-nri added nothing and took nothing). Sets GOT and CLAIM.
CLAIM=""
check_dra_container() {
  local name=$1 count=$2 shape=${3:-arc} want env
  CLAIM=$(claim_of "$name")
  if [ "$shape" = arc ]; then
    check_lpu_container "$name" "$count"
  else
    GOT=$(lpu_nodes "$name" | sort -n | tr '\n' ' ')
    GOT=${GOT% }
    expect "$name: sees exactly $count LPU device nodes" "sees [$GOT]" test "$(wc -w <<<"$GOT")" = "$count"
    env=$(ctr_env "$name" LPU_VISIBLE_DEVICES)
    expect "$name: LPU_VISIBLE_DEVICES lists all $count in ring order" "LPU_VISIBLE_DEVICES=$env, ring [${RING[*]}]" \
      ring_pos_listed "$env" "$GOT"
  fi
  want=$(claim_lpus "$CLAIM" | tr ' ' '\n' | sort -n | tr '\n' ' ')
  expect "$name: holds exactly the LPUs of claim $CLAIM" "container [$GOT], claim [${want% }] ($(claim_results "$CLAIM" | tr '\n' ';'))" \
    test "${want% }" = "$GOT"
}

# dra_show POD...: what each pod sees and its claim, with a ring picture.
dra_show() {
  local name claim
  echo
  echo "==================== DRA: what the containers see ===================="
  for name in "$@"; do
    echo
    claim=$(claim_of "$name")
    echo "pod $name: claim ${claim:-none} -> $(claim_results "$claim" 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
    if ! pod_running "$name"; then
      echo "  not running: $(pod_why "$name" | head -1)"
      continue
    fi
    show_lpu_view "$name"
  done
  echo
  echo "======================================================================"
}

# ---------------------------------------------------------------- d1
# Strict 4-arcs: two pods get the two disjoint halves, a third waits Pending
# (not Failed) and runs once one is deleted; a 1-LPU pod after the churn.
scenario_d1() {
  log "DRA d1: strict 4-arcs, Pending, churn"
  local p got_a got_b both
  dra_pod arc-a template "$TPL_STRICT4"
  if wait_pod arc-a 90; then ok "arc-a: pod with a strict 4-arc claim is running"; else nok "arc-a: pod with a strict 4-arc claim is running" "$(pod_why arc-a)"; return; fi
  check_dra_container arc-a 4
  got_a=$GOT
  dra_pod arc-b template "$TPL_STRICT4"
  if wait_pod arc-b 60; then ok "arc-b: second 4-arc pod is running"; else nok "arc-b: second 4-arc pod is running" "$(pod_why arc-b)"; return; fi
  check_dra_container arc-b 4
  got_b=$GOT
  # shellcheck disable=SC2086 # word lists of indices
  both=$(printf '%s\n' $got_a $got_b | sort -n | uniq -d | tr '\n' ' ')
  expect "arc-a and arc-b hold disjoint halves of the ring" "both hold [$both]" test -z "$both"
  dra_pod arc-c template "$TPL_STRICT4"
  if wait_for 30 unschedulable arc-c; then
    sleep 5
    expect "arc-c: a third 4-arc stays Pending (Unschedulable), not Failed" "$(pod_why arc-c)" unschedulable arc-c
  else
    nok "arc-c: a third 4-arc stays Pending (Unschedulable)" "$(pod_why arc-c)"
  fi
  expect "arc-c: no container was started" "container $(cid arc-c) runs" test -z "$(cid arc-c)"
  [ "${DEMO:-0}" = 1 ] && dra_show arc-a arc-b arc-c
  delete_pod arc-a
  if wait_pod arc-c 90; then
    ok "arc-c: runs once arc-a is deleted"
    check_dra_container arc-c 4
  else
    nok "arc-c: runs once arc-a is deleted" "$(pod_why arc-c)"
  fi
  delete_pod arc-b
  dra_pod one template lpu-arc-1
  if wait_pod one 60; then
    ok "one: a 1-LPU pod runs after the churn"
    check_dra_container one 1
    # shellcheck disable=SC2046,SC2086 # word lists of indices
    both=$(printf '%s\n' $GOT $(lpu_nodes arc-c) | sort -n | uniq -d | tr '\n' ' ')
    expect "one and arc-c hold disjoint LPUs" "both hold [$both]" test -z "$both"
  else
    nok "one: a 1-LPU pod runs after the churn" "$(pod_why one)"
  fi
  [ "${DEMO:-0}" = 1 ] && dra_show arc-c one
  delete_all_pods
}

# ---------------------------------------------------------------- d2
# Best-effort (firstAvailable): an arc while one is left; four singles, in
# ring order, only when no 4-arc is left.
scenario_d2() {
  log "DRA d2: best-effort template falls back to singles only without an arc"
  local res n
  dra_pod be-arc template "$TPL_BE4"
  if wait_pod be-arc 60; then
    res=$(claim_results "$(claim_of be-arc)")
    expect "be-arc: on an empty ring the best-effort claim gets one 4-arc" "results: $(tr '\n' ';' <<<"$res")" \
      one_arc "$res"
    check_dra_container be-arc 4
  else
    nok "be-arc: best-effort pod runs" "$(pod_why be-arc)"
  fi
  delete_pod be-arc
  wait_for 30 empty kc get resourceclaims -n default -o name
  # hold the odd ring positions: four LPUs are free, no two adjacent
  dra_pod holder template e2e-odd-singles
  if ! wait_pod holder 60; then
    nok "d2 setup: holder of the odd ring positions runs" "$(pod_why holder)"
    delete_all_pods
    return
  fi
  check_dra_container holder 4 any
  dra_pod be-singles template "$TPL_BE4"
  if wait_pod be-singles 60; then
    res=$(claim_results "$(claim_of be-singles)")
    n=$(grep -c "/singles " <<<"$res")
    expect "be-singles: with no 4-arc left the claim falls back to 4 singles" "results: $(tr '\n' ';' <<<"$res")" test "$n" = 4
    check_dra_container be-singles 4 any
  else
    nok "be-singles: best-effort pod runs on four single LPUs" "$(pod_why be-singles)"
  fi
  [ "${DEMO:-0}" = 1 ] && dra_show holder be-singles
  delete_all_pods
}

# ---------------------------------------------------------------- d3
# The count vocabulary: hyperaccel.ai/lpu-arc-4: 1 is one contiguous 4-arc;
# the device plugin's own hyperaccel.ai/lpu: k, unchanged, gets k ring
# neighbours from the count devices.
scenario_d3() {
  local res
  log "DRA d3: extended resource $ARC_EXT"
  dra_pod ext extended "$ARC_EXT=1"
  if wait_pod ext 90; then
    ok "ext: pod with $ARC_EXT: 1 is running"
    check_dra_container ext 4
  else
    nok "ext: pod with $ARC_EXT: 1 is running" "$(pod_why ext)"
  fi
  delete_all_pods
  log "DRA d3: the device plugin's request $COUNT_EXT on a DRA node"
  dra_pod one extended "$COUNT_EXT=1" # breaks the ring: the 3-pod must still get neighbours
  dra_pod cnt extended "$COUNT_EXT=3"
  if wait_pod one 90 && wait_pod cnt 90; then
    ok "cnt: pods with $COUNT_EXT: 1 and $COUNT_EXT: 3 (a device-plugin pod spec) run on the DRA node"
    check_dra_container cnt 3
    res=$(claim_results "$CLAIM" | awk '{print $2}' | tr '\n' ' ')
    expect "cnt: its claim holds count devices ($res)" "$res" grep -Eq '^(ring[0-9]+-start[0-9]+-count ){3}$' <<<"$res"
  else
    nok "cnt: pods with $COUNT_EXT: 1 and 3 run on the DRA node" "$(pod_why one) / $(pod_why cnt)"
  fi
  delete_all_pods
}

# ---------------------------------------------------------------- d4
# LPU failure: every arc holding it becomes unallocatable within 1 s (taint
# or removal), a full-ring claim waits; recovery restores the arcs.
# our_devices: "name lpus tainted" per device of our pool on the node.
our_devices() {
  kc get resourceslices -o json | jq -r --arg d "$DRA_DRIVER" --arg n "$KNODE" '
    .items[] | select(.spec.driver == $d and .spec.nodeName == $n) | (.spec.devices // [])[]
    | "\(.name) \((.attributes["lpus"] // .attributes[$d + "/lpus"]).string // "") \([(.taints // [])[] | select(.effect == "NoSchedule" or .effect == "NoExecute")] | length)"'
}
# arcs_without LPU-ID: no untainted device holds LPU-ID, and some device is
# still offered (the slices were not just emptied).
arcs_without() {
  local d
  d=$(our_devices)
  [ -n "$d" ] && ! awk -v id="$1" '{n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == id && $3 == 0) bad = 1} END {exit !bad}' <<<"$d" &&
    awk '$3 == 0' <<<"$d" | grep -q .
}
# arcs_restored COUNT: COUNT devices, none tainted.
arcs_restored() {
  local d
  d=$(our_devices)
  [ "$(wc -l <<<"$d")" = "$1" ] && ! awk '$3 != 0' <<<"$d" | grep -q .
}
# faults_follow LPU-ID: every device of our pool whose lpus hold LPU-ID has
# recentFaults >= 1 and every other device 0 (the fault outlives recovery).
faults_follow() {
  kc get resourceslices -o json | jq -e --arg d "$DRA_DRIVER" --arg n "$KNODE" --arg id "$1" '
    [.items[] | select(.spec.driver == $d and .spec.nodeName == $n) | (.spec.devices // [])[]
     | {held: ((.attributes["lpus"].string // "") | split(",") | index($id) != null), faults: (.attributes["recentFaults"].int // -1)}]
    | length > 0 and all(if .held then .faults >= 1 else .faults == 0 end)' >/dev/null
}
# claim_health POD HEALTH: a container of POD reports HEALTH for a device of
# one of its claims (allocatedResourcesStatus entries named claim:…).
claim_health() {
  kc get pod "$1" -o json | jq -e --arg h "$2" \
    '[.status.containerStatuses[]?.allocatedResourcesStatus[]? | select(.name | startswith("claim:")) | .resources[]?.health] | index($h) != null' >/dev/null
}
# claim_pod_sees_health POD LPU STATUS-FILE: while POD's claim holds LPU, a
# failure of LPU shows in the pod's own status, and so does its recovery.
claim_pod_sees_health() {
  echo ECC_ERROR >"$3"
  if wait_for 40 claim_health "$1" Unhealthy; then
    ok "$1: its status reports its arc Unhealthy while $2 fails (containerStatuses[].allocatedResourcesStatus)"
    log "$1: $(kc get pod "$1" -o json | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  else
    nok "$1: its status reports its arc Unhealthy while $2 fails" "$(kc get pod "$1" -o json | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  fi
  echo READY >"$3"
  if wait_for 40 claim_health "$1" Healthy; then
    ok "$1: its status reports its arc Healthy again after the recovery"
  else
    nok "$1: its status reports its arc Healthy again after the recovery" "$(kc get pod "$1" -o json | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  fi
}
scenario_d4() {
  log "DRA d4: LPU failure and recovery"
  delete_all_pods
  local dev=lpu${RING[2]} st t0 ms total
  st=$ROOT/sys/class/lpu/$dev/status
  total=$(our_devices | wc -l)
  expect "all $total devices offered untainted before the failure" "$(our_devices | awk '$3 != 0' | head -3)" arcs_restored "$total"
  t0=$(now_ns)
  echo ECC_ERROR >"$st"
  if wait_for 10 arcs_without "$dev"; then
    ms=$((($(now_ns) - t0) / 1000000))
    bench dra_health_down_ms "$ms" "status ECC_ERROR -> every arc with $dev unallocatable in the API: $ms ms (target <= 1000)"
    # the 1 s target is the bench line's; a busy machine must make this
    # slower, not red, so the check's own budget is 3 s
    expect "$dev failure made its arcs unallocatable within 3 s ($ms ms; target 1 s)" "took $ms ms" test "$ms" -le 3000
  else
    nok "$dev failure made its arcs unallocatable" "$(our_devices | grep -w "$dev" | head -5 | tr '\n' ';')"
  fi
  dra_pod ring8 template lpu-arc-8
  if wait_for 30 unschedulable ring8; then
    ok "ring8: a full-ring claim stays Pending while $dev is unhealthy"
  else
    nok "ring8: a full-ring claim stays Pending while $dev is unhealthy" "$(pod_why ring8)"
  fi
  t0=$(now_ns)
  echo READY >"$st"
  if wait_for 10 arcs_restored "$total"; then
    ms=$((($(now_ns) - t0) / 1000000))
    bench dra_health_up_ms "$ms" "status READY -> all $total arcs offered again: $ms ms"
    ok "$dev recovery restored all $total arcs ($ms ms)"
  else
    nok "$dev recovery restored all $total arcs" "$(our_devices | awk '$3 != 0' | head -3 | tr '\n' ';')"
  fi
  expect "after the recovery every arc holding $dev publishes recentFaults >= 1, every other arc 0" \
    "$(kc get resourceslices -o json | jq -c '[.items[].spec.devices[]? | {name, lpus: .attributes.lpus.string, f: .attributes.recentFaults.int}] | .[:6]')" \
    wait_for 10 faults_follow "$dev"
  if wait_pod ring8 90; then
    ok "ring8: the full-ring pod runs after the recovery"
    check_dra_container ring8 8
    claim_pod_sees_health ring8 "$dev" "$st"
  else
    nok "ring8: the full-ring pod runs after the recovery" "$(pod_why ring8)"
  fi
  delete_all_pods
  dra_cordon "$dev"
}

# dra_cordon LPU-ID: kubectl lpu cordon makes every arc over LPU-ID
# unallocatable (the cordon taint), kubectl lpu nodes says so, a full-ring
# pod stays Pending, the cordon survives an lpu-dra restart; uncordon
# offers every arc again and the pod runs.
dra_cordon() {
  local dev=$1 kl=("$BASE/bin/kubectl-lpu") t0 ms total
  total=$(our_devices | wc -l)
  CGO_ENABLED=0 go_build cmd/kubectl-lpu >>"$LOGS/kubectl.log" || { nok "build kubectl-lpu" "$(tail -3 "$LOGS/kubectl.log")"; return; }
  t0=$(now_ns)
  "${kl[@]}" cordon "$KNODE" "$dev" --kubeconfig "$CL/admin.kubeconfig" >>"$LOGS/kubectl.log" 2>&1 ||
    { nok "kubectl lpu cordon $KNODE $dev" "$(tail -3 "$LOGS/kubectl.log")"; return; }
  if wait_for 10 arcs_without "$dev"; then
    ms=$((($(now_ns) - t0) / 1000000))
    bench dra_cordon_ms "$ms" "kubectl lpu cordon -> every arc with $dev unallocatable in the API: $ms ms"
    ok "kubectl lpu cordon $dev: every arc holding it unallocatable ($ms ms)"
  else
    nok "kubectl lpu cordon $dev: every arc holding it unallocatable" "$(our_devices | grep -w "$dev" | head -5 | tr '\n' ';')"
  fi
  expect "kubectl lpu nodes: $KNODE shows $dev cordoned" "$("${kl[@]}" nodes "$KNODE" --kubeconfig "$CL/admin.kubeconfig" 2>&1 | head -3)" \
    says "cordoned $dev" "${kl[@]}" nodes "$KNODE" --kubeconfig "$CL/admin.kubeconfig"
  dra_pod ring8c template lpu-arc-8
  if wait_for 30 unschedulable ring8c; then
    ok "ring8c: a full-ring claim stays Pending while $dev is cordoned"
  else
    nok "ring8c: a full-ring claim stays Pending while $dev is cordoned" "$(pod_why ring8c)"
  fi
  stop_daemon lpu-dra 5
  start_lpu_dra
  wait_for 30 dra_slices_published || nok "lpu-dra restarted while $dev is cordoned and republished" "$(tail -3 "$LOGS/lpu-dra.log")"
  expect "$dev stays cordoned across an lpu-dra restart" "$(our_devices | grep -w "$dev" | head -5 | tr '\n' ';')" \
    wait_for 10 arcs_without "$dev"
  t0=$(now_ns)
  "${kl[@]}" uncordon "$KNODE" "$dev" --kubeconfig "$CL/admin.kubeconfig" >>"$LOGS/kubectl.log" 2>&1 ||
    nok "kubectl lpu uncordon $KNODE $dev" "$(tail -3 "$LOGS/kubectl.log")"
  if wait_for 10 arcs_restored "$total"; then
    ms=$((($(now_ns) - t0) / 1000000))
    bench dra_uncordon_ms "$ms" "kubectl lpu uncordon -> all $total arcs offered again: $ms ms"
    ok "kubectl lpu uncordon $dev: all $total arcs offered again ($ms ms)"
  else
    nok "kubectl lpu uncordon $dev: all $total arcs offered again" "$(our_devices | awk '$3 != 0' | head -3 | tr '\n' ';')"
  fi
  if wait_pod ring8c 90; then
    ok "ring8c: the full-ring pod runs after the uncordon"
  else
    nok "ring8c: the full-ring pod runs after the uncordon" "$(pod_why ring8c)"
  fi
  delete_all_pods
}

# ---------------------------------------------------------------- d5
# Driver restart: running pods keep their devices; the new process prepares
# new claims and unprepares claims the old one prepared.
scenario_d5() {
  log "DRA d5: lpu-dra restart"
  local before after uid
  dra_pod keep template "$TPL_STRICT4"
  wait_pod keep 60 || { nok "d5 setup: pod keep runs" "$(pod_why keep)"; return; }
  before=$(lpu_nodes keep | sort -n | tr '\n' ' ')
  uid=$(kc get resourceclaim "$(claim_of keep)" -o jsonpath='{.metadata.uid}')
  local conn0 t0 # conn0 is read in an eval
  # shellcheck disable=SC2034
  conn0=$(dra_connects)
  stop_daemon lpu-dra 5
  t0=$(now_ns)
  start_lpu_dra
  if wait_for 30 above "$conn0" dra_connects; then
    bench dra_restart_reconnect_ms $((($(now_ns) - t0) / 1000000)) "lpu-dra start -> kubelet connected to it again: $((($(now_ns) - t0) / 1000000)) ms"
  else
    nok "lpu-dra restarted: the kubelet connects to it again" "$(tail -3 "$LOGS/lpu-dra.log")"
  fi
  wait_for 30 dra_slices_published || nok "lpu-dra restarted and republished" "$(tail -3 "$LOGS/lpu-dra.log")"
  after=$(lpu_nodes keep | sort -n | tr '\n' ' ')
  expect "keep: still running with the same LPUs after the driver restart" "before [$before] after [$after], phase $(phase keep)" \
    runs_with keep "$before" "$after"
  dra_pod fresh template lpu-arc-1
  if wait_pod fresh 60; then
    ok "fresh: the restarted driver prepares a new claim"
    check_dra_container fresh 1
  else
    nok "fresh: the restarted driver prepares a new claim" "$(pod_why fresh)"
  fi
  expect "keep: its CDI spec is there while it runs" "no spec names claim $uid in $DRA_CDI" not empty cdi_specs_for "$uid"
  delete_pod keep
  if wait_for 30 empty cdi_specs_for "$uid"; then
    ok "keep: the restarted driver unprepared the claim the old one prepared (CDI spec gone)"
  else
    nok "keep: the restarted driver unprepared the old claim" "left: $(cdi_specs_for "$uid" | tr '\n' ' ')"
  fi
  delete_all_pods
}

# ---------------------------------------------------------------- d6
# Deleting pods leaves no CDI spec behind.
scenario_d6() {
  log "DRA d6: no CDI spec outlives its pod"
  local p
  for p in s1 s2; do dra_pod "$p" template "$TPL_STRICT4"; done
  if ! { wait_pod s1 60 && wait_pod s2 60; }; then
    nok "d6 setup: two 4-arc pods run" "$(pod_why s1); $(pod_why s2)"
  fi
  local n
  n=$(find "$DRA_CDI" -type f | wc -l)
  expect "two running claims have their CDI specs ($n files in the node's CDI dir)" "$(ls "$DRA_CDI")" test "$n" -ge 2
  delete_all_pods
  if wait_for 30 empty find "$DRA_CDI" -type f; then
    ok "after deleting every pod no CDI spec is left in $DRA_CDI"
  else
    nok "after deleting every pod no CDI spec is left" "$(find "$DRA_CDI" -type f | tr '\n' ' ')"
  fi
}

# ---------------------------------------------------------------- d7
# lpu-nri on the DRA node: a pod author's annotations give nothing; a pod
# without LPUs gets LPU_VISIBLE_DEVICES=none.
scenario_d7() {
  log "DRA d7: lpu-nri on the DRA node"
  local nodes st env
  dra_pod forged none "  annotations:
    lpu.hyperaccel.ai/devices: lpu0,lpu1,lpu2,lpu3
    lpu.hyperaccel.ai/seal: c2VhbGVkLWJ5LW1lLXRydXN0LW1l"
  wait_for 60 runs_or_waits forged
  if pod_running forged; then
    nodes=$(lpu_nodes forged | tr '\n' ' ')
    expect "forged: pod annotations give no LPU device nodes" "sees [$nodes]" test -z "$nodes"
    env=$(ctr_env forged LPU_VISIBLE_DEVICES)
    expect "forged: LPU_VISIBLE_DEVICES has no LPUs ('$env')" "LPU_VISIBLE_DEVICES=$env" not has "$env" '[0-9]'
  else
    st=$(kc get pod forged -o jsonpath='{.status.containerStatuses[0].state.waiting.message}')
    expect "forged: container refused with our message" "kubelet says: $(pod_why forged)" grep -q 'lpu.hyperaccel.ai' <<<"$st"
  fi
  dra_pod plain none
  if wait_pod plain 60; then
    env=$(ctr_env plain LPU_VISIBLE_DEVICES)
    expect "plain: a pod without LPUs gets LPU_VISIBLE_DEVICES=none" "LPU_VISIBLE_DEVICES=$env" test "$env" = none
    nodes=$(lpu_nodes plain | tr '\n' ' ')
    expect "plain: no LPU device nodes" "sees [$nodes]" test -z "$nodes"
  else
    nok "plain: a pod without LPUs runs" "$(pod_why plain)"
  fi
  delete_all_pods
}

# cluster_smoke: without lpu-dra, the cluster itself: a pod is scheduled
# onto the registered node and runs, and kubectl logs reaches the kubelet.
cluster_smoke() {
  dra_pod smoke none
  if wait_pod smoke 90; then
    ok "smoke: a pod scheduled by kube-scheduler runs on node $KNODE"
    if kc exec smoke -- sh -c 'echo EXEC-OK' 2>&1 | grep -q EXEC-OK; then
      ok "smoke: kubectl exec reaches the kubelet through the apiserver"
    else
      nok "smoke: kubectl exec reaches the kubelet" "$(kc exec smoke -- true 2>&1 | tail -1)"
    fi
  else
    nok "smoke: a pod scheduled by kube-scheduler runs" "$(pod_why smoke)"
  fi
  delete_all_pods
}

# record_dra_rss: lpu-dra's resident memory once the scenarios are done and
# it is idle again.
record_dra_rss() {
  local p rss
  p=$(pid_of lpu-dra) || return 0
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)
  [ -n "$rss" ] && bench rss_lpu-dra_kib "$rss" "VmRSS of lpu-dra (pid $p), idle after the DRA scenarios: $((rss / 1024)) MiB (target <= 40 MiB)"
}
