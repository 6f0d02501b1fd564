# shellcheck shell=bash
# crio.sh — run.sh crio: the node scenarios and the security cases that apply
# on CRI-O instead of containerd. The real kubelet talks to a real CRI-O
# (v1.36.3 from CRIO_BIN/PINNS_BIN, test/e2e/tools.sh crio) whose
# crio.conf.d holds deploy/runtime/crio-nri-cdi.conf as shipped, followed by
# this run's private paths; lpu-nri and the device plugin run as on
# containerd. CRI-O pulls the test images through containers/image from a
# loopback registry, with registries.conf and policy.json of this run.
# The scenario functions are lib/scenarios.sh's and lib/security.sh's: the
# runtime instance "a" (RT=crio) lives in $BASE/ctd-a like containerd's, with
# crio.sock as its CRI socket. Sourced by test/e2e/run.sh after lib/node.sh.

CRIO_VERSION=${CRIO_VERSION:-1.36.3}
CRIO_BIN=${CRIO_BIN:-$REPO/../shared/tools/crio-$CRIO_VERSION-linux-amd64.gz}
PINNS_BIN=${PINNS_BIN:-$REPO/../shared/tools/pinns-$CRIO_VERSION-linux-amd64.gz}
CRIO_SNIPPET=$REPO/deploy/runtime/crio-nri-cdi.conf
REGISTRY_ADDR=""

# crio_binaries_present: both prebuilt binaries exist; otherwise the group
# is skipped with one line naming the missing path.
crio_binaries_present() {
  local p
  for p in "$CRIO_BIN" "$PINNS_BIN"; do
    if [ ! -f "$p" ]; then
      echo "# skip crio: no CRI-O binary at $p (set CRIO_BIN and PINNS_BIN)"
      return 1
    fi
  done
}

# crio_tools: CRI-O and pinns into the tool cache (sha256 checked) and the
# Debian packages they run with.
crio_tools() {
  CRIO_BIN=$CRIO_BIN PINNS_BIN=$PINNS_BIN CRIO_VERSION=$CRIO_VERSION bash "$E2E_DIR/tools.sh" crio >>"$LOGS/tools.log" 2>&1 ||
    fatal "tools" "test/e2e/tools.sh crio failed, see $LOGS/tools.log: $(tail -3 "$LOGS/tools.log")"
  local t
  for t in crio pinns conmon runc docker-registry skopeo; do
    command -v "$t" >/dev/null || fatal "tools" "$t not on PATH (test/e2e/tools.sh crio)"
  done
  log "CRI-O $(crio --version 2>/dev/null | awk '/^crio version/ {print $3}') from $(dirname "$(command -v crio)")"
}

# crio_registry: a loopback registry (Debian's docker-registry) serving the
# test images, copied there from the umoci layout with skopeo.
crio_registry() {
  local r=$BASE/registry t
  mkdir -p "$r/data"
  REGISTRY_ADDR=127.0.0.1:$(free_port)
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
    "$r/data" "$REGISTRY_ADDR" >"$r/config.yml"
  printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$r/policy.json"
  start_daemon registry "$LOGS/registry.log" docker-registry serve "$r/config.yml"
  wait_for 20 curl -sf --max-time 1 "http://$REGISTRY_ADDR/v2/" ||
    fatal "registry" "not answering on $REGISTRY_ADDR: $(tail -5 "$LOGS/registry.log")"
  for t in busybox pause lpuenv; do
    skopeo --policy "$r/policy.json" copy --dest-tls-verify=false \
      "oci-archive:$BASE/images/lpu-e2e.tar:$t" "docker://$REGISTRY_ADDR/lpu-e2e:$t" >>"$LOGS/images.log" 2>&1 ||
      fatal "registry" "skopeo copy of $t failed: $(tail -3 "$LOGS/images.log")"
  done
  log "registry on $REGISTRY_ADDR serves lpu-e2e:{busybox,pause,lpuenv}"
}

# crio_args NAME: the command line of CRI-O instance NAME.
crio_args() {
  local d=$BASE/ctd-$1
  echo env CONTAINERS_STORAGE_CONF="$d/storage.conf" crio --config "$d/crio.conf" --config-dir "$d/conf.d" \
    --registries-conf "$d/registries.conf" --registries-conf-dir "$d/registries.conf.d"
}

# crio_config NAME: CRI-O instance NAME under $BASE/ctd-NAME. crio.conf holds
# this run's paths and runtimes; conf.d/10-lpu.conf is the shipped snippet,
# byte for byte; conf.d/99-e2e.conf moves the snippet's host paths (NRI
# socket, plugin and CDI dirs) under $BASE, nothing else.
crio_config() {
  local n=$1 d=$BASE/ctd-$1
  mkdir -p "$d"/{root,run,state,cdi,conf.d,registries.conf.d,ns,logs,exits,attach,keys,auth,policies,nri/plugins,nri/conf.d,cni/net.d} "$BASE/runc-$n"
  [ -f "$CRIO_SNIPPET" ] || fatal "crio config" "no $CRIO_SNIPPET in the checkout"
  cp "$CRIO_SNIPPET" "$d/conf.d/10-lpu.conf"
  crio_main_config "$n" >"$d/crio.conf"
  # the snippet's tables and path keys, rendered with the paths under $d
  {
    echo "# e2e: the snippet's host paths moved under \$BASE"
    grep -E '^\[|^(cdi_spec_dirs|nri_listen|nri_plugin_dir|nri_plugin_config_dir) = ' "$CRIO_SNIPPET" | runtime_paths "$d"
  } >"$d/conf.d/99-e2e.conf"
  printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$d/policy.json"
  cat >"$d/registries.conf" <<EOF
unqualified-search-registries = []
# the test images' name, served by this run's loopback registry over http
[[registry]]
prefix = "${IMG%%/*}/${IMG#*/}"
location = "$REGISTRY_ADDR/lpu-e2e"
insecure = true
EOF
  printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n' "$d/root" "$d/run" >"$d/storage.conf"
  cat >"$d/crictl.yaml" <<EOF
runtime-endpoint: unix://$d/crio.sock
image-endpoint: unix://$d/crio.sock
timeout: 30
EOF
}

# crio_main_config NAME: crio.conf of instance NAME. Every default path
# outside $BASE is moved in; "nodev" is the security cases' handler with
# privileged_without_host_devices.
crio_main_config() {
  local n=$1 d=$BASE/ctd-$1 h
  cat <<EOF
[crio]
root = "$d/root"
runroot = "$d/run"
storage_driver = "overlay"
log_dir = "$d/logs"
version_file = "$d/state/version"
version_file_persist = "$d/state/version-persist"
clean_shutdown_file = "$d/state/clean.shutdown"

[crio.api]
listen = "$d/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
pinns_path = "$(command -v pinns)"
namespaces_dir = "$d/ns"
container_exits_dir = "$d/exits"
container_attach_socket_dir = "$d/attach"
decryption_keys_path = "$d/keys"
hooks_dir = []
irqbalance_config_file = ""
irqbalance_config_restore_file = ""
log_level = "info"
EOF
  for h in runc nodev; do
    cat <<EOF

[crio.runtime.runtimes.$h]
runtime_path = "/usr/sbin/runc"
runtime_type = "oci"
runtime_root = "$BASE/runc-$n"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"
EOF
    [ "$h" = nodev ] && echo "privileged_without_host_devices = true"
  done
  cat <<EOF

[crio.image]
pause_image = "$IMG:pause"
pause_command = ""
pinned_images = ["$IMG:pause"]
signature_policy = "$d/policy.json"
signature_policy_dir = "$d/policies"
namespaced_auth_dir = "$d/auth"

[crio.network]
network_dir = "$d/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]
EOF
}

# crio_dump NAME: the settings CRI-O NAME has in effect (`crio config`
# comments out values equal to its defaults, and in 1.36 the whole
# [crio.nri.default_validator] table, but prints the values in effect).
crio_dump() {
  local d=$BASE/ctd-$1
  # shellcheck disable=SC2046 # crio_args is a word list
  $(crio_args "$1") config 2>"$d/config.err" |
    sed -E 's/^# ?(([a-z0-9_]+ = |\[crio|\t"|\]$).*)$/\1/; /^#/d'
}

# crio_read_unchanged DIR: CRI-O's config run read conf.d/10-lpu.conf, and
# that file is the shipped snippet byte for byte.
crio_read_unchanged() { grep -q "drop-in file: $1/conf.d/10-lpu.conf" "$1/config.err" && cmp -s "$CRIO_SNIPPET" "$1/conf.d/10-lpu.conf"; }

# crio_validator_on DUMP: the default validator on, with the chart's
# toleration annotation and no global required plugins (an empty list).
crio_validator_on() {
  has_lines "$1" 'nri_enable_default_validator = true' \
    'nri_validator_tolerate_missing_plugins_annotation = "tolerate-missing-plugins.noderesource.dev"' &&
    [ "$(grep -A1 '^nri_validator_required_plugins = \[' <<<"$1" | tail -1)" = "]" ]
}

# crio_check_config NAME: CRI-O read the shipped drop-in and its NRI and
# validator settings are in effect.
crio_check_config() {
  local d=$BASE/ctd-$1 dump rel=${CRIO_SNIPPET#"$REPO"/}
  dump=$(crio_dump "$1") || { nok "CRI-O loads its config with $rel" "$(tail -3 "$d/config.err")"; return 0; }
  echo "$dump" >"$d/config.dump.toml"
  expect "CRI-O reads $rel from its crio.conf.d (10-lpu.conf, unchanged)" "$(grep -o 'drop-in file: [^"]*' "$d/config.err" | tr '\n' ' ')" \
    crio_read_unchanged "$d"
  expect "CRI-O merged $rel: NRI on, external plugins allowed, at $d/nri.sock" \
    "$(grep -E '^(enable_nri|nri_listen|nri_disable_connections) =' <<<"$dump" | tr '\n' ' ')" \
    has_lines "$dump" 'enable_nri = true' 'nri_disable_connections = false' "nri_listen = \"$d/nri.sock\""
  expect "CRI-O merged $rel: NRI default validator on, no global required plugins, the chart's toleration annotation" \
    "$(grep -E '^nri_(enable_default_validator|validator_required_plugins|validator_tolerate)' <<<"$dump" | tr '\n' ' ')" \
    crio_validator_on "$dump"
}

# crio_start NAME: start (or restart) CRI-O NAME, wait for CRI and, the
# first time, pull the test images through CRI (containers/image, this run's
# registries.conf and policy.json).
crio_start() {
  local n=$1 d=$BASE/ctd-$1 t
  rm -f "$d/crio.sock"
  # shellcheck disable=SC2046 # crio_args is a word list
  start_daemon "crio-$n" "$LOGS/crio-$n.log" $(crio_args "$n")
  wait_for 30 test -S "$d/crio.sock" || fatal "crio $n" "socket did not appear: $(tail -5 "$LOGS/crio-$n.log")"
  CTD=$n
  wait_for 30 cri version || fatal "crio $n" "CRI not answering: $(tail -5 "$LOGS/crio-$n.log")"
  [ -f "$d/pulled" ] && return 0
  for t in busybox pause lpuenv; do
    crictl --config "$d/crictl.yaml" pull "$IMG:$t" >>"$LOGS/images.log" 2>&1 ||
      fatal "crio $n" "crictl pull $IMG:$t (registries.conf: $REGISTRY_ADDR) failed: $(tail -2 "$LOGS/images.log") | $(tail -2 "$LOGS/crio-$n.log")"
  done
  ok "CRI-O pulled $IMG:{busybox,pause,lpuenv} through registries.conf from the loopback registry"
  touch "$d/pulled"
}

crio_stop() { stop_daemon "crio-$1" 10; }

# crio_hugetlb: on a cgroup v1 host whose kernel has the hugetlb controller
# enabled (/proc/cgroups) but no hierarchy of it mounted here, CRI-O passes
# the kubelet's hugepage limits on and runc fails every container ("cannot set
# hugetlb limit"); containerd drops them. A real v1 node mounts every
# controller, so the run mounts this one and unmounts it at teardown. Whether
# it is mounted is read from mountinfo, not from /proc/cgroups' hierarchy
# column: a hierarchy that was unmounted while it still had cgroups keeps its
# number but is invisible to runc.
crio_hugetlb() {
  local d=/sys/fs/cgroup/hugetlb
  [ -f /sys/fs/cgroup/cgroup.controllers ] && return 0 # cgroup v2
  awk '$1 == "hugetlb" && $4 == 1 {f=1} END {exit !f}' /proc/cgroups || return 0
  hugetlb_mounted && return 0
  if ! { mkdir -p "$d" && mount -t cgroup -o hugetlb cgroup "$d"; }; then
    fatal "crio" "cannot mount the hugetlb cgroup hierarchy at $d"
  fi
  record mount "$d"
  log "mounted the hugetlb cgroup hierarchy at $d (v1 host without it; unmounted at teardown)"
}

# hugetlb_mounted: a cgroup v1 mount with the hugetlb controller is visible in
# this mount namespace (mountinfo: fields after " - " are type, source, super
# options).
hugetlb_mounted() {
  awk -F' - ' '{split($2, f, " "); if (f[1] == "cgroup" && ("," f[3] ",") ~ /,hugetlb,/) m=1} END {exit !m}' /proc/self/mountinfo
}

# ---------------------------------------------------------------- CRI-O cases
# scenario_crio_annotations: CRI-O copies every pod annotation into every
# container's annotations (what NRI hands lpu-nri as the container's); a pod
# annotation carrying a validly sealed allocation must still give nothing.
scenario_crio_annotations() {
  log "crio: pod annotations in container annotations, the reserved-key rule"
  ensure_kubelet
  remove_all_pods
  local c spec sealed all8 before st
  lpu_pod copyprobe 1 busybox "  annotations:
    e2e.lpu-test/copied: from-the-pod"
  if wait_running copyprobe 60; then
    c=$(cid copyprobe)
    spec=$(cri inspect "$c" | jq -c '.info.runtimeSpec.annotations // {}')
    expect "copyprobe: CRI-O copied the pod annotation e2e.lpu-test/copied into the container's annotations" \
      "container annotations: $(cut -c1-300 <<<"$spec")" json_true "$spec" '."e2e.lpu-test/copied" == "from-the-pod"'
    expect "copyprobe: the device plugin's sealed allocation is in the same container annotations" \
      "$(jq -c 'with_entries(select(.key | startswith("lpu.hyperaccel.ai/")))' <<<"$spec")" \
      json_true "$spec" '(."lpu.hyperaccel.ai/seal" // "") | startswith("v2:")'
    check_lpu_container copyprobe 1
  else
    nok "copyprobe: a pod of 1 LPU with a plain annotation runs" "$(kpod_status copyprobe)"
  fi
  sealed=$("$BASE/bin/sealtool" --state-dir "$STATE" lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7) ||
    { nok "sealtool seals with the node's key" "$sealed"; return; }
  all8=$(jq -r 'to_entries | map("    \(.key): \"\(.value)\"") | join("\n")' <<<"$sealed")
  before=$(refusals pod-annotation)
  lpu_pod spoofseal 2 busybox "  annotations:
$all8"
  wait_for 30 refused_since pod-annotation "$before"
  st=$(kpod_status spoofseal)
  expect "spoofseal: an LPU pod whose pod annotations carry a valid seal of all 8 LPUs (copied into its container by CRI-O) is refused (pod-annotation)" \
    "refusals{pod-annotation} $before -> $(refusals pod-annotation); kubelet: $st" refused_since pod-annotation "$before"
  expect "spoofseal: never created (crictl ps -a)" "$(cri ps -a --name '^spoofseal$')" never_created spoofseal
  expect "spoofseal: the kubelet shows lpu-nri's reason" "kubelet: $st" \
    wait_for 15 status_says spoofseal "reserved for the LPU device plugin"
  if has_running copyprobe; then
    expect "copyprobe: still holds exactly 1 LPU" "sees [$(lpu_nodes copyprobe | tr '\n' ' ')]" test "$(lpu_nodes copyprobe | wc -l)" = 1
  fi
  remove_all_pods
}

# crio_sec_nodev: rule 7 on CRI-O. Unlike containerd's
# privileged_without_host_devices_all_devices_allowed, CRI-O's
# privileged_without_host_devices also keeps the default device cgroup
# (internal/factory/container/device_linux.go): a privileged container on
# that handler carries no LPU node and no rule admitting one, so lpu-nri has
# nothing to refuse. Where runc can start it, the container sees no LPU and
# cannot open one it makes itself; on a host whose bounding set lacks a
# capability CRI-O grants privileged containers, runc refuses it after lpu-nri
# let it through.
# sees_no_lpu_denied LPUS OUTPUT: no LPU node, and the device cgroup denied
# opening one made by hand.
sees_no_lpu_denied() { [ -z "$1" ] && has "$2" "Operation not permitted"; }
# not_refused_since BEFORE ERR: lpu-nri counted no refusal since BEFORE and
# the runtime's error does not name it.
not_refused_since() { [ "$(refusals)" = "$1" ] && ! has "$2" "lpu-nri refused"; }

crio_sec_nodev() {
  local sb f=$SEC_DIR/nodev.ctr.json c out lpus before err
  sb=$(sec_nodev_sandbox nodevpod) || { sec_nok "nodev: privileged sandbox on the nodev handler" "runp failed"; return; }
  jq -n --arg img "$IMG:busybox" '{metadata: {name: "nodev", attempt: 0}, image: {image: $img},
    command: ["/bin/sleep", "600"], log_path: "nodev.log",
    linux: {security_context: {privileged: true, namespace_options: {network: 2, pid: 1, ipc: 0}}}}' >"$f"
  before=$(refusals)
  if crictl --config "$BASE/ctd-$CTD/crictl.yaml" create "$sb" "$f" "$SEC_DIR/nodevpod.pod.json" >"$SEC_DIR/nodev.id" 2>"$SEC_DIR/nodev.err" &&
    c=$(cat "$SEC_DIR/nodev.id") && cri start "$c" >/dev/null; then
    lpus=$(ctr_lpus "$c")
    out=$(crictl --config "$BASE/ctd-$CTD/crictl.yaml" exec "$c" sh -c \
      "mknod /tmp/lpu0 c $LPU_MAJOR 0 && head -c1 /tmp/lpu0; echo rc=\$?" 2>&1 | tr '\n' ' ')
    sec_expect "nodev: a privileged container on CRI-O's privileged_without_host_devices handler gets no LPU node, and one it makes itself cannot be opened (device cgroup: '$(grep -o 'Operation not permitted' <<<"$out" | head -1)')" \
      "LPUs [$lpus]; mknod+open: $out" sees_no_lpu_denied "$lpus" "$out"
    cri rm -f "$c" >/dev/null
  else
    err=$(create_err nodev)
    sec_expect "nodev: a privileged container on CRI-O's privileged_without_host_devices handler (no LPU node, default device cgroup) is not refused by lpu-nri (refusals stay $before)" \
      "refusals $before -> $(refusals); runtime said: $err" not_refused_since "$before" "$err"
    grep -q 'unable to apply caps' <<<"$err" &&
      echo "# skip nodev start: runc cannot start a CRI-O privileged container here (CAP_SYS_RESOURCE is not in the bounding set)"
  fi
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
}

# scenario_crio_security: lib/security.sh's cases that concern the runtime
# (forged, case-variant, privileged and replayed allocations, the runtime's
# validator gate with lpu-nri down, rule 7), on CRI-O. The metrics-port
# floods do not involve the runtime and run in run.sh security only.
scenario_crio_security() {
  log "security: the hostile tenant on the real CRI-O"
  ensure_kubelet
  remove_all_pods
  local t0=$SECONDS
  mkdir -p "$SEC_DIR"
  # the runtime guard stays off here: not yet exercised on CRI-O
  # shellcheck disable=SC2034 # read by sec_crictl (lib/security.sh)
  SEC_GUARD_ON=false
  { cat "$CFG"; printf 'security:\n  auditInterval: 2s\n'; } >"$SEC_CFG"
  sec_restart_nri "$SEC_CFG" || return 0
  sec_pods
  sec_crictl
  sec_after
  bench crio_security_seconds $((SECONDS - t0)) "security cases on CRI-O: $((SECONDS - t0))s"
}

# main_crio: the node on CRI-O and its scenarios.
main_crio() {
  # shellcheck disable=SC2034 # read by lib/node.sh, scenarios.sh and security.sh
  RT=crio
  # shellcheck disable=SC2034
  RT_NAME=CRI-O
  preflight
  setup_tools
  crio_tools
  build_binaries
  build_images
  crio_registry
  crio_hugetlb
  make_node
  node_up
  local s
  for s in 1 2 3 4 crio_annotations crio_security; do run_scenario "$s"; done
}
