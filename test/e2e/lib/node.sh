# shellcheck shell=bash
# shellcheck disable=SC2034 # settings here are read by the other lib files
# node.sh — the node under test: tools, our binaries, images, a simulated LPU
# node with real device nodes, containerd instances, the standalone kubelet,
# lpu-nri and lpu-device-plugin, and the teardown that undoes all of it.
# Sourced by test/e2e/run.sh after lib/common.sh.

NODE_NAME=lpu-e2e-node              # kubelet --hostname-override; static pods are "<name>-$NODE_NAME"
RESOURCE=hyperaccel.ai/lpu
DP_DIR=/var/lib/kubelet/device-plugins   # fixed in kubelet, whatever its --root-dir
ROOT=$BASE/node                     # discovery root: the simulated sysfs + dev tree
STATE=$BASE/state                   # seal key and NRI readiness socket (shared by both daemons)
LOGS=$BASE/logs
CFG=$BASE/lpu.yaml                  # config for both daemons (NRI mode)
DRIVER_DIR=$BASE/host/usr/lib/lpu   # host driver dir, bind-mounted read-only into LPU containers
DRIVER_CTR_DIR=/usr/lib/lpu
DRIVER_MARKER=libhyperaccel.so.1
CGNAME=$(basename "$BASE")          # cgroup parent for pods made with crictl/ctr
CDI_HOST_DIR=/var/run/cdi           # podman 4.3 reads only /etc/cdi and /var/run/cdi
CDI_SPEC_NAME=hyperaccel.ai-lpu.json
IMG=localhost/lpu-e2e               # tags: busybox, pause, lpuenv
KUBELET_PORT=10250
NRI_IDX=10
CTD=a                               # the containerd instance crictl talks to
KUBELET_STARTS=0
KUBELET_LOG=""
LPU_MAJOR=""
RING=()                             # device indices of ring 0 in ring order
# CONTAINERD=1.7 runs the node on containerd 1.7 (test/e2e/tools.sh
# containerd17) with deploy/runtime/containerd-1.7.toml; default: 2.x (2.4.2)
CTD_SERIES=${CONTAINERD:-2}
CONTAINERD17_VERSION=${CONTAINERD17_VERSION:-v1.7.35}
# RT: the CRI runtime of instance a ($BASE/ctd-a): containerd, or crio (run.sh
# crio, lib/crio.sh; it listens on crio.sock in the same layout)
RT=containerd
RT_NAME=containerd

cri() { crictl --config "$BASE/ctd-$CTD/crictl.yaml" "$@" 2>/dev/null; }
ctrc() { ctr --address "$BASE/ctd-$CTD/containerd.sock" "$@"; }
nri_sock() { echo "$BASE/ctd-$1/nri.sock"; }
rt_sock() { if [ "$RT" = crio ]; then echo "$BASE/ctd-$1/crio.sock"; else echo "$BASE/ctd-$1/containerd.sock"; fi; }

# record KIND PATH: something outside $BASE that this run created and the
# teardown must remove (node, file, dir).
record() { echo "$1 $2" >>"$BASE/created"; }

# ---------------------------------------------------------------- preflight
preflight() {
  [ "$(id -u)" = 0 ] || fatal "preflight" "run as root (mknod, cgroups, kubelet)"
  # one run at a time on a host: a second one waits (bounded) rather than fails
  exec 9>/tmp/lpu-e2e.lock
  if ! flock -n 9; then
    log "another e2e run holds /tmp/lpu-e2e.lock; waiting up to ${E2E_LOCK_WAIT:-3600}s"
    flock -w "${E2E_LOCK_WAIT:-3600}" 9 || fatal "preflight" "another e2e run held /tmp/lpu-e2e.lock for ${E2E_LOCK_WAIT:-3600}s"
  fi
  reclaim_stale
  local p
  for p in $KUBELET_PORT 10248; do
    listening "$p" && fatal "preflight" "port $p is in use (another kubelet?)"
  done
  if [ -S "$DP_DIR/kubelet.sock" ] && curl -s --max-time 1 -o /dev/null http://127.0.0.1:10248/healthz; then
    fatal "preflight" "a kubelet is running on this host"
  fi
  mkdir -p "$BASE"/{bin,pids,images,nfd} "$LOGS" "$STATE" "$DRIVER_DIR"
  : >"$BASE/created"
  # cgroups we may create; only the ones that do not exist yet are ours to remove
  local c
  for c in /sys/fs/cgroup/*/; do
    for p in kubepods libpod_parent "$CGNAME"; do
      [ -e "$c$p" ] || echo "$c$p" >>"$BASE/cgroups-ours"
    done
  done
  [ -e /var/lib/kubelet ] || record tree /var/lib/kubelet
  [ -e /var/log/containers ] || record emptydir /var/log/containers
  [ -e /run/containerd ] || record tree-if-empty /run/containerd
  # containers/image's blob-info cache (skopeo, CRI-O: run.sh crio)
  [ -e /var/lib/containers ] || record tree /var/lib/containers
  log "base dir $BASE"
}

# ---------------------------------------------------------------- tools and builds
setup_tools() {
  log "tools: apt packages, containerd, crictl, kubelet (cached builds; ~15 min the first time, log: $LOGS/tools.log)"
  bash "$E2E_DIR/tools.sh" apt containerd crictl kubelet >>"$LOGS/tools.log" 2>&1 ||
    fatal "tools" "test/e2e/tools.sh failed, see $LOGS/tools.log: $(tail -3 "$LOGS/tools.log")"
  case $CTD_SERIES in
    2) PATH=$(bash "$E2E_DIR/tools.sh" path):/usr/local/go/bin:$PATH ;;
    1.7)
      bash "$E2E_DIR/tools.sh" containerd17 >>"$LOGS/tools.log" 2>&1 ||
        fatal "tools" "test/e2e/tools.sh containerd17 failed, see $LOGS/tools.log: $(tail -3 "$LOGS/tools.log")"
      # the same tools, but containerd, ctr and the shim from 1.7
      PATH=$(CONTAINERD_VERSION=$CONTAINERD17_VERSION bash "$E2E_DIR/tools.sh" path):/usr/local/go/bin:$PATH ;;
    *) fatal "tools" "CONTAINERD=$CTD_SERIES: want 2 or 1.7" ;;
  esac
  export PATH
  log "containerd $(containerd --version | awk '{print $3}') from $(dirname "$(command -v containerd)")"
  local t
  for t in containerd ctr containerd-shim-runc-v2 crictl kubelet runc umoci podman; do
    command -v "$t" >/dev/null || fatal "tools" "$t not on PATH"
  done
}

build_binaries() {
  log "go build lpu-device-plugin, lpu-nri, noopnri, simnode, sealtool, connflood, e2etool"
  local t out
  for t in cmd/lpu-device-plugin cmd/lpu-nri test/e2e/noopnri test/e2e/simnode test/e2e/sealtool test/e2e/connflood test/e2e/e2etool; do
    out=$(go_build "$t") || fatal "build ./$t" "$out"
  done
}

# build_e2etool: the e2e's own helpers alone (the install run builds nothing
# else): e2etool, and fakedra, the second DRA driver of the install run.
build_e2etool() {
  local out t
  for t in test/e2e/e2etool test/e2e/fakedra; do
    out=$(go_build "$t") || fatal "build ./$t" "$out"
  done
}

# ---------------------------------------------------------------- images
# build_images: one OCI layout with three tags built from busybox-static with
# umoci, no registry: busybox (sh), pause (sleeps), lpuenv (busybox whose image
# config sets LPU_VISIBLE_DEVICES=0,1,2,3).
build_images() {
  local w=$BASE/images a
  log "images: umoci layout from busybox-static"
  rm -rf "$w/oci" "$w/bundle"
  {
    umoci init --layout "$w/oci"
    umoci new --image "$w/oci:busybox"
    umoci unpack --image "$w/oci:busybox" "$w/bundle"
    mkdir -p "$w/bundle/rootfs"/{bin,dev,proc,sys,etc,tmp,usr/lib}
    cp /bin/busybox "$w/bundle/rootfs/bin/busybox"
    for a in $(/bin/busybox --list); do
      [ "$a" = busybox ] || ln -sf busybox "$w/bundle/rootfs/bin/$a"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' >"$w/bundle/rootfs/etc/passwd"
    echo 'root:x:0:' >"$w/bundle/rootfs/etc/group"
    umoci repack --image "$w/oci:busybox" "$w/bundle"
    umoci config --image "$w/oci:busybox" --tag pause --config.env PATH=/bin \
      --config.entrypoint /bin/busybox --config.entrypoint sleep --config.entrypoint 2147483647
    umoci config --image "$w/oci:busybox" --config.env PATH=/bin --config.workingdir / --config.cmd /bin/sh
    umoci config --image "$w/oci:busybox" --tag lpuenv --config.env LPU_VISIBLE_DEVICES=0,1,2,3
    umoci gc --layout "$w/oci"
    tar -C "$w/oci" -cf "$w/lpu-e2e.tar" .
    # the same root file system as a plain tar, for podman import
    tar -C "$w/bundle/rootfs" -cf "$w/rootfs.tar" .
  } >>"$LOGS/images.log" 2>&1 || fatal "images" "umoci failed, see $LOGS/images.log"
  rm -rf "$w/oci" "$w/bundle"
}

# ---------------------------------------------------------------- simulated node
choose_major() {
  local m used
  used=$(awk '/^Character/{c=1;next} /^Block/{c=0} c{print $1}' /proc/devices)
  for m in $(seq 240 254); do
    grep -qx "$m" <<<"$used" && continue
    # no existing character node on the host may use it either (stat fails on
    # some entries; under pipefail that must not make the major look free)
    if ! { stat -c '%F %t' /dev/* /dev/*/* 2>/dev/null || true; } | grep -qx "character special file $(printf '%x' "$m")"; then
      echo "$m"
      return 0
    fi
  done
  return 1
}

# make_node: the simulated LPU node. pkg/device writes the fake sysfs tree (8
# LPUs, one ring); its /dev/lpuN files become real character devices on an
# unused major (minor N), and the same nodes are made at the host's /dev/lpuN,
# the paths that reach containers.
make_node() {
  local i out
  for i in 0 1 2 3 4 5 6 7; do
    [ -e "/dev/lpu$i" ] && fatal "simulated node" "/dev/lpu$i already exists on this host; not touching it"
  done
  LPU_MAJOR=$(choose_major) || fatal "simulated node" "no free character major in 240-254 (/proc/devices)"
  out=$("$BASE/bin/simnode" --root "$ROOT" --devices 8 --rings 1 --major "$LPU_MAJOR" 2>&1) ||
    fatal "simulated node" "simnode: $out"
  read -r -a RING <<<"$(sed -n 's/^ring0: //p' <<<"$out" | sed 's/lpu//g')"
  [ ${#RING[@]} = 8 ] || fatal "simulated node" "simnode printed no ring of 8: $out"
  for i in 0 1 2 3 4 5 6 7; do
    rm -f "$ROOT/dev/lpu$i"
    mknod -m 0666 "$ROOT/dev/lpu$i" c "$LPU_MAJOR" "$i"
    mknod -m 0666 "/dev/lpu$i" c "$LPU_MAJOR" "$i"
    record node "/dev/lpu$i"
  done
  echo "fake LPU runtime library" >"$DRIVER_DIR/$DRIVER_MARKER"
  # the daemons look at host paths under their discovery root (as a DaemonSet
  # sees the host under /host): mirror the driver dir there
  mkdir -p "$ROOT$(dirname "$DRIVER_DIR")"
  ln -sfn "$DRIVER_DIR" "$ROOT$DRIVER_DIR"
  log "simulated node: 8 LPUs, major $LPU_MAJOR, ring0 = ${RING[*]}"
}

# make_orion_node: a simulated Orion node (8 Alveo U55C cards under XRT, the
# xilinx backend) under ORION_ROOT, next to the LPU node. pkg/device writes
# the PCI tree (with its distractors and a network table keyed by PCI
# addresses whose ring is not address order); every render node
# (226:128+i) and management node (a free major, minor i) in it becomes a
# real character device of the number sysfs gives, so discovery checks real
# device numbers. No node is made on the host: runc creates them in the
# container from the numbers lpu-nri injects.
ORION_ROOT=$BASE/orion
ORION_CFG=$BASE/lpu-orion.yaml
ORION_RING=()  # card indices of ring 0 in ring order (from the table)
ORION_NODES="" # "node lpuN PATH MAJOR:MINOR" lines
ORION_PCI=""   # "pci lpuN ADDRESS" lines
make_orion_node() {
  local major out id path num
  grep -qx 226 <<<"$(awk '/^Character/{c=1;next} /^Block/{c=0} c{print $1}' /proc/devices)" &&
    log "major 226 (DRM) is in use on this host; the simulated render nodes reuse its numbers only inside the tree"
  major=$(choose_major) || { nok "orion node" "no free character major in 240-254 for xclmgmt"; return 1; }
  [ "$major" != "$LPU_MAJOR" ] || { nok "orion node" "xclmgmt major $major is the LPU node's"; return 1; }
  out=$("$BASE/bin/simnode" --root "$ORION_ROOT" --devices 8 --rings 1 --backend xilinx --major "$major" 2>>"$LOGS/simnode-orion.log") ||
    { nok "orion node" "simnode: $(tail -3 "$LOGS/simnode-orion.log")"; return 1; }
  read -r -a ORION_RING <<<"$(sed -n 's/^ring0: //p' <<<"$out" | sed 's/lpu//g')"
  ORION_NODES=$(grep '^node ' <<<"$out")
  ORION_PCI=$(grep '^pci ' <<<"$out")
  if [ ${#ORION_RING[@]} != 8 ] || [ "$(wc -l <<<"$ORION_NODES")" != 16 ]; then
    nok "orion node" "simnode printed no ring of 8 with 16 nodes: $out"
    return 1
  fi
  while read -r _ id path num; do
    rm -f "$ORION_ROOT$path"
    mknod -m 0666 "$ORION_ROOT$path" c "${num%%:*}" "${num##*:}"
  done <<<"$ORION_NODES"
  log "orion node: 8 cards, render major 226, xclmgmt major $major, ring0 = ${ORION_RING[*]}"
}

# write_config FILE MODE SPECDIR [orion]: the daemons' config (both read the
# same file): the LPU node's, or with orion the Orion node's (xilinx
# discovery, its network table, no driver mount). With PR_SOCK set, the
# kubelet's PodResources socket is that (lpu-dra publishes no free LPU
# until it answers).
write_config() {
  local root=$ROOT head mounts
  if [ "${4:-}" = orion ]; then
    root=$ORION_ROOT
    head="discovery:
  backend: xilinx
topology:
  networkTable: /etc/lpu/network.table"
    mounts="  mounts: []"
  else
    head="allocation:
  policy: best-effort"
    mounts="  mounts:
  - hostPath: $DRIVER_DIR
    containerPath: $DRIVER_CTR_DIR"
  fi
  cat >"$1" <<EOF
version: v1
resourceName: $RESOURCE
root: $root
stateDir: $STATE
$head
injection:
  mode: $2
$mounts
health:
  resyncInterval: 1s
  failureThreshold: 2
  recoveryThreshold: 2
kubelet:
  devicePluginDir: $DP_DIR${PR_SOCK:+
  podResourcesSocket: $PR_SOCK}
cdi:
  specDir: $3
log:
  level: info
  format: json
EOF
}

# ---------------------------------------------------------------- containerd
# The runtime configs are the shipped deploy/runtime files, rendered with
# their host paths moved under the instance's dir; what the e2e node adds
# (private roots, runc with its own state, the pause image) is in e2e.toml.
CTD2_SNIPPET=$REPO/deploy/runtime/containerd-2.x.toml
CTD17_SNIPPET=$REPO/deploy/runtime/containerd-1.7.toml

# runtime_paths DIR <SHIPPED: the shipped text with its host paths (NRI
# socket, plugin and plugin-config dirs, CDI spec dirs) moved under DIR.
runtime_paths() {
  sed -e "s#\"/var/run/nri/nri.sock\"#\"$1/nri.sock\"#" \
    -e "s#\"/opt/nri/plugins\"#\"$1/nri/plugins\"#" \
    -e "s#\"/etc/nri/conf.d\"#\"$1/nri/conf.d\"#" \
    -e "s#\[\"/etc/cdi\", \"/var/run/cdi\"\]#[\"$1/cdi\"]#"
}

# runtime_dirs NAME: the instance's private dirs; prints the instance dir.
runtime_dirs() {
  local d=$BASE/ctd-$1
  mkdir -p "$d"/{root,state,cdi,nri/plugins,nri/conf.d} "$BASE/runc-$1"
  echo "$d"
}

# ctd_main_config NAME VERSION IMPORTS: the main file of containerd NAME:
# its paths and imports (later imports win).
ctd_main_config() {
  local d=$BASE/ctd-$1
  cat <<EOF
version = $2
root = "$d/root"
state = "$d/state"
imports = [$3]

[grpc]
  address = "$d/containerd.sock"

[ttrpc]
  address = "$d/containerd.sock.ttrpc"

[debug]
  level = "info"
EOF
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$d/containerd.sock" "$d/containerd.sock" >"$d/crictl.yaml"
}

# ctd_runtimes TABLE NAME: the runc handlers under TABLE (the CRI plugin's
# "...containerd.runtimes" of either config version) for instance NAME.
ctd_runtimes() {
  local h
  for h in runc nodev; do
    printf '      [%s.%s]\n        runtime_type = "io.containerd.runc.v2"\n' "$1" "$h"
    # security rule 7: a privileged pod on this handler gets no host
    # device nodes but an allow-all device cgroup (run.sh security, nodev)
    [ "$h" = nodev ] && printf '        privileged_without_host_devices = true\n        privileged_without_host_devices_all_devices_allowed = true\n'
    printf '        [%s.%s.options]\n          BinaryName = "/usr/sbin/runc"\n          SystemdCgroup = false\n          Root = "%s"\n' \
      "$1" "$h" "$BASE/runc-$2"
  done
}

# ctd_config NAME NRI(on|off): a containerd with its own root, state, sockets,
# NRI socket and CDI dir under $BASE/ctd-NAME. The main file only holds paths
# and imports: first deploy/runtime/containerd-2.x.toml rendered (lpu.toml),
# then our overrides (e2e.toml), so the drop-in is loaded the way an
# operator would load it.
ctd_config() {
  if [ "$RT" = crio ]; then
    crio_config "$@"
    return
  fi
  if [ "$CTD_SERIES" = 1.7 ]; then
    ctd17_config "$@"
    return
  fi
  local n=$1 nri=$2 d
  d=$(runtime_dirs "$n")
  [ -f "$CTD2_SNIPPET" ] || fatal "containerd" "no $CTD2_SNIPPET in the checkout"
  runtime_paths "$d" <"$CTD2_SNIPPET" >"$d/lpu.toml"
  ctd_main_config "$n" 3 "\"$d/lpu.toml\", \"$d/e2e.toml\"" >"$d/config.toml"
  {
    cat <<EOF
# e2e overrides: private paths, runc with its own state root, no CAP_SYS_RESOURCE
version = 3

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$IMG:pause"

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
EOF
    ctd_runtimes "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes" "$n"
    cat <<EOF
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$d/cni/bin"]
      conf_dir = "$d/cni/net.d"

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
    [ "$nri" = on ] || printf "\n  [plugins.'io.containerd.nri.v1.nri']\n    disable = true\n"
  } >"$d/e2e.toml"
}

# ctd17_config NAME NRI(on|off): ctd_config for containerd 1.7 (config
# version 2, CRI plugin io.containerd.grpc.v1.cri). 1.7 replaces a whole
# plugin table from an imported file instead of merging it, so the shipped
# deploy/runtime/containerd-1.7.toml is used as its comments say: its NRI
# table imported (rendered: host paths moved under $BASE/ctd-NAME, nothing
# else changed), its CRI keys (enable_cdi, cdi_spec_dirs, rendered too)
# merged into the main CRI table. With NRI off nothing is imported.
ctd17_config() {
  local n=$1 nri=$2 d imports="" cri
  d=$(runtime_dirs "$n")
  [ -f "$CTD17_SNIPPET" ] || fatal "containerd 1.7" "no $CTD17_SNIPPET in the checkout"
  if [ "$nri" = on ]; then
    # the NRI table: from its header to the end of the file or the next table
    awk '/^\[/ { keep = ($0 == "[plugins.\"io.containerd.nri.v1.nri\"]") } keep || NR == 1 || /^version/' "$CTD17_SNIPPET" |
      runtime_paths "$d" >"$d/lpu-nri-1.7.toml"
    imports="\"$d/lpu-nri-1.7.toml\""
  fi
  # the snippet's CRI keys, their host dirs this instance's CDI dir
  cri=$(awk '/^\[/ { keep = ($0 == "[plugins.\"io.containerd.grpc.v1.cri\"]") } keep && /^ *[a-z_]+ = / { sub(/^ */, "    "); print }' "$CTD17_SNIPPET" |
    runtime_paths "$d")
  has "$cri" '^ *enable_cdi = true$' || fatal "containerd 1.7" "$CTD17_SNIPPET: no enable_cdi = true in its CRI table"
  {
    ctd_main_config "$n" 2 "$imports"
    cat <<EOF

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$IMG:pause"
    restrict_oom_score_adj = true
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # from deploy/runtime/containerd-1.7.toml
$cri
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
EOF
    ctd_runtimes 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes' "$n"
    cat <<EOF
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$d/cni/bin"
      conf_dir = "$d/cni/net.d"
EOF
    [ "$nri" = on ] || printf '\n  [plugins."io.containerd.nri.v1.nri"]\n    disable = true\n'
  } >"$d/config.toml"
}

# nri_table DUMP: the NRI plugin's table in a containerd config dump.
nri_table() { grep -A8 'io.containerd.nri.v1.nri.\]' <<<"$1" | tr -s ' '; }
# nri_on_at DUMP SOCKET: the dump has NRI on, listening at SOCKET.
nri_on_at() { has "$(nri_table "$1")" 'disable = false' && has "$(nri_table "$1")" "socket_path = [\"']$2[\"']"; }

# check_snippet_loaded NAME: the runtime's merged config shows the shipped
# snippet loaded, its NRI (and validator) settings in effect.
check_snippet_loaded() {
  local d=$BASE/ctd-$1 dump rel
  [ "$RT" = crio ] && { crio_check_config "$1"; return; }
  if [ "$CTD_SERIES" = 1.7 ]; then
    dump=$(containerd --config "$d/config.toml" config dump 2>&1) || { nok "containerd 1.7 loads its config" "$(tail -3 <<<"$dump")"; return 0; }
    echo "$dump" >"$d/config.dump.toml"
    expect "containerd 1.7 imports deploy/runtime/containerd-1.7.toml's NRI table: NRI on at $d/nri.sock" \
      "$(nri_table "$dump" | tr '\n' ' ')" nri_on_at "$dump" "$d/nri.sock"
    expect "containerd 1.7 merged the snippet's CRI keys: enable_cdi = true" "$(grep -E 'enable_cdi|cdi_spec_dirs' <<<"$dump" | tr -s ' ')" \
      has "$dump" 'enable_cdi = true'
    return 0
  fi
  rel=${CTD2_SNIPPET#"$REPO"/}
  dump=$(containerd --config "$d/config.toml" config dump 2>&1) || { nok "containerd loads $rel" "$(tail -3 <<<"$dump")"; return 0; }
  echo "$dump" >"$d/config.dump.toml"
  expect "containerd imports $rel (rendered: $d/lpu.toml)" "imports: $(grep '^imports' <<<"$dump")" has "$dump" "^imports = .*$d/lpu.toml"
  expect "containerd merged $rel: NRI on at $d/nri.sock" "$(nri_table "$dump" | tr '\n' ' ')" nri_on_at "$dump" "$d/nri.sock"
  expect "containerd merged $rel: the NRI default validator is on" \
    "$(grep -A3 'default_validator\]' <<<"$dump" | tr -s ' ' | tr '\n' ' ')" \
    has "$(grep -A3 'default_validator\]' <<<"$dump")" 'enable = true'
}

# ctd_start NAME: start (or restart) containerd NAME and wait for CRI and,
# the first time, import the images.
ctd_start() {
  local n=$1 d=$BASE/ctd-$1 t
  [ "$RT" = crio ] && { crio_start "$1"; return; }
  rm -f "$d/containerd.sock" "$d/containerd.sock.ttrpc"
  start_daemon "containerd-$n" "$LOGS/containerd-$n.log" containerd --config "$d/config.toml"
  wait_for 30 test -S "$d/containerd.sock" || fatal "containerd $n" "socket did not appear: $(tail -5 "$LOGS/containerd-$n.log")"
  CTD=$n
  wait_for 30 cri version || fatal "containerd $n" "CRI not answering: $(tail -5 "$LOGS/containerd-$n.log")"
  if [ ! -f "$d/imported" ]; then
    ctrc -n k8s.io images import --base-name "$IMG" "$BASE/images/lpu-e2e.tar" >>"$LOGS/images.log" 2>&1 ||
      fatal "containerd $n" "image import failed, see $LOGS/images.log"
    for t in busybox pause lpuenv; do
      wait_for 20 cri inspecti "$IMG:$t" || fatal "containerd $n" "image $IMG:$t not visible to CRI"
    done
    touch "$d/imported"
  fi
}

ctd_stop() { if [ "$RT" = crio ]; then crio_stop "$1"; else stop_daemon "containerd-$1" 5; fi; }

# ---------------------------------------------------------------- kubelet
# kubelet_config NAME RUNTIME [cluster]: the e2e kubelet's one config, in
# $BASE/kubelet-NAME, for runtime instance RUNTIME. Standalone (the
# default): static pods from its manifests dir, anonymous access. cluster
# (lib/cluster.sh): registered to the API server, webhook authn/authz so
# kubectl logs/exec go through RBAC, node status every 5 s.
kubelet_config() {
  local k=$BASE/kubelet-$1 sock
  sock=$(rt_sock "$2")
  mkdir -p "$k"/{root,pki,manifests,logs}
  {
    cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: $k/logs
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
resolvConf: ""
syncFrequency: 2s
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
    if [ "${3:-}" = cluster ]; then
      cat <<EOF
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$CL/pki/ca.crt"}
authorization: {mode: Webhook}
clusterDomain: cluster.local
nodeStatusUpdateFrequency: 5s
EOF
    else
      cat <<EOF
staticPodPath: $k/manifests
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
fileCheckFrequency: 1s
EOF
    fi
  } >"$k/config.yaml"
}

# kubelet_shared_root DIR: make DIR a shared bind mount of itself, as the
# kubelet does at start when it is not one. Done before the kubelet starts:
# its own remount raced the sockets it was creating under DIR (a rename of
# the pods-api socket across the new mount failed with EXDEV, and that
# kubelet never became healthy). The teardown unmounts it.
kubelet_shared_root() {
  mkdir -p "$1"
  if ! mountpoint -q "$1"; then
    mount --bind "$1" "$1" || fatal "kubelet" "bind-mount $1 onto itself"
  fi
  mount --make-rshared "$1" || fatal "kubelet" "make $1 a shared mount"
}

# kubelet_launch NAME NODE [ARG...]: the kubelet of $BASE/kubelet-NAME as
# node NODE, healthy; each start logs to its own file (KUBELET_LOG) so
# restarts can be timed from a clean log.
kubelet_launch() {
  local n=$1 node=$2 k=$BASE/kubelet-$1
  shift 2
  kubelet_shared_root "$k/root"
  KUBELET_STARTS=$((KUBELET_STARTS + 1))
  KUBELET_LOG=$LOGS/kubelet-$n.$KUBELET_STARTS.log
  KUBELET_NAME=$n
  start_daemon kubelet "$KUBELET_LOG" kubelet --config "$k/config.yaml" "$@" --root-dir "$k/root" \
    --cert-dir "$k/pki" --hostname-override "$node" --v=2
  wait_for 60 curl -sf --max-time 1 http://127.0.0.1:10248/healthz ||
    fatal "kubelet" "not healthy after 60s: $(tail -5 "$KUBELET_LOG")"
}

# kubelet_start NAME: the standalone kubelet of $BASE/kubelet-NAME, its
# device-plugin socket up.
kubelet_start() {
  kubelet_launch "$1" "$NODE_NAME"
  wait_for 30 test -S "$DP_DIR/kubelet.sock" || fatal "kubelet" "$DP_DIR/kubelet.sock missing"
}

kubelet_stop() { stop_daemon kubelet 5; }

# put_pod NAME YAML: add a static pod manifest atomically.
put_pod() {
  local k=$BASE/kubelet-$KUBELET_NAME
  printf '%s\n' "$2" >"$k/$1.tmp" && mv "$k/$1.tmp" "$k/manifests/$1.yaml"
}
del_pod() { rm -f "$BASE/kubelet-$KUBELET_NAME/manifests/$1.yaml"; }

# pod_manifest NAME NAMESPACE TAG [METADATA] [SPEC] [CONTAINER]: a pod
# whose one container (also NAME) runs $IMG:TAG until told to stop;
# METADATA, SPEC and CONTAINER are more YAML lines at those levels.
pod_manifest() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $2
${4:-}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
${5:-}
  containers:
  - name: $1
    image: $IMG:$3
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
${6:-}
EOF
}

# lpu_pod NAME COUNT [IMAGE-TAG] [EXTRA-METADATA]: a static pod whose single
# container (also called NAME) asks for COUNT LPUs (0: no request).
lpu_pod() {
  local name=$1 count=$2 res=""
  [ "$count" -gt 0 ] && res="    resources:
      limits:
        $RESOURCE: $count"
  put_pod "$name" "$(pod_manifest "$name" default "${3:-busybox}" "${4:-}" "" "$res")"
}

# cid NAME: the running container of static pod NAME.
cid() { cri ps --label "io.kubernetes.container.name=$1" --state Running -q | head -1; }
has_running() { [ -n "$(cid "$1")" ]; }
wait_running() { wait_for "${2:-60}" has_running "$1"; }

# in_ctr NAME CMD...: run CMD inside the running container of pod NAME.
in_ctr() {
  local c
  c=$(cid "$1") || return 1
  [ -n "$c" ] || return 1
  shift
  crictl --config "$BASE/ctd-$CTD/crictl.yaml" exec "$c" "$@" 2>&1
}

# kpod NAME: the kubelet's view (/pods endpoint) of static pod NAME as JSON.
kpod() {
  curl -sk --max-time 3 "https://127.0.0.1:$KUBELET_PORT/pods" |
    jq -c --arg n "$1-$NODE_NAME" '.items[]? | select(.metadata.name == $n)'
}
# kubelet_pod_count: how many pods the kubelet lists.
kubelet_pod_count() { curl -sk --max-time 3 "https://127.0.0.1:$KUBELET_PORT/pods" | jq '.items | length'; }
# kpod_status NAME: phase, reason and message of the pod and its container.
kpod_status() {
  kpod "$1" | jq -r '[.status.phase, .status.reason, .status.message,
    ((.status.containerStatuses // [])[0].state // {} | to_entries | (.[0] // {}) | .key, .value.reason?, .value.message?)]
    | map(select(. != null)) | join(" | ")'
}

# status_says NAME PATTERN [GREP-OPTION]: the kubelet's status of static pod
# NAME matches PATTERN.
status_says() { has "$(kpod_status "$1")" "$2" ${3:+"$3"}; }

# ---------------------------------------------------------------- our daemons
nri_ready_sock() { echo "$STATE/nri-ready.sock"; }
# nri_ready: lpu-nri's readiness socket answers "connected".
nri_ready() { e2e_ready "$(nri_ready_sock)"; }

NRI_METRICS=""
DP_METRICS=""

start_lpu_nri() { # [MODE]
  local mode=${1:-nri}
  [ -n "$NRI_METRICS" ] || NRI_METRICS=127.0.0.1:$(free_port)
  start_daemon lpu-nri "$LOGS/lpu-nri.log" "$BASE/bin/lpu-nri" --config "$CFG" --root "$ROOT" \
    --state-dir "$STATE" --nri-socket "$(nri_sock "$CTD")" --plugin-idx "$NRI_IDX" --mode "$mode" \
    --metrics-addr "$NRI_METRICS"
}

start_lpu_dp() { # [INJECTION]
  local inj=${1:-nri}
  [ -n "$DP_METRICS" ] || DP_METRICS=127.0.0.1:$(free_port)
  start_daemon lpu-device-plugin "$LOGS/lpu-device-plugin.log" "$BASE/bin/lpu-device-plugin" \
    --config "$CFG" --root "$ROOT" --kubelet-dir "$DP_DIR" --state-dir "$STATE" --injection "$inj" \
    --metrics-addr "$DP_METRICS" --nfd-features-file "$BASE/nfd/lpu"
}

dp_registrations() { metric "http://$DP_METRICS/metrics" lpu_registrations_total; }
# dp_healthy [LABEL-MATCH]: the device plugin's lpu_device_healthy (summed).
dp_healthy() { metric "http://$DP_METRICS/metrics" lpu_device_healthy "$@"; }
kubelet_saw_registration() { grep -q "Got registration request from device plugin.*$RESOURCE" "$KUBELET_LOG"; }
# kubelet_has_lpus: the kubelet holds the plugin's devices (its node status
# counts them). Registration alone is not enough: CI once saw the kubelet
# take the plugin's first Register past the plugin's 5 s deadline, and a
# static pod admitted in between was refused ("no healthy devices").
kubelet_has_lpus() { grep -q "Updated capacity for device plugin\" plugin=\"$RESOURCE\" capacity=[1-9]" "$KUBELET_LOG"; }

# node_up: containerd A (NRI on) + lpu-nri + kubelet + lpu-device-plugin.
node_up() {
  write_config "$CFG" nri "$BASE/ctd-a/cdi"
  ctd_config a on
  check_snippet_loaded a
  ctd_start a
  start_lpu_nri nri
  wait_for 20 nri_ready || fatal "lpu-nri" "not connected to containerd after 20s: $(tail -5 "$LOGS/lpu-nri.log")"
  kubelet_config a a
  ls -A "$DP_DIR" 2>/dev/null >"$BASE/dp-before" || : >"$BASE/dp-before"
  kubelet_start a
  start_lpu_dp nri
  wait_for 20 kubelet_saw_registration ||
    fatal "lpu-device-plugin" "kubelet saw no registration for $RESOURCE: $(tail -5 "$LOGS/lpu-device-plugin.log")"
  wait_for 20 kubelet_has_lpus ||
    fatal "lpu-device-plugin" "kubelet has no $RESOURCE devices after registration: $(tail -5 "$LOGS/lpu-device-plugin.log")"
  ok "node up: $RT_NAME (NRI), kubelet, lpu-nri connected, lpu-device-plugin registered"
  wait_for 5 test -s "$BASE/nfd/lpu"
  expect "device plugin wrote the NFD feature file (lpu.count=8)" "$({ tr '\n' ' ' <"$BASE/nfd/lpu"; } 2>&1)" \
    grep -qx "$RESOURCE.count=8" "$BASE/nfd/lpu"
  local out
  out=$("$BASE/bin/lpu-nri" doctor --config "$CFG" --root "$ROOT" --state-dir "$STATE" \
    --nri-socket "$(nri_sock a)" --nri-plugin-dir "$BASE/ctd-a/nri/plugins" --kubelet-dir "$DP_DIR" 2>&1) || true
  echo "$out" >"$LOGS/doctor.log"
  expect "lpu-nri doctor finds nothing wrong on the node" "$(grep -v '^OK' <<<"$out" | head -5)" \
    doctor_clean "$out"
}

# doctor_clean OUTPUT: lpu-nri doctor printed OK lines and no FAIL line.
doctor_clean() { ! has "$1" '^FAIL' && has "$1" '^OK'; }

# ---------------------------------------------------------------- teardown
remove_cri_pods() {
  local p
  for p in $(cri pods -q); do
    cri stopp "$p" >/dev/null
    cri rmp -f "$p" >/dev/null
  done
}

# undo_host_changes DIR: what the run with base dir DIR changed outside it:
# mounts under DIR, the files it recorded (simulated /dev/lpuN nodes among
# them), the kubelet's log links into DIR, device-plugin files and the
# cgroups it created. Used by teardown and, for a run killed before its
# teardown, by reclaim_stale.
undo_host_changes() {
  local d=$1 m i p kind path
  # kubelet bind-mounts its root dir onto itself; container rootfs and shm mounts
  for i in 1 2 3; do
    for m in $(findmnt -rn -o TARGET | awk -v b="$d/" 'index($0, b) == 1' | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
  done
  if [ -f "$d/created" ]; then
    while read -r kind path; do
      case $kind in
        node | file) rm -f "$path" ;;
        mount) umount "$path" 2>/dev/null && rmdir "$path" 2>/dev/null ;;
        emptydir) find "$path" -maxdepth 1 -type l -lname "$d/*" -delete 2>/dev/null; rmdir "$path" 2>/dev/null ;;
        dir) rmdir "$path" 2>/dev/null ;;
        tree-if-empty) rmdir "$path"/* "$path" 2>/dev/null ;;
        # only trees a run may own whole: the kubelet's, the plain
        # manifests' state dir (lib/install.sh), containers/image's cache
        tree) case $path in /var/lib/kubelet | /var/lib/lpu | /var/lib/containers) rm -rf "$path" ;; esac ;;
      esac
    done < <(tac "$d/created")
  fi
  find /var/log/containers -maxdepth 1 -type l -lname "$d/*" -delete 2>/dev/null
  if [ -d "$DP_DIR" ] && [ -f "$d/dp-before" ]; then
    for p in "$DP_DIR"/* "$DP_DIR"/.[!.]*; do
      [ -e "$p" ] || [ -L "$p" ] || continue
      grep -qxF "$(basename "$p")" "$d/dp-before" || rm -f "$p"
    done
  fi
  # cgroups it created: depth first, only empty ones go
  if [ -f "$d/cgroups-ours" ]; then
    while read -r p; do
      [ -d "$p" ] && find "$p" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ -d "$p" ] && log "cgroup $p not removed (still in use?)"
    done <"$d/cgroups-ours"
  fi
  return 0
}

# reclaim_stale: a run killed before its teardown (its session ended, a
# SIGKILL) leaves its simulated /dev/lpuN nodes, mounts and maybe daemons
# behind, and the next run would refuse to touch those nodes. Called with
# the host lock held, so no other run is alive: undo what each such run
# recorded. Its surviving processes are stopped only when their command
# line names its base dir (they are the runs' own, by PID).
reclaim_stale() {
  local d f p
  for d in /tmp/lpu-e2e.*/; do
    d=${d%/}
    if [ "$d" = "$BASE" ] || [ ! -f "$d/created" ] || [ -e "$d/torn-down" ]; then continue; fi
    log "reclaiming what a run killed before its teardown left: $d"
    for f in "$d"/pids/*; do
      p=$(cat "$f" 2>/dev/null) || continue
      [ -n "$p" ] && grep -qF "$d/" "/proc/$p/cmdline" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
    for p in $(ps -eo pid=,args= | awk -v b="$d/" '$2 ~ /containerd-shim|conmon|kubelet|containerd|crio/ && index($0, b) {print $1}'); do
      kill -KILL "$p" 2>/dev/null
    done
    sleep 0.5
    undo_host_changes "$d"
    touch "$d/torn-down"
  done
}

# our_shims: PIDs of shims started by our containerds and of conmons started
# by our CRI-O (their arguments carry our paths).
our_shims() { ps -eo pid=,args= | awk -v b="$BASE/ctd-" '$2 ~ /containerd-shim|conmon/ && index($0, b) {print $1}'; }

teardown() {
  set +e
  log "teardown"
  kubelet_stop
  local n p m i
  for n in a b; do
    if running "containerd-$n" || running "crio-$n"; then
      CTD=$n
      remove_cri_pods
      for p in $(ctrc -n lpu-e2e containers ls -q 2>/dev/null); do
        ctrc -n lpu-e2e tasks kill -s KILL "$p" >/dev/null 2>&1
        sleep 0.2
        ctrc -n lpu-e2e containers rm "$p" >/dev/null 2>&1
      done
    fi
  done
  for n in lpu-device-plugin lpu-nri noopnri fixednri stall registry; do stop_daemon "$n" 3; done
  # shims exit by themselves once their pods are gone; give them a moment
  wait_for 5 empty our_shims
  for n in a b; do ctd_stop "$n"; done
  for p in $(our_shims); do
    log "leftover shim pid $p: killing it"
    kill -KILL "$p" 2>/dev/null
  done
  undo_host_changes "$BASE"
  findmnt -rn -o TARGET | grep -F "$BASE/" | sed 's/^/# still mounted: /' >&2
  touch "$BASE/torn-down"
}
