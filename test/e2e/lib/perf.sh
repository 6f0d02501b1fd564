# shellcheck shell=bash
# perf.sh — container create latency on the real containerd: lpu-nri injecting
# 4 LPUs vs a no-op NRI plugin, measured in the same run. Numbers are recorded
# (docs/benchmarks/e2e.md), never asserted; what is asserted is that the
# measured creates really were injected (or not).
# Sourced by test/e2e/run.sh after lib/scenarios.sh.

PERF_ROUNDS=${PERF_ROUNDS:-5}   # rounds of (lpu, noop) blocks, order alternating
PERF_BLOCK=${PERF_BLOCK:-10}    # creates per block: 5 x 10 = 50 per plugin

# connected_count NAME: how often containerd logged plugin NAME as connected.
connected_count() { grep -c "plugin \\\\\"$NRI_IDX-$1\\\\\" connected and synchronized" "$LOGS/containerd-a.log" || true; }

use_plugin() { # lpu|noop
  local n0
  if [ "$1" = lpu ]; then
    stop_daemon noopnri 3
    running lpu-nri || start_lpu_nri nri
    wait_for 20 nri_ready || fatal "perf" "lpu-nri did not connect"
  else
    running noopnri && return 0
    stop_daemon lpu-nri 3
    n0=$(connected_count noop)
    start_daemon noopnri "$LOGS/noopnri.log" "$BASE/bin/noopnri" --socket "$(nri_sock a)" --idx "$NRI_IDX" --name noop
    wait_for 20 eval '[ "$(connected_count noop)" -gt "$n0" ]' || fatal "perf" "noopnri did not connect: $(tail -3 "$LOGS/noopnri.log")"
  fi
}

scenario_perf() {
  log "perf: create latency, lpu-nri (4 LPUs) vs no-op NRI plugin"
  ensure_kubelet
  remove_all_pods
  # a real allocation: the sealed annotations the device plugin gave a 4-LPU container
  lpu_pod perfsrc 4
  wait_running perfsrc 60 || { nok "perf: source pod with 4 LPUs runs" "$(kpod_status perfsrc)"; return; }
  local anns
  anns=$(cri inspect "$(cid perfsrc)" | jq -c '.status.annotations | with_entries(select(.key | startswith("lpu.hyperaccel.ai/")))')
  if [ -z "$anns" ] || [ "$anns" = "{}" ] || [ "$anns" = null ]; then
    nok "perf: allocation annotations found on a kubelet-made container" "crictl inspect: $(cri inspect "$(cid perfsrc)" | jq -c .status.annotations)"
    return
  fi
  ok "perf: took the device plugin's sealed allocation from a kubelet-made container"
  # the kubelet removes pods it did not make: measure with it stopped
  remove_all_pods
  kubelet_stop
  local pd=$BASE/perf
  mkdir -p "$pd/logs"
  cat >"$pd/pod.json" <<EOF
{
  "metadata": {"name": "perf", "namespace": "e2e-perf", "uid": "perf-$CGNAME", "attempt": 0},
  "log_directory": "$pd/logs",
  "annotations": {"tolerate-missing-plugins.noderesource.dev": "true"},
  "linux": {
    "cgroup_parent": "/$CGNAME/perf",
    "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}
  }
}
EOF
  local sb
  sb=$(cri runp "$pd/pod.json") || { nok "perf: sandbox" "$(crictl --config "$BASE/ctd-a/crictl.yaml" runp "$pd/pod.json" 2>&1 | tail -1)"; return; }
  local round block plugin i t0 t1 c name injected=0 bare=0 hsum=0 hcount=0
  : >"$pd/client.tsv"
  for ((round = 1; round <= PERF_ROUNDS; round++)); do
    for block in 1 2; do
      if (((round + block) % 2 == 0)); then plugin=lpu; else plugin=noop; fi
      use_plugin "$plugin"
      for ((i = 1; i <= PERF_BLOCK; i++)); do
        name=perf-$plugin-$round-$i
        jq -n --arg n "$name" --arg img "$IMG:busybox" --argjson a "$anns" \
          '{metadata: {name: $n, attempt: 0}, image: {image: $img}, command: ["/bin/sleep", "60"],
            log_path: ($n + ".log"), annotations: $a, linux: {}}' >"$pd/$name.json"
        t0=$(now_ns)
        c=$(cri create "$sb" "$pd/$name.json" "$pd/pod.json") || { nok "perf: create $name" "failed"; continue; }
        t1=$(now_ns)
        printf '%s\t%s\t%s\n' "$plugin" "$name" $(((t1 - t0) / 1000)) >>"$pd/client.tsv"
        if [ "$i" = 1 ]; then
          local n
          n=$(cri inspect "$c" | jq '[.info.runtimeSpec.linux.devices[]? | select(.path | startswith("/dev/lpu"))] | length')
          if [ "$plugin" = lpu ] && [ "$n" = 4 ]; then injected=$((injected + 1)); fi
          if [ "$plugin" = noop ] && [ "$n" = 0 ]; then bare=$((bare + 1)); fi
        fi
        cri rm "$c" >/dev/null
      done
      if [ "$plugin" = lpu ]; then
        # lpu-nri restarts between blocks: add up its own handling-time histogram per block
        hsum=$(awk -v a="$hsum" -v b="$(metric "http://$NRI_METRICS/metrics" lpu_nri_create_container_duration_seconds_sum)" 'BEGIN { print a + b }')
        hcount=$(awk -v a="$hcount" -v b="$(metric "http://$NRI_METRICS/metrics" lpu_nri_create_container_duration_seconds_count)" 'BEGIN { print a + b }')
      fi
    done
  done
  if [ "$hcount" != 0 ]; then
    bench nri_handler_mean_us "$(awk -v s="$hsum" -v c="$hcount" 'BEGIN { printf "%d", s / c * 1e6 }')" \
      "lpu-nri's own CreateContainer handling (lpu_nri_create_container_duration_seconds): $hcount calls, mean $(awk -v s="$hsum" -v c="$hcount" 'BEGIN { printf "%.1f", s / c * 1e6 }')us"
  fi
  expect "perf: every lpu-nri block injected 4 LPU device nodes into the created spec" "$injected of $PERF_ROUNDS blocks" \
    test "$injected" = "$PERF_ROUNDS"
  expect "perf: no-op blocks created containers without LPU devices" "$bare of $PERF_ROUNDS blocks" test "$bare" = "$PERF_ROUNDS"
  cri stopp "$sb" >/dev/null
  cri rmp -f "$sb" >/dev/null
  use_plugin lpu
  perf_report "$pd"
}

# perf_report DIR: client-side (crictl wall time) and server-side (containerd's
# own CreateContainer log lines) latency per plugin, and their ratio.
perf_report() {
  local pd=$1
  # server side: 'CreateContainer within sandbox .. for container name:\"X\"' -> '.. for name:\"X\" returns container id'
  grep -E 'CreateContainer within sandbox.*name:."perf-' "$LOGS/containerd-a.log" |
    sed -nE 's/^time="([^"]+)".*name:\\"(perf-[a-z]+-[0-9]+-[0-9]+)\\".*/\1 \2/p' |
    while read -r t n; do echo "$(date -d "$t" +%s%N) $n"; done |
    awk '{ if ($2 in s) { printf "%s\t%s\t%d\n", substr($2, 6, index(substr($2, 6), "-") - 1), $2, ($1 - s[$2]) / 1000 } else s[$2] = $1 }' \
      >"$pd/server.tsv"
  stats() { # file plugin -> "n median mean" (microseconds)
    awk -v p="$2" '$1 == p {print $3}' "$1" | sort -n |
      awk '{ v[NR] = $1; s += $1 } END { if (NR) printf "%d %d %d", NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), s / NR; else printf "0 0 0" }'
  }
  local kind f n lmed lmean nmed nmean
  for kind in server client; do
    f=$pd/$kind.tsv
    read -r n lmed lmean <<<"$(stats "$f" lpu)"
    read -r _ nmed nmean <<<"$(stats "$f" noop)"
    [ "$n" -gt 0 ] && [ "$nmed" -gt 0 ] || { log "perf: no $kind-side samples"; continue; }
    local rmed rmean
    rmed=$(awk -v a="$lmed" -v b="$nmed" 'BEGIN { printf "%.3f", a / b }')
    rmean=$(awk -v a="$lmean" -v b="$nmean" 'BEGIN { printf "%.3f", a / b }')
    bench "create_${kind}_lpu_median_us" "$lmed" "$kind-side CreateContainer, lpu-nri (4 LPUs): n=$n median ${lmed}us mean ${lmean}us"
    bench "create_${kind}_noop_median_us" "$nmed" "$kind-side CreateContainer, no-op NRI plugin: median ${nmed}us mean ${nmean}us"
    bench "create_${kind}_ratio_median" "$rmed" "$kind-side ratio lpu/noop: median $rmed, mean $rmean (target <= 1.05)"
    echo "create_${kind}_lpu_mean_us=$lmean" >>"$BASE/bench"
    echo "create_${kind}_noop_mean_us=$nmean" >>"$BASE/bench"
    echo "create_${kind}_ratio_mean=$rmean" >>"$BASE/bench"
  done
}
