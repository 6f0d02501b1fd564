# shellcheck shell=bash
# install.sh — issue 14's "installed the way users install it": on the
# cluster of lib/cluster.sh (without the host lpu-nri and lpu-dra), import
# the image deploy/container/build-oci.sh builds, then
#   1. `helm install` the chart in mode devicePlugin on a simulated node
#      (values `simulate: 8`, the chart's own way to run without LPUs): both
#      DaemonSet containers Ready, an LPU pod placed by the real scheduler
#      gets 4 ring neighbours; `helm upgrade` to a changed config rolls the
#      pod while LPU pods keep being created, and every LPU container that
#      starts during the roll has its LPUs (never bare); `helm uninstall`
#      leaves no socket and no CDI spec, the seal key stays, and the NFD
#      feature file stays until its expiry (see node_clean); with NFD
#      v0.19.0 (lib/nfd.sh) the chart's NodeFeatureRule labels the node
#      from simulated PCI functions first, and the feature file becomes
#      node labels;
#   2. `kubectl apply -f deploy/manifests/lpu-node.yaml` with the two
#      overrides a machine without LPUs and with a private containerd needs
#      (LPU_ROOT on both containers naming the simulated node `lpu-nri
#      simulate` wrote under /var/lib/lpu, the NRI socket's host dir), the
#      image imported under the manifest's own name: Ready, ring neighbours,
#      `kubectl delete -f` leaves the node as clean. These use the shipped
#      host paths (/var/lib/lpu, the NFD features.d, ...); the ones this run
#      created are recorded and removed at teardown.
# Sourced by test/e2e/run.sh after lib/dra.sh.

CHART_NS=lpu-system
CHART_STATE=$BASE/chart-state          # the chart's stateDir (a hostPath)
CHART_NFD=$BASE/chart-nfd
MAN_NS=kube-system                     # the plain manifests' namespace
MAN_STATE=/var/lib/lpu                 # ... and their host paths, as shipped
MAN_NFD=/etc/kubernetes/node-feature-discovery/features.d

# ds_ready [NS]: every DaemonSet in NS has all its pods updated and ready.
ds_ready() {
  local j
  j=$(kc get ds -n "${1:-$CHART_NS}" -o json 2>/dev/null) || return 1
  jq -e '(.items | length) > 0 and all(.items[]; .status.desiredNumberScheduled > 0 and .status.numberReady == .status.desiredNumberScheduled and (.status.updatedNumberScheduled // 0) == .status.desiredNumberScheduled)' <<<"$j" >/dev/null
}
ds_not_ready() {
  kc get pods -n "$1" -o wide 2>&1 | tail -3 | tr '\n' ';'
  kc get events -n "$1" -o jsonpath='{range .items[-3:]}{.reason}: {.message} | {end}' 2>/dev/null
}

# label_for_ds NS: the node carries the labels the DaemonSets in NS select
# on, as a person would set them (NFD sets them in install_helm, lib/nfd.sh).
label_for_ds() {
  local sel
  for sel in $(kc get ds -n "$1" -o json | jq -r '.items[].spec.template.spec.nodeSelector // {} | to_entries[] | "\(.key)=\(.value)"' | sort -u); do
    kc label node "$KNODE" "$sel" --overwrite >/dev/null || nok "install: label node $sel" "$(kc label node "$KNODE" "$sel" --overwrite 2>&1)"
  done
}

# sim_ring STATE: RING from the simulated node the daemons wrote under
# STATE (ring 0, by ring_position).
sim_ring() {
  local d f
  RING=()
  read -r -a RING <<<"$(for d in "$1"/simulated-node/sys/class/lpu/lpu*; do
    f=$(readlink -f "$d")
    [ "$(cat "$f/ring_id" 2>/dev/null)" = 0 ] && echo "$(cat "$f/ring_position") ${d##*lpu}"
  done | sort -n | awk '{printf "%s ", $2}')"
  [ ${#RING[@]} -gt 0 ]
}

# ctr_devs NAME: indices of the /dev/lpuN the container of pod NAME has.
ctr_devs() {
  in_ctr "$1" sh -c 'for f in /dev/lpu*; do [ -e "$f" ] && echo "${f#/dev/lpu}"; done; true' | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# advertised COUNT: the node's allocatable hyperaccel.ai/lpu is COUNT.
advertised() { [ "$(kc get node "$KNODE" -o jsonpath='{.status.allocatable.hyperaccel\.ai/lpu}')" = "$1" ]; }

# four_lpu_pod WHAT STATE: a pod asking hyperaccel.ai/lpu: 4, placed by the
# scheduler, runs with 4 ring neighbours of the simulated node under STATE.
four_lpu_pod() {
  local what=$1 env devs node
  if ! wait_for 60 advertised 8; then
    nok "$what: node advertises hyperaccel.ai/lpu: 8" "allocatable: $(kc get node "$KNODE" -o jsonpath='{.status.allocatable}')"
    return
  fi
  ok "$what: node $KNODE advertises hyperaccel.ai/lpu: 8"
  dra_pod chart-four extended hyperaccel.ai/lpu=4
  if wait_pod chart-four 90; then
    env=$(ctr_env chart-four LPU_VISIBLE_DEVICES)
    devs=$(ctr_devs chart-four)
    node=$(kc get pod chart-four -o jsonpath='{.spec.nodeName}')
    expect "$what: the scheduler bound the pod asking hyperaccel.ai/lpu: 4 to $KNODE" "nodeName=$node" test "$node" = "$KNODE"
    sim_ring "$2" || nok "$what: ring of the simulated node" "no ring_id/ring_position under $2/simulated-node"
    expect "$what: it sees 4 LPUs that are ring neighbours (/dev/lpu{$devs}, ring ${RING[*]})" "devices [$devs], ring [${RING[*]}]" \
      is_arc_of 4 "$devs"
    expect "$what: LPU_VISIBLE_DEVICES=$env lists them in ring order" "LPU_VISIBLE_DEVICES=$env, devices [$devs], ring [${RING[*]}]" \
      ring_listed "$env" "$devs"
  else
    nok "$what: a pod asking hyperaccel.ai/lpu: 4 runs" "$(pod_why chart-four)"
  fi
  delete_pod chart-four
}

# example_pod WHAT FILE STATE: the example pod docs/install.md runs ("Run an
# LPU pod"), FILE as shipped, only made runnable here: the e2e registry's
# busybox, host network and tolerations as every e2e pod. It completes, and
# its log names 4 ring neighbours of the node under STATE, in ring order,
# and shows their /dev nodes.
example_pod() {
  local what=$1 f=$2 state=$3 out env devs
  sed -e "s|^      image: busybox:1.37\$|      image: $IMG:busybox\\n      imagePullPolicy: Never|" \
    -e 's|^  restartPolicy: Never$|  restartPolicy: Never\n  hostNetwork: true\n  tolerations: [{operator: Exists}]|' "$f" |
    kc apply -f - >>"$LOGS/kubectl.log" 2>&1
  if wait_for 120 says Succeeded phase lpu-example; then
    out=$(kc logs lpu-example 2>&1)
    env=$(sed -n 's/^LPU_VISIBLE_DEVICES=\([^ ]*\) NUM_LPU_DEVICES=4$/\1/p' <<<"$out")
    devs=$(awk '$NF ~ /^lpu[0-9]+$/ {sub(/^lpu/, "", $NF); print $NF}' <<<"$out" | sort -n | tr '\n' ' ' | sed 's/ $//')
    sim_ring "$state" || nok "$what: ring of the simulated node" "no ring under $state/simulated-node"
    expect "$what: the docs' example pod $(basename "$f") completes with 4 ring neighbours (/dev/lpu{$devs}, ring ${RING[*]})" \
      "log: $(tr '\n' ' ' <<<"$out" | cut -c1-300)" is_arc_of 4 "$devs"
    expect "$what: ... its log's LPU_VISIBLE_DEVICES=$env lists them in ring order" "log: $(head -1 <<<"$out")" ring_listed "$env" "$devs"
  else
    nok "$what: the docs' example pod $(basename "$f") completes" "$(pod_why lpu-example)"
  fi
  delete_pod lpu-example
}

# injector_up STATE: the readiness socket under STATE says lpu-nri is
# connected to the runtime (what the device plugin's PreStartContainer asks).
injector_up() { e2e_ready "$1/nri-ready.sock"; }

# view_pod NAME LABEL SPEC RESOURCES: a one-LPU pod labelled LABEL=1
# (SPEC: more spec lines; RESOURCES: its container's resources) whose
# container prints what it got at start ("view env=N devs=/dev/lpuN,"),
# then exits (restartPolicy Never), so its LPU is free again 2 s later.
view_pod() {
  kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {$2: "1"}}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
$3
  containers:
  - name: $1
    image: $IMG:busybox
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo view env=\${LPU_VISIBLE_DEVICES-unset} devs=\$(ls -d /dev/lpu* 2>/dev/null | tr -s '[:space:]' ,); sleep 2"]
    resources: $4
EOF
}

# roll_pod NAME: a view_pod asking hyperaccel.ai/lpu: 1.
roll_pod() { view_pod "$1" e2e-roll "" "{limits: {hyperaccel.ai/lpu: 1}}"; }

# roll_watch STATE: until $BASE/roll-on goes (at most 90 s), create a roll
# pod every second, and one at once whenever the injector goes down; logs
# "<n> up|down" per pod to $BASE/roll-log.
roll_watch() {
  local i=0 deadline=$((SECONDS + 90)) st last=up next=0
  : >"$BASE/roll-log"
  while [ -f "$BASE/roll-on" ] && ((SECONDS < deadline)); do
    if injector_up "$1"; then st=up; else st=down; fi
    if ((SECONDS >= next)) || { [ "$st" = down ] && [ "$last" = up ]; }; then
      roll_pod "roll-$i" || true
      echo "$i $st" >>"$BASE/roll-log"
      i=$((i + 1))
      next=$((SECONDS + 1))
    fi
    last=$st
    sleep 0.2
  done
}

# roll_settled: every roll pod finished (Succeeded or Failed).
roll_settled() {
  kc get pods -l e2e-roll=1 -o json | jq -e 'all(.items[]; .status.phase == "Succeeded" or .status.phase == "Failed")' >/dev/null
}

# helm_upgrade_roll HELM CHART: helm upgrade to a changed config while roll
# pods keep being created; every LPU container that started had its LPU.
helm_upgrade_roll() {
  local helm=$1 chart=$2 old new out started=0 bare="" down warn p line watcher
  old=$(kc get pods -n "$CHART_NS" -o jsonpath='{.items[*].metadata.uid}')
  touch "$BASE/roll-on"
  roll_watch "$CHART_STATE" &
  watcher=$!
  sleep 2
  out=$("$helm" upgrade lpu-node "$chart" --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --reuse-values \
    --set config.health.resyncInterval=2s --set config.allocation.policy=strict --wait --timeout 120s 2>&1) ||
    nok "upgrade: helm upgrade to a changed config" "$(tail -3 <<<"$out")"
  wait_for 60 ds_ready "$CHART_NS" || nok "upgrade: the DaemonSet is Ready again" "$(ds_not_ready "$CHART_NS")"
  sleep 3
  rm -f "$BASE/roll-on"
  wait "$watcher" || log "roll watcher exited with status $?"
  new=$(kc get pods -n "$CHART_NS" -o jsonpath='{.items[*].metadata.uid}')
  expect "upgrade: helm upgrade (allocation strict, resync 2s) replaced the DaemonSet's pod" "pods before [$old], after [$new]" \
    replaced "$new" "$old"
  wait_for 90 roll_settled ||
    log "roll pods not finished after 90s: $(kc get pods -l e2e-roll=1 --no-headers 2>&1 | grep -v Completed | head -3 | tr '\n' ';')"
  for p in $(kc get pods -l e2e-roll=1 -o json | jq -r '.items[] | select(any((.status.containerStatuses // [])[]; .state.terminated.startedAt != null or .state.running != null)) | .metadata.name'); do
    started=$((started + 1))
    line=$(kc logs "$p" 2>/dev/null | grep '^view ' | head -1)
    if ! [[ $line =~ ^view\ env=([0-9]+)\ devs=/dev/lpu([0-9]+),$ ]] || [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ]; then
      bare+="${p}[$line] "
    fi
  done
  down=$(awk '$2 == "down"' "$BASE/roll-log" | wc -l)
  warn=$(kc get events -n default -o json | jq -r '[.items[] | select(.involvedObject.name | startswith("roll-")) | select(.type == "Warning") | .reason] | group_by(.) | map("\(.[0]) x\(length)") | join(", ")')
  echo "# upgrade: $(wc -l <"$BASE/roll-log") roll pods created around the roll, $down of them while lpu-nri was not connected; $started started; warnings: ${warn:-none}"
  expect "upgrade: all $started LPU containers that started during the roll had their LPU (LPU_VISIBLE_DEVICES=N and /dev/lpuN)" \
    "bare: $bare" none_bare "$started" "$bare"
  kc delete pods -l e2e-roll=1 --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1
}

# replaced NEW OLD: there are NEW pods, the first of them not among OLD.
replaced() { [ -n "$1" ] && ! grep -qwF -- "${1%% *}" <<<"$2"; }
# none_bare STARTED BARE: some LPU containers started, none of them bare.
none_bare() { [ "$1" -gt 0 ] && [ -z "$2" ]; }
# expires_within_hour TIME: TIME is in the coming hour.
expires_within_hour() {
  local t now
  t=$(date -d "$1" +%s 2>/dev/null) || return 1
  now=$(date +%s)
  [ "$t" -gt "$now" ] && [ "$t" -le $((now + 3600)) ]
}
# claim_matches WANT DEVS ENV: the container's devices DEVS (sorted) are
# its claim's LPUs WANT, and LPU_VISIBLE_DEVICES ENV names the same.
claim_matches() { [ "$(sorted_words "$1")" = "$2 " ] && [ "$(sorted_words "$(visible_list "$3")")" = "$2 " ]; }

# dp_left: sockets in the kubelet's device-plugin dir other than the
# kubelet's own (its checkpoint file is the kubelet's too).
dp_left() { find "$DP_DIR" -mindepth 1 -maxdepth 1 -type s ! -name kubelet.sock -printf '%f\n' 2>/dev/null; }

# node_clean WHAT STATE NFD: after an uninstall the node holds none of our
# sockets, CDI specs or NFD feature file; the seal key stays in STATE.
node_clean() {
  local what=$1 state=$2 nfd=$3 left
  wait_for 30 empty dp_left || true
  left=$(dp_left | tr '\n' ' ')
  expect "$what: no device-plugin socket left in $DP_DIR" "left: $left" test -z "$left"
  left=$(find "$state" -maxdepth 1 -type s 2>/dev/null | tr '\n' ' ')
  expect "$what: no socket left in the state dir" "left: $left" test -z "$left"
  left=$(find "$DRA_CDI" /var/run/cdi /etc/cdi -maxdepth 1 -name '*hyperaccel.ai*' 2>/dev/null | tr '\n' ' ')
  expect "$what: no CDI spec left" "left: $left" test -z "$left"
  # the NFD feature file stays on purpose (docs/operate.md, "Upgrade, rollback and uninstall"): it
  # carries hyperaccel.ai/lpu.present, the DaemonSet's own nodeSelector
  # label, so removing it at every shutdown could unlabel the node during a
  # roll; its expiry makes NFD drop the labels within nfd.Lifetime (1 h)
  left=$(sed -n 's/^# +expiry-time=//p' "$nfd/lpu" 2>/dev/null)
  if [ ! -e "$nfd/lpu" ]; then
    ok "$what: no NFD feature file left"
  else
    expect "$what: the NFD feature file left behind expires within 1h ($left)" "$(head -2 "$nfd/lpu")" \
      expires_within_hour "$left"
  fi
  expect "$what: the seal key stays ($state/seal.key)" "state dir: $(find "$state" -maxdepth 1 -printf '%f ' 2>&1)" test -s "$state/seal.key"
}

# chart_check WHAT HELM NS: `helm test` runs the chart's check pod
# (templates/tests/check.yaml: lpu-nri check in a pod asking for LPUs as a
# workload does, in the release namespace NS) and it passes; Helm deletes a passing
# pod. A failing one shows its log and events, and is deleted.
chart_check() {
  local what=$1 helm=$2 ns=$3 out
  if out=$("$helm" test lpu-node --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --timeout 150s 2>&1); then
    expect "$what: helm test: the check pod got its LPU and opened its device nodes ($(grep -m1 -o 'Phase: *[A-Za-z]*' <<<"$out"))" \
      "pod lpu-node-check left in $ns after passing" wait_for 30 none_listed kc get pod lpu-node-check -n "$ns" -o name --ignore-not-found
  else
    nok "$what: helm test: the check pod passes" "$(tail -4 <<<"$out" | tr '\n' ' ') | log: $(kc logs lpu-node-check -n "$ns" --tail 8 2>&1 | tr '\n' ' ') | $(kc get events -n "$ns" --field-selector involvedObject.name=lpu-node-check -o jsonpath='{range .items[-3:]}{.reason}: {.message} | {end}' 2>/dev/null)"
    kc delete pod lpu-node-check -n "$ns" --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1
  fi
}

# install_helm HELM CHART: mode devicePlugin from the chart. With NFD
# (lib/nfd.sh; skipped with one line without NFD_TARBALL) the chart's
# NodeFeatureRule is enabled and NFD, not the e2e, labels the node.
install_helm() {
  local helm=$1 chart=$2 out nfd=false
  if nfd_available; then
    # a failed NFD case leaves the e2e to label the node: NFD must not
    # undo that label, so it stops
    if nfd_trees && nfd_up "$CHART_NFD" && nfd_rule_cases "$helm" "$chart"; then nfd=true; else nfd_down; fi
  fi
  if ! out=$("$helm" install lpu-node "$chart" --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --create-namespace \
    --set nodeFeatureRule.enabled=$nfd \
    --set image.repository=localhost/lpu-node --set image.tag=e2e --set image.pullPolicy=Never \
    --set simulate=8 --set config.stateDir="$CHART_STATE" --set config.nri.socket="$(nri_sock a)" \
    --set config.cdi.specDir="$DRA_CDI" --set nfd.featuresDir="$CHART_NFD" \
    --set "config.injection.mounts[0].hostPath=$DRIVER_DIR" \
    --set "config.injection.mounts[0].containerPath=$DRIVER_CTR_DIR" 2>&1); then
    nok "install: helm install the chart" "$(tail -5 <<<"$out")"
    return
  fi
  ok "install: helm install lpu-node (chart $(sed -n 's/^version: //p' "$chart/Chart.yaml"), nodeFeatureRule.enabled=$nfd)"
  # without NFD (or when it failed to label) the e2e labels the node itself
  if [ "$nfd" != true ] || ! nfd_onboard; then label_for_ds "$CHART_NS"; fi
  if wait_for 180 ds_ready "$CHART_NS"; then
    ok "install: the DaemonSet's pods are Ready on $KNODE$([ "$nfd" = true ] && echo ", placed by its nodeSelector on NFD's label")"
  else
    nok "install: the DaemonSet's pods are Ready" "$(ds_not_ready "$CHART_NS")"
  fi
  [ "$nfd" = true ] && { nfd_feature_labels || true; }
  chart_check install "$helm" "$CHART_NS"
  four_lpu_pod install "$CHART_STATE"
  example_pod install "$chart/examples/pod-device-plugin.yaml" "$CHART_STATE"
  helm_upgrade_roll "$helm" "$chart"
  out=$("$helm" uninstall lpu-node --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --wait --timeout 60s 2>&1) ||
    nok "install: helm uninstall" "$(tail -3 <<<"$out")"
  if wait_for 60 empty kc get pods -n "$CHART_NS" -o name; then
    ok "install: helm uninstall removed the DaemonSet's pods"
  else
    nok "install: helm uninstall removed the DaemonSet's pods" "$(kc get pods -n "$CHART_NS" -o name | tr '\n' ' ')"
  fi
  node_clean uninstall "$CHART_STATE" "$CHART_NFD"
  if [ "$nfd" = true ]; then
    expect "nfd: helm uninstall removed the chart's NodeFeatureRule" "$(kc get nodefeaturerules -o name 2>&1 | tr '\n' ' ')" \
      wait_for 10 none_listed kc get nodefeaturerules -o name
    nfd_down
  fi
}

# install_manifests REF: deploy/manifests/lpu-node.yaml as shipped but for
# two overrides, applied with kubectl; then kubectl delete -f.
install_manifests() {
  local ref=$1 src=$REPO/deploy/manifests/lpu-node.yaml m=$BASE/lpu-node.manifests.yaml img out p
  img=$(sed -n 's/^ *image: //p' "$src" | sort -u)
  if [ "$(wc -l <<<"$img")" != 1 ]; then
    nok "manifests: one image in $src" "$img"
    return
  fi
  # the image under the manifest's own name, as a pull would leave it
  ctrc -n k8s.io images tag --force "$ref" "$img" >>"$LOGS/images.log" 2>&1 ||
    { nok "manifests: tag $ref as $img" "$(tail -2 "$LOGS/images.log")"; return; }
  # host paths the manifests create, which this run removes again
  for p in "$MAN_STATE" /etc/kubernetes /usr/lib/lpu /var/run/nri /var/run/cdi /opt/nri /opt/nri/plugins /var/lib/kubelet/pod-resources; do
    [ -e "$p" ] && continue
    case $p in
      "$MAN_STATE") record tree "$p" ;;
      /etc/kubernetes) record dir /etc/kubernetes && record dir /etc/kubernetes/node-feature-discovery &&
        record dir "$MAN_NFD" && record file "$MAN_NFD/lpu" ;;
      *) record dir "$p" ;;
    esac
  done
  # simulated LPUs as deploy/README.md says: lpu-nri simulate writes the
  # node once under the state dir, and both containers are given it as
  # their root (LPU_ROOT, the --root flag's variable)
  [ -x "$BASE/bin/lpu-nri" ] || out=$(go_build cmd/lpu-nri) || { nok "manifests: build ./cmd/lpu-nri" "$out"; return; }
  if ! out=$("$BASE/bin/lpu-nri" simulate --root "$MAN_STATE/simulated-node" --lpus 8 2>&1); then
    nok "manifests: lpu-nri simulate --root $MAN_STATE/simulated-node --lpus 8" "$(tail -3 <<<"$out")"
    return
  fi
  # overrides: LPU_ROOT on both containers, and the host dir of this node's
  # NRI socket (containerd a listens on $BASE/ctd-a/nri.sock, not /var/run/nri)
  if ! awk -v root="$MAN_STATE/simulated-node" '
    { print }
    /^ *fieldPath: spec.nodeName$/ { ind = $0; sub(/[^ ].*/, "", ind); ind = substr(ind, 7)
      print ind "- name: LPU_ROOT"; print ind "  value: " root; env++ }
    END { if (env != 2) exit 1 }' "$src" | sed "s#^\( *path: \)/var/run/nri\$#\1$BASE/ctd-a#" >"$m"; then
    nok "manifests: override $src" "not exactly two NODE_NAME env entries"
    return
  fi
  expect "manifests: the only overrides are LPU_ROOT=$MAN_STATE/simulated-node on both containers and the NRI socket's host dir" "$(diff "$src" "$m" | head -20)" \
    test "$(diff "$src" "$m" | grep -c '^>')" = 5
  if ! out=$(kc apply -f "$m" 2>&1); then
    nok "manifests: kubectl apply -f deploy/manifests/lpu-node.yaml" "$(tail -3 <<<"$out")"
    return
  fi
  ok "manifests: kubectl apply -f deploy/manifests/lpu-node.yaml ($(grep -c '^kind:' "$m") objects, image $img)"
  label_for_ds "$MAN_NS"
  if wait_for 180 ds_ready "$MAN_NS"; then
    ok "manifests: the DaemonSet's pods are Ready on $KNODE"
  else
    nok "manifests: the DaemonSet's pods are Ready" "$(ds_not_ready "$MAN_NS")"
  fi
  four_lpu_pod manifests "$MAN_STATE"
  out=$(kc delete -f "$m" --wait=true --timeout=60s 2>&1) || nok "manifests: kubectl delete -f" "$(tail -3 <<<"$out")"
  if wait_for 60 empty kc get pods -n "$MAN_NS" -l app.kubernetes.io/name=lpu-node -o name; then
    ok "manifests: kubectl delete -f removed the DaemonSet's pods"
  else
    nok "manifests: kubectl delete -f removed the DaemonSet's pods" "$(kc get pods -n "$MAN_NS" -o name | tr '\n' ' ')"
  fi
  node_clean "manifests delete" "$MAN_STATE" "$MAN_NFD"
}

# api_relay_up: kube-apiserver listens on 127.0.0.1 only and this cluster has
# no kube-proxy, so a pod on the bridge network reaches it through a TCP
# relay on the bridge's host address (host-only), which the apiserver's
# certificate names. lpu-dra's in-cluster config is pointed there with
# KUBERNETES_SERVICE_HOST/PORT (dra.extraEnv).
API_RELAY=10.244.77.1:6443
api_relay_up() {
  running api-relay && return 0
  start_daemon api-relay "$LOGS/api-relay.log" "$BASE/bin/e2etool" relay "tcp:$API_RELAY" "tcp:127.0.0.1:$API_PORT"
  wait_for 10 listening "${API_RELAY#*:}" "${API_RELAY%:*}"
}

# cluster_chart_install CASE HELM CHART STATE SET...: helm install lpu-node
# into the cluster (the e2e image, 8 simulated LPUs, state in STATE, lpu-dra
# reaching the apiserver through the relay, the driver mount) with SET on
# top. Returns 1 after a skip line (no bridge address yet) or a nok line
# naming CASE, so the caller just returns.
cluster_chart_install() {
  local what=$1 helm=$2 chart=$3 state=$4 out
  shift 4
  mkdir -p "$state"
  if ! ip addr show "$CNI_BRIDGE" 2>/dev/null | grep -q "inet ${API_RELAY%:*}/"; then
    echo "# skip install $what: bridge $CNI_BRIDGE has no ${API_RELAY%:*} yet"
    return 1
  fi
  api_relay_up || { nok "$what: relay to the apiserver on $API_RELAY" "$(tail -3 "$LOGS/api-relay.log")"; return 1; }
  if ! out=$("$helm" install lpu-node "$chart" --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --create-namespace \
    "$@" --set image.repository=localhost/lpu-node --set image.tag=e2e --set image.pullPolicy=Never \
    --set simulate=8 --set config.stateDir="$state" --set config.nri.socket="$(nri_sock a)" \
    --set config.cdi.specDir="$DRA_CDI" --set nfd.enabled=false --set config.kubelet.podResourcesSocket="$(cluster_pr_sock)" \
    --set dra.pluginDir="$DRA_PLUGIN_DIR" --set dra.registryDir="$DRA_REGISTRY_DIR" \
    --set "dra.extraEnv[0].name=KUBERNETES_SERVICE_HOST" --set "dra.extraEnv[0].value=${API_RELAY%:*}" \
    --set "dra.extraEnv[1].name=KUBERNETES_SERVICE_PORT" --set-string "dra.extraEnv[1].value=${API_RELAY#*:}" \
    --set "config.injection.mounts[0].hostPath=$DRIVER_DIR" \
    --set "config.injection.mounts[0].containerPath=$DRIVER_CTR_DIR" 2>&1); then
    nok "$what: helm install $*" "$(tail -5 <<<"$out")"
    return 1
  fi
}

# install_dra HELM CHART: the chart in mode dra (lpu-dra and lpu-nri
# DaemonSets, DeviceClasses, claim templates); a pod with the chart's
# lpu-arc-4 claim template gets a contiguous 4-arc; helm uninstall.
install_dra() {
  local helm=$1 chart=$2 out state=$BASE/chart-dra-state claim env devs want
  cluster_chart_install "dra" "$helm" "$chart" "$state" --set mode=dra || return 0
  ok "dra: helm install lpu-node --set mode=dra"
  label_for_ds "$CHART_NS"
  if wait_for 180 ds_ready "$CHART_NS"; then
    ok "dra: the lpu-dra and lpu-nri DaemonSets' pods are Ready ($(kc get ds -n "$CHART_NS" -o jsonpath='{.items[*].metadata.name}'))"
  else
    nok "dra: the DaemonSets' pods are Ready" "$(ds_not_ready "$CHART_NS")"
  fi
  if wait_for 60 dra_slices_published; then
    ok "dra: lpu-dra published ResourceSlices for $KNODE ($(kc get resourceslices -o json | jq --arg n "$KNODE" '[.items[] | select(.spec.nodeName == $n) | (.spec.devices // [])[]] | length') devices)"
  else
    nok "dra: lpu-dra published ResourceSlices" "$(kc logs -n "$CHART_NS" -l hyperaccel.ai/daemon=lpu-dra --tail 5 2>&1 | tr '\n' ' ')"
  fi
  if kc get resourceclaimtemplate "$TPL_STRICT4" -n default >/dev/null 2>&1; then
    ok "dra: the chart made DeviceClasses ($(kc get deviceclasses -o name | wc -l)) and claim template $TPL_STRICT4 in default"
  else
    nok "dra: the chart made claim template $TPL_STRICT4" "$(kc get resourceclaimtemplates -A 2>&1 | tr '\n' ';')"
  fi
  # lpu-dra as the chart runs it: its pod-bound token may patch only its own
  # node's lpu.hyperaccel.ai/ labels (dra-node-labels policy).
  if wait_for 30 labels_are 8 8; then
    ok "dra: lpu-dra's pod labels $KNODE largest-free-arc 8, free-lpus 8 through the chart's RBAC and dra-node-labels policy"
  else
    nok "dra: lpu-dra's pod labels $KNODE largest-free-arc 8, free-lpus 8" \
      "$(labels_seen); $(kc logs -n "$CHART_NS" -l hyperaccel.ai/daemon=lpu-dra --tail 50 2>&1 | grep -i label | tail -2 | tr '\n' ' ')"
  fi
  if dra_slices_published; then chart_check dra "$helm" "$CHART_NS"; fi
  # without slices no claim can be allocated: skip the pod's long wait
  dra_pod chart-arc template "$TPL_STRICT4"
  if dra_slices_published && wait_pod chart-arc 90; then
    claim=$(claim_of chart-arc)
    want=$(claim_lpus "$claim")
    env=$(ctr_env chart-arc LPU_VISIBLE_DEVICES)
    devs=$(ctr_devs chart-arc)
    sim_ring "$state" || nok "dra: ring of the simulated node" "no ring under $state/simulated-node"
    expect "dra: the $TPL_STRICT4 pod sees a contiguous 4-arc (/dev/lpu{$devs}, ring ${RING[*]})" "devices [$devs], ring [${RING[*]}]" \
      is_arc_of 4 "$devs"
    expect "dra: ... exactly its claim's LPUs ($claim: $want), LPU_VISIBLE_DEVICES=$env" "claim [$want], devices [$devs], env $env" \
      claim_matches "$want" "$devs" "$env"
    expect "dra: the chart's dra-prefilter policy gave it largest-free-arc NotIn 0,1,2,3" "$(kc get pod chart-arc -o jsonpath='{.spec.affinity}')" \
      has_prefilter chart-arc 0,1,2,3
  else
    nok "dra: a pod with claim template $TPL_STRICT4 runs" "$(pod_why chart-arc)"
  fi
  delete_pod chart-arc
  dra_slices_published && example_pod dra "$chart/examples/pod-dra.yaml" "$state"
  dra_other_vendor "$state"           # lib/install_dra_cases.sh
  dra_upgrade "$helm" "$chart" "$state" # lib/install_upgrade.sh
  dra_node_config "$helm" "$chart"    # lib/install_dra_cases.sh
  out=$("$helm" uninstall lpu-node --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --wait --timeout 60s 2>&1) ||
    nok "dra: helm uninstall" "$(tail -3 <<<"$out")"
  if wait_for 60 empty kc get pods -n "$CHART_NS" -o name; then
    ok "dra: helm uninstall removed the DaemonSets' pods"
  else
    nok "dra: helm uninstall removed the DaemonSets' pods" "$(kc get pods -n "$CHART_NS" -o name | tr '\n' ' ')"
  fi
  out=$(find "$DRA_PLUGIN_DIR" "$DRA_REGISTRY_DIR" -type s 2>/dev/null | tr '\n' ' ')
  expect "dra uninstall: no lpu-dra socket left in the kubelet's plugin dirs" "left: $out" test -z "$out"
  node_clean "dra uninstall" "$state" "$BASE/no-nfd"
  stop_daemon api-relay 2
}

scenario_install() {
  local script=$REPO/deploy/container/build-oci.sh chart=$REPO/deploy/helm/lpu-node
  local tar=$BASE/oci/lpu-node.tar ref=localhost/lpu-node:e2e helm out
  helm=${HELM:-$(command -v helm)}
  if [ ! -f "$script" ] || [ ! -d "$chart" ] || [ -z "$helm" ]; then
    echo "# skip install: needs deploy/container/build-oci.sh, deploy/helm/lpu-node and helm"
    return 0
  fi
  log "install: build-oci.sh image; helm install (devicePlugin, simulate 8), upgrade, uninstall; kubectl apply -f the manifests"
  mkdir -p "$BASE/oci" "$CHART_STATE" "$CHART_NFD"
  if ! out=$(IMAGE=localhost/lpu-node bash "$script" "$tar" e2e 2>&1); then
    nok "install: build-oci.sh builds the image" "$(tail -5 <<<"$out")"
    return
  fi
  echo "$out" >"$LOGS/build-oci.log"
  out=$(ctrc -n k8s.io images import "$tar" 2>&1)
  if wait_for 20 cri inspecti "$ref"; then
    ok "install: image $ref imported into the node's containerd"
  else
    nok "install: image $ref imported into the node's containerd" "$out"
    return
  fi
  install_helm "$helm" "$chart"
  install_manifests "$ref"
  install_dra "$helm" "$chart"
  install_node_mode "$helm" "$chart" # lib/install_nodemode.sh
}
