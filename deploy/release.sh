#!/usr/bin/env bash
# release.sh — builds every release artefact into DIST without a container
# engine or a registry (`make release VERSION=x.y.z` calls it):
#
#   lpu-node-image-V.oci.tar    the image as one OCI image index for linux/amd64
#                               and linux/arm64 (build-oci.sh, OCI archive)
#   lpu-node-V.tgz              the chart (helm package; version = appVersion = V)
#   lpu-node-chart-V.oci.tar    the same chart as an OCI artifact in an OCI
#                               layout, as `helm push` would store it (chartoci)
#   lpu-node-V.yaml             the chart rendered with default values for
#                               namespace kube-system (kubectl apply -f)
#   kubectl-lpu-V-linux-ARCH.tar.gz
#                               the kubectl lpu plugin per architecture:
#                               kubectl-lpu, kubectl_complete-lpu, LICENSE
#   krew/lpu.yaml               its krew plugin manifest (deploy/krew/lpu.yaml
#                               with the version, URIs and sha256 filled in)
#   sbom/lpu-device-plugin-V-linux-ARCH.cdx.json,
#   sbom/lpu-nri-V-linux-ARCH.cdx.json,
#   sbom/lpu-dra-V-linux-ARCH.cdx.json,
#   sbom/kubectl-lpu-V-linux-ARCH.cdx.json
#                               CycloneDX SBOMs of each binary per architecture
#                               (cyclonedx-gomod app, with licences)
#   SHA256SUMS                  sha256sum of every file above
#
# usage: deploy/release.sh [VERSION]    (default: the VERSION file)
#
#   DIST              output directory (default: dist/ at the repository root;
#                     emptied first)
#   PLATFORMS         architectures (default "amd64 arm64")
#   HELM              helm binary (default: the test/e2e/tools.sh cache, PATH)
#   CYCLONEDX_GOMOD   cyclonedx-gomod binary (default: go run of the pinned
#                     version from the Go module proxy)
#   KREW_URI_BASE     where the krew manifest says the archives are
#                     (default: the GitHub release vV of hyperaccel/lpu-node)
#   SOURCE_DATE_EPOCH, IMAGE, REVISION, CA_BUNDLE: as for build-oci.sh
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
log() { printf '[%(%H:%M:%S)T] release: %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ $# -le 1 ] || die "usage: $0 [VERSION]"
v=$(bash "$here/version.sh" "${1:-}") || exit 1
dist=${DIST:-$repo/dist}
case $dist in /*) ;; *) dist=$PWD/$dist ;; esac
platforms=${PLATFORMS:-amd64 arm64}
cyclonedx_version=v1.10.0
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}

helm=${HELM:-}
if [ -z "$helm" ]; then
  for c in /var/cache/lpu-e2e/helm-v3.22.0/helm "$(command -v helm || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { helm=$c; break; }
  done
fi
[ -n "$helm" ] || die "no helm; run test/e2e/tools.sh helm or set HELM"
command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"

rm -rf "$dist"
mkdir -p "$dist/sbom"
work=$(mktemp -d /tmp/lpu-release.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Keep helm away from the user's repositories, cache and plugins.
export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data

log "image $v for $platforms"
GOARCH=$platforms bash "$here/container/build-oci.sh" "$dist/lpu-node-image-$v.oci.tar" "$v" >/dev/null

log "chart $v"
"$helm" lint --quiet "$here/helm/lpu-node" >/dev/null
"$helm" package --version "$v" --app-version "$v" -d "$work" "$here/helm/lpu-node" >/dev/null
install -m 0644 "$work/lpu-node-$v.tgz" "$dist/lpu-node-$v.tgz"
(cd "$repo" && go run ./deploy/chartoci "$dist/lpu-node-$v.tgz" "$dist/lpu-node-chart-$v.oci.tar")

log "manifests $v"
{
  printf '%s\n' \
    "# lpu-node $v: the Helm chart rendered with its default values for namespace" \
    '# kube-system (deploy/release.sh). kubectl apply -f this file.'
  "$helm" template lpu-node "$dist/lpu-node-$v.tgz" --namespace kube-system --kube-version 1.37.2 --skip-tests
} >"$dist/lpu-node-$v.yaml"

log "kubectl-lpu $v for $platforms"
# The archives krew installs: the binary, the completion helper, the licence;
# owner, order and times fixed so that the same tree gives the same bytes.
krew_uri=${KREW_URI_BASE:-https://github.com/hyperaccel/lpu-node/releases/download/v$v}
mkdir -p "$dist/krew"
sed '/^#/d' "$here/krew/lpu.yaml" >"$work/lpu.in"
sed -n '1,/^  platforms:$/p' "$work/lpu.in" | sed "s|@VERSION@|$v|g" >"$work/lpu.yaml"
for arch in $platforms; do
  pkg=$work/kubectl-lpu-$arch
  mkdir -p "$pkg"
  (cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS='' \
    go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$v" -o "$pkg/kubectl-lpu" ./cmd/kubectl-lpu) ||
    die "build kubectl-lpu for linux/$arch"
  install -m 0755 "$repo/cmd/kubectl-lpu/kubectl_complete-lpu" "$pkg/kubectl_complete-lpu"
  install -m 0644 "$repo/LICENSE" "$pkg/LICENSE"
  archive=kubectl-lpu-$v-linux-$arch.tar.gz
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$pkg" -cf - LICENSE kubectl-lpu kubectl_complete-lpu | gzip -9n >"$dist/$archive"
  sum=$(sha256sum "$dist/$archive" | cut -d' ' -f1)
  sed '1,/^  platforms:$/d' "$work/lpu.in" |
    sed "s|@VERSION@|$v|g; s|@ARCH@|$arch|g; s|@URI@|$krew_uri|g; s|@SHA256@|$sum|g" >>"$work/lpu.yaml"
done
install -m 0644 "$work/lpu.yaml" "$dist/krew/lpu.yaml"

log "SBOMs (cyclonedx-gomod $cyclonedx_version)"
cdx=${CYCLONEDX_GOMOD:-}
if [ -z "$cdx" ]; then
  GOBIN=$work/bin go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$cyclonedx_version"
  cdx=$work/bin/cyclonedx-gomod
fi
# cyclonedx-gomod takes the main module's version from git tags; give it a
# snapshot of this tree (tracked and untracked, not ignored files) in a fresh
# repository tagged v$v, the Go module version of this release.
src=$work/src
mkdir -p "$src"
(cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 -r cp --parents -t "$src" 2>/dev/null) ||
  die "snapshot the source tree for the SBOM"
(
  cd "$src"
  export GIT_AUTHOR_DATE="@$SOURCE_DATE_EPOCH" GIT_COMMITTER_DATE="@$SOURCE_DATE_EPOCH"
  git init -q && git add -A
  git -c user.name=release -c user.email=release@localhost commit -qm "lpu-node $v"
  git tag "v$v"
)
for arch in $platforms; do
  for d in lpu-device-plugin lpu-nri lpu-dra kubectl-lpu; do
    (cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS='' \
      "$cdx" app -json -licenses -noserial -notimestamp -main "cmd/$d" \
      -output "$dist/sbom/$d-$v-linux-$arch.cdx.json" . 2>"$work/cdx.log") ||
      { cat "$work/cdx.log" >&2; die "cyclonedx-gomod failed for $d linux/$arch"; }
  done
done

(cd "$dist" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >"$work/SHA256SUMS")
install -m 0644 "$work/SHA256SUMS" "$dist/SHA256SUMS"
log "wrote $dist:"
(cd "$dist" && sed 's/^/  /' SHA256SUMS) >&2
