# shellcheck shell=bash
# security.sh — the hostile tenant on the real node (issue 12, "prove it"):
# forged, replayed, cross-node, legacy and case-variant allocation
# annotations, privileged pods, the toleration annotation with lpu-nri down,
# a lpu-nri slower than the runtime's plugin timeout, and floods of idle
# connections to both daemons' metrics ports. Every case says what was tried
# and checks, from the container's side (crictl exec, crictl ps -a, the
# kubelet's /pods) and from lpu-nri's counters, that nothing was granted
# and nothing a legitimate pod holds was lost. Lines: "ok - security: ...".
# Sourced by test/e2e/run.sh after lib/scenarios.sh (run.sh security; it
# takes /tmp/lpu-e2e.lock in preflight like every run).

SEC_CFG=$BASE/lpu-security.yaml   # CFG plus a 2 s audit interval
SLOW_CFG=$BASE/lpu-slow.yaml      # SEC_CFG plus a PodResources check that stalls
STALL_SOCK=$BASE/stall.sock       # accepts and never answers
SEC_DIR=$BASE/security            # CRI configs of the crictl-made pods

# sec_ok / sec_nok / sec_expect: the assertion helpers, "security: " prefixed.
sec_ok() { ok "security: $1"; }
sec_nok() { nok "security: $1" "$2"; }
sec_expect() {
  local what=$1 detail=$2
  shift 2
  expect "security: $what" "$detail" "$@"
}

# refusals [REASON]: lpu-nri's lpu_nri_refusals_total (for REASON), 0 if none.
refusals() {
  local v
  v=$(metric "http://$NRI_METRICS/metrics" lpu_nri_refusals_total "${1:+reason=\"$1\"}")
  echo "${v:-0}"
}
# nri_gauge NAME: one of lpu-nri's metrics, 0 if absent.
nri_gauge() {
  local v
  v=$(metric "http://$NRI_METRICS/metrics" "$1")
  echo "${v:-0}"
}
# refused_since REASON BEFORE: lpu-nri counted more REASON refusals than BEFORE.
refused_since() { [ "$(refusals "$1")" -gt "$2" ]; }

# sec_restart_nri CONFIG: lpu-nri restarted on CONFIG, connected again.
sec_restart_nri() {
  stop_daemon lpu-nri 3
  CFG=$1 start_lpu_nri nri
  wait_for 20 nri_ready || { sec_nok "lpu-nri connects on $(basename "$1")" "$(tail -3 "$LOGS/lpu-nri.log")"; return 1; }
}

# sec_restart_daemons CONFIG: lpu-nri and the device plugin restarted on
# CONFIG, lpu-nri connected and the plugin registered with the kubelet again.
sec_restart_daemons() {
  local regs
  regs=$(grep -c "Got registration request from device plugin.*$RESOURCE" "$KUBELET_LOG" || true)
  stop_daemon lpu-device-plugin 3
  sec_restart_nri "$1" || return 1
  CFG=$1 start_lpu_dp nri
  wait_for 30 registered_since "$regs" ||
    { sec_nok "the device plugin registers again on $(basename "$1")" "$(tail -3 "$LOGS/lpu-device-plugin.log")"; return 1; }
}

# registered_since N: the kubelet logged more than N registrations of the
# plugin, and it offers 8 healthy LPUs.
registered_since() { lines_above "$1" "Got registration request from device plugin.*$RESOURCE" "$KUBELET_LOG" && prints 8 dp_healthy; }

# nri_refused_pod NAME: lpu-nri logged a refused container of pod NAME*.
nri_refused_pod() { has "$(grep '"refused container"' "$LOGS/lpu-nri.log")" "\"pod\":\"$1"; }

# never_created NAME: the runtime has no container of that name, in any state.
never_created() { [ -z "$(cri ps -a -q --name "^$1\$")" ]; }

# ---------------------------------------------------------------- crictl pods
# The kubelet removes pods it did not make, so the crictl cases run with it
# stopped: the runtime then hears only from us, as from a kubelet replaying
# whatever annotations it is given.

# sec_sandbox NAME [ANNOTATIONS-JSON]: a pod sandbox in namespace default
# with its own UID; prints its ID.
sec_sandbox() {
  local name=$1 ann=${2:-'{}'} f=$SEC_DIR/$1.pod.json
  mkdir -p "$SEC_DIR/logs"
  jq -n --arg n "$name" --arg uid "sec-$name-$CGNAME" --arg logs "$SEC_DIR/logs" --arg cg "/$CGNAME/sec-$name" \
    --argjson a "$ann" '{metadata: {name: $n, namespace: "default", uid: $uid, attempt: 0},
      log_directory: $logs, annotations: $a,
      linux: {cgroup_parent: $cg, security_context: {namespace_options: {network: 2, pid: 1, ipc: 0}}}}' >"$f"
  cri runp "$f"
}

# sec_nodev_sandbox NAME: a privileged pod sandbox on the nodev runtime
# handler (privileged_without_host_devices + ..._all_devices_allowed);
# prints its ID.
sec_nodev_sandbox() {
  local name=$1 f=$SEC_DIR/$1.pod.json
  mkdir -p "$SEC_DIR/logs"
  jq -n --arg n "$name" --arg uid "sec-$name-$CGNAME" --arg logs "$SEC_DIR/logs" --arg cg "/$CGNAME/sec-$name" \
    '{metadata: {name: $n, namespace: "default", uid: $uid, attempt: 0},
      log_directory: $logs, annotations: {},
      linux: {cgroup_parent: $cg, security_context: {privileged: true, namespace_options: {network: 2, pid: 1, ipc: 0}}}}' >"$f"
  cri runp --runtime nodev "$f"
}

# sec_nodev: rule 7 on the real containerd. A privileged container on the
# nodev handler carries no LPU node, but its device cgroup admits every
# device (with CAP_MKNOD it could make /dev/lpuN itself): lpu-nri refuses it
# (device-cgroup), nothing is created.
sec_nodev() {
  local sb f=$SEC_DIR/nodev.ctr.json before c
  [ "$RT" = crio ] && { crio_sec_nodev; return; }
  sb=$(sec_nodev_sandbox nodevpod) || { sec_nok "nodev: privileged sandbox on the nodev handler" "runp failed"; return; }
  jq -n --arg img "$IMG:busybox" '{metadata: {name: "nodev", attempt: 0}, image: {image: $img},
    command: ["/bin/sleep", "600"], log_path: "nodev.log",
    linux: {security_context: {privileged: true, namespace_options: {network: 2, pid: 1, ipc: 0}}}}' >"$f"
  before=$(refusals device-cgroup)
  if crictl --config "$BASE/ctd-$CTD/crictl.yaml" create "$sb" "$f" "$SEC_DIR/nodevpod.pod.json" >"$SEC_DIR/nodev.id" 2>"$SEC_DIR/nodev.err"; then
    c=$(cat "$SEC_DIR/nodev.id")
    sec_nok "nodev: a privileged container with no LPU node but an allow-all device cgroup is refused" \
      "created $c; its devices.allow: $(cri inspect "$c" | jq -c '.info.runtimeSpec.linux.resources.devices' 2>/dev/null | cut -c1-120)"
    cri rm -f "$c" >/dev/null
  elif wait_for 3 refused_since device-cgroup "$before"; then
    sec_ok "nodev: a privileged container on privileged_without_host_devices(_all_devices_allowed) (no LPU node, allow-all device cgroup) is refused (device-cgroup), nothing created"
  else
    sec_nok "nodev: refused as device-cgroup" "refusals{device-cgroup} stayed $before; runtime said: $(create_err nodev)"
  fi
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
}

# sec_create SANDBOX-ID POD-NAME NAME ANNOTATIONS-JSON: create (and start) a
# container carrying ANNOTATIONS as container annotations. Prints the
# container ID; on refusal returns 1 (create_err NAME has the message). Its
# namespace options are the sandbox's, as a kubelet sends them (CRI-O
# refuses a container whose PID namespace mode differs from its pod's).
sec_create() {
  local sb=$1 pod=$2 name=$3 ann=$4 f=$SEC_DIR/$3.ctr.json c
  jq -n --arg n "$name" --arg img "$IMG:busybox" --argjson a "$ann" \
    '{metadata: {name: $n, attempt: 0}, image: {image: $img}, command: ["/bin/sleep", "600"],
      log_path: ($n + ".log"), annotations: $a,
      linux: {security_context: {namespace_options: {network: 2, pid: 1, ipc: 0}}}}' >"$f"
  crictl --config "$BASE/ctd-$CTD/crictl.yaml" create "$sb" "$f" "$SEC_DIR/$pod.pod.json" 2>"$SEC_DIR/$name.err" >"$SEC_DIR/$name.id" ||
    return 1
  c=$(cat "$SEC_DIR/$name.id")
  cri start "$c" >/dev/null || { echo "start $c failed" >>"$SEC_DIR/$name.err"; return 1; }
  echo "$c"
}

# create_err NAME: the runtime's answer to the last sec_create of NAME, its
# escaped quotes made single quotes.
create_err() { tail -1 "$SEC_DIR/$1.err" 2>/dev/null | sed "s/\\\\\"/'/g" | tr '\n' ' '; }

# ctr_lpus CID: "N ..." for the LPU character devices (our major) in a
# crictl-made container.
ctr_lpus() {
  crictl --config "$BASE/ctd-$CTD/crictl.yaml" exec "$1" sh -c \
    'for f in /dev/lpu*; do [ -e "$f" ] && stat -c "%t %T" "$f"; done; true' 2>/dev/null |
    while read -r maj min; do [ $((16#$maj)) = "$LPU_MAJOR" ] && echo $((16#$min)); done | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# sec_refused WHAT REASON SANDBOX POD NAME ANNOTATIONS: the create must fail,
# with lpu-nri counting one more REASON refusal.
sec_refused() {
  local what=$1 reason=$2 name=$5 before c msg
  shift 2
  before=$(refusals "$reason")
  if c=$(sec_create "$@"); then
    sec_nok "$what: refused" "created $c, it sees LPUs [$(ctr_lpus "$c")]"
    cri rm -f "$c" >/dev/null
    return
  fi
  msg=$(create_err "$name" | grep -o 'lpu-nri refused the container: [^"]*' | head -1 | cut -c32-150)
  if wait_for 3 refused_since "$reason" "$before"; then
    sec_ok "$what: refused ($reason), nothing created ('$msg')"
  else
    sec_nok "$what: refused as $reason" "refusals{$reason} stayed $before; runtime said: $(create_err "$name")"
  fi
}

# ---------------------------------------------------------------- the scenario
scenario_security() {
  log "security: the hostile tenant on the real containerd"
  ensure_kubelet
  remove_all_pods
  local t0=$SECONDS
  mkdir -p "$SEC_DIR"
  # the runtime guard on (both daemons read it): every LPU container the
  # kubelet makes carries the guard's CDI device and its hook.
  # SEC_GUARD=false shows what it closes (slow on containerd 1.7 fails).
  SEC_GUARD_ON=${SEC_GUARD:-true}
  { cat "$CFG"; printf 'security:\n  auditInterval: 2s\n  runtimeGuard: %s\n' "$SEC_GUARD_ON"; } >"$SEC_CFG"
  sec_restart_daemons "$SEC_CFG" || return 0
  # idle keep-alive connections to the device plugin's metrics port, watched
  # in the background for longer than its idle timeout (30 s)
  "$BASE/bin/connflood" --addr "$DP_METRICS" --conns 32 --keepalive --hold 1s --watch 45s \
    --pid "$(pid_of lpu-device-plugin)" >"$SEC_DIR/keepalive.out" 2>&1 &
  local ka=$!
  sec_snippet
  sec_pods
  sec_crictl
  sec_slow
  sec_flood
  wait "$ka" || true
  sec_keepalive "$SEC_DIR/keepalive.out"
  sec_after
  bench security_seconds $((SECONDS - t0)) "security scenario: $((SECONDS - t0))s"
}

# sec_snippet: with the shipped snippet containerd passes no pod annotation
# into a container's annotations (pod_annotations), so a pod author's
# lpu.hyperaccel.ai/* keys reach lpu-nri only as pod annotations.
sec_snippet() {
  local dump=$BASE/ctd-a/config.dump.toml
  [ -s "$dump" ] || containerd --config "$BASE/ctd-a/config.toml" config dump >"$dump" 2>/dev/null
  sec_expect "the merged containerd config passes no pod annotations into containers (pod_annotations empty)" \
    "$(grep -E 'pod_annotations|container_annotations' "$dump" | sort | uniq -c | tr -s ' ' | tr '\n' ';')" \
    passes_no_pod_annotations "$dump"
}

# passes_no_pod_annotations DUMP-FILE: the dump names pod_annotations, every
# such list empty.
passes_no_pod_annotations() { grep -q 'pod_annotations' "$1" && ! grep -Eq 'pod_annotations = \[.+\]' "$1"; }

# forged_pods_counted: lpu-nri counted both forged pods' and both
# privileged pods' refusals.
forged_pods_counted() { at_least 2 refusals pod-annotation && at_least 2 refusals unallocated-nodes; }

# sec_pods: static pods through the kubelet — a victim with a real
# allocation, and a tenant's forged, case-variant and privileged pods.
sec_pods() {
  local sealed all8 st c
  sealed=$("$BASE/bin/sealtool" --state-dir "$STATE" lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7) ||
    { sec_nok "sealtool seals with the node's key" "$sealed"; return; }
  # a pod author who got hold of a correctly sealed value for this node
  all8=$(jq -r 'to_entries | map("    \(.key): \"\(.value)\"") | join("\n")' <<<"$sealed")
  lpu_pod victim 2
  lpu_pod forgedpod 0 busybox "  annotations:
$all8"
  lpu_pod casevar 0 busybox "  annotations:
    LPU.hyperaccel.ai/devices: \"$(jq -r '."lpu.hyperaccel.ai/devices"' <<<"$sealed")\"
    Lpu.HyperAccel.AI/seal: \"$(jq -r '."lpu.hyperaccel.ai/seal"' <<<"$sealed")\""
  priv_pod privileged default 0
  priv_pod privlpu default 1
  priv_pod agent kube-system 0
  if wait_running victim 60; then
    check_lpu_container victim 2 >/dev/null
    VICTIM=$GOT
    sec_expect "victim: a legitimate pod of 2 runs with exactly its 2 LPUs ([$VICTIM])" "sees [$VICTIM]" test "$(wc -w <<<"$VICTIM")" = 2
  else
    sec_nok "victim: a legitimate pod of 2 runs" "$(kpod_status victim)"
    VICTIM=""
  fi
  wait_for 30 forged_pods_counted
  for c in forgedpod casevar; do
    st=$(kpod_status "$c")
    if has_running "$c"; then
      sec_nok "$c: refused" "it runs and sees LPUs [$(lpu_nodes "$c" | tr '\n' ' ')]"
    else
      sec_expect "$c: never created (crictl ps -a)" "$(cri ps -a --name "^$c\$")" never_created "$c"
    fi
  done
  sec_expect "forgedpod: a validly sealed allocation for all 8 LPUs written as pod annotations is refused (pod-annotation)" \
    "kubelet: $st; refusals{pod-annotation}=$(refusals pod-annotation)" wait_for 15 status_says forgedpod "lpu.hyperaccel.ai"
  sec_expect "casevar: LPU.hyperaccel.ai/devices and Lpu.HyperAccel.AI/seal (case variants of reserved keys) are refused" \
    "kubelet: $(kpod_status casevar)" wait_for 15 status_says casevar "lpu.hyperaccel.ai" -i
  for c in privileged privlpu; do
    if has_running "$c"; then
      sec_nok "$c: privileged pod in default refused" "it runs and sees LPUs [$(lpu_nodes "$c" | tr '\n' ' ')]"
    else
      sec_expect "$c: never created (crictl ps -a)" "$(cri ps -a --name "^$c\$")" never_created "$c"
    fi
  done
  sec_expect "privileged: a privileged pod in default (every host /dev/lpuN, no allocation) is refused (unallocated-nodes)" \
    "kubelet: $(kpod_status privileged)" wait_for 15 status_says privileged 'unallocated\|not allocated\|allowNamespaces'
  sec_expect "privlpu: a privileged pod allocated 1 LPU but carrying all 8 is refused" \
    "kubelet: $(kpod_status privlpu)" wait_for 15 status_says privlpu 'unallocated\|not allocated\|allowNamespaces'
  if wait_running agent 30; then
    sec_ok "agent: a privileged pod in kube-system (security.allowNamespaces) starts, holding $(lpu_nodes agent | wc -l) LPU nodes as the operator allowed"
  elif [ "$RT" = crio ] && kpod_status agent | grep -q 'unable to apply caps'; then
    # CRI-O gives a privileged container every capability the kernel knows;
    # runc cannot grant one missing from this host's bounding set
    echo "# skip agent start: runc cannot start a CRI-O privileged container here (CAP_SYS_RESOURCE is not in the bounding set)"
    sec_expect "agent: a privileged pod in kube-system (security.allowNamespaces) is not refused by lpu-nri" \
      "$(grep '"refused container"' "$LOGS/lpu-nri.log" | grep '"pod":"agent' | tail -1)" \
      not nri_refused_pod agent
  else
    sec_nok "agent: an allowlisted privileged pod starts" "$(kpod_status agent)"
  fi
  if [ -n "$VICTIM" ]; then
    local now
    now=$(lpu_nodes victim | sort -n | tr '\n' ' ')
    sec_expect "victim: still holds its LPUs [$VICTIM] after the forged pods" "now [${now% }]" test "${now% }" = "$VICTIM"
  fi
  for c in forgedpod casevar privileged privlpu agent; do del_pod "$c"; done
  for c in forgedpod casevar privileged privlpu agent; do wait_for 30 gone "$c" || log "$c not gone after 30s"; done
}

# priv_pod NAME NAMESPACE COUNT: a static pod whose container is privileged.
priv_pod() {
  local res=""
  [ "$3" -gt 0 ] && res="
    resources:
      limits:
        $RESOURCE: $3"
  put_pod "$1" "$(pod_manifest "$1" "$2" busybox "" "" "    securityContext:
      privileged: true$res")"
}

# guard_hooked HOOKS PROOF: the guard's createRuntime hook is among HOOKS
# and lpu-nri's proof is a v1 one.
guard_hooked() { has "$1" "lpu-nri guard --state-dir" && [[ $2 == v1:* ]]; }

# sec_crictl: the runtime told by "a kubelet" (crictl, kubelet stopped)
# about containers whose annotations a tenant forged or copied.
sec_crictl() {
  local vc vann sb ctl c free=() i ann fresh
  vc=$(cid victim)
  [ -n "$vc" ] || { sec_nok "crictl cases: the victim runs" "no victim container"; return; }
  vann=$(cri inspect "$vc" | jq -c '.status.annotations | with_entries(select(.key | startswith("lpu.hyperaccel.ai/")))')
  sec_expect "victim's container carries the device plugin's sealed v2 allocation" "$vann" \
    json_true "$vann" '."lpu.hyperaccel.ai/allocation" and (."lpu.hyperaccel.ai/seal" | startswith("v2:"))'
  VICTIM_ALLOC=$(jq -r '."lpu.hyperaccel.ai/allocation"' <<<"$vann")
  local hook proof
  # only where the scenario turned the guard on (CRI-O's cases keep it off)
  if [ "${SEC_GUARD_ON:-false}" = true ]; then
    hook=$(cri inspect "$vc" | jq -c '.info.runtimeSpec.hooks.createRuntime // [] | map(.args | join(" "))')
    proof=$(cri inspect "$vc" | jq -r '.info.runtimeSpec.annotations["lpu.hyperaccel.ai/verified"] // ""')
    sec_expect "guard: the victim runs with the guard's createRuntime hook from CDI (hyperaccel.ai/lpu-guard=verified) and lpu-nri's proof in its spec (lpu.hyperaccel.ai/verified ${proof:0:11}...)" \
      "hooks: $hook; proof: '$proof'" guard_hooked "$hook" "$proof"
  fi
  for i in 0 1 2 3 4 5 6 7; do grep -qw "$i" <<<"$VICTIM" || free+=("lpu$i"); done
  kubelet_stop
  # control: the crictl path grants what a valid, fresh, node-bound seal names
  fresh=$("$BASE/bin/sealtool" --state-dir "$STATE" "${free[0]}" "${free[1]}")
  ctl=$(sec_sandbox ctl) || { sec_nok "crictl sandbox" "runp failed"; return; }
  if c=$(sec_create "$ctl" ctl ctl "$fresh"); then
    sec_expect "control: a fresh seal for this node made with its key gives exactly ${free[0]} ${free[1]} (so the refusals below are lpu-nri's)" \
      "sees [$(ctr_lpus "$c")]" test "$(ctr_lpus "$c")" = "${free[0]#lpu} ${free[1]#lpu}"
  else
    sec_nok "control: a validly sealed container is created" "$(create_err ctl)"
  fi
  cri stopp "$ctl" >/dev/null
  cri rmp -f "$ctl" >/dev/null

  sb=$(sec_sandbox tenant) || { sec_nok "crictl sandbox" "runp failed"; return; }
  sec_refused "replay: the victim's sealed annotations (allocation $(jq -r '."lpu.hyperaccel.ai/allocation"' <<<"$vann" | cut -c1-8)...) in another pod" \
    replayed "$sb" tenant replay "$vann"
  ann=$(jq -c --arg id "$(jq -r '."lpu.hyperaccel.ai/allocation"' <<<"$fresh")" '."lpu.hyperaccel.ai/allocation" = $id' <<<"$vann")
  sec_refused "rebind: the victim's devices and seals under a new allocation ID" bad-seal "$sb" tenant rebind "$ann"
  ann=$("$BASE/bin/sealtool" --state-dir "$STATE" --node other-node "${free[2]}" "${free[3]}")
  sec_refused "cross-node: sealed with this node's key for node other-node" bad-seal "$sb" tenant crossnode "$ann"
  ann=$("$BASE/bin/sealtool" --state-dir "$STATE" --legacy "${free[2]}" "${free[3]}")
  sec_refused "legacy: a v1 seal (no node binding), as device plugins before node binding wrote it" bad-seal "$sb" tenant legacy "$ann"
  ann=$("$BASE/bin/sealtool" --random-key "${free[2]}" "${free[3]}")
  sec_refused "forged container annotations (what a pod_annotations passthrough would deliver): sealed with another key" \
    bad-seal "$sb" tenant otherkey "$ann"
  ann=$(jq -c '."lpu.hyperaccel.ai/seal" = "v2:c2VhbGVkLWJ5LW1lLXRydXN0LW1l"' <<<"$fresh")
  sec_refused "forged container annotations: a made-up seal" bad-seal "$sb" tenant madeup "$ann"
  ann=$("$BASE/bin/sealtool" --state-dir "$STATE" lpu9)
  sec_refused "a valid seal naming lpu9, not on this node" unknown-device "$sb" tenant nodevice "$ann"
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null

  sec_nodev
  sec_gate
  kubelet_start a
  wait_for 20 kubelet_saw_registration || sec_nok "device plugin re-registers after the crictl cases" "$(tail -3 "$LOGS/lpu-device-plugin.log")"
}

# sec_gate: lpu-nri down. containerd's default validator refuses an LPU
# container whose pod requires plugin lpu; the toleration annotation lets it
# through bare (no LPUs: nothing granted, the tenant starves itself), which
# is why the chart's ValidatingAdmissionPolicy forbids it outside an
# allowlist (go test ./deploy/tests/ -run TestRuntimeGatePolicies, real apiserver);
# the audit reports the bare container once lpu-nri is back.
sec_gate() {
  local req='{"required-plugins.noderesource.dev": "[\"lpu\"]"}'
  stop_daemon lpu-nri 3
  wait_for 5 not nri_ready
  if [ "$CTD_SERIES" = 1.7 ]; then
    # there the runtime guard is what fails such a container (slow)
    echo "# skip gated: containerd 1.7 has no NRI validator (the per-pod gate needs containerd >= 2.2)"
  else
    sec_gated "$req"
  fi
  sec_tolerant "$req"
}

# sec_gated REQ: with lpu-nri down the validator refuses a container whose
# pod requires plugin lpu.
sec_gated() {
  local sb c ann req=$1
  ann=$("$BASE/bin/sealtool" --state-dir "$STATE" lpu0 lpu1)
  sb=$(sec_sandbox gated "$req") || { sec_nok "crictl sandbox gated" "runp failed"; return; }
  if c=$(sec_create "$sb" gated gated "$ann"); then
    sec_nok "gated: an LPU container requiring plugin lpu is refused by $RT_NAME's validator while lpu-nri is down" \
      "created $c, it sees LPUs [$(ctr_lpus "$c")]"
  else
    sec_expect "gated: an LPU container requiring plugin lpu is refused by $RT_NAME's validator while lpu-nri is down ('$(create_err gated | grep -o 'required plugin[^"]*' | head -1)')" \
      "$(create_err gated)" has "$(create_err gated)" "required plugin" -i
  fi
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
}

# sec_tolerant REQ: the toleration annotation lets the runtime create it
# bare while lpu-nri is down; the audit reports it once lpu-nri is back.
sec_tolerant() {
  local sb c ann req=$1
  ann=$("$BASE/bin/sealtool" --state-dir "$STATE" lpu2 lpu3)
  sb=$(sec_sandbox tolerant "$(jq -c '. + {"tolerate-missing-plugins.noderesource.dev": "true"}' <<<"$req")") ||
    { sec_nok "crictl sandbox tolerant" "runp failed"; return; }
  if c=$(sec_create "$sb" tolerant tolerant "$ann"); then
    sec_expect "tolerant: with tolerate-missing-plugins the runtime creates it while lpu-nri is down, bare (no LPU nodes granted)" \
      "sees [$(ctr_lpus "$c")]" test -z "$(ctr_lpus "$c")"
  else
    sec_nok "tolerant: the toleration annotation lets the runtime create it" "$(create_err tolerant)"
  fi
  CFG=$SEC_CFG start_lpu_nri nri
  wait_for 20 nri_ready || sec_nok "lpu-nri back" "$(tail -3 "$LOGS/lpu-nri.log")"
  if wait_for 10 at_least 1 nri_gauge lpu_nri_uninjected_allocations; then
    sec_ok "tolerant: lpu-nri's audit reports the bare container (lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations))"
  else
    sec_nok "tolerant: lpu-nri's audit reports the bare container" "lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations)"
  fi
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
  sec_expect "tolerant: the audit clears once it is gone (auditInterval 2s)" \
    "lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations)" \
    wait_for 10 prints 0 nri_gauge lpu_nri_uninjected_allocations
}

# sec_slow: lpu-nri's CreateContainer outlives containerd's plugin timeout
# (2 s). Its PodResources cross-check goes to a socket that accepts and
# never answers (podResourcesTimeout 5 s). The first attempt also freezes
# lpu-nri (SIGSTOP for 4 s when the socket is dialed, a starved or paused
# process), so NRI gives up on it and closes it: lpu-nri's validation must
# then fail the container. Later attempts show lpu-nri's own check keeping
# to the runtime's deadline (it refuses: podresources). The container must
# never start bare, and starts with its LPUs once lpu-nri answers in time.
# On containerd 1.7 (no validator) NRI creates the container without
# lpu-nri's adjustment; the runtime guard's hook (security.runtimeGuard,
# on in SEC_CFG) must then refuse to start it. The pod carries required-plugins.noderesource.dev: ["lpu"], as the chart's
# MutatingAdmissionPolicy gives every LPU pod (this node has no apiserver):
# without it a kubelet retry right after the thaw can pass PreStartContainer
# on a readiness answer lpu-nri gives before it notices NRI dropped it, and
# the runtime then creates the container with no lpu-nri connected (seen
# here; the audit reports it, docs/security.md).
VALIDATOR_FAILED='validator plugin [^ ]*lpu[^ ]* failed'
GUARD_REFUSED='lpu-nri guard: refusing to start the container'

# sec_slow_validator N0: containerd >= 2.2 (lpu-nri its NRI validator):
# the frozen CreateContainer fails, nothing is created.
sec_slow_validator() {
  local n0=$1 st
  wait_for 20 lines_above "$n0" "$VALIDATOR_FAILED" "$LOGS/containerd-a.log"
  st=$(kpod_status slow)
  sec_expect "slow: lpu-nri frozen past the plugin timeout, then 5 s late: the LPU container never starts, bare or otherwise (crictl ps -a)" \
    "$(cri ps -a --name '^slow$'); kubelet: $st; lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations)" never_created slow
  sec_expect "slow: containerd's NRI validation failed it once lpu-nri was lost ('$(grep -o "${VALIDATOR_FAILED}[^\"]*" "$LOGS/containerd-a.log" | tail -1 | cut -c1-80)')" \
    "stall: $(tr '\n' ' ' <"$LOGS/stall.log"); containerd: $(grep -i 'lpu' "$LOGS/containerd-a.log" | tail -2)" \
    lines_above "$n0" "$VALIDATOR_FAILED" "$LOGS/containerd-a.log"
}

# bare_starts NAME: the containers of that name (any state) that started
# without an LPU node of our major in their spec, one "ID state" a line.
# A container whose start failed has startedAt at the epoch (or unset).
bare_starts() {
  local c info
  for c in $(cri ps -a -q --name "^$1\$"); do
    info=$(cri inspect "$c") || continue
    jq -r --arg id "$c" --argjson major "$LPU_MAJOR" '
      (.status.startedAt // "") as $s
      | select(($s | tostring | test("^($|0$|null$|1970-01-01T|1969-12-31T|0001-01-01T)")) | not)
      | select([.info.runtimeSpec.linux.devices[]? | select(.major == $major)] | length == 0)
      | "\($id[0:12]) \(.status.state) started \($s)"' <<<"$info"
  done
}

# sec_slow_guard G0: containerd 1.7 (no NRI validator). NRI closes the
# frozen lpu-nri and creates the container without its adjustment; the
# runtime guard's hook refuses to start it, so no container runs bare.
sec_slow_guard() {
  local g0=$1 st bare
  wait_for 20 lines_above "$g0" "$GUARD_REFUSED" "$LOGS/containerd-a.log"
  st=$(kpod_status slow)
  bare=$(bare_starts slow)
  sec_expect "slow (containerd 1.7, no validator): lpu-nri frozen past the plugin timeout: no slow container ever started without its LPUs ($(cri ps -a -q --name '^slow$' | wc -l) created, $(grep -c . <<<"$bare") started bare)" \
    "bare: ${bare:-none}; $(cri ps -a --name '^slow$' | tail -n +2 | tr -s ' ' | tr '\n' ';'); kubelet: $st; lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations)" \
    test -z "$bare"
  sec_expect "slow (containerd 1.7): the runtime guard's hook refused the container NRI created without lpu-nri ('$(grep -o "${GUARD_REFUSED}[^\"]*" "$LOGS/containerd-a.log" | tail -1 | cut -c47-150)')" \
    "stall: $(tr '\n' ' ' <"$LOGS/stall.log"); containerd: $(grep -i 'lpu' "$LOGS/containerd-a.log" | tail -2 | cut -c1-300)" \
    lines_above "$g0" "$GUARD_REFUSED" "$LOGS/containerd-a.log"
  sec_expect "slow (containerd 1.7): the audit finds no container running without its allocation (lpu_nri_uninjected_allocations=$(nri_gauge lpu_nri_uninjected_allocations))" \
    "$(grep '"uninjected' "$LOGS/lpu-nri.log" | tail -1 | cut -c1-300)" test "$(nri_gauge lpu_nri_uninjected_allocations)" = 0
}

sec_slow() {
  local n0 p0 g0
  ensure_kubelet
  rm -f "$STALL_SOCK"
  touch "$SEC_DIR/freeze"
  start_daemon stall "$LOGS/stall.log" "$BASE/bin/e2etool" stall "$STALL_SOCK" "$BASE/pids/lpu-nri" "$SEC_DIR/freeze"
  wait_for 5 test -S "$STALL_SOCK"
  sed "s|^  devicePluginDir: .*|&\n  podResourcesCheck: true\n  podResourcesSocket: $STALL_SOCK\n  podResourcesTimeout: 5s|" \
    "$SEC_CFG" >"$SLOW_CFG"
  sec_restart_nri "$SLOW_CFG" || { stop_daemon stall 2; return; }
  p0=$(refusals podresources)
  n0=$(grep -c "$VALIDATOR_FAILED" "$LOGS/containerd-a.log" || true)
  g0=$(grep -c "$GUARD_REFUSED" "$LOGS/containerd-a.log" || true)
  lpu_pod slow 2 busybox '  annotations:
    required-plugins.noderesource.dev: "[\"lpu\"]"'
  wait_for 30 grep -q thawed "$LOGS/stall.log"
  if [ "$CTD_SERIES" = 1.7 ]; then
    sec_slow_guard "$g0"
  else
    sec_slow_validator "$n0"
  fi
  wait_for 20 refused_since podresources "$p0"
  sec_expect "slow: unfrozen, lpu-nri's own cross-check keeps to the runtime's deadline and refuses (podresources)" \
    "refusals{podresources}=$(refusals podresources), before $p0" refused_since podresources "$p0"
  sec_restart_nri "$SEC_CFG"
  stop_daemon stall 2
  rm -f "$STALL_SOCK"
  if wait_running slow 90; then
    local got
    got=$(lpu_nodes slow | sort -n | tr '\n' ' ')
    sec_expect "slow: starts with exactly its 2 LPUs once lpu-nri answers in time ([${got% }])" "sees [${got% }]" test "$(wc -w <<<"$got")" = 2
  else
    sec_nok "slow: starts once lpu-nri answers in time" "$(kpod_status slow)"
  fi
  wait_gone slow
}

# flood_capped DIALED HELD ESTABLISHED DIAL-ERRORS: connflood dialed (all
# 2000 tried), at most 68 were held (the 64 shared slots and, since the
# flood comes from the node's own address, its 4), at most 69 established
# on the daemon's side.
flood_capped() { [ "$1" -gt 0 ] && [ "$2" -le 68 ] && [ "$3" -le 69 ] && [ $(($1 + $4)) = 2000 ]; }
# all_closed_between END-HELD LAST-CLOSE LO HI: no connection held at the
# end, the last closed between LO and HI seconds.
all_closed_between() { [ "$1" = 0 ] && awk -v s="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(s >= lo && s < hi) }'; }
# nri_unharmed G0 G1 PID: goroutines G1 within 8 of G0, lpu-nri still the
# process PID, running and connected.
nri_unharmed() { [ "$2" -le $(($1 + 8)) ] && [ "$(pid_of lpu-nri)" = "$3" ] && running lpu-nri && nri_ready; }
# holds_apart N SET SHARED: SET has N LPUs and shares none (SHARED empty).
holds_apart() { [ "$(wc -w <<<"$2")" = "$1" ] && [ -z "$3" ]; }

# sec_flood: 2,000 idle connections to lpu-nri's metrics port.
sec_flood() {
  local pid out g0 g1 held peak before port estab=0 kv
  pid=$(pid_of lpu-nri)
  port=${NRI_METRICS##*:}
  g0=$(nri_gauge go_goroutines)
  "$BASE/bin/connflood" --addr "$NRI_METRICS" --conns 2000 --hold 1s --watch 15s --pid "$pid" >"$SEC_DIR/flood.out" 2>&1 &
  local fl=$!
  sleep 1.5
  # held by the daemon: established connections on its side of the port
  estab=$(ss -tnH state established "( sport = :$port )" 2>/dev/null | wc -l)
  wait "$fl" || true
  out=$(tr '\n' ' ' <"$SEC_DIR/flood.out")
  declare -A f=()
  for kv in $out; do f[${kv%%=*}]=${kv#*=}; done
  log "flood: $out"
  held=${f[held]:-?}
  sec_expect "flood: 2000 connections opened to lpu-nri's metrics port, at most 68 held (held $held, daemon side $estab)" "$out" \
    flood_capped "${f[dialed]:-0}" "${f[held]:-999}" "$estab" "${f[dial_errors]:-0}"
  sec_expect "flood: the ones beyond the cap are reset at once ($((f[reset] + f[dial_reset])) reset, ${f[dial_timeout]:-0} timed out)" "$out" \
    test "$((f[reset] + f[dial_reset] + f[held]))" -ge 1990
  sec_expect "flood: the held ones are closed by the server after the 5 s header timeout (last at ${f[last_close_dial_s]}s)" "$out" \
    all_closed_between "${f[end_held]:-1}" "${f[last_close_dial_s]:-99}" 4.5 10
  peak=${f[rss_peak_kib]:-0}
  before=${f[rss_before_kib]:-0}
  bench flood_rss_growth_kib $((peak - before)) "lpu-nri VmRSS during 2000 idle connections: $((before / 1024)) -> peak $((peak / 1024)) MiB"
  sec_expect "flood: lpu-nri's memory stays bounded (VmRSS $((before / 1024)) -> peak $((peak / 1024)) MiB, +$(((peak - before) / 1024)) MiB)" \
    "$out" test $((peak - before)) -lt 16384
  sec_expect "flood: lpu-nri answers /metrics afterwards (${f[probe_after]}; while the cap was full: ${f[probe_while_held]})" "$out" \
    test "${f[probe_after]}" = 200
  g1=$(nri_gauge go_goroutines)
  bench flood_goroutines "$g1" "lpu-nri goroutines before/after the flood: $g0/$g1"
  sec_expect "flood: goroutines back to where they were ($g0 -> $g1), same process, still connected" "$out" \
    nri_unharmed "$g0" "$g1" "$pid"
}

# sec_keepalive FILE: the background keep-alive flood on the device plugin.
sec_keepalive() {
  local out kv
  out=$(tr '\n' ' ' <"$1")
  log "keepalive: $out"
  declare -A f=()
  for kv in $out; do f[${kv%%=*}]=${kv#*=}; done
  sec_expect "keepalive: 32 idle keep-alive connections to the device plugin's metrics port, each answered once, held (${f[held]:-?})" \
    "$out" same_nonempty 32 "${f[keepalive_answered]:-0}" "${f[held]:-0}"
  sec_expect "keepalive: /metrics still answered while they were held (${f[probe_while_held]:-?})" "$out" test "${f[probe_while_held]:-}" = 200
  sec_expect "keepalive: the server closed them after the 30 s idle timeout (last at ${f[last_close_s]:-?}s)" "$out" \
    all_closed_between "${f[end_held]:-1}" "${f[last_close_s]:-0}" 29 42
}

# sec_after: nothing lost — the victim keeps its LPUs, a new pod is served,
# lpu-nri's ledger is intact, and lpu-nri runs on the suite's base config.
sec_after() {
  local now ledger=$STATE/allocations.json
  ensure_kubelet
  if [ -n "${VICTIM:-}" ]; then
    now=$(lpu_nodes victim | sort -n | tr '\n' ' ')
    sec_expect "victim: still holds exactly [$VICTIM] after every case" "now [${now% }]" test "${now% }" = "$VICTIM"
  fi
  lpu_pod after 2
  if wait_running after 60; then
    check_lpu_container after 2 >/dev/null
    local clash
    # shellcheck disable=SC2086 # lists of device indices, split on purpose
    clash=$(printf '%s\n' $VICTIM $GOT | sort -n | uniq -d | tr '\n' ' ')
    sec_expect "after: a new pod of 2 is served ([$GOT]), none of the victim's" "got [$GOT], shared [$clash]" \
      holds_apart 2 "$GOT" "$clash"
  else
    sec_nok "after: a new pod of 2 is served" "$(kpod_status after)"
  fi
  local uid owner
  uid=$(kpod victim | jq -r .metadata.uid)
  owner=$(jq -r --arg id "${VICTIM_ALLOC:-}" '.allocations[$id].pod // "none"' "$ledger" 2>/dev/null)
  sec_expect "ledger: the victim's allocation ${VICTIM_ALLOC:0:8}... stays recorded to the victim's pod ($owner), not the replaying one" \
    "victim uid $uid; ledger: $(head -c 300 "$ledger" 2>&1)" test -n "$uid" -a "$owner" = "$uid"
  remove_all_pods
  # back on the suite's config; the device plugin only if it left it
  # (run.sh crio's cases keep the guard off and the plugin as it was)
  if grep -q '^  runtimeGuard: true' "$SEC_CFG"; then
    sec_restart_daemons "$CFG" || true
  else
    sec_restart_nri "$CFG" || true
  fi
}
