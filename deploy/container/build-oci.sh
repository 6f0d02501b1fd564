#!/usr/bin/env bash
# build-oci.sh — builds the lpu-node image (both daemons) without a container
# engine: static Go binaries, an OCI image layout assembled with umoci, written
# as an OCI archive that `ctr images import` and `podman load` accept.
#
# usage: deploy/container/build-oci.sh OUT.tar [VERSION]
#
#   VERSION          default: deploy/version.sh (the VERSION file); a leading
#                    "v" before a digit is dropped (v1.2.3 → 1.2.3)
#   IMAGE            image name recorded in the archive
#                    (default ghcr.io/hyperaccel/lpu-node); the tag is VERSION
#   SOURCE_DATE_EPOCH  timestamp for every file, layer and config date
#                    (default: the commit time of HEAD), for reproducibility
#   REVISION         source revision label (default: git rev-parse HEAD)
#   GOARCH           target architecture, or several separated by spaces
#                    ("amd64 arm64": one multi-arch OCI image index; the
#                    printed digest is then the index's). Default: the host's
#   CA_BUNDLE        PEM CA bundle copied to /etc/ssl/certs/ca-certificates.crt
#                    for TLS to an OTLP collector (default: the build host's
#                    Debian bundle; "none" leaves it out)
#
# Same source tree + same Go toolchain + same umoci + same SOURCE_DATE_EPOCH
# gives byte-identical OUT.tar (the binaries are built with -trimpath and
# -buildvcs=false, every mtime is SOURCE_DATE_EPOCH, the archive is sorted
# with fixed owners).
#
# Import and run, e.g.:
#   ctr -n k8s.io images import OUT.tar
#   ctr -n k8s.io run --rm ghcr.io/hyperaccel/lpu-node:VERSION v /usr/bin/lpu-nri --version
set -euo pipefail

usage() { echo "usage: $0 OUT.tar [VERSION]" >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
case $1 in -h|--help) usage ;; esac

export PATH=/usr/local/go/bin:$PATH
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$1
case $out in /*) ;; *) out=$PWD/$out ;; esac

log() { printf '[%(%H:%M:%S)T] build-oci: %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

version=${2:-$(bash "$repo/deploy/version.sh")}
[[ $version =~ ^v[0-9] ]] && version=${version#v}
# An OCI tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
tag=$(printf '%s' "$version" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-128)
image=${IMAGE:-ghcr.io/hyperaccel/lpu-node}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
[[ $epoch =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970, got '$epoch'"
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
revision=${REVISION:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)}
goarch=${GOARCH:-$(go env GOARCH)}

# A fresh machine has neither: root installs them (apt), others are told how.
missing=()
for tool in umoci jq; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "${missing[*]} missing; install: apt-get install ${missing[*]}"
  log "installing ${missing[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rootless=()
[ "$(id -u)" = 0 ] || rootless=(--rootless)

work=$(mktemp -d /tmp/lpu-oci.XXXXXX)
trap 'rm -rf "$work"' EXIT

labels=(
  "org.opencontainers.image.title=lpu-node"
  "org.opencontainers.image.description=HyperAccel LPU node stack: kubelet device plugin and NRI plugin"
  "org.opencontainers.image.vendor=HyperAccel"
  "org.opencontainers.image.source=https://github.com/hyperaccel/lpu-node"
  "org.opencontainers.image.url=https://github.com/hyperaccel/lpu-node"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.revision=$revision"
  "org.opencontainers.image.created=$created"
  "org.opencontainers.image.licenses=Apache-2.0"
)

layout=$work/oci
umoci init --layout "$layout"

# image ARCH REF: cross-builds both daemons for linux/ARCH (CGO_ENABLED=0, so
# no C toolchain or foreign base layer is needed: the image is FROM scratch)
# and adds them as the single-platform image REF of the layout. grpcnotrace:
# gRPC without golang.org/x/net/trace, which the daemons never serve and
# whose templates would keep every method linked (see the Makefile).
image() {
  local arch=$1 ref=$2 bundle=$work/bundle-$1 rootfs
  log "building lpu-device-plugin, lpu-nri and lpu-dra $version (linux/$arch, static)"
  (
    cd "$repo"
    CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS='' \
      go build -trimpath -buildvcs=false -tags grpcnotrace -ldflags "-s -w -X main.version=$version" \
      -o "$work/bin-$arch/" ./cmd/lpu-device-plugin ./cmd/lpu-nri ./cmd/lpu-dra
  )
  log "assembling the OCI image $image:$ref (linux/$arch)"
  umoci new --image "$layout:$ref"
  umoci unpack "${rootless[@]}" --image "$layout:$ref" "$bundle"
  rootfs=$bundle/rootfs

  install -d -m 0755 "$rootfs/usr" "$rootfs/usr/bin" "$rootfs/etc"
  install -d -m 1777 "$rootfs/tmp"
  install -m 0755 "$work/bin-$arch/lpu-device-plugin" "$work/bin-$arch/lpu-nri" "$work/bin-$arch/lpu-dra" "$rootfs/usr/bin/"
  install -D -m 0644 "$repo/LICENSE" "$rootfs/usr/share/doc/lpu-node/LICENSE"
  # Names for the two users the image knows: root (the Helm chart runs as UID 0
  # without capabilities, see deploy/README.md) and nonroot, the image default.
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > "$rootfs/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' > "$rootfs/etc/group"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  if [ "$ca" != none ]; then
    install -D -m 0644 "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  find "$rootfs" -exec touch -h -d "@$epoch" {} +

  umoci repack --image "$layout:$ref" \
    --history.created "$created" --history.created_by "deploy/container/build-oci.sh" \
    --history.comment "lpu-device-plugin, lpu-nri and lpu-dra $version" "$bundle"

  local cfg=(--no-history --created "$created" --os linux --architecture "$arch"
    --config.user 65532:65532 --config.workingdir /
    --config.env PATH=/usr/bin:/bin
    --config.entrypoint /usr/bin/lpu-device-plugin) l
  for l in "${labels[@]}"; do cfg+=(--config.label "$l" --manifest.annotation "$l"); done
  umoci config --image "$layout:$ref" "${cfg[@]}"
  umoci stat --image "$layout:$ref" >/dev/null
}

ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ "$ca" != none ] && [ ! -f "$ca" ]; then
  die "no CA bundle at $ca (install ca-certificates, set CA_BUNDLE, or CA_BUNDLE=none)"
fi

read -r -a arches <<<"$goarch"
[ ${#arches[@]} -ge 1 ] || die "GOARCH is empty"
if [ ${#arches[@]} = 1 ]; then
  image "${arches[0]}" "$tag"
  umoci gc --layout "$layout"
else
  # Several architectures: one image per architecture, then an OCI image
  # index naming each with its platform; index.json points at that index
  # only, so the archive holds one multi-arch image (what registries serve
  # as a manifest list).
  for a in "${arches[@]}"; do image "$a" "$tag-$a"; done
  umoci gc --layout "$layout"
  entries=()
  for a in "${arches[@]}"; do
    entries+=("$(jq -c --arg ref "$tag-$a" --arg arch "$a" \
      '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $ref)
       | {mediaType, digest, size, platform: {architecture: $arch, os: "linux"}}' "$layout/index.json")")
  done
  idx=$work/image-index.json
  printf '%s\n' "${entries[@]}" | jq -cs --arg v "$version" --arg r "$revision" --arg c "$created" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: .,
      annotations: {"org.opencontainers.image.version": $v, "org.opencontainers.image.revision": $r,
        "org.opencontainers.image.created": $c, "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.source": "https://github.com/hyperaccel/lpu-node"}}' | tr -d '\n' >"$idx"
  [ "$(jq '.manifests | length' "$idx")" = ${#arches[@]} ] || die "image index lacks an architecture"
  sum=$(sha256sum "$idx" | cut -d' ' -f1)
  install -m 0644 "$idx" "$layout/blobs/sha256/$sum"
  jq -c --arg d "sha256:$sum" --argjson s "$(stat -c %s "$idx")" --arg t "$tag" \
    '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.index.v1+json",
      digest: $d, size: $s, annotations: {"org.opencontainers.image.ref.name": $t}}]}' \
    "$layout/index.json" | tr -d '\n' >"$layout/index.json.tmp"
  mv "$layout/index.json.tmp" "$layout/index.json"
fi

# Let `ctr images import` name the image without --base-name: containerd reads
# io.containerd.image.name from the index; umoci wrote only the tag.
ref="\"org.opencontainers.image.ref.name\":\"$tag\""
grep -q "$ref" "$layout/index.json" || die "index.json has no ref.name $tag"
sed -i "s|$ref|\"io.containerd.image.name\":\"$image:$tag\",$ref|" "$layout/index.json"

find "$layout" -exec touch -h -d "@$epoch" {} +
mkdir -p "$(dirname "$out")"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w,go-w \
  --format=gnu -C "$layout" -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"

manifest=$(grep -o '"digest":"sha256:[0-9a-f]*"' "$layout/index.json" | head -1 | cut -d'"' -f4)
log "wrote $out: $image:$tag manifest $manifest"
printf '%s\n' "$manifest"
