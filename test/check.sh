#!/usr/bin/env bash
# check.sh — the project's test command (`make test`, called by .ci/run).
# On a fresh Debian 12 machine with Go it installs what it needs itself.
#
# usage: test/check.sh [all|tools|lint|unit|bench|prom|lab|release|fuzz|e2e]...
set -euo pipefail
cd "$(dirname "$0")/.."
PATH=/usr/local/go/bin:$PATH
PATH=$(go env GOPATH)/bin:$PATH
export PATH
export GOFLAGS=${GOFLAGS:--buildvcs=false}
STATICCHECK_VERSION=v0.8.2
GOLANGCI_LINT_VERSION=v2.15.0
DEADCODE_VERSION=v0.52.0 # golang.org/x/tools
# FUZZTIME, when set, overrides every target's budget (e.g. 30s or 1000x).
FUZZTIME=${FUZZTIME:-}

log() { printf '[%(%H:%M:%S)T] check: %s\n' -1 "$*" >&2; }

# The linters (make lint installs them on a fresh machine too).
do_lint_tools() {
  command -v staticcheck >/dev/null || { log "installing staticcheck $STATICCHECK_VERSION"; go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"; }
  # go install caches the build: a second run with the same version is a no-op.
  case $(golangci-lint version --short 2>/dev/null) in
    "${GOLANGCI_LINT_VERSION#v}") ;;
    *) log "installing golangci-lint $GOLANGCI_LINT_VERSION"
       go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION" ;;
  esac
  command -v deadcode >/dev/null || { log "installing deadcode $DEADCODE_VERSION"; go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"; }
  command -v shellcheck >/dev/null || {
    log "installing shellcheck"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
  }
}

do_tools() {
  do_lint_tools
  # helm renders the chart in deploy tests; the rest runs the e2e node.
  # containerd17: the shipped 1.7 snippet is run on a real containerd 1.7 (deploy tests).
  # etcd and kube (apiserver, scheduler, controller-manager, kubectl) run the
  # cluster tests: internal/clustertest and the e2e DRA scenarios; kueue
  # (the manager and its CRDs) runs test/kueuequota on that control plane.
  # prometheus (and promtool) run the chart's alerts and dashboard (test/prom);
  # crio: the prebuilt CRI-O of ../shared/tools (run.sh crio, deploy tests);
  # nfd: the prebuilt Node Feature Discovery v0.19.0 there (run.sh install).
  bash test/e2e/tools.sh helm apt containerd containerd17 crictl kubelet kube kueue etcd prometheus crio nfd
}

# The modules the linters run in, each on its own packages: the product,
# the lab (the scheduling research) and test/prom (real Prometheus).
# test/dravalidate is vetted where it runs (do_unit).
LINT_MODULES=(. lab test/prom)

do_lint() {
  log "gofmt"
  local bad m; bad=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
  if [ -n "$bad" ]; then printf 'gofmt would change:\n%s\n' "$bad" >&2; return 1; fi
  for m in "${LINT_MODULES[@]}"; do
    log "go vet ($m)"; (cd "$m" && go vet ./...)
    log "staticcheck ($m)"; (cd "$m" && staticcheck ./...)
    log "golangci-lint ($m, .golangci.yml)"; (cd "$m" && golangci-lint run --allow-parallel-runners ./...)
  done
  log "deadcode (no unreachable production function)"; do_deadcode
  log "shellcheck"; git ls-files -z '*.sh' .ci/run | xargs -0 shellcheck
}

# Every production function is reachable from a main. The test kits
# (packages named <what>test, as layers_test.go names them: the kubelet's
# and the runtime's sides, daemontest, clustertest, devicetest, verifytest,
# injecttest, ...) are reachable from tests only, by design.
# The lab's commands (cluster, sim) reach its packages the same way.
do_deadcode() {
  local dead
  dead=$({ deadcode ./cmd/... ./deploy/... ./test/... && (cd lab && deadcode ./...); } |
    grep -vE '^([^:]*/)?[a-z0-9]+test/[^/:]+:' || true)
  if [ -n "$dead" ]; then printf 'unreachable production functions:\n%s\n' "$dead" >&2; return 1; fi
}

do_unit() {
  log "go test -race ./..."
  # An explicit budget per package binary: ./deploy/tests/ (chart, image, release
  # and the real-apiserver policy tests) passes 10 minutes, go test's
  # default, on a cold 2-core machine.
  HELM=${HELM:-$(bash test/e2e/tools.sh path | tr ':' '\n' | grep helm)/helm} go test -race -count=1 -timeout 30m ./...
  # A module of its own (it imports k8s.io/kubernetes for the API server's
  # validation code): lpu-dra's slices and chart objects, validated for real.
  log "go test ./test/dravalidate (v1.37.2 API validation)"
  (cd test/dravalidate && go vet ./... && go test -count=1 ./...)
}

# test/prom, a module of its own (github.com/prometheus/prometheus stays
# out of the product's): the chart's rules and dashboard through
# Prometheus's parsers, promtool, and a real Prometheus scraping the
# daemons.
do_prom() {
  log "go test ./test/prom (real Prometheus)"
  (cd test/prom && go vet ./... &&
    HELM=${HELM:-$(bash ../e2e/tools.sh path | tr ':' '\n' | grep helm)/helm} go test -race -count=1 -timeout 20m ./...)
}

# The lab (lab/, a module of its own): vet and its unit tests, which keeps
# it building against the product; its long runs (the 10-node cluster
# smoke, the benchmarks) are make -C lab targets.
do_lab() {
  log "go test ./lab (vet and unit tests; the long runs are make -C lab targets)"
  (cd lab && go vet ./... && go test -count=1 -timeout 10m ./...)
}

# make release end to end (deploy's TestRelease: both daemons cross-built
# for two architectures, the image, chart, manifests and SBOMs), on its own
# step with its own budget: 3-4 min warm, far longer on a cold 2-core
# machine, so it stays out of the unit stage's packages.
do_release() {
  log "go test ./deploy/tests/ -run TestRelease (make release, checked)"
  HELM=${HELM:-$(bash test/e2e/tools.sh path | tr ':' '\n' | grep helm)/helm} LPU_RELEASE_TEST=1 \
    go test -count=1 -timeout 40m -run '^TestRelease$' ./deploy/tests/
}

# Smoke budgets are execution counts, about 2-7 s each on 2 cores. A
# duration (-fuzztime 10s) races the fuzz coordinator's own deadline in Go
# 1.26 (golang/go#75804) and fails now and then with a bare "context deadline
# exceeded" and no crasher; a count has no deadline to race.
fuzz_budget() {
  case $1 in
    FuzzRequests) echo 1000x ;;         # a real gRPC round trip per input
    FuzzDeviceAttributes) echo 5000x ;; # writes a device tree per input
    FuzzXilinxAttributes) echo 5000x ;; # writes six attributes of a card per input
    FuzzDecide) echo 10000x ;;
    FuzzCheck) echo 10000x ;;           # loads the seal key per input
    FuzzFaultHistory) echo 5000x ;;     # writes a history file per input
    FuzzLoad) echo 30000x ;;
    FuzzPreferred|FuzzParseDev|FuzzParseNetworkTable) echo 100000x ;;
    *) echo 50000x ;;
  esac
}

# Every fuzz target in the tree, run briefly from its seed corpus onward.
do_fuzz() {
  local file pkg name budget
  while IFS=: read -r file name; do
    pkg=./$(dirname "$file")
    budget=${FUZZTIME:-$(fuzz_budget "$name")}
    log "fuzz $pkg $name ($budget)"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$budget" "$pkg"
  done < <(git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed -E 's/:func /:/' | sort -u || true)
}

# The node scenarios (on containerd 2.4.2, then the functional ones and the
# security group again on containerd 1.7 with its snippet, ~4.5 min), then
# the DRA ones and the chart install (with NFD v0.19.0 labelling the node),
# each on its own cluster, the security group, and the node on CRI-O 1.36.3
# (CRI-O and NFD each skipped in one line without ../shared/tools); all
# always run.
do_e2e() {
  local rc=0
  bash test/e2e/run.sh all || rc=1
  CONTAINERD=1.7 bash test/e2e/run.sh 1 2 3 4 5 orion security 6 || rc=1
  bash test/e2e/run.sh security || rc=1
  bash test/e2e/run.sh dra || rc=1
  bash test/e2e/run.sh install || rc=1
  bash test/e2e/run.sh crio || rc=1
  return "$rc"
}

# Every benchmark of the product once (-benchtime 1x), as a smoke: a broken
# benchmark fails here instead of rotting unseen; the figures are not kept.
# Only the root module's packages that have benchmarks (a nested go.mod
# is another module). BenchmarkIdleRSS builds lpu-dra and runs it against
# a real API server (skipped without test/e2e/tools.sh's binaries).
do_bench() {
  local d p inner pkgs=()
  while read -r d; do
    inner=; p=$d
    while [ "$p" != . ]; do [ -f "$p/go.mod" ] && inner=1; p=$(dirname "$p"); done
    [ -z "$inner" ] && pkgs+=("./$d")
  done < <(git grep -l -E '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u)
  log "every benchmark once: ${pkgs[*]}"
  go test -count=1 -run '^$' -bench . -benchtime 1x -timeout 15m "${pkgs[@]}"
}

[ $# -eq 0 ] && set -- all
for step in "$@"; do
  case $step in
    all) do_tools; do_lint; do_unit; do_bench; do_prom; do_lab; do_release; do_fuzz; do_e2e ;;
    lint) do_lint_tools; do_lint ;;
    tools|unit|bench|prom|lab|release|fuzz|e2e) "do_$step" ;;
    *) echo "usage: $0 [all|tools|lint|unit|bench|prom|lab|release|fuzz|e2e]..." >&2; exit 2 ;;
  esac
done
