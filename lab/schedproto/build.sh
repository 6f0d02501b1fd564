#!/usr/bin/env bash
# Prototype of upstream fixes, never shipped (lab/schedproto/PROPOSAL.md):
# kube-scheduler v1.37.2 with, in the structured allocator, a per-node pool
# cache (poolcache_incubating.go.in, the three hooks in hooks.patch) and a
# fail-fast precount for ExactCount requests (precount_incubating.go.in, the
# hook in precount.patch). A scratch module copies
# k8s.io/dynamic-resource-allocation v0.37.2 from the module cache, adds the
# parts named in SCHEDPROTO_PARTS (default "poolcache precount"), and
# replaces the upstream module with that copy.
#
#   build.sh scheduler   kube-scheduler into $LPU_E2E_CACHE/kube-scheduler-poolcache-v1.37.2/
#   build.sh test ARGS   lab/dravalidate's and test/dravalidate's tests (and,
#                        with -bench, benchmarks) against the patched
#                        allocator; ARGS go to go test
#   build.sh schedperf ARGS
#                        the scheduler_perf case in schedperf/ (k8s.io/kubernetes
#                        v1.37.2 test/integration/scheduler_perf, run from a
#                        scratch module), ARGS go to go test; etcd must be on
#                        PATH. SCHEDPROTO_PARTS= (empty) runs it on the stock
#                        allocator.
#
# scheduler needs test/e2e/tools.sh kube first: it reuses that module's go.mod.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${LPU_E2E_CACHE:-/var/cache/lpu-e2e}
k8s=v1.37.2
dra_version=v0.37.2

# patched_dra DIR: the patched copy of k8s.io/dynamic-resource-allocation in DIR.
patched_dra() {
  local dir=$1 orig
  orig=$(go mod download -json "k8s.io/dynamic-resource-allocation@$dra_version" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
  [ -d "$orig" ] || { echo "schedproto: no module dir for k8s.io/dynamic-resource-allocation@$dra_version" >&2; return 1; }
  rm -rf "$dir" && cp -r "$orig" "$dir" && chmod -R u+w "$dir"
  for part in ${SCHEDPROTO_PARTS-poolcache precount}; do
    case $part in
    poolcache) patch -s -d "$dir" -p1 < "$here/hooks.patch" ;;
    precount) patch -s -d "$dir" -p1 < "$here/precount.patch" ;;
    *) echo "schedproto: unknown part $part (poolcache, precount)" >&2; return 1 ;;
    esac
    cp "$here/${part}_incubating.go.in" "$dir/structured/internal/incubating/${part}_incubating.go"
  done
}

case ${1:-} in
scheduler)
  base=$cache/src/kube-$k8s
  [ -f "$base/go.mod" ] || { echo "schedproto: $base/go.mod missing; run test/e2e/tools.sh kube first" >&2; exit 1; }
  src=$cache/src/schedproto-$k8s out=$cache/kube-scheduler-poolcache-$k8s
  rm -rf "$src" && mkdir -p "$src" "$out"
  cp "$base/go.mod" "$base/go.sum" "$src/"
  patched_dra "$src/dra"
  cd "$src"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-scheduler"\n' > tools.go
  go mod edit -module lpu.local/schedproto -replace "k8s.io/dynamic-resource-allocation=./dra"
  minor=${k8s#v1.}; minor=${minor%%.*}
  go build -ldflags "-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "$out/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
  echo "$out/kube-scheduler"
  ;;
test)
  shift
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  patched_dra "$work/dra"
  # The lab's benchmarks and the product's allocator checks, one workspace
  # (both modules replace the product with the same checkout).
  root=$(cd "$here/../.." && pwd)
  printf 'go 1.26.0\n\nuse (\n\t%s\n\t%s\n)\n\nreplace (\n\tgithub.com/hyperaccel/lpu-node => %s\n\tk8s.io/dynamic-resource-allocation => %s\n)\n' \
    "$root/lab" "$root/test/dravalidate" "$root" "$work/dra" > "$work/go.work"
  cd "$root/lab"
  GOWORK=$work/go.work go test "$@" ./dravalidate ../test/dravalidate
  ;;
schedperf)
  shift
  base=$cache/src/kube-$k8s
  [ -f "$base/go.mod" ] || { echo "schedproto: $base/go.mod missing; run test/e2e/tools.sh kube first" >&2; exit 1; }
  command -v etcd >/dev/null || { echo "schedproto: no etcd on PATH (test/e2e/tools.sh etcd; PATH=\$(test/e2e/tools.sh path):\$PATH)" >&2; exit 1; }
  # A fixed directory per set of parts, so that the build cache holds
  # across runs (the compiled packages depend on the patched copy's path).
  parts=${SCHEDPROTO_PARTS-poolcache precount}
  tag=$(echo "${parts:-stock}" | tr -s ' ' +)
  work=$cache/src/schedperf-$k8s-$tag
  rm -rf "$work" && mkdir -p "$work/lpurings"
  cp "$base/go.mod" "$base/go.sum" "$work/"
  cp -r "$here/schedperf/performance-config.yaml" "$here/schedperf/templates" "$work/lpurings/"
  cp "$here/schedperf/lpurings_test.go.in" "$work/lpurings/lpurings_test.go"
  cd "$work"
  go mod edit -module lpu.local/schedperf
  if [ -n "$parts" ]; then
    patched_dra "$work/dra"
    go mod edit -replace "k8s.io/dynamic-resource-allocation=./dra"
  fi
  go mod tidy
  cd lpurings
  # As upstream runs it: no cache mutation checks, the components' logs
  # in files under ARTIFACTS rather than on stdout.
  export KUBE_CACHE_MUTATION_DETECTOR=${KUBE_CACHE_MUTATION_DETECTOR:-false} ARTIFACTS=${ARTIFACTS:-$work/artifacts}
  mkdir -p "$ARTIFACTS"
  go test "$@" .
  ;;
*)
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
