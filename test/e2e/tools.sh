#!/usr/bin/env bash
# tools.sh — installs and builds the pinned tools the end-to-end tests run on:
# Debian packages (runc, busybox-static, umoci, podman, jq, curl, iproute2)
# and, from the Go module proxy, containerd + ctr + shim, crictl, a kubelet,
# helm (for the deploy tests), and a control plane for the cluster tests:
# etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kubectl.
# crio: CRI-O and pinns are not on the module proxy; they come prebuilt from
# CRIO_BIN and PINNS_BIN (gunzipped into the cache, sha256 checked) with the
# Debian packages they need at run time (conmon, runc, libseccomp2, ...).
# nfd: Node Feature Discovery's nfd-master and nfd-worker v0.19.0 and that
# tag's CRDs, not on the module proxy either: NFD_TARBALL unpacked into the
# cache (the tarball's sha256 and its SHA256SUMS checked).
# Built binaries are cached by version under $LPU_E2E_CACHE (outside the
# checkout), so only the first run on a machine pays the cold build (~15 min
# for the node tools, ~5-8 min more for the control plane, which shares most
# of its packages with the kubelet, on 2 cores). The prometheus step
# installs the distribution's prometheus package (2.42, with promtool) that
# test/prom runs the chart's alerts and dashboard on.
#
# usage: test/e2e/tools.sh [apt|containerd|containerd17|crictl|kubelet|etcd|kube|kueue|helm|prometheus|crio|nfd|path|all]...
#   path prints the cached tools' directories for PATH; all is every step but
#   helm, crio, nfd and containerd17 (containerd 1.7 for go test ./deploy/tests/'s
#   TestContainerd17Snippet; ~4 min cold)
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
CONTAINERD17_VERSION=${CONTAINERD17_VERSION:-v1.7.35}
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
LPU_E2E_CACHE=${LPU_E2E_CACHE:-/var/cache/lpu-e2e}
TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/tools
CRIO_VERSION=${CRIO_VERSION:-1.36.3}
CRIO_BIN=${CRIO_BIN:-$TOOLS_DIR/crio-$CRIO_VERSION-linux-amd64.gz}
PINNS_BIN=${PINNS_BIN:-$TOOLS_DIR/pinns-$CRIO_VERSION-linux-amd64.gz}
# sha256 of the gunzipped binaries (../shared/tools/README.md); set empty
# for a binary of your own
CRIO_SHA256=${CRIO_SHA256-3a32c66bff43495de8c6c7da6a232c6d09bcd1ff531d4a6a17e91c87fc4b980d}
PINNS_SHA256=${PINNS_SHA256-c3ccdb9152f62c3d7e8fa10dd8eab406e2952ef244f47e085db36e131b4b3def}
NFD_VERSION=${NFD_VERSION:-0.19.0}
NFD_TARBALL=${NFD_TARBALL:-$TOOLS_DIR/nfd-$NFD_VERSION-linux-amd64.tar.gz}
# sha256 of ../shared/tools/nfd-0.19.0-linux-amd64.tar.gz; set empty for a
# tarball of your own (its SHA256SUMS is still checked)
NFD_SHA256=${NFD_SHA256-0ac96c9e05da202290a890f857204305711d9475bd4fdd2d703caff5927be29b}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
export PATH=/usr/local/go/bin:$PATH

log() { printf '[%(%H:%M:%S)T] tools: %s\n' -1 "$*" >&2; }

# bin_dir NAME VERSION: the cache folder for one tool at one version.
bin_dir() { echo "$LPU_E2E_CACHE/$1-$2"; }

do_apt() {
  # skopeo and docker-registry: the release test's loopback registry round trip.
  local want="runc busybox-static umoci podman jq curl iproute2 skopeo docker-registry" missing=""
  for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  log "apt-get install$missing"
  apt-get update -qq
  # A package's service (docker-registry's) must not start on install: the
  # tests run their own registry on loopback. policy-rc.d exit 101 forbids it.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
  fi
  # shellcheck disable=SC2086 # a list of package names
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  [ "$own_policy" = 1 ] && rm -f "$policy"
  return 0
}

# do_prometheus: the distribution's prometheus and promtool (2.42). Its
# service must not start on install (it would listen on every address):
# test/prom starts its own on 127.0.0.1; policy-rc.d exit 101 forbids it.
do_prometheus() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  log "apt-get install prometheus"
  apt-get update -qq
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  [ "$own_policy" = 1 ] && rm -f "$policy"
  return 0
}

do_containerd() {
  local d; d=$(bin_dir containerd "$CONTAINERD_VERSION")
  [ -x "$d/containerd" ] && [ -x "$d/ctr" ] && [ -x "$d/containerd-shim-runc-v2" ] && return 0
  log "building containerd $CONTAINERD_VERSION (cold: ~5 min on 2 cores)"
  mkdir -p "$d.tmp"
  GOBIN="$d.tmp" go install \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# do_containerd17: containerd 1.7 and its shim. Its go.mod has exclude
# directives, so `go install pkg@version` refuses it: build inside a copy of
# the module as the proxy serves it.
do_containerd17() {
  local d src; d=$(bin_dir containerd "$CONTAINERD17_VERSION")
  [ -x "$d/containerd" ] && [ -x "$d/containerd-shim-runc-v2" ] && return 0
  log "building containerd $CONTAINERD17_VERSION (cold: ~4 min on 2 cores)"
  src=$(go mod download -json "github.com/containerd/containerd@$CONTAINERD17_VERSION" | jq -r .Dir)
  rm -rf "$d.src" "$d.tmp" && cp -r "$src" "$d.src" && chmod -R u+w "$d.src"
  (cd "$d.src" && GOFLAGS="$GOFLAGS -mod=mod" go build -tags "no_btrfs no_devmapper no_zfs no_aufs" \
    -o "$d.tmp/" ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2)
  rm -rf "$d" "$d.src" && mv "$d.tmp" "$d"
}

do_crictl() {
  local d; d=$(bin_dir crictl "$CRICTL_VERSION")
  [ -x "$d/crictl" ] && return 0
  log "building crictl $CRICTL_VERSION (cold: ~1 min)"
  mkdir -p "$d.tmp"
  GOBIN="$d.tmp" go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  rm -rf "$d" && mv "$d.tmp" "$d"
}

do_helm() {
  local d; d=$(bin_dir helm "$HELM_VERSION")
  [ -x "$d/helm" ] && return 0
  log "building helm $HELM_VERSION"
  mkdir -p "$d.tmp"
  GOBIN="$d.tmp" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# k8s_module DIR NAME: a scratch module lpu.local/NAME in DIR requiring k8s.io/kubernetes, whose
# go.mod requires its staging modules at v0.0.0; the scratch module maps each
# to its published release. tools.go (written by the caller) names the
# commands, so `go mod tidy` pulls exactly what they need.
k8s_module() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  [ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$K8S_VERSION"; return 1; }
  {
    printf 'module lpu.local/%s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$2" "$K8S_VERSION"
    grep -E '^\s+k8s.io/\S+ v0.0.0$' "$gomod" | awk -v v="$K8S_STAGING_VERSION" '{printf "\t%s => %s %s\n", $1, $1, v}' | sort -u
    printf ')\n'
  } > "$1/go.mod"
}

# k8s_build NAME OUTDIR CMD...: build k8s.io/kubernetes/cmd/CMD... at
# $K8S_VERSION into OUTDIR in one `go build`, so the commands share compile
# work; the scratch module lives in $LPU_E2E_CACHE/src/NAME-$K8S_VERSION.
k8s_build() {
  local name=$1 out=$2 c minor src pkgs=(); shift 2
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  src="$LPU_E2E_CACHE/src/$name-$K8S_VERSION"
  rm -rf "$src" && mkdir -p "$src" "$out"
  (
    cd "$src"
    k8s_module "$src" "$name"
    { printf '//go:build tools\n\npackage tools\n\nimport (\n'; for c in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done; printf ')\n'; } > tools.go
    go mod tidy
    minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    # -o DIR/ with several main packages writes one binary per command
    go build -ldflags "-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
      -o "$out/" "${pkgs[@]}"
  )
}

do_kubelet() {
  local d; d=$(bin_dir kubelet "$K8S_VERSION")
  [ -x "$d/kubelet" ] && return 0
  log "building kubelet $K8S_VERSION (cold: ~9 min on 2 cores)"
  k8s_build kubelet "$d.tmp" kubelet
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# The control plane for cluster tests (internal/clustertest, lib/cluster.sh).
# Built after the kubelet, most of k8s.io/* is already in the build cache.
KUBE_CMDS="kube-apiserver kube-scheduler kube-controller-manager kubectl"
do_kube() {
  local d c ok=1; d=$(bin_dir kube "$K8S_VERSION")
  for c in $KUBE_CMDS; do [ -x "$d/$c" ] || ok=0; done
  [ "$ok" = 1 ] && return 0
  log "building $KUBE_CMDS $K8S_VERSION (cold, after the kubelet: ~5 min on 2 cores, measured 281 s)"
  # shellcheck disable=SC2086
  k8s_build kube "$d.tmp" $KUBE_CMDS
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# etcd: `go install go.etcd.io/etcd/server/v3@...` is refused (its go.mod has
# replace directives), so a scratch module requires it and builds it.
do_etcd() {
  local d; d=$(bin_dir etcd "$ETCD_VERSION")
  [ -x "$d/etcd" ] && return 0
  log "building etcd $ETCD_VERSION (cold: ~0.5-1.5 min on 2 cores)"
  local src="$LPU_E2E_CACHE/src/etcd-$ETCD_VERSION"
  rm -rf "$src" && mkdir -p "$src" "$d.tmp"
  (
    cd "$src"
    printf 'module lpu.local/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy
    go build -o "$d.tmp/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# do_kueue: `go install` of the Kueue manager (its go.mod has no replace
# directives), static as Kueue's own image builds it, and the CRDs of the
# same module version copied beside it into crds/.
do_kueue() {
  local d src; d=$(bin_dir kueue "$KUEUE_VERSION")
  if [ ! -x "$d/kueue" ]; then
    log "building kueue $KUEUE_VERSION (~35 s with a warm Go build cache; cold not measured)"
    rm -rf "$d.tmp" && mkdir -p "$d.tmp"
    CGO_ENABLED=0 GOBIN="$d.tmp" go install -trimpath \
      -ldflags "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
    mkdir -p "$d" && mv "$d.tmp/kueue" "$d/kueue" && rm -rf "$d.tmp"
  fi
  [ -f "$d/crds/kueue.x-k8s.io_clusterqueues.yaml" ] && return 0
  src=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | jq -r .Dir)
  rm -rf "$d/crds.tmp" && mkdir -p "$d/crds.tmp"
  cp "$src"/config/components/crd/bases/*.yaml "$d/crds.tmp/"
  chmod 0644 "$d"/crds.tmp/*.yaml
  rm -rf "$d/crds" && mv "$d/crds.tmp" "$d/crds"
}

# install_prebuilt SRC DEST SHA256: SRC (gunzipped when it ends in .gz) as
# the executable DEST, its sha256 checked; a DEST that already matches stays.
install_prebuilt() {
  local src=$1 dest=$2 sum=$3 got
  if [ -x "$dest" ]; then
    if [ -n "$sum" ]; then
      [ "$(sha256sum <"$dest" | cut -d' ' -f1)" = "$sum" ] && return 0
    elif [ "$dest" -nt "$src" ]; then
      return 0
    fi
  fi
  case $src in
    *.gz) gzip -dc "$src" >"$dest.tmp" ;;
    *) cp "$src" "$dest.tmp" ;;
  esac
  got=$(sha256sum <"$dest.tmp" | cut -d' ' -f1)
  if [ -n "$sum" ] && [ "$got" != "$sum" ]; then
    rm -f "$dest.tmp"
    log "$src: sha256 $got, want $sum"
    return 1
  fi
  chmod 0755 "$dest.tmp" && mv "$dest.tmp" "$dest"
}

# do_crio: CRI-O and pinns from CRIO_BIN and PINNS_BIN, and what they run
# with. Absent binaries are not an error here: run.sh crio skips its group.
do_crio() {
  local d want="libseccomp2 libsqlite3-0 conmon runc containernetworking-plugins" missing="" p
  for p in "$CRIO_BIN" "$PINNS_BIN"; do
    [ -f "$p" ] || { log "skip crio: no file $p (CRIO_BIN / PINNS_BIN)"; return 0; }
  done
  for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    log "apt-get install$missing"
    # another step (apt) may hold the dpkg lock: wait for it
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null
  fi
  d=$(bin_dir crio "$CRIO_VERSION")
  mkdir -p "$d"
  install_prebuilt "$CRIO_BIN" "$d/crio" "$CRIO_SHA256"
  install_prebuilt "$PINNS_BIN" "$d/pinns" "$PINNS_SHA256"
}

# do_nfd: NFD_TARBALL (nfd-VERSION/{nfd-master,nfd-worker,SHA256SUMS,crds/})
# unpacked into the cache as nfd-VERSION/; its sha256 and the binaries'
# SHA256SUMS are checked. An absent tarball is not an error here: the
# install group skips its NFD cases (test/e2e/lib/nfd.sh).
do_nfd() {
  local d got tmp
  [ -f "$NFD_TARBALL" ] || { log "skip nfd: no file $NFD_TARBALL (NFD_TARBALL)"; return 0; }
  d=$(bin_dir nfd "$NFD_VERSION")
  got=$(sha256sum <"$NFD_TARBALL" | cut -d' ' -f1)
  # unpacked from this very tarball, binaries intact: nothing to do
  if [ "$(cat "$d/tarball.sha256" 2>/dev/null)" = "$got" ] && [ -f "$d/crds/nfd-api-crds.yaml" ] &&
    (cd "$d" && sha256sum --quiet -c SHA256SUMS) >/dev/null 2>&1; then
    return 0
  fi
  if [ -n "$NFD_SHA256" ] && [ "$got" != "$NFD_SHA256" ]; then
    log "$NFD_TARBALL: sha256 $got, want $NFD_SHA256"
    return 1
  fi
  tmp=$d.tmp
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -C "$tmp" -xzf "$NFD_TARBALL" "nfd-$NFD_VERSION/" ||
    { log "$NFD_TARBALL: cannot unpack nfd-$NFD_VERSION/"; rm -rf "$tmp"; return 1; }
  if ! (cd "$tmp/nfd-$NFD_VERSION" && sha256sum --quiet -c SHA256SUMS); then
    log "$NFD_TARBALL: its SHA256SUMS do not match the binaries"
    rm -rf "$tmp"
    return 1
  fi
  echo "$got" >"$tmp/nfd-$NFD_VERSION/tarball.sha256"
  rm -rf "$d" && mv "$tmp/nfd-$NFD_VERSION" "$d" && rmdir "$tmp"
  log "nfd $NFD_VERSION unpacked into $d (tarball sha256 $got)"
}

# print_path: the PATH entries for every cached tool, for callers to prepend.
print_path() {
  echo "$(bin_dir containerd "$CONTAINERD_VERSION"):$(bin_dir crictl "$CRICTL_VERSION"):$(bin_dir kubelet "$K8S_VERSION"):$(bin_dir kube "$K8S_VERSION"):$(bin_dir etcd "$ETCD_VERSION"):$(bin_dir helm "$HELM_VERSION"):$(bin_dir crio "$CRIO_VERSION")"
}

main() {
  [ $# -eq 0 ] && set -- all
  for step in "$@"; do
    case $step in
      all) do_apt; do_containerd; do_crictl; do_kubelet; do_kube; do_etcd; do_prometheus ;;
      apt|containerd|containerd17|crictl|kubelet|kube|kueue|etcd|helm|prometheus|crio|nfd) "do_$step" ;;
      path) print_path ;;
      *) echo "usage: $0 [apt|containerd|containerd17|crictl|kubelet|etcd|kube|kueue|helm|prometheus|crio|nfd|path|all]..." >&2; exit 2 ;;
    esac
  done
}
main "$@"
