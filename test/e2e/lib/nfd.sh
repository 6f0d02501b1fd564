# shellcheck shell=bash
# nfd.sh — Node Feature Discovery v0.19.0 for real in the install group:
# nfd-master and nfd-worker from NFD_TARBALL (test/e2e/tools.sh nfd) as local
# processes against the group's control plane, with that release's CRDs.
#
# What v0.19.0 offers and what this does with it:
#   - its host path prefix (pkg/utils/hostpath) is set only at link time
#     (-X ...hostpath.pathPrefix); the tarball's binaries have "/", so
#     nfd-worker reads /sys. It runs in a private mount namespace in which a
#     simulated node's sys tree ($NFD_SYS) is bind-mounted over /sys;
#   - its local source reads the fixed /etc/kubernetes/node-feature-discovery/
#     features.d/; in the same namespace the chart's nfd.featuresDir (the
#     device plugin's --nfd-features-file directory) is bind-mounted there
#     (the mount point is created on the host if absent, and removed again);
#   - both daemons serve metrics on ":PORT", every address: they run in a
#     network namespace of their own with only loopback, and reach the
#     apiserver (127.0.0.1:$API_PORT) through a relay over a unix socket;
#   - they use the admin kubeconfig (not NFD's own RBAC); the worker's
#     NodeFeature lives in namespace $NFD_NS, without owner references.
# Sourced by test/e2e/run.sh after lib/cluster.sh.

NFD_VERSION=${NFD_VERSION:-0.19.0}
NFD_DIR=${LPU_E2E_CACHE:-/var/cache/lpu-e2e}/nfd-$NFD_VERSION
NFD_NS=node-feature-discovery
NFD_RUN=$BASE/nfd-run                 # relay socket, worker config, views
NFD_SYS=$NFD_RUN/sys                  # the /sys nfd-worker sees
NFD_ETC_FEATURES=/etc/kubernetes/node-feature-discovery/features.d
NFD_SLEEP=2s                          # core.sleepInterval: rescans every 2 s

# nfd_available: tools.sh nfd unpacked NFD_TARBALL; else one skip line.
nfd_available() {
  local tarball=${NFD_TARBALL:-$(cd "$REPO/.." && pwd)/shared/tools/nfd-$NFD_VERSION-linux-amd64.tar.gz}
  if [ ! -f "$tarball" ]; then
    echo "# skip NFD onboarding: no file $tarball (NFD_TARBALL)"
    return 1
  fi
  bash "$E2E_DIR/tools.sh" nfd >>"$LOGS/tools.log" 2>&1 ||
    { nok "nfd: tools.sh nfd unpacks $tarball" "$(tail -2 "$LOGS/tools.log")"; return 1; }
  if [ ! -x "$NFD_DIR/nfd-master" ] || [ ! -x "$NFD_DIR/nfd-worker" ] || [ ! -f "$NFD_DIR/crds/nfd-api-crds.yaml" ]; then
    nok "nfd: $NFD_DIR holds nfd-master, nfd-worker and crds/" "$(find "$NFD_DIR" -maxdepth 1 -printf '%f ' 2>&1)"
    return 1
  fi
}

# nfd_features_mountpoint: the fixed features.d path exists on the host (the
# bind mount's target); what this run creates is recorded for the teardown,
# with the feature file the plain manifests later write there.
nfd_features_mountpoint() {
  local p=$NFD_ETC_FEATURES missing=()
  while [ ! -e "$p" ]; do missing=("$p" "${missing[@]}") && p=$(dirname "$p"); done
  [ ${#missing[@]} = 0 ] && return 0
  for p in "${missing[@]}"; do mkdir "$p" && record dir "$p"; done
  record file "$NFD_ETC_FEATURES/lpu"
}

# nfd_show TREE: nfd-worker's /sys view becomes the sys tree of the
# simulated node under TREE (its contents replaced; the bind mount stays).
nfd_show() {
  find "$NFD_SYS" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  cp -a "$1/sys/." "$NFD_SYS/"
}

# nfd_up FEATURES_DIR: the CRDs, nfd-master and nfd-worker (its /sys the
# current view, its features.d FEATURES_DIR).
nfd_up() {
  local features=$1 out ns
  mkdir -p "$NFD_RUN" "$NFD_SYS" "$features"
  out=$(kc apply --server-side -f "$NFD_DIR/crds/nfd-api-crds.yaml" 2>&1) ||
    { nok "nfd: apply the v$NFD_VERSION CRDs" "$out"; return 1; }
  if ! kc wait --for condition=established --timeout 30s crd/nodefeatures.nfd.k8s-sigs.io \
    crd/nodefeaturerules.nfd.k8s-sigs.io crd/nodefeaturegroups.nfd.k8s-sigs.io >>"$LOGS/kubectl.log" 2>&1; then
    nok "nfd: the CRDs are established" "$(tail -2 "$LOGS/kubectl.log")"
    return 1
  fi
  ok "nfd: CRDs of v$NFD_VERSION established ($(grep -c '^kind: CustomResourceDefinition' "$NFD_DIR/crds/nfd-api-crds.yaml") from its crds/nfd-api-crds.yaml)"
  kc create namespace "$NFD_NS" >>"$LOGS/kubectl.log" 2>&1 || true
  nfd_features_mountpoint
  cat >"$NFD_RUN/nfd-worker.conf" <<EOF
core:
  sleepInterval: $NFD_SLEEP
  featureSources: [pci, local]
  labelSources: [local]
EOF
  start_daemon nfd-api-relay "$LOGS/nfd-relay.log" "$BASE/bin/e2etool" relay "unix:$NFD_RUN/api.sock" "tcp:127.0.0.1:$API_PORT"
  wait_for 10 test -S "$NFD_RUN/api.sock" || { nok "nfd: apiserver relay" "$(tail -3 "$LOGS/nfd-relay.log")"; return 1; }
  # holds the network namespace: loopback only, 127.0.0.1:$API_PORT relayed
  start_daemon nfd-netns "$LOGS/nfd-relay.log" unshare --net -- /bin/sh -c \
    'ip link set lo up && exec "$0" relay "tcp:127.0.0.1:$1" "unix:$2"' "$BASE/bin/e2etool" "$API_PORT" "$NFD_RUN/api.sock"
  ns=/proc/$(pid_of nfd-netns)/ns/net
  wait_for 10 says . nsenter --net="$ns" -- ss -ltnH "sport = :$API_PORT" ||
    { nok "nfd: network namespace with the apiserver relay" "$(tail -3 "$LOGS/nfd-relay.log")"; return 1; }
  # NODE_NAME: nfd-master annotates the node it runs on (exits without it)
  start_daemon nfd-master "$LOGS/nfd-master.log" env NODE_NAME="$KNODE" nsenter --net="$ns" -- \
    "$NFD_DIR/nfd-master" -kubeconfig "$CL/admin.kubeconfig" -port 18080
  start_daemon nfd-worker "$LOGS/nfd-worker.log" env NODE_NAME="$KNODE" KUBERNETES_NAMESPACE="$NFD_NS" \
    nsenter --net="$ns" -- unshare --mount --propagation private -- /bin/sh -c \
    'mount --bind "$1" /sys && mount --bind "$2" "$3" && shift 3 && exec "$@"' sh \
    "$NFD_SYS" "$features" "$NFD_ETC_FEATURES" \
    "$NFD_DIR/nfd-worker" -kubeconfig "$CL/admin.kubeconfig" -config "$NFD_RUN/nfd-worker.conf" -owner-refs= -port 18081
  if wait_for 30 kc get nodefeature "$KNODE" -n "$NFD_NS" && sleep 2 && running nfd-master && running nfd-worker; then
    ok "nfd: nfd-master and nfd-worker v$NFD_VERSION run; the worker published NodeFeature $NFD_NS/$KNODE"
  else
    nok "nfd: nfd-worker publishes NodeFeature $NFD_NS/$KNODE" "worker: $(tail -3 "$LOGS/nfd-worker.log"); master: $(tail -2 "$LOGS/nfd-master.log")"
    return 1
  fi
}

# nfd_down: the NFD daemons and relays stop, by PID (the namespaces go with
# them); a no-op when none runs. The labels nfd-master set stay on the node.
nfd_down() {
  local n
  for n in nfd-worker nfd-master nfd-netns nfd-api-relay; do stop_daemon "$n" 5; done
}

# nfd_label KEY: the node's label KEY, "" when it has none; fails when the
# node cannot be read.
nfd_label() {
  local j
  j=$(kc get node "$KNODE" -o json 2>/dev/null) || return 1
  jq -r --arg k "$1" '.metadata.labels[$k] // ""' <<<"$j"
}
nfd_labelled() { [ "$(nfd_label "$1")" = "$2" ]; }
nfd_unlabelled() { local v; v=$(nfd_label "$1") && [ -z "$v" ]; }
nfd_labels() { kc get node "$KNODE" -o json | jq -c '.metadata.labels | with_entries(select(.key | startswith("hyperaccel.ai/")))'; }

# nfd_unplug VENDOR DEVICE CLASS: the PCI functions of nfd-worker's view
# with that vendor (and device, and class prefix, when not "") leave it, as
# on a hot unplug: the bus link and the device directory go. Prints how many.
nfd_unplug() {
  local f real n=0
  for f in "$NFD_SYS"/bus/pci/devices/*; do
    [ "$(cat "$f/vendor" 2>/dev/null)" = "0x$1" ] || continue
    [ -z "$2" ] || [ "$(cat "$f/device")" = "0x$2" ] || continue
    [ -z "$3" ] || [[ $(cat "$f/class") == 0x$3* ]] || continue
    real=$(readlink -f "$f")
    rm -f "$f"
    case $real in "$NFD_SYS"/devices/*) rm -rf "$real" ;; esac
    n=$((n + 1))
  done
  echo "$n"
}

# nfd_functions VENDOR DEVICE: how many functions of the view have that
# vendor and device.
nfd_functions() {
  local f n=0
  for f in "$NFD_SYS"/bus/pci/devices/*; do
    [ "$(cat "$f/vendor" 2>/dev/null)" = "0x$1" ] && [ "$(cat "$f/device")" = "0x$2" ] && n=$((n + 1))
  done
  echo "$n"
}

# nfd_trees: the simulated Orion and Bertha nodes (test/e2e/simnode) whose
# PCI functions nfd-worker is shown; no device nodes are made for them.
nfd_trees() {
  local b out
  if [ ! -x "$BASE/bin/simnode" ]; then
    out=$(go_build test/e2e/simnode) ||
      { nok "nfd: build ./test/e2e/simnode" "$out"; return 1; }
  fi
  for b in xilinx pci; do
    out=$("$BASE/bin/simnode" --root "$NFD_RUN/tree-$b" --devices 8 --backend "$b" 2>&1) ||
      { nok "nfd: simulated $b node for NFD" "$(tail -2 <<<"$out")"; return 1; }
  done
}

# nfd_rule_cases HELM CHART: the chart's NodeFeatureRule alone (rendered
# with nodeFeatureRule.enabled=true, applied with kubectl): it labels the
# node from each simulated node's PCI functions and nfd-master removes the
# label when they are unplugged, or when the rule goes. No feature file is
# in nfd-worker's features.d yet, so the label can only be the rule's.
nfd_rule_cases() {
  local helm=$1 chart=$2 rule=$NFD_RUN/rule.yaml key=hyperaccel.ai/lpu.present n out
  out=$("$helm" template lpu-node "$chart" -n "$CHART_NS" --kube-version 1.37.2 --show-only templates/nodefeaturerule.yaml \
    --set nodeFeatureRule.enabled=true 2>&1 >"$rule") || { nok "nfd: render the chart's NodeFeatureRule" "$out"; return 1; }
  nfd_show "$NFD_RUN/tree-xilinx"
  out=$(kc apply -f "$rule" 2>&1) || { nok "nfd: kubectl apply the chart's NodeFeatureRule" "$out"; return 1; }
  expect "nfd: no feature file in nfd-worker's features.d yet" "$(find "$CHART_NFD" -mindepth 1 -printf '%f ' 2>&1)" \
    empty find "$CHART_NFD" -mindepth 1 -print -quit
  if wait_for 60 nfd_labelled "$key" true; then
    ok "nfd: the chart's NodeFeatureRule labels $KNODE $key=true from the simulated Orion node ($(nfd_functions 10ee 505d) U55C user functions 10ee:505d)"
  else
    nok "nfd: the NodeFeatureRule labels $KNODE from the Orion node's 10ee:505d functions" "labels $(nfd_labels); master: $(tail -2 "$LOGS/nfd-master.log")"
    return 1
  fi
  n=$(nfd_unplug 10ee 505d "")
  expect "nfd: removing the $n 10ee:505d functions removes the label (the $(nfd_functions 10ee 505c) management functions 10ee:505c stay, no rule matches them)" \
    "labels $(nfd_labels)" wait_for 60 nfd_unlabelled "$key"
  nfd_show "$NFD_RUN/tree-pci"
  expect "nfd: the Bertha node's functions (vendor 1eff, class 1200) label it again" "labels $(nfd_labels)" \
    wait_for 60 nfd_labelled "$key" true
  n=$(nfd_unplug 1eff "" 1200)
  expect "nfd: removing the $n 1eff class-1200 functions removes the label (the 1eff function of class 0580 stays)" \
    "labels $(nfd_labels)" wait_for 60 nfd_unlabelled "$key"
  nfd_show "$NFD_RUN/tree-xilinx"
  wait_for 60 nfd_labelled "$key" true || nok "nfd: the Orion node's functions back label it again" "labels $(nfd_labels)"
  out=$(kc delete -f "$rule" --wait=true --timeout=30s 2>&1) || nok "nfd: kubectl delete the NodeFeatureRule" "$out"
  expect "nfd: nfd-master removes the label of a deleted NodeFeatureRule" "labels $(nfd_labels)" \
    wait_for 60 nfd_unlabelled "$key"
}

# nfd_onboard: after helm install with nodeFeatureRule.enabled=true, NFD
# labels the node before anything of ours runs on it (no feature file yet).
nfd_onboard() {
  local key=hyperaccel.ai/lpu.present
  if wait_for 60 nfd_labelled "$key" true; then
    ok "nfd: the installed chart's NodeFeatureRule labels $KNODE $key=true (Orion functions; no LPU pod ran yet)"
  else
    nok "nfd: the installed chart's NodeFeatureRule labels $KNODE" "labels $(nfd_labels); master: $(tail -2 "$LOGS/nfd-master.log")"
    return 1
  fi
}

# nfd_ring_labels MODEL: the node carries lpu.count=8, lpu.largest-ring=8
# and lpu.model=MODEL (which must not be empty).
nfd_ring_labels() {
  nfd_labelled hyperaccel.ai/lpu.count 8 && nfd_labelled hyperaccel.ai/lpu.largest-ring 8 &&
    [ -n "$1" ] && nfd_labelled hyperaccel.ai/lpu.model "$1"
}

# nfd_feature_labels: the device plugin's feature file (nfd.featuresDir,
# nfd-worker's features.d) turned into node labels: count, largest ring,
# model as the file says, and 8 LPUs in one ring of 8 (simulate: 8). While
# the file is there it carries the present label too, so unplugging the
# PCI functions does not unlabel the node (docs/install.md says so).
nfd_feature_labels() {
  local file=$CHART_NFD/lpu model key
  if ! wait_for 60 test -s "$file"; then
    nok "nfd: the device plugin writes its feature file $file" "$(find "$CHART_NFD" -mindepth 1 -printf '%f ' 2>&1)"
    return 1
  fi
  model=$(sed -n 's#^hyperaccel.ai/lpu.model=##p' "$file")
  if wait_for 60 nfd_ring_labels "$model"; then
    ok "nfd: the feature file became node labels: lpu.count=8, lpu.largest-ring=8, lpu.model=$model"
  else
    nok "nfd: the feature file becomes node labels count=8, largest-ring=8, model=$model" "labels $(nfd_labels); file: $(tr '\n' ' ' <"$file")"
    return 1
  fi
  for key in rings driver-version firmware; do
    expect "nfd: ... and lpu.$key=$(sed -n "s#^hyperaccel.ai/lpu.$key=##p" "$file") as in the file" "labels $(nfd_labels)" \
      same_nonempty "$(nfd_label "hyperaccel.ai/lpu.$key")" "$(sed -n "s#^hyperaccel.ai/lpu.$key=##p" "$file")"
  done
  nfd_unplug 10ee 505d "" >/dev/null
  sleep 6 # three rescans
  expect "nfd: with the feature file there, unplugging the 10ee:505d functions leaves $KNODE labelled (the file carries lpu.present=true)" \
    "labels $(nfd_labels)" nfd_labelled hyperaccel.ai/lpu.present true
  nfd_show "$NFD_RUN/tree-xilinx"
}
