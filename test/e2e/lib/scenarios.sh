# shellcheck shell=bash
# scenarios.sh — the end-to-end scenarios. Every check looks at what the
# container itself sees (crictl exec / podman run), or at what the kubelet
# reports for a pod (/pods), never at our daemons' own view of themselves.
# Sourced by test/e2e/run.sh after lib/node.sh.

# ---------------------------------------------------------------- helpers
# lpu_nodes NAME: indices of the LPU device nodes in the container, one line
# "N" each, for character devices with our major and minor N. Anything else
# under /dev/lpu* is reported on stderr and as index "bad:<path>".
lpu_nodes() {
  local out path maj min
  out=$(in_ctr "$1" sh -c 'for f in /dev/lpu*; do [ -e "$f" ] && stat -c "%n|%F|%t|%T" "$f"; done; true') || return 1
  while IFS='|' read -r path kind maj min; do
    [ -n "$path" ] || continue
    if [ "$kind" = "character special file" ] && [ $((16#$maj)) = "$LPU_MAJOR" ] && [ "/dev/lpu$((16#$min))" = "$path" ]; then
      echo $((16#$min))
    else
      echo "bad:$path($kind $maj:$min)"
    fi
  done <<<"$out"
}

# ctr_env NAME VAR: VAR as the container's process sees it ("<unset>" if unset).
ctr_env() { in_ctr "$1" sh -c "printf '%s' \"\${$2-<unset>}\""; }

# ring_next I: the index after I on ring 0.
ring_next() {
  local i
  for ((i = 0; i < ${#RING[@]}; i++)); do
    [ "${RING[$i]}" = "$1" ] && { echo "${RING[$(((i + 1) % ${#RING[@]}))]}"; return; }
  done
  echo "?"
}

# ring_ordered "A B C": the indices follow each other along ring 0.
ring_ordered() {
  local -a s
  read -r -a s <<<"$1"
  local i
  [ ${#s[@]} -gt 0 ] || return 1
  for ((i = 0; i + 1 < ${#s[@]}; i++)); do
    [ "$(ring_next "${s[$i]}")" = "${s[$((i + 1))]}" ] || return 1
  done
}

# ring_arc "SET": the set (any order) in ring order from its arc start, if it
# is one contiguous arc of ring 0; fails otherwise.
ring_arc() {
  local -a want
  read -r -a want <<<"$(tr ' ' '\n' <<<"$1" | sort -n | tr '\n' ' ')"
  local n=${#RING[@]} k=${#want[@]} s j cand
  [ "$k" -gt 0 ] || return 1
  for ((s = 0; s < n; s++)); do
    cand=""
    for ((j = 0; j < k; j++)); do cand+="${RING[$(((s + j) % n))]} "; done
    if [ "$(tr ' ' '\n' <<<"$cand" | grep . | sort -n | tr '\n' ' ')" = "${want[*]} " ]; then
      echo "${cand% }"
      return 0
    fi
  done
  return 1
}

# is_arc_of N "SET": SET is N LPUs forming one arc of ring 0.
is_arc_of() { [ "$(wc -w <<<"$2")" = "$1" ] && ring_arc "$2" >/dev/null; }

# visible_list VALUE: LPU_VISIBLE_DEVICES ("0,1" or "lpu0,lpu1") as "0 1".
visible_list() { tr ',' ' ' <<<"$1" | sed 's/lpu//g; s/  */ /g; s/^ //; s/ $//'; }

# draw_ring "OWNED": ring 0 as text, owned LPUs in brackets.
draw_ring() {
  local out="ring0: " i
  for i in "${RING[@]}"; do
    if grep -qw "$i" <<<"$1"; then out+="[$i]"; else out+=" $i "; fi
  done
  echo "${out% }"
}

# show_lpu_view NAME: what pod NAME's container sees (demo output): the
# ring with its LPUs, its device nodes, LPU_* env and the driver mount.
show_lpu_view() {
  local path kind maj min
  echo "  $(draw_ring "$(lpu_nodes "$1" | tr '\n' ' ')")"
  echo "  devices:"
  in_ctr "$1" sh -c 'for f in /dev/lpu*; do [ -e "$f" ] && stat -c "%n|%F|%t|%T" "$f"; done' |
    while IFS='|' read -r path kind maj min; do
      printf '    %-10s %s %d:%d\n' "$path" "${kind/character special file/char}" $((16#$maj)) $((16#$min))
    done
  echo "  env:"
  in_ctr "$1" env | grep -E '^LPU_' | sort | sed 's/^/    /'
  echo "  mounts:"
  printf '    %-14s %s  <- host %s\n' "$DRIVER_CTR_DIR" \
    "$(in_ctr "$1" sh -c "grep ' $DRIVER_CTR_DIR ' /proc/mounts" | awk '{print $4}' | cut -d, -f1-3)" "$DRIVER_DIR"
}

# driver_mount_ro MOUNTS: the line for DRIVER_CTR_DIR in MOUNTS (/proc/mounts
# text) has the option ro.
driver_mount_ro() { grep " $DRIVER_CTR_DIR " <<<"$1" | awk '{print $4}' | tr ',' '\n' | grep -qx ro; }
# driver_dir_ro OUTPUT: OUTPUT (the mount line and a listing) shows the
# driver dir mounted read-only, holding the driver.
driver_dir_ro() { driver_mount_ro "$1" && has "$1" "$DRIVER_MARKER"; }

# ring_listed VALUE "N...": LPU_VISIBLE_DEVICES VALUE lists exactly the
# LPUs N... (any order given), in ring order.
ring_listed() { ring_ordered "$(visible_list "$1")" && same_set "$(visible_list "$1")" "$2"; }

# lists_no_lpu VALUE: an LPU_VISIBLE_DEVICES that is set and names no LPU.
lists_no_lpu() { ! has "$1" '[0-9]' && [ "$1" != "<unset>" ]; }

# version_at_most MAX V: version V sorts at or before MAX.
version_at_most() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | tail -1)" = "$1" ]; }

# check_lpu_container NAME COUNT: the assertions every LPU container must
# pass; sets GOT to its LPU indices.
GOT=""
check_lpu_container() {
  local name=$1 count=$2 nodes env arc mnt wr
  nodes=$(lpu_nodes "$name" | sort -n | tr '\n' ' ')
  nodes=${nodes% }
  GOT=$nodes
  if grep -q bad: <<<"$nodes"; then
    nok "$name: LPU device nodes are ours" "$nodes"
  fi
  expect "$name: sees exactly $count LPU device nodes" "sees [$nodes]" test "$(wc -w <<<"$nodes")" = "$count"
  arc=$(ring_arc "$nodes") || arc=""
  expect "$name: its LPUs are ring neighbours" "[$nodes] is not one arc of ring [${RING[*]}]" test -n "$arc"
  env=$(ctr_env "$name" LPU_VISIBLE_DEVICES)
  expect "$name: LPU_VISIBLE_DEVICES lists them in ring order" "LPU_VISIBLE_DEVICES=$env, devices [$nodes], ring [${RING[*]}]" \
    ring_listed "$env" "$nodes"
  mnt=$(in_ctr "$name" sh -c "grep ' $DRIVER_CTR_DIR ' /proc/mounts; ls $DRIVER_CTR_DIR")
  expect "$name: driver dir mounted at $DRIVER_CTR_DIR" "$mnt" grep -q "$DRIVER_MARKER" <<<"$mnt"
  expect "$name: driver mount is read-only" "$mnt" driver_mount_ro "$mnt"
  wr=$(in_ctr "$name" sh -c "touch $DRIVER_CTR_DIR/e2e-write 2>&1 && echo WRITE-SUCCEEDED || echo WRITE-REFUSED")
  expect "$name: writing into the driver mount fails" "$wr" grep -q WRITE-REFUSED <<<"$wr"
}

# gone NAME: the pod's container is gone and the kubelet no longer lists it.
gone() { ! has_running "$1" && [ -z "$(kpod "$1")" ]; }
# wait_gone NAME: delete the static pod and wait until it is gone.
wait_gone() {
  del_pod "$1"
  wait_for 30 gone "$1"
}

# runs_or_says NAME PATTERN: pod NAME's container runs, or the kubelet's
# status of it matches PATTERN.
runs_or_says() { has_running "$1" || status_says "$1" "$2"; }

# admission_refused NAME: the kubelet reports the pod Failed at admission.
admission_refused() { kpod_status "$1" | grep -Eq '^Failed.*(UnexpectedAdmissionError|OutOf)'; }

# ensure_kubelet: scenarios that need the kubelet-a node start it if a
# previous scenario (perf) stopped it.
ensure_kubelet() {
  running kubelet && return 0
  log "restarting kubelet for the next scenario"
  kubelet_start a
  wait_for 20 kubelet_saw_registration || fatal "kubelet" "device plugin did not re-register"
}

# remove_all_pods: delete every static pod manifest and wait until the
# kubelet has let go of them (so their LPUs are free again).
remove_all_pods() {
  local f n
  for f in "$BASE/kubelet-$KUBELET_NAME/manifests"/*.yaml; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .yaml)
    del_pod "$n"
  done
  wait_for 40 empty cri ps -q --label io.kubernetes.pod.namespace=default ||
    log "pods still running after 40s: $(cri ps 2>/dev/null | tail -n +2)"
  wait_for 20 prints 0 kubelet_pod_count || true
}

# ---------------------------------------------------------------- scenario 1
# LPU pods of 4 and 2 get disjoint ring arcs; a third that does not fit is not
# admitted. With DEMO=1, also show what each container sees.
scenario_1() {
  ensure_kubelet
  lpu_pod four 4
  if ! wait_running four 60; then
    nok "four: pod with $RESOURCE: 4 is running" "$(kpod_status four) | $(grep -i -m3 'four' "$KUBELET_LOG" | tail -1 | cut -c1-300)"
    return
  fi
  ok "four: pod with $RESOURCE: 4 is running"
  check_lpu_container four 4
  local got4=$GOT
  lpu_pod two 2
  if wait_running two 60; then
    ok "two: pod with $RESOURCE: 2 is running"
    check_lpu_container two 2
  else
    nok "two: pod with $RESOURCE: 2 is running" "$(kpod_status two)"
  fi
  local got2=$GOT both
  # shellcheck disable=SC2086 # lists of device indices, split on purpose
  both=$(printf '%s\n' $got4 $got2 | sort -n | uniq -d | tr '\n' ' ')
  expect "four and two hold disjoint LPUs" "both hold [$both]" test -z "$both"
  lpu_pod three 3
  if wait_for 30 admission_refused three; then
    ok "three: asking for 3 with 2 left is not admitted ($(kpod_status three | cut -d'|' -f2 | tr -d ' '))"
  else
    nok "three: asking for 3 with 2 left is not admitted" "kubelet says: $(kpod_status three); running: $(cid three)"
  fi
  expect "three: no container was started" "container $(cid three) runs" test -z "$(cid three)"
  record_rss
  [ "${DEMO:-0}" = 1 ] && demo_show four two three
  del_pod three
}

# record_rss: resident memory of both daemons after scenario 1.
record_rss() {
  local d p rss
  for d in lpu-nri lpu-device-plugin; do
    p=$(pid_of "$d") || continue
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)
    [ -n "$rss" ] || continue
    bench "rss_${d}_kib" "$rss" "VmRSS of $d (pid $p) after scenario 1: $((rss / 1024)) MiB (target <= 30 MiB)"
  done
}

# bench KEY VALUE TEXT: a measured number (recorded, never asserted).
bench() {
  echo "$1=$2" >>"$BASE/bench"
  log "bench: $3"
}

# demo_show POD...: what each pod's container sees, drawn readably.
demo_show() {
  local name asked ann
  echo
  echo "==================== what the containers see ===================="
  for name in "$@"; do
    echo
    asked=$(kpod "$name" | jq -r '.spec.containers[0].resources.limits["'"$RESOURCE"'"] // "no"')
    echo "pod $name-$NODE_NAME: asked for $asked LPUs"
    if ! has_running "$name"; then
      echo "  not running; kubelet says: $(kpod_status "$name")"
      continue
    fi
    show_lpu_view "$name"
    ann=$(cri inspect "$(cid "$name")" | jq -r '.status.annotations["lpu.hyperaccel.ai/devices"] // "none"')
    printf '    %-14s %s\n' "" "$(in_ctr "$name" ls "$DRIVER_CTR_DIR" | tr '\n' ' ')"
    echo "  allocation (device plugin annotation, sealed): $ann"
  done
  echo
  echo "================================================================="
}

# ---------------------------------------------------------------- scenario 2
# Annotations a pod author writes give no LPUs; an image's own
# LPU_VISIBLE_DEVICES is overridden when the container holds no allocation.
scenario_2() {
  ensure_kubelet
  lpu_pod forged 0 busybox "  annotations:
    lpu.hyperaccel.ai/devices: lpu0,lpu1,lpu2,lpu3
    lpu.hyperaccel.ai/seal: c2VhbGVkLWJ5LW1lLXRydXN0LW1l"
  wait_for 30 runs_or_says forged Error
  local st nodes
  if has_running forged; then
    nodes=$(lpu_nodes forged | tr '\n' ' ')
    expect "forged: pod annotations give no LPU device nodes" "sees [$nodes]" test -z "$nodes"
    expect "forged: no LPU_VISIBLE_DEVICES with digits" "$(ctr_env forged LPU_VISIBLE_DEVICES)" \
      not says '[0-9]' ctr_env forged LPU_VISIBLE_DEVICES
  else
    st=$(kpod_status forged)
    expect "forged: container refused with our message" "kubelet says: $st" grep -q 'lpu.hyperaccel.ai' <<<"$st"
    log "forged pod refused: $st"
  fi
  wait_gone forged

  lpu_pod imgenv 0 lpuenv
  if wait_running imgenv 30; then
    local env
    env=$(ctr_env imgenv LPU_VISIBLE_DEVICES)
    expect "imgenv: image's LPU_VISIBLE_DEVICES=0,1,2,3 is overridden (now '$env')" "LPU_VISIBLE_DEVICES=$env" \
      lists_no_lpu "$env"
    nodes=$(lpu_nodes imgenv | tr '\n' ' ')
    expect "imgenv: no LPU device nodes" "sees [$nodes]" test -z "$nodes"
  else
    nok "imgenv: pod without LPUs runs" "$(kpod_status imgenv)"
  fi
  wait_gone imgenv
}

# ---------------------------------------------------------------- scenario 3
# Kubelet restart: the plugin re-registers within a second, running pods keep
# their devices, and a new pod is served from what is left.
scenario_3() {
  ensure_kubelet
  local keep="" p
  for p in four two; do has_running "$p" && keep+="$p "; done
  if [ -z "$keep" ]; then
    lpu_pod four 4
    wait_running four 60 || { nok "scenario 3 setup: pod four runs" "$(kpod_status four)"; return; }
    keep="four "
  fi
  declare -A before
  for p in $keep; do before[$p]=$(lpu_nodes "$p" | sort -n | tr '\n' ' '); done
  local regs0 sock_t reg_line reg_t lat
  regs0=$(dp_registrations)
  kubelet_stop
  local old_log=$KUBELET_LOG
  kubelet_start a
  wait_for 10 kubelet_saw_registration
  sock_t=$(stat -c %.9Y "$DP_DIR/kubelet.sock")
  reg_line=$(grep -m1 "Got registration request from device plugin.*$RESOURCE" "$KUBELET_LOG")
  if [ -n "$reg_line" ]; then
    reg_t=$(date -d "$(date +%Y)-$(cut -c2-3 <<<"$reg_line")-$(cut -c4-5 <<<"$reg_line") $(awk '{print $2}' <<<"$reg_line")" +%s.%N)
    lat=$(awk -v a="$reg_t" -v b="$sock_t" 'BEGIN { printf "%.3f", a - b }')
    bench reregister_seconds "$lat" "kubelet.sock re-created -> registration received by kubelet: ${lat}s"
    expect "plugin re-registered within 1 s of kubelet.sock re-creation (${lat}s)" "${lat}s" \
      awk -v l="$lat" 'BEGIN { exit !(l < 1.0) }'
  else
    nok "plugin re-registered after kubelet restart" "no registration in $KUBELET_LOG; plugin log: $(tail -3 "$LOGS/lpu-device-plugin.log")"
  fi
  local regs1
  regs1=$(dp_registrations)
  expect "lpu_registrations_total went up ($regs0 -> $regs1)" "metric at http://$DP_METRICS/metrics" \
    awk -v a="${regs0:-0}" -v b="${regs1:-0}" 'BEGIN { exit !(b > a) }'
  : "$old_log"
  for p in $keep; do
    local now
    now=$(lpu_nodes "$p" | sort -n | tr '\n' ' ')
    expect "$p: still sees the same LPUs after the kubelet restart ([$now])" "before [${before[$p]}] now [$now]" \
      test "$now" = "${before[$p]}"
  done
  lpu_pod restart2 2
  if wait_running restart2 60; then
    ok "restart2: a new pod is served after the restart"
    check_lpu_container restart2 2
    local clash=""
    for p in $keep; do
      # shellcheck disable=SC2086 # lists of device indices, split on purpose
      clash+=$(printf '%s\n' ${before[$p]} $GOT | sort -n | uniq -d | tr '\n' ' ')
    done
    expect "restart2: its LPUs are not held by the pods from before the restart" "shared [$clash]" test -z "$clash"
  else
    nok "restart2: a new pod is served after the restart" "$(kpod_status restart2)"
  fi
  wait_gone restart2
}

# ---------------------------------------------------------------- scenario 4
# containerd restart: lpu-nri reconnects. lpu-nri down: no LPU container
# starts bare; lpu-nri back: the waiting pod starts with its devices.
scenario_4() {
  ensure_kubelet
  ctd_stop a
  wait_for 10 not nri_ready
  ctd_start a
  if wait_for 30 nri_ready; then ok "lpu-nri reconnected after the $RT_NAME restart"; else
    nok "lpu-nri reconnected after the $RT_NAME restart" "$(tail -3 "$LOGS/lpu-nri.log")"
  fi
  lpu_pod afterctd 2
  if wait_running afterctd 60; then
    ok "afterctd: a new LPU pod runs after the $RT_NAME restart"
    check_lpu_container afterctd 2
  else
    nok "afterctd: a new LPU pod runs after the $RT_NAME restart" "$(kpod_status afterctd)"
  fi
  wait_gone afterctd

  stop_daemon lpu-nri 3
  wait_for 5 not nri_ready
  # Per-pod runtime gate: containerd's NRI validator refuses a pod that
  # names lpu in required-plugins.noderesource.dev (the chart's admission
  # policy adds it to LPU pods) while lpu-nri is down; a pod without it
  # starts. Neither asks for an LPU, so PreStartContainer is not involved.
  # containerd 1.7 has no NRI validator: there only PreStartContainer
  # (guarded, below) keeps LPU containers from starting bare
  local gated=1
  [ "$CTD_SERIES" = 1.7 ] && gated="" && echo "# skip gated: containerd 1.7 has no NRI validator (the per-pod gate needs containerd >= 2.2)"
  lpu_pod free 0
  [ -n "$gated" ] && lpu_pod gated 0 busybox '  annotations:
    required-plugins.noderesource.dev: "[\"lpu\"]"'
  if wait_running free 30; then ok "free: a pod that needs no LPU starts while lpu-nri is down"; else
    nok "free: a pod that needs no LPU starts while lpu-nri is down" "$(kpod_status free)"
  fi
  local gate=""
  if [ -n "$gated" ]; then
    for _ in $(seq 1 30); do
      grep -q 'required plugin .*lpu.* not present' "$KUBELET_LOG" && { gate=1; break; }
      sleep 0.5
    done
    expect "gated: a pod requiring plugin lpu is not created while lpu-nri is down" "$(cri ps -a --label io.kubernetes.container.name=gated)" \
      test -z "$(cri ps -a -q --label io.kubernetes.container.name=gated)"
    expect "gated: kubelet reports $RT_NAME's validator refusal" "kubelet: $(kpod_status gated)" test -n "$gate"
  fi
  lpu_pod guarded 2
  local seen=""
  for _ in $(seq 1 30); do
    has_running guarded && break
    grep -q "not connected" "$KUBELET_LOG" && kpod_status guarded | grep -q . && { seen=1; break; }
    sleep 0.5
  done
  sleep 2
  expect "guarded: with lpu-nri down the LPU container is not started" "it runs: $(cid guarded)" test -z "$(cid guarded)"
  expect "guarded: ever created? no (crictl ps -a)" "$(cri ps -a --label io.kubernetes.container.name=guarded)" \
    test -z "$(cri ps -a -q --label io.kubernetes.container.name=guarded)"
  local msg
  msg=$(grep -m1 -o 'LPU injector not connected[^"]*' "$KUBELET_LOG" | head -1)
  expect "guarded: kubelet reports the PreStartContainer refusal ('${msg:0:80}')" \
    "kubelet: $(kpod_status guarded)" test -n "$seen" -a -n "$msg"
  start_lpu_nri nri
  wait_for 20 nri_ready || nok "lpu-nri back: connected" "$(tail -3 "$LOGS/lpu-nri.log")"
  if wait_running guarded 60; then
    ok "guarded: starts once lpu-nri is back"
    check_lpu_container guarded 2
  else
    nok "guarded: starts once lpu-nri is back" "$(kpod_status guarded)"
  fi
  if [ -z "$gated" ]; then :; elif wait_running gated 60; then ok "gated: starts once lpu-nri is back"; else
    nok "gated: starts once lpu-nri is back" "$(kpod_status gated)"
  fi
  wait_gone guarded
  [ -z "$gated" ] || wait_gone gated
  wait_gone free
}

# pod_lpu_health NAME LPU HEALTH: the kubelet's status of static pod NAME
# reports LPU with HEALTH in a container's allocatedResourcesStatus.
pod_lpu_health() {
  kpod "$1" | jq -e --arg id "$2" --arg h "$3" \
    '[.status.containerStatuses[]?.allocatedResourcesStatus[]?.resources[]? | select(.resourceID == $id) | .health] | index($h) != null' >/dev/null
}

# pod_sees_health NAME LPU STATUS-FILE RESOURCE: while pod NAME holds LPU,
# a failure of LPU shows in the pod's own status (allocatedResourcesStatus,
# under RESOURCE), and so does its recovery.
pod_sees_health() {
  echo ECC_ERROR >"$3"
  if wait_for 30 pod_lpu_health "$1" "$2" Unhealthy; then
    ok "$1: its status reports $2 Unhealthy under $4 (containerStatuses[].allocatedResourcesStatus)"
    log "$1: $(kpod "$1" | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  else
    nok "$1: its status reports $2 Unhealthy under $4" "$(kpod "$1" | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  fi
  echo READY >"$3"
  if wait_for 30 pod_lpu_health "$1" "$2" Healthy; then
    ok "$1: its status reports $2 Healthy again after the recovery"
  else
    nok "$1: its status reports $2 Healthy again after the recovery" "$(kpod "$1" | jq -c '[.status.containerStatuses[]?.allocatedResourcesStatus]')"
  fi
}

# ---------------------------------------------------------------- scenario 5
# A device that fails stops being offered; once it recovers it is offered again.
scenario_5() {
  ensure_kubelet
  remove_all_pods
  local dev=lpu5 st=$ROOT/sys/class/lpu/lpu5/status h
  # shellcheck disable=SC2317 # health and healthy are called from set_status
  health() { dp_healthy "device=\"$dev\""; }
  # shellcheck disable=SC2317
  healthy() { [ "$(health)" = "$1" ]; }
  # set_status STATUS WANT KEY WHAT: write STATUS, time until lpu_device_healthy is WANT.
  set_status() {
    local t0 ms
    t0=$(now_ns)
    echo "$1" >"$st"
    if wait_for 15 healthy "$2"; then
      ms=$((($(now_ns) - t0) / 1000000))
      ok "$4"
      bench "$3" "$ms" "status $1 -> lpu_device_healthy $2: $ms ms"
    else
      nok "$4" "metric: $(health)"
    fi
  }
  expect "$dev healthy before the failure (lpu_device_healthy)" "metric: $(health)" wait_for 10 healthy 1
  set_status ECC_ERROR 0 health_down_ms "$dev reported unhealthy after its status turned ECC_ERROR"
  sleep 1
  lpu_pod alleight 8
  if wait_for 30 admission_refused alleight; then
    ok "alleight: a pod needing all 8 LPUs is not admitted while $dev is unhealthy"
  else
    nok "alleight: a pod needing all 8 LPUs is not admitted while $dev is unhealthy" "kubelet: $(kpod_status alleight)"
  fi
  del_pod alleight
  set_status READY 1 health_up_ms "$dev offered again after recovery"
  sleep 1
  lpu_pod eight 8
  if wait_running eight 60; then
    ok "eight: a pod needing all 8 LPUs runs after the recovery"
    check_lpu_container eight 8
    pod_sees_health eight "$dev" "$st" "hyperaccel.ai/lpu"
  else
    nok "eight: a pod needing all 8 LPUs runs after the recovery" "$(kpod_status eight)"
  fi
  wait_gone eight
  h=$(dp_healthy)
  expect "all 8 devices healthy at the end (sum lpu_device_healthy = $h)" "sum $h" test "$h" = 8
}

# ---------------------------------------------------------------- scenario orion
# The Orion layout (8 Alveo U55C cards under XRT, discovery.backend: xilinx)
# on the same kubelet and containerd: a pod of 4 sees the render AND
# management nodes of 4 ring-neighbour cards (ring from a network table
# keyed by PCI addresses, not in address order) with the numbers sysfs
# gives, LPU_VISIBLE_DEVICES in ring order and NUM_LPU_DEVICES=4; a card
# whose ready turns 0x0 stops being offered and comes back at 0x1. The LPU
# node is restored afterwards.

# orion_node ID KIND: "PATH MAJOR:MINOR" of card ID's render or mgmt node.
orion_node() {
  local pat=/dev/dri/renderD
  [ "$2" = mgmt ] && pat=/dev/xclmgmt
  awk -v id="$1" -v p="$pat" '$2 == id && index($3, p) == 1 {print $3, $4}' <<<"$ORION_NODES"
}

# check_orion_container NAME COUNT: what a container holding COUNT Orion
# LPUs must see.
check_orion_container() {
  local name=$1 count=$2 out path kind maj min id want renders="" mgmts="" bad="" arc env num lpus
  out=$(in_ctr "$name" sh -c 'for f in /dev/dri/renderD* /dev/xclmgmt* /dev/lpu*; do [ -e "$f" ] && stat -c "%n|%F|%t|%T" "$f"; done; true')
  while IFS='|' read -r path kind maj min; do
    [ -n "$path" ] || continue
    id=$(awk -v p="$path" '$3 == p {print $2}' <<<"$ORION_NODES")
    want=$(awk -v p="$path" '$3 == p {print $4}' <<<"$ORION_NODES")
    if [ -z "$id" ] || [ "$kind" != "character special file" ] || [ "$((16#$maj)):$((16#$min))" != "$want" ]; then
      bad+="$path($kind $((16#$maj)):$((16#$min)), want ${want:-none}) "
      continue
    fi
    case $path in
      /dev/dri/renderD*) renders+="${id#lpu} " ;;
      /dev/xclmgmt*) mgmts+="${id#lpu} " ;;
    esac
  done <<<"$out"
  renders=$(tr ' ' '\n' <<<"$renders" | grep . | sort -n | tr '\n' ' ')
  mgmts=$(tr ' ' '\n' <<<"$mgmts" | grep . | sort -n | tr '\n' ' ')
  expect "$name: every device node is a card's, with the number sysfs gives" "$bad" test -z "$bad"
  expect "$name: sees the render nodes of $count cards" "render nodes of [$renders]" test "$(wc -w <<<"$renders")" = "$count"
  expect "$name: sees the management nodes of the same $count cards" "render [$renders] management [$mgmts]" test "$renders" = "$mgmts"
  lpus=${renders% }
  arc=$(ring_arc "$lpus") || arc=""
  expect "$name: its cards are ring neighbours" "[$lpus] is not one arc of ring [${RING[*]}]" test -n "$arc"
  env=$(ctr_env "$name" LPU_VISIBLE_DEVICES)
  expect "$name: LPU_VISIBLE_DEVICES lists them in ring order" "LPU_VISIBLE_DEVICES=$env, cards [$lpus], ring [${RING[*]}]" \
    ring_listed "$env" "$renders"
  num=$(ctr_env "$name" NUM_LPU_DEVICES)
  expect "$name: NUM_LPU_DEVICES=$count" "NUM_LPU_DEVICES=$num" test "$num" = "$count"
  GOT=$lpus
}

# lpu_daemons_restart: stop both daemons and start them on CFG and ROOT.
lpu_daemons_restart() {
  stop_daemon lpu-device-plugin 3
  stop_daemon lpu-nri 3
  start_lpu_nri nri
  wait_for 20 nri_ready || { nok "$1: lpu-nri connects" "$(tail -3 "$LOGS/lpu-nri.log")"; return 1; }
  start_lpu_dp nri
  wait_for 30 prints 8 dp_healthy ||
    { nok "$1: 8 healthy LPUs offered" "$(dp_healthy); $(tail -3 "$LOGS/lpu-device-plugin.log")"; return 1; }
}

scenario_orion() {
  ensure_kubelet
  remove_all_pods
  make_orion_node || return 0
  write_config "$ORION_CFG" nri "$BASE/ctd-a/cdi" orion
  local saved_cfg=$CFG saved_root=$ROOT card addr ready
  local -a saved_ring=("${RING[@]}")
  CFG=$ORION_CFG ROOT=$ORION_ROOT
  RING=("${ORION_RING[@]}")
  if lpu_daemons_restart orion; then
    ok "orion: both daemons serve the Orion node, 8 healthy LPUs (ring0 = ${RING[*]})"
    expect "orion: the device plugin logged the PCI address to LPU ID map" "$(grep -c . "$LOGS/lpu-device-plugin.log") log lines" \
      grep -q '"PCI address to LPU ID map"' "$LOGS/lpu-device-plugin.log"
    lpu_pod orion4 4
    if wait_running orion4 60; then
      ok "orion4: pod with $RESOURCE: 4 is running"
      check_orion_container orion4 4
    else
      nok "orion4: pod with $RESOURCE: 4 is running" "$(kpod_status orion4)"
    fi
    wait_gone orion4
    card=${RING[2]}
    addr=$(awk -v id="lpu$card" '$2 == id {print $3}' <<<"$ORION_PCI")
    ready=$ORION_ROOT/sys/bus/pci/devices/$addr/ready
    h() { dp_healthy "device=\"lpu$card\""; }
    echo 0x0 >"$ready"
    expect "orion: lpu$card ($addr) unhealthy after its ready turned 0x0" "metric: $(h)" wait_for 15 prints 0 h
    lpu_pod orion8 8
    if wait_for 30 admission_refused orion8; then
      ok "orion8: a pod needing all 8 cards is not admitted while lpu$card is unhealthy"
    else
      nok "orion8: a pod needing all 8 cards is not admitted while lpu$card is unhealthy" "kubelet: $(kpod_status orion8)"
    fi
    del_pod orion8
    echo 0x1 >"$ready"
    expect "orion: lpu$card offered again after ready turned 0x1" "metric: $(h)" wait_for 15 prints 1 h
    wait_for 30 gone orion8 || true
  fi
  remove_all_pods
  CFG=$saved_cfg ROOT=$saved_root
  RING=("${saved_ring[@]}")
  lpu_daemons_restart "orion: back to the LPU node" && ok "orion: back to the LPU node, 8 healthy LPUs"
}

# ---------------------------------------------------------------- scenario 6
# CDI for runtimes without NRI: podman 4.3 with a spec from `lpu-nri cdi
# generate`, then containerd with NRI off + the device plugin in cdi mode.
scenario_6() {
  scenario_6_podman
  scenario_6_containerd
}

scenario_6_podman() {
  local spec=$CDI_HOST_DIR/$CDI_SPEC_NAME out ver P
  if [ -e "$spec" ]; then
    nok "podman: CDI spec" "$spec already exists on this host; not overwriting it"
    return
  fi
  [ -d "$CDI_HOST_DIR" ] || { mkdir -p "$CDI_HOST_DIR" && record dir "$CDI_HOST_DIR"; }
  record file "$spec"
  if ! out=$("$BASE/bin/lpu-nri" cdi generate --config "$CFG" --root "$ROOT" --output "$CDI_HOST_DIR" 2>&1); then
    nok "lpu-nri cdi generate" "$out"
    return
  fi
  expect "lpu-nri cdi generate wrote $spec" "$out" test -s "$spec"
  ver=$(jq -r .cdiVersion "$spec" 2>/dev/null)
  expect "CDI spec version $ver is one podman 4.3 accepts (<= 0.5.0)" "cdiVersion $ver" \
    version_at_most 0.5.0 "$ver"
  local pd=$BASE/podman
  mkdir -p "$pd"/{storage,run,tmp}
  cat >"$pd/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
netns = "none"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$pd/events.log"
tmp_dir = "$pd/tmp"
EOF
  P=(env CONTAINERS_CONF="$pd/containers.conf" podman --root "$pd/storage" --runroot "$pd/run"
    --storage-driver vfs --cgroup-manager cgroupfs)
  if ! "${P[@]}" image exists "$IMG:podman" 2>/dev/null; then
    "${P[@]}" import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' "$BASE/images/rootfs.tar" "$IMG:podman" \
      >>"$LOGS/podman.log" 2>&1 || { nok "podman: import busybox image" "$(tail -3 "$LOGS/podman.log")"; return; }
  fi
  out=$("${P[@]}" run --rm --cgroup-parent "/$CGNAME/podman" \
    --device "$RESOURCE=lpu0" --device "$RESOURCE=lpu1" "$IMG:podman" \
    sh -c "for f in /dev/lpu*; do stat -c '%n|%F|%t|%T' \$f; done; echo VISIBLE=\$LPU_VISIBLE_DEVICES;
           grep ' $DRIVER_CTR_DIR ' /proc/mounts; ls $DRIVER_CTR_DIR" 2>&1)
  echo "$out" >>"$LOGS/podman.log"
  local nodes
  local path kind maj min
  nodes=""
  while IFS='|' read -r path kind maj min; do
    [ "$kind" = "character special file" ] && [ $((16#$maj)) = "$LPU_MAJOR" ] && nodes+="$path "
  done < <(grep '^/dev/lpu' <<<"$out")
  expect "podman: --device $RESOURCE=lpu0 --device $RESOURCE=lpu1 gives exactly /dev/lpu0 /dev/lpu1" \
    "$(tr '\n' ' ' <<<"$out" | cut -c1-400)" test "$nodes" = "/dev/lpu0 /dev/lpu1 "
  expect "podman: driver dir mounted read-only at $DRIVER_CTR_DIR" "$(tr '\n' ' ' <<<"$out" | cut -c1-400)" \
    driver_dir_ro "$out"
  log "podman container saw: $(grep VISIBLE= <<<"$out")"
  "${P[@]}" rmi -f "$IMG:podman" >/dev/null 2>&1 || true
  rm -f "$spec"
}

scenario_6_containerd() {
  # a separate containerd (NRI disabled) under its own kubelet; the NRI node goes down first
  if running kubelet; then remove_all_pods; kubelet_stop; fi
  stop_daemon lpu-device-plugin 3
  stop_daemon lpu-nri 3
  CTD=a
  running containerd-a && { remove_cri_pods; ctd_stop a; }
  CFG=$BASE/lpu-cdi.yaml
  write_config "$CFG" cdi "$BASE/ctd-b/cdi"
  ctd_config b off
  ctd_start b
  start_lpu_nri cdi
  if wait_for 15 test -s "$BASE/ctd-b/cdi/$CDI_SPEC_NAME"; then
    ok "lpu-nri --mode cdi keeps $CDI_SPEC_NAME in containerd's CDI dir"
  else
    nok "lpu-nri --mode cdi keeps $CDI_SPEC_NAME in containerd's CDI dir" "$(tail -3 "$LOGS/lpu-nri.log")"
  fi
  kubelet_config b b
  kubelet_start b
  start_lpu_dp cdi
  wait_for 20 kubelet_saw_registration || { nok "cdi node: device plugin registered" "$(tail -3 "$LOGS/lpu-device-plugin.log")"; return; }
  wait_for 20 kubelet_has_lpus || { nok "cdi node: the kubelet has the plugin's devices" "$(tail -3 "$LOGS/lpu-device-plugin.log")"; return; }
  lpu_pod cdithree 3
  if wait_running cdithree 60; then
    ok "cdithree: static pod with $RESOURCE: 3 runs on containerd without NRI"
    check_lpu_container cdithree 3
    local cdinames
    cdinames=$(cri inspect "$(cid cdithree)" | jq -r '[.info.config.CDI_devices[]?.name] | join(",")' 2>/dev/null)
    expect "cdithree: devices came through CDI ($cdinames)" "CRI CDI_devices: '$cdinames'" grep -q "$RESOURCE=" <<<"$cdinames"
  else
    nok "cdithree: static pod with $RESOURCE: 3 runs on containerd without NRI" "$(kpod_status cdithree) | $(tail -2 "$LOGS/containerd-b.log")"
  fi
}

# ---------------------------------------------------------------- image
# The project's OCI image (deploy/container/build-oci.sh) holds both daemons.
scenario_image() {
  local script=$REPO/deploy/container/build-oci.sh out tar=$BASE/oci/lpu-node.tar ref=localhost/lpu-node:e2e d
  if [ ! -f "$script" ]; then
    echo "# skip image: $script not present yet"
    return
  fi
  log "image: build with deploy/container/build-oci.sh, import with ctr, run --version"
  mkdir -p "$BASE/oci"
  if ! out=$(IMAGE=localhost/lpu-node bash "$script" "$tar" e2e 2>&1); then
    nok "image: deploy/container/build-oci.sh builds" "$(tail -5 <<<"$out")"
    return
  fi
  echo "$out" >"$LOGS/build-oci.log"
  expect "image: build-oci.sh wrote an OCI archive ($(du -h "$tar" 2>/dev/null | cut -f1))" "$(tail -3 <<<"$out")" test -s "$tar"
  [ -s "$tar" ] || return
  running "containerd-$CTD" || { nok "image: containerd running" "containerd $CTD is down"; return; }
  out=$(ctrc -n lpu-e2e images import "$tar" 2>&1)
  expect "image: ctr imports it as $ref" "$out; images: $(ctrc -n lpu-e2e images ls -q 2>&1 | tr '\n' ' ')" \
    has "$(ctrc -n lpu-e2e images ls -q)" "$ref" -xF
  for d in lpu-device-plugin lpu-nri; do
    out=$(ctrc -n lpu-e2e run --rm --runc-binary /usr/sbin/runc --runc-root "$BASE/runc-ctr" \
      --cgroup "/$CGNAME/img-$d" --net-host "$ref" "img-$d" "/usr/bin/$d" --version 2>>"$LOGS/ctr-run.log")
    expect "image: /usr/bin/$d --version runs in it ($(head -1 <<<"$out" | cut -c1-60))" "$out" \
      has "$out" "^$d "
  done
  ctrc -n lpu-e2e images rm "$ref" >/dev/null 2>&1 || true
}
