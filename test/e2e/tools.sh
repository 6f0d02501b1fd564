#!/usr/bin/env bash
# tools.sh — installs and builds the pinned tools the end-to-end tests run on:
# Debian packages (runc, busybox-static, umoci, podman, jq, curl, iproute2)
# and, from the Go module proxy, containerd + ctr + shim, crictl, a standalone
# kubelet and helm (for the deploy tests). Built
# binaries are cached by version under $LPU_E2E_CACHE (outside the checkout),
# so only the first run on a machine pays the ~15 min cold build.
#
# usage: test/e2e/tools.sh [apt|containerd|containerd17|crictl|kubelet|helm|path|all]...
#   path prints the cached tools' directories for PATH; all is every step but
#   helm and containerd17 (containerd 1.7 for go test ./deploy/'s
#   TestContainerd17Snippet; ~4 min cold)
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
CONTAINERD17_VERSION=${CONTAINERD17_VERSION:-v1.7.35}
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.37.2}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
LPU_E2E_CACHE=${LPU_E2E_CACHE:-/var/cache/lpu-e2e}
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

# The kubelet lives in k8s.io/kubernetes, whose go.mod requires its staging
# modules at v0.0.0; a scratch module maps each to its published release.
do_kubelet() {
  local d; d=$(bin_dir kubelet "$K8S_VERSION")
  [ -x "$d/kubelet" ] && return 0
  log "building kubelet $K8S_VERSION (cold: ~9 min on 2 cores)"
  local src="$LPU_E2E_CACHE/src/kubelet-$K8S_VERSION"
  rm -rf "$src" && mkdir -p "$src" "$d.tmp"
  (
    cd "$src"
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
    [ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
    {
      printf 'module lpu.local/kubelet\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
      grep -E '^\s+k8s.io/\S+ v0.0.0$' "$gomod" | awk -v v="$K8S_STAGING_VERSION" '{printf "\t%s => %s %s\n", $1, $1, v}' | sort -u
      printf ')\n'
    } > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' > tools.go
    go mod tidy
    minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    go build -ldflags "-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
      -o "$d.tmp/kubelet" k8s.io/kubernetes/cmd/kubelet
  )
  rm -rf "$d" && mv "$d.tmp" "$d"
}

# print_path: the PATH entries for every cached tool, for callers to prepend.
print_path() {
  echo "$(bin_dir containerd "$CONTAINERD_VERSION"):$(bin_dir crictl "$CRICTL_VERSION"):$(bin_dir kubelet "$K8S_VERSION"):$(bin_dir helm "$HELM_VERSION")"
}

main() {
  [ $# -eq 0 ] && set -- all
  for step in "$@"; do
    case $step in
      all) do_apt; do_containerd; do_crictl; do_kubelet ;;
      apt|containerd|containerd17|crictl|kubelet|helm) "do_$step" ;;
      path) print_path ;;
      *) echo "usage: $0 [apt|containerd|containerd17|crictl|kubelet|helm|path|all]..." >&2; exit 2 ;;
    esac
  done
}
main "$@"
