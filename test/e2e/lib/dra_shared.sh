# shellcheck shell=bash
# dra_shared.sh — DRA scenarios for claims more than one pod uses and for
# admin access (issue 20). The kubelet prepares a claim once per node, so a
# pod joining a prepared claim is admitted only because lpu-dra follows the
# claim's status.reservedFor on the API server. As in dra.sh every check
# looks at what the containers see or what the API server says.
# Sourced by test/e2e/run.sh after lib/dra.sh and lib/security.sh.

# shared_claim NAMESPACE NAME [SELECTOR] [ADMIN]: a standalone ResourceClaim
# for one 4-arc (SELECTOR narrows it; ADMIN=true asks for adminAccess).
shared_claim() {
  local ns=$1 name=$2 selector=${3:-} admin=${4:-false}
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $name, namespace: $ns}
spec:
  devices:
    requests:
    - name: lpus
      exactly:
        deviceClassName: lpu-arc-4.hyperaccel.ai
        adminAccess: $admin
${selector:+        selectors: [$selector]}
EOF
}

# claim_pod NAMESPACE NAME CLAIM: a pod whose container (also NAME) uses the
# named ResourceClaim.
claim_pod() {
  pod_manifest "$2" "$1" busybox "" "  tolerations: [{operator: Exists}]
  resourceClaims: [{name: lpus, resourceClaimName: $3}]" "    resources: {claims: [{name: lpus}]}" |
    kc apply -f - >>"$LOGS/kubectl.log" 2>&1
}

# reserved_for CLAIM [NAMESPACE]: the pod names the claim is reserved for.
reserved_for() {
  kc get resourceclaim "$1" -n "${2:-default}" -o jsonpath='{range .status.reservedFor[*]}{.name} {end}'
}
sorted_nodes() { lpu_nodes "$1" | sort -n | tr '\n' ' '; }
# one_running NAME: exactly one running container is named NAME.
one_running() { [ "$(cri ps --label "io.kubernetes.container.name=$1" --state Running -q | wc -l)" = 1 ]; }
# runs_in NAMESPACE NAME: the pod is Running there and its container runs.
runs_in() { prints Running kc get pod "$2" -n "$1" -o jsonpath='{.status.phase}' && has_running "$2"; }
# refused_as_unprepared NAME BEFORE: the runtime's error for NAME says the
# claim is not prepared for its pod, and lpu-nri counted a bad-value refusal.
refused_as_unprepared() { grep -q "not prepared for pod" "$SEC_DIR/$1.err" && refused_since bad-value "$2"; }

# ---------------------------------------------------------------- d8
# A named claim shared by two pods, the second created once the first runs
# (no second Prepare): both run with the same LPUs and LPU_VISIBLE_DEVICES.
# A container naming the claim from a pod it is not reserved for is refused
# by lpu-nri. A Deployment rollout recreates its pod on the same claim.
scenario_d8() {
  log "DRA d8: shared claims follow reservedFor"
  local a b env_a env_b uid
  shared_claim default shared
  claim_pod default share-a shared
  wait_pod share-a 90 || { nok "d8 setup: share-a runs on claim shared" "$(pod_why share-a)"; delete_all_pods; return; }
  check_lpu_container share-a 4
  claim_pod default share-b shared
  if wait_pod share-b 60; then
    ok "share-b: a second pod joining the prepared claim runs (reservedFor: $(reserved_for shared))"
    a=$(sorted_nodes share-a) b=$(sorted_nodes share-b)
    env_a=$(ctr_env share-a LPU_VISIBLE_DEVICES) env_b=$(ctr_env share-b LPU_VISIBLE_DEVICES)
    expect "share-a and share-b see the same LPUs" "share-a [$a], share-b [$b]" same_nonempty "$a" "$b"
    expect "share-a and share-b see the same LPU_VISIBLE_DEVICES ($env_a)" "share-a $env_a, share-b $env_b" test "$env_a" = "$env_b"
  else
    nok "share-b: a second pod joining the prepared claim runs" "$(pod_why share-b)"
  fi
  uid=$(kc get resourceclaim shared -o jsonpath='{.metadata.uid}')
  d8_intruder "$uid"
  d8_rollout
  delete_all_pods
  kc delete resourceclaim shared --wait=true --timeout=60s >/dev/null 2>&1
  wait_for 30 empty cdi_specs_for "$uid" || nok "d8: the shared claim's CDI spec goes with its last pod" "left: $(cdi_specs_for "$uid")"
}

# d8_intruder CLAIM-UID: a container asking the runtime for the claim's CDI
# device from a sandbox the claim is not reserved for (what a kubelet would
# replay for a pod that never was): lpu-nri refuses it, nothing starts.
#
# The node's kubelet stops a running sandbox it has no pod for within a
# housekeeping pass or two, so on a busy machine the sandbox can be gone
# before the create; the runtime then says "is not running" without
# asking lpu-nri, and the check is tried again on a fresh sandbox (3 times).
d8_intruder() {
  local sb f=$SEC_DIR/intruder.ctr.json before c try created
  mkdir -p "$SEC_DIR"
  jq -n --arg img "$IMG:busybox" --arg cdi "$DRA_DRIVER/claim=$1" '{metadata: {name: "intruder", attempt: 0},
    image: {image: $img}, command: ["/bin/sleep", "600"], log_path: "intruder.log", CDI_devices: [{name: $cdi}], linux: {}}' >"$f"
  for try in 1 2 3; do
    sb=$(sec_sandbox intruder) || { nok "d8 intruder: crictl sandbox" "runp failed"; return; }
    before=$(refusals bad-value)
    created=0
    crictl --config "$BASE/ctd-$CTD/crictl.yaml" create "$sb" "$f" "$SEC_DIR/intruder.pod.json" >"$SEC_DIR/intruder.id" 2>"$SEC_DIR/intruder.err" && created=1
    if [ "$created" = 1 ] || [ "$try" = 3 ] || ! grep -q 'is not running' "$SEC_DIR/intruder.err"; then
      break
    fi
    log "d8 intruder: the sandbox was stopped before the create (try $try), again"
    cri stopp "$sb" >/dev/null
    cri rmp -f "$sb" >/dev/null
  done
  if [ "$created" = 1 ]; then
    c=$(cat "$SEC_DIR/intruder.id")
    nok "intruder: a container naming claim shared from a pod it is not reserved for is refused" \
      "created $c with LPUs [$(ctr_lpus "$c" 2>/dev/null)]"
    cri rm -f "$c" >/dev/null
  else
    expect "intruder: a container naming claim shared from a pod it is not reserved for is refused by lpu-nri" \
      "runtime said: $(create_err intruder); refusals{bad-value} $before -> $(refusals bad-value)" \
      refused_as_unprepared intruder "$before"
  fi
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
}

# d8_rollout: a one-replica Deployment on the claim; a rollout restart
# replaces its pod, which runs on the same claim with the same LPUs.
d8_rollout() {
  local before after
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: roll, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: roll}}
  template:
    metadata: {labels: {app: roll}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      tolerations: [{operator: Exists}]
      resourceClaims: [{name: lpus, resourceClaimName: shared}]
      containers:
      - name: roll
        image: $IMG:busybox
        imagePullPolicy: Never
        command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
        resources: {claims: [{name: lpus}]}
EOF
  if ! kc rollout status deployment/roll --timeout=90s >/dev/null 2>&1 || ! wait_running roll 30; then
    nok "roll: the Deployment's pod runs on claim shared" "$(kc get pods -l app=roll -o wide 2>&1 | tail -2)"
    return
  fi
  before=$(sorted_nodes roll)
  kc rollout restart deployment/roll >/dev/null 2>&1
  # the old pod's container may still run for its grace second: read the
  # new one once it is the only one left
  if kc rollout status deployment/roll --timeout=120s >/dev/null 2>&1 && wait_for 30 one_running roll; then
    after=$(sorted_nodes roll)
    expect "roll: the rollout's new pod runs on the same claim with the same LPUs" "before [$before], after [$after]; reservedFor: $(reserved_for shared)" \
      same_nonempty "$after" "$before" "$(sorted_nodes share-a)"
  else
    nok "roll: the rollout's new pod runs on claim shared" "$(kc get pods -l app=roll -o wide 2>&1 | tail -3); $(kc get events --field-selector reason=Failed -o jsonpath='{.items[-1:].message}')"
  fi
  kc delete deployment roll --wait=true --timeout=60s >/dev/null 2>&1
}

# ---------------------------------------------------------------- d9
# Admin access: an adminAccess claim (namespace labelled for it) on ring-0's
# first 4-arc, then a tenant's strict 4-arc: the tenant is not blocked and
# gets that same arc; both run, the admin pod sees the tenant's LPUs, and the
# audit reports no unallocated holder.
scenario_d9() {
  log "DRA d9: admin access is not a holder"
  local ns=e2e-admin a t
  kc create namespace "$ns" >>"$LOGS/kubectl.log" 2>&1
  kc label namespace "$ns" resource.kubernetes.io/admin-access=true --overwrite >>"$LOGS/kubectl.log" 2>&1
  shared_claim "$ns" monitor "$(sel "$(attr ring) == 0 && $(attr start) == 0")" true
  claim_pod "$ns" admin-mon monitor
  if wait_for 90 runs_in "$ns" admin-mon; then
    ok "admin-mon: the adminAccess claim's pod runs"
  else
    nok "admin-mon: the adminAccess claim's pod runs" "$(kc get pod admin-mon -n "$ns" -o jsonpath='{.status.conditions}' 2>&1 | cut -c1-300)"
  fi
  dra_pod tenant template "$TPL_STRICT4"
  if wait_pod tenant 60; then
    ok "tenant: a tenant's 4-arc claim runs while the admin claim is prepared"
    a=$(sorted_nodes admin-mon) t=$(sorted_nodes tenant)
    expect "tenant and admin-mon share the arc (the admin claim holds nothing)" "admin-mon [$a], tenant [$t]" \
      same_nonempty "$t" "$a"
    sleep 32 # one audit (security.auditInterval, 30 s) saw both containers
    expect "the audit reports no unallocated holder (lpu_nri_unallocated_holders 0)" "gauge $(nri_gauge lpu_nri_unallocated_holders)" \
      test "$(nri_gauge lpu_nri_unallocated_holders)" = 0
  else
    nok "tenant: a tenant's 4-arc claim runs while the admin claim is prepared" "$(pod_why tenant)"
  fi
  kc delete namespace "$ns" --wait=true --timeout=90s >/dev/null 2>&1
  delete_all_pods
}
