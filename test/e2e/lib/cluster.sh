# shellcheck shell=bash
# shellcheck disable=SC2034 # settings here are read by the other lib files
# cluster.sh — a real single-node Kubernetes cluster on loopback for the DRA
# scenarios: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# the e2e's kubelet registered to the apiserver as node "localhost", containerd
# with NRI (lpu-nri on it) and lpu-dra as a host process with a kubeconfig.
# Sourced by test/e2e/run.sh after lib/node.sh, whose containerd, images,
# simulated node, lpu-nri and teardown it reuses.
#
# The node is named localhost: the kubelet refuses a loopback node IP, so the
# apiserver reaches it by host name (kubectl logs/exec), and any other name
# would send that lookup off the machine. There is no kube-proxy: in-cluster
# programs run as host processes with a kubeconfig.

CL=$BASE/cluster                      # pki, kubeconfigs, etcd data
KNODE=localhost
DRA_DRIVER=lpu.hyperaccel.ai
KUBELET_C=$BASE/kubelet-c             # the registered kubelet's files
DRA_PLUGIN_DIR=$KUBELET_C/root/plugins/$DRA_DRIVER
DRA_REGISTRY_DIR=$KUBELET_C/root/plugins_registry
DRA_STATE=$STATE                      # shared with lpu-nri, as the chart shares stateDir
DRA_CFG=""
DRA_CDI=$BASE/ctd-a/cdi               # the CDI dir containerd a reads
DRA_METRICS=""
CNI_BRIDGE=lpue2e0
CHART=${CHART:-$REPO/deploy/helm/lpu-node}   # DRA objects and RBAC come from it
ETCD_PORT="" API_PORT="" CM_PORT="" SCHED_PORT=""

# The Workload API and gang scheduling (beta, off by default in v1.37) for
# scenario d11, as docs/dra.md "Jobs that span servers" turns them on.
GANG_GATE=(--feature-gates=GenericWorkload=true)

kc() { kubectl --kubeconfig "$CL/admin.kubeconfig" "$@"; }

# ---------------------------------------------------------------- certificates
# cl_cert NAME SUBJECT [SAN]: a key and a certificate signed by the cluster
# CA; with SAN a serving certificate, else a client one.
cl_cert() {
  local n=$1 subj=$2 san=${3:-} ext=$CL/pki/$1.ext
  if [ -n "$san" ]; then
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$san" >"$ext"
  else
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$CL/pki/$n.key" \
    -subj "$subj" -out "$CL/pki/$n.csr" 2>/dev/null &&
    openssl x509 -req -in "$CL/pki/$n.csr" -CA "$CL/pki/ca.crt" -CAkey "$CL/pki/ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$CL/pki/$n.crt" 2>/dev/null
}

# cl_kubeconfig NAME CERT: a kubeconfig authenticating with client cert CERT.
cl_kubeconfig() {
  cat >"$CL/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$CL/pki/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$CL/pki/$2.crt")
    client-key-data: $(base64 -w0 "$CL/pki/$2.key")
contexts:
- name: e2e
  context: {cluster: e2e, user: $1}
current-context: e2e
EOF
  chmod 600 "$CL/$1.kubeconfig"
}

cluster_pki() {
  mkdir -p "$CL/pki"
  {
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj /CN=lpu-e2e-ca -keyout "$CL/pki/ca.key" -out "$CL/pki/ca.crt" 2>/dev/null &&
      cl_cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:10.244.77.1,DNS:localhost,DNS:kubernetes.default.svc" &&
      cl_cert admin "/O=system:masters/CN=e2e-admin" &&
      cl_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" &&
      cl_cert controller-manager /CN=system:kube-controller-manager &&
      cl_cert scheduler /CN=system:kube-scheduler &&
      cl_cert kubelet "/O=system:nodes/CN=system:node:$KNODE" &&
      cl_cert lpu-dra /CN=lpu-dra &&
      openssl ecparam -name prime256v1 -genkey -noout -out "$CL/pki/sa.key" 2>/dev/null
  } || fatal "cluster pki" "openssl failed"
  cl_kubeconfig admin admin
  cl_kubeconfig controller-manager controller-manager
  cl_kubeconfig scheduler scheduler
  cl_kubeconfig kubelet kubelet
  cl_kubeconfig lpu-dra lpu-dra
}

# ---------------------------------------------------------------- tools and builds
setup_cluster_tools() {
  log "tools: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl (cached; ~5-8 min the first time)"
  bash "$E2E_DIR/tools.sh" etcd kube >>"$LOGS/tools.log" 2>&1 ||
    fatal "tools" "test/e2e/tools.sh etcd kube failed, see $LOGS/tools.log: $(tail -3 "$LOGS/tools.log")"
  local t
  for t in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl openssl; do
    command -v "$t" >/dev/null || fatal "tools" "$t not on PATH"
  done
}

# build_lpu_dra: lpu-dra from this checkout; false while the checkout has
# no cmd/lpu-dra command. LPU_DRA=/path/to/lpu-dra runs that binary instead
# (to try a driver from another tree; the run says so).
build_lpu_dra() {
  if [ -n "${LPU_DRA:-}" ]; then
    cp "$LPU_DRA" "$BASE/bin/lpu-dra" || fatal "lpu-dra" "LPU_DRA=$LPU_DRA: cannot copy it"
    echo "# lpu-dra from LPU_DRA=$LPU_DRA, not built from this checkout"
    return 0
  fi
  ls "$REPO"/cmd/lpu-dra/*.go >/dev/null 2>&1 || return 1
  local out
  # Built as the image is (static, no symbol tables): a node's idle RSS.
  out=$(CGO_ENABLED=0 go_build cmd/lpu-dra -trimpath -tags grpcnotrace -ldflags '-s -w') ||
    fatal "build ./cmd/lpu-dra" "$out"
}

# ---------------------------------------------------------------- control plane
control_plane_up() {
  local t0=$SECONDS
  ETCD_PORT=$(free_port)
  local peer
  peer=$(free_port)
  while [ "$peer" = "$ETCD_PORT" ]; do peer=$(free_port); done
  API_PORT=$(free_port)
  CM_PORT=$(free_port)
  SCHED_PORT=$(free_port)
  cluster_pki
  start_daemon etcd "$LOGS/etcd.log" etcd --name e2e --data-dir "$CL/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e2e=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level warn
  wait_for 30 says '"health":"true"' curl -sf --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" ||
    fatal "etcd" "not healthy after 30s: $(tail -5 "$LOGS/etcd.log")"
  start_daemon kube-apiserver "$LOGS/kube-apiserver.log" kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$CL/pki" --tls-cert-file "$CL/pki/apiserver.crt" --tls-private-key-file "$CL/pki/apiserver.key" \
    --client-ca-file "$CL/pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$CL/pki/sa.key" --service-account-signing-key-file "$CL/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --endpoint-reconciler-type none --profiling=false \
    --kubelet-client-certificate "$CL/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$CL/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types Hostname,InternalIP \
    "${GANG_GATE[@]}" --runtime-config=scheduling.k8s.io/v1beta1=true
  wait_for 120 prints ok kc get --raw /readyz ||
    fatal "kube-apiserver" "not ready after 120s: $(tail -5 "$LOGS/kube-apiserver.log")"
  start_daemon kube-controller-manager "$LOGS/kube-controller-manager.log" kube-controller-manager \
    --kubeconfig "$CL/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$CL/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$CL/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
    --use-service-account-credentials=true --service-account-private-key-file "$CL/pki/sa.key" \
    --root-ca-file "$CL/pki/ca.crt" --cluster-signing-cert-file "$CL/pki/ca.crt" \
    --cluster-signing-key-file "$CL/pki/ca.key" --profiling=false "${GANG_GATE[@]}"
  start_daemon kube-scheduler "$LOGS/kube-scheduler.log" kube-scheduler \
    --kubeconfig "$CL/scheduler.kubeconfig" --authentication-kubeconfig "$CL/scheduler.kubeconfig" \
    --authorization-kubeconfig "$CL/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false \
    "${GANG_GATE[@]}"
  wait_for 60 curl -skf --max-time 1 "https://127.0.0.1:$CM_PORT/healthz" ||
    fatal "kube-controller-manager" "not healthy after 60s: $(tail -5 "$LOGS/kube-controller-manager.log")"
  wait_for 60 curl -skf --max-time 1 "https://127.0.0.1:$SCHED_PORT/healthz" ||
    fatal "kube-scheduler" "not healthy after 60s: $(tail -5 "$LOGS/kube-scheduler.log")"
  ok "control plane up: etcd $(etcd --version | sed -n 's/^etcd Version: //p'), kube-apiserver $(kc version -o json 2>/dev/null | jq -r .serverVersion.gitVersion), scheduler, controller-manager ($((SECONDS - t0))s)"
}

# ---------------------------------------------------------------- the node
# registered_kubelet_config [bridge]: the e2e kubelet in cluster mode
# (kubelet_config ... cluster) and its CNI config: a host-only bridge with
# bridge, else loopback only.
registered_kubelet_config() {
  kubelet_config c a cluster
  mkdir -p "$BASE/ctd-a/cni/net.d" "$BASE/ctd-a/cni/bin"
  local p
  for p in loopback bridge host-local; do ln -sf "/usr/lib/cni/$p" "$BASE/ctd-a/cni/bin/$p"; done
  if [ "${1:-}" = bridge ]; then
    # a pod network on a host-only bridge (no route off the machine), for
    # pods that do not use the host network, like the chart's DaemonSet
    ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && fatal "cni" "bridge $CNI_BRIDGE already exists; not touching it"
    touch "$BASE/cni-bridge-ours"
    cat >"$BASE/ctd-a/cni/net.d/10-bridge.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "lpu-e2e-br", "plugins": [
  {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$BASE/cni-ipam", "ranges": [[{"subnet": "10.244.77.0/24"}]]}},
  {"type": "loopback"}]}
EOF
  else
    # loopback only: the node turns Ready; pods use the host network
    cat >"$BASE/ctd-a/cni/net.d/10-loopback.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "lpu-e2e-lo", "plugins": [{"type": "loopback"}]}
EOF
  fi
}

# cluster_pr_sock: the registered kubelet's PodResources socket (its root
# is $BASE/kubelet-c/root, kubelet_launch).
cluster_pr_sock() { echo "$BASE/kubelet-c/root/pod-resources/kubelet.sock"; }

registered_kubelet_start() { kubelet_launch c "$KNODE" --kubeconfig "$CL/kubelet.kubeconfig"; }

node_ready() {
  [ "$(kc get node "$KNODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

start_lpu_dra() {
  [ -n "$DRA_METRICS" ] || DRA_METRICS=127.0.0.1:$(free_port)
  mkdir -p "$DRA_STATE"
  start_daemon lpu-dra "$LOGS/lpu-dra.log" "$BASE/bin/lpu-dra" --config "$DRA_CFG" \
    --node-name "$KNODE" --kubeconfig "$CL/lpu-dra.kubeconfig" --root "$ROOT" --state-dir "$DRA_STATE" \
    --cdi-dir "$DRA_CDI" --plugin-dir "$DRA_PLUGIN_DIR" --registry-dir "$DRA_REGISTRY_DIR" \
    --metrics-addr "$DRA_METRICS"
}

# dra_slices_published: lpu-dra's pool for the node has devices in the API.
dra_slices_published() {
  [ "$(kc get resourceslices -o json 2>/dev/null | jq --arg d "$DRA_DRIVER" --arg n "$KNODE" \
    '[.items[] | select(.spec.driver == $d and .spec.nodeName == $n) | (.spec.devices // [])[]] | length')" -gt 0 ]
}
# dra_connects: how often the kubelet connected to lpu-dra's plugin socket.
dra_connects() { grep -c "Connection changed.*driverName=\"$DRA_DRIVER\".*connected=true" "$KUBELET_LOG" || true; }
kubelet_saw_dra() { [ "$(dra_connects)" -gt 0 ]; }

# lpu_dra_rbac: what the chart grants lpu-dra, bound to the e2e's lpu-dra
# client certificate (user "lpu-dra"), so the driver runs with exactly those
# rights. The chart's ClusterRole is used when it renders one for mode=dra.
lpu_dra_rbac() {
  local role=""
  local helm=${HELM:-$(command -v helm)}
  if [ -n "$helm" ] && [ -d "$CHART" ]; then
    role=$("$helm" template e2e "$CHART" --kube-version 1.37.2 --set mode=dra 2>/dev/null |
      awk 'BEGIN{RS="\n---"} /kind: ClusterRole\n/ && /resourceslices/' | head -c 20000) || role=""
  fi
  if [ -n "$role" ]; then
    DRA_ROLE_SOURCE=chart
    printf '%s\n' "$role" | kc apply -f - >>"$LOGS/kubectl.log" 2>&1 || role=""
  fi
  if [ -z "$role" ]; then
    # chart has no DRA role (yet): the helper's needs, written here
    DRA_ROLE_SOURCE=e2e
    kc apply -f - >>"$LOGS/kubectl.log" 2>&1 <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lpu-dra-e2e}
rules:
- apiGroups: [resource.k8s.io]
  resources: [resourceslices]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
EOF
  fi
  local name
  name=$(kc get clusterroles -o json | jq -r '.items[] | select(any(.rules[]?; (.resources // []) | index("resourceslices"))) | .metadata.name' |
    grep -v '^system:' | head -1) || name=""
  kc create clusterrolebinding lpu-dra-e2e --clusterrole "$name" --user lpu-dra >>"$LOGS/kubectl.log" 2>&1 ||
    fatal "lpu-dra rbac" "binding $name: $(tail -2 "$LOGS/kubectl.log")"
  log "lpu-dra runs as user lpu-dra with ClusterRole $name (from the $DRA_ROLE_SOURCE)"
}

# cluster_up [bare]: the control plane and the registered node, in
# dependency order; bare leaves lpu-nri off the node (the chart brings its
# own) and gives pods a network on a host-only bridge.
cluster_up() {
  control_plane_up
  # one config for lpu-nri and lpu-dra, the e2e's usual one (health: 1 s
  # resync, 2 readings to flip), its CDI dir the one containerd a reads
  PR_SOCK=$(cluster_pr_sock) write_config "$CFG" nri "$DRA_CDI"
  DRA_CFG=$CFG
  ctd_config a on
  registered_kubelet_config "$([ "${1:-}" = bare ] && echo bridge)"
  ctd_start a
  if [ "${1:-}" != bare ]; then
    start_lpu_nri nri
    wait_for 20 nri_ready || fatal "lpu-nri" "not connected to containerd after 20s: $(tail -5 "$LOGS/lpu-nri.log")"
  fi
  ls -A "$DP_DIR" 2>/dev/null >"$BASE/dp-before" || : >"$BASE/dp-before"
  [ -e /run/netns ] || record dir /run/netns
  registered_kubelet_start
  wait_for 90 node_ready || fatal "node $KNODE" "not Ready after 90s: $(kc get node "$KNODE" -o wide 2>&1 | tail -1); $(tail -3 "$KUBELET_LOG")"
  wait_for 60 kc get serviceaccount default -n default ||
    fatal "cluster" "no default ServiceAccount after 60s (controller-manager): $(tail -3 "$LOGS/kube-controller-manager.log")"
  ok "node $KNODE registered and Ready (kubelet $(kubelet --version | awk '{print $2}'), containerd with NRI$([ "${1:-}" = bare ] || echo ", lpu-nri connected"))"
}

# dra_up: lpu-dra on the node, with the chart's RBAC.
dra_up() {
  lpu_dra_rbac
  start_lpu_dra
  wait_for 30 dra_slices_published ||
    fatal "lpu-dra" "published no ResourceSlice for $KNODE in 30s: $(tail -5 "$LOGS/lpu-dra.log")"
  wait_for 20 kubelet_saw_dra || log "no kubelet registration line for $DRA_DRIVER yet"
  ok "lpu-dra published $(kc get resourceslices -o json | jq --arg n "$KNODE" '[.items[] | select(.spec.nodeName == $n) | (.spec.devices // [])[]] | length') devices for $KNODE"
}

# cluster_pods_gone: no pod objects left and no containers of them.
cluster_pods_gone() {
  [ -z "$(kc get pods -n default -o name 2>/dev/null)" ] &&
    [ -z "$(cri ps -q --label io.kubernetes.pod.namespace=default)" ]
}

# cluster_teardown_pods: delete every pod through the API, so the kubelet
# unprepares their claims while lpu-dra still runs.
cluster_teardown_pods() {
  running kube-apiserver || return 0
  kc delete pods --all -n default --grace-period=1 --wait=false >/dev/null 2>&1
  wait_for 60 cluster_pods_gone || log "pods left after 60s: $(kc get pods -n default -o name 2>&1 | tr '\n' ' ')"
}

# cluster_teardown: everything cluster-only, around node.sh's teardown.
cluster_teardown() {
  set +e
  cluster_teardown_pods
  stop_daemon lpu-dra 3
  teardown
  local n
  for n in api-relay kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_daemon "$n" 5; done
  if [ -f "$BASE/cni-bridge-ours" ]; then
    ip link del "$CNI_BRIDGE" 2>/dev/null
    rm -f "$BASE/cni-bridge-ours"
  fi
}
