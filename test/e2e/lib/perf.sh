# shellcheck shell=bash
# perf.sh — container create latency on the real containerd: lpu-nri injecting
# 4 LPUs vs a no-op NRI plugin (plus lpu-nri on containers without an
# allocation), measured in the same run with the arms interleaved. Numbers are
# recorded (docs/benchmarks/e2e.md), never asserted; what is asserted is that
# the measured creates really were injected (or not).
# Sourced by test/e2e/run.sh after lib/scenarios.sh.

PERF_ROUNDS=${PERF_ROUNDS:-5}   # rounds of (lpu, noop) blocks, order alternating
PERF_BLOCK=${PERF_BLOCK:-10}    # creates per block: 5 x 10 = 50 per plugin

# connected_count NAME: how often containerd logged plugin NAME as connected.
connected_count() { grep -c "plugin \\\\\"$NRI_IDX-$1\\\\\" connected and synchronized" "$LOGS/containerd-a.log" || true; }

# harvest_nri: add the running lpu-nri's own handling-time histogram to
# HSUM/HCOUNT (it restarts between blocks, so each process is read once,
# just before it is stopped).
harvest_nri() {
  running lpu-nri || return 0
  HSUM=$(awk -v a="$HSUM" -v b="$(metric "http://$NRI_METRICS/metrics" lpu_nri_create_container_duration_seconds_sum)" 'BEGIN { print a + b }')
  HCOUNT=$(awk -v a="$HCOUNT" -v b="$(metric "http://$NRI_METRICS/metrics" lpu_nri_create_container_duration_seconds_count)" 'BEGIN { print a + b }')
}

# use_plugin lpu|noop|fixed: exactly this NRI plugin is connected to containerd a.
use_plugin() {
  local want=$1 d n0=0
  declare -A daemon=([lpu]=lpu-nri [noop]=noopnri [fixed]=fixednri)
  for d in lpu noop fixed; do
    [ "$d" = "$want" ] && continue
    [ "$d" = lpu ] && harvest_nri
    stop_daemon "${daemon[$d]}" 3
  done
  running "${daemon[$want]}" && return 0
  n0=$(connected_count "$want")
  case $want in
    lpu)
      start_lpu_nri nri
      wait_for 20 nri_ready || fatal "perf" "lpu-nri did not connect"
      return 0
      ;;
    noop)
      start_daemon noopnri "$LOGS/noopnri.log" "$BASE/bin/noopnri" --socket "$(nri_sock a)" --idx "$NRI_IDX" --name noop
      ;;
    fixed)
      start_daemon fixednri "$LOGS/fixednri.log" "$BASE/bin/noopnri" --socket "$(nri_sock a)" --idx "$NRI_IDX" --name fixed \
        "${FIXED_ARGS[@]}"
      ;;
  esac
  wait_for 20 above "$n0" connected_count "$want" ||
    fatal "perf" "$want NRI plugin did not connect: $(tail -3 "$LOGS/${daemon[$want]}.log")"
}

# fixed_args_from CONTAINER-ID: noopnri flags that reproduce the edits lpu-nri
# made to this container (its LPU devices, the driver mount, LPU_* env).
FIXED_ARGS=()
fixed_args_from() {
  local spec line
  spec=$(cri inspect "$1" | jq -c .info.runtimeSpec)
  FIXED_ARGS=()
  while read -r line; do FIXED_ARGS+=(--device "$line"); done < <(jq -r \
    '.linux.devices[]? | select(.path | startswith("/dev/lpu")) | "\(.path):\(.major):\(.minor)"' <<<"$spec")
  while read -r line; do FIXED_ARGS+=(--mount "$line"); done < <(jq -r --arg d "$DRIVER_CTR_DIR" \
    '.mounts[]? | select(.destination == $d) | "\(.source):\(.destination)"' <<<"$spec")
  while read -r line; do FIXED_ARGS+=(--env "$line"); done < <(jq -r '.process.env[]? | select(startswith("LPU_"))' <<<"$spec")
  log "perf: fixed-adjustment plugin args: ${FIXED_ARGS[*]}"
}

scenario_perf() {
  log "perf: create latency, lpu-nri (4 LPUs) vs no-op NRI plugin"
  bench loadavg_at_perf "$(cut -d' ' -f1 /proc/loadavg)" "load average when perf started: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
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
  fixed_args_from "$(cid perfsrc)"
  # The perf sandbox is another pod: lpu-nri's ledger refuses perfsrc's
  # allocation ID from it (a replay). Seal the same LPUs under a fresh
  # allocation ID with the node's key, as the device plugin would for it.
  local ids
  ids=$(jq -r '."lpu.hyperaccel.ai/devices"' <<<"$anns" | tr ',' ' ')
  # shellcheck disable=SC2086 # the LPU IDs, one argument each
  anns=$("$BASE/bin/sealtool" --state-dir "$STATE" $ids) ||
    { nok "perf: sealtool seals the same LPUs for the perf pod" "$anns"; return; }
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
  # four arms, 5 rounds x 10 creates each, the arm order rotating per round:
  #   lpu     lpu-nri, container carrying the 4-LPU allocation (injected)
  #   noop    the no-op plugin, same container config (the baseline)
  #   unalloc lpu-nri, container without allocation (only LPU_VISIBLE_DEVICES=none)
  #   fixed   noopnri returning lpu-nri's edits for this allocation, no checks:
  #           lpu vs fixed is lpu-nri's own work, fixed vs noop the runtime's
  local arms=(lpu noop unalloc fixed) round k arm i t0 t1 c name a n
  local -A good=()
  HSUM=0 HCOUNT=0
  : >"$pd/client.tsv"
  for ((round = 1; round <= PERF_ROUNDS; round++)); do
    for ((k = 0; k < ${#arms[@]}; k++)); do
      arm=${arms[$(((round + k) % ${#arms[@]}))]}
      case $arm in noop | fixed) use_plugin "$arm" ;; *) use_plugin lpu ;; esac
      a=$anns
      [ "$arm" = unalloc ] && a='{}'
      for ((i = 1; i <= PERF_BLOCK; i++)); do
        name=perf-$arm-$round-$i
        jq -n --arg n "$name" --arg img "$IMG:busybox" --argjson a "$a" \
          '{metadata: {name: $n, attempt: 0}, image: {image: $img}, command: ["/bin/sleep", "60"],
            log_path: ($n + ".log"), annotations: $a, linux: {}}' >"$pd/$name.json"
        t0=$(now_ns)
        c=$(cri create "$sb" "$pd/$name.json" "$pd/pod.json") || { nok "perf: create $name" "failed"; continue; }
        t1=$(now_ns)
        printf '%s\t%s\t%s\n' "$arm" "$name" $(((t1 - t0) / 1000)) >>"$pd/client.tsv"
        if [ "$i" = 1 ]; then
          # what the runtime was told to create: LPU devices and LPU_VISIBLE_DEVICES
          n=$(cri inspect "$c" | jq -r '[([.info.runtimeSpec.linux.devices[]? | select(.path | startswith("/dev/lpu"))] | length),
            ([.info.runtimeSpec.process.env[]? | select(startswith("LPU_VISIBLE_DEVICES="))] | join(","))] | join(" ")')
          case "$arm:$n" in
            "lpu:4 LPU_VISIBLE_DEVICES="[0-9]*,*,*,* | "fixed:4 LPU_VISIBLE_DEVICES="[0-9]*,*,*,* | \
              "noop:0 " | "unalloc:0 LPU_VISIBLE_DEVICES=none")
              good[$arm]=$((${good[$arm]:-0} + 1)) ;;
            *) log "perf: $name spec: devices/env '$n'" ;;
          esac
        fi
        cri rm "$c" >/dev/null
      done
    done
  done
  harvest_nri
  if [ "$HCOUNT" != 0 ]; then
    bench nri_handler_mean_us "$(awk -v s="$HSUM" -v c="$HCOUNT" 'BEGIN { printf "%d", s / c * 1e6 }')" \
      "lpu-nri's own CreateContainer handling (lpu_nri_create_container_duration_seconds): $HCOUNT calls, mean $(awk -v s="$HSUM" -v c="$HCOUNT" 'BEGIN { printf "%.1f", s / c * 1e6 }')us"
  fi
  expect "perf: lpu-nri injected 4 LPU nodes and their LPU_VISIBLE_DEVICES in every sampled create" "${good[lpu]:-0} of $PERF_ROUNDS" \
    test "${good[lpu]:-0}" = "$PERF_ROUNDS"
  expect "perf: the no-op plugin's creates carry no LPU devices" "${good[noop]:-0} of $PERF_ROUNDS" test "${good[noop]:-0}" = "$PERF_ROUNDS"
  expect "perf: lpu-nri gave unallocated creates no devices and LPU_VISIBLE_DEVICES=none" "${good[unalloc]:-0} of $PERF_ROUNDS" \
    test "${good[unalloc]:-0}" = "$PERF_ROUNDS"
  expect "perf: the fixed-adjustment plugin's creates carry the same 4 LPUs" "${good[fixed]:-0} of $PERF_ROUNDS" \
    test "${good[fixed]:-0}" = "$PERF_ROUNDS"
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
  local kind f n lmed lmean nmed nmean umed umean fmed fmean
  for kind in server client; do
    f=$pd/$kind.tsv
    read -r n lmed lmean <<<"$(stats "$f" lpu)"
    read -r _ nmed nmean <<<"$(stats "$f" noop)"
    read -r _ umed umean <<<"$(stats "$f" unalloc)"
    read -r _ fmed fmean <<<"$(stats "$f" fixed)"
    if [ "$n" -le 0 ] || [ "$nmed" -le 0 ]; then log "perf: no $kind-side samples"; continue; fi
    local rmed rmean
    rmed=$(awk -v a="$lmed" -v b="$nmed" 'BEGIN { printf "%.3f", a / b }')
    rmean=$(awk -v a="$lmean" -v b="$nmean" 'BEGIN { printf "%.3f", a / b }')
    bench "create_${kind}_lpu_median_us" "$lmed" "$kind-side CreateContainer, lpu-nri (4 LPUs): n=$n median ${lmed}us mean ${lmean}us"
    bench "create_${kind}_noop_median_us" "$nmed" "$kind-side CreateContainer, no-op NRI plugin: median ${nmed}us mean ${nmean}us"
    bench "create_${kind}_unalloc_median_us" "$umed" "$kind-side CreateContainer, lpu-nri, no allocation: median ${umed}us mean ${umean}us"
    bench "create_${kind}_fixed_median_us" "$fmed" "$kind-side CreateContainer, fixed-adjustment plugin: median ${fmed}us mean ${fmean}us"
    bench "create_${kind}_ratio_median" "$rmed" "$kind-side ratio lpu/noop: median $rmed, mean $rmean (target <= 1.05)"
    [ "${fmed:-0}" -gt 0 ] && bench "create_${kind}_ratio_lpu_fixed_median" "$(awk -v a="$lmed" -v b="$fmed" 'BEGIN { printf "%.3f", a / b }')" \
      "$kind-side ratio lpu/fixed (lpu-nri's own share): median $(awk -v a="$lmed" -v b="$fmed" 'BEGIN { printf "%.3f", a / b }')"
    {
      echo "create_${kind}_lpu_mean_us=$lmean"
      echo "create_${kind}_noop_mean_us=$nmean"
      echo "create_${kind}_ratio_mean=$rmean"
    } >>"$BASE/bench"
  done
}
