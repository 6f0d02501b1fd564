# shellcheck shell=bash
# install_upgrade.sh — issue 20 item 2: lpu-dra upgraded by surge without
# losing a claim. With the chart installed in mode dra (lib/install.sh's
# install_dra), `helm upgrade` to another image tag while a loop keeps
# creating claim pods:
#   - no claim pod fails and none starts bare (its LPU in /dev and in
#     LPU_VISIBLE_DEVICES);
#   - the claims prepared before the upgrade are still served: their CDI
#     specs are there, and their pods' containers, restarted after the
#     upgrade, pass lpu-nri again with the same LPUs;
#   - the old and the new lpu-dra pod never held the checkpoint lock at once
#     (the journal <stateDir>/dra-lock.log, one line per hold), and both held
#     it (the surge did overlap);
#   - the pod-creation gap: the longest create-to-start time of a claim pod
#     created during the upgrade, against the same before it.
# Sourced by test/e2e/run.sh after lib/install.sh.

# upg_pod NAME: a view_pod (lib/install.sh) with a claim from the chart's
# lpu-arc-1 template.
upg_pod() {
  view_pod "$1" e2e-upg "  resourceClaims:
  - {name: lpus, resourceClaimTemplateName: lpu-arc-1}" "{claims: [{name: lpus}]}"
}

# upg_loop PREFIX: until $BASE/upg-on goes (at most 150 s), one claim pod a
# second.
upg_loop() {
  local i=0 deadline=$((SECONDS + 150))
  while [ -f "$BASE/upg-on" ] && ((SECONDS < deadline)); do
    upg_pod "$1-$i" || true
    i=$((i + 1))
    sleep 1
  done
}

# upg_settled: every loop pod finished.
upg_settled() {
  kc get pods -l e2e-upg=1 -o json | jq -e 'all(.items[]; .status.phase == "Succeeded" or .status.phase == "Failed")' >/dev/null
}

# upg_latency PREFIX: the longest create-to-start seconds of the loop pods
# named PREFIX-*, "n/a" when none started.
upg_latency() {
  kc get pods -l e2e-upg=1 -o json | jq -r --arg p "$1-" '[.items[] | select(.metadata.name | startswith($p))
    | ((.status.containerStatuses // [])[0].state | (.terminated.startedAt // .running.startedAt)) as $s | select($s != null)
    | (($s | fromdateiso8601) - (.metadata.creationTimestamp | fromdateiso8601))] | if length == 0 then "n/a" else max end'
}

# upg_check PREFIX: loop pods PREFIX-* that failed or started bare; sets
# UPG_STARTED, UPG_BAD.
upg_check() {
  local p line
  UPG_STARTED=0 UPG_BAD=""
  for p in $(kc get pods -l e2e-upg=1 -o json | jq -r --arg p "$1-" '.items[] | select(.metadata.name | startswith($p)) | .metadata.name'); do
    if [ "$(phase "$p")" != Succeeded ]; then
      UPG_BAD+="${p}[$(phase "$p")] "
      continue
    fi
    UPG_STARTED=$((UPG_STARTED + 1))
    line=$(kc logs "$p" 2>/dev/null | grep '^view ' | head -1)
    if ! [[ $line =~ ^view\ env=([0-9]+)\ devs=/dev/lpu([0-9]+),$ ]] || [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ]; then
      UPG_BAD+="${p}[$line] "
    fi
  done
}

# lock_overlap JOURNAL: the first two holds that overlap, empty when none
# (lines "<acquired µs> <released µs> <holder> <op>").
lock_overlap() {
  sort -n "$1" | awk '{ if (NR > 1 && $1 < maxr) { print "overlap: " last " / " $0; exit } if ($2 > maxr) { maxr = $2; last = $0 } }'
}

# new_ctr NAME OLD: pod NAME runs a container other than OLD.
new_ctr() { local c; c=$(cid "$1"); [ -n "$c" ] && [ "$c" != "$2" ]; }

# restart_ctr NAME: stop pod NAME's container; the kubelet creates a new one
# (lpu-nri checks it again against the checkpoint, the runtime resolves its
# CDI device again). True once a new container runs.
restart_ctr() {
  local old
  old=$(cid "$1")
  [ -n "$old" ] || return 1
  cri stop --timeout 1 "$old" >/dev/null || return 1
  wait_for 60 new_ctr "$1" "$old"
}

# words_in WORDS LIST: every word of WORDS is a word of LIST.
# dra_driver_count: how many lpu-dra pods there are.
dra_driver_count() { dra_driver_uids | wc -w; }
# replaced_by_one NEW OLD: exactly one pod now, not one of OLD.
replaced_by_one() { [ "$(wc -w <<<"$1")" = 1 ] && ! words_in "$1" "$2"; }
# held_in_turn JOURNAL OVERLAPS: the lock journal has holds, none overlapping.
held_in_turn() { [ -s "$1" ] && [ -z "$2" ]; }
words_in() {
  local w
  for w in $1; do grep -qwF -- "$w" <<<"$2" || return 1; done
  [ -n "$1" ]
}

# dra_driver_uids: UIDs of the lpu-dra pods.
dra_driver_uids() { kc get pods -n "$CHART_NS" -l hyperaccel.ai/daemon=lpu-dra -o jsonpath='{.items[*].metadata.uid}'; }

# dra_upgrade HELM CHART STATE: the scenario, on the installed mode-dra chart
# whose stateDir is STATE.
dra_upgrade() {
  local helm=$1 chart=$2 state=$3 out old new claim spec want got before after loop journal ov holders
  dra_pod upg-kept template "$TPL_STRICT4"
  if ! wait_pod upg-kept 90; then
    nok "upgrade dra: a claim pod prepared before the upgrade runs" "$(pod_why upg-kept)"
    return
  fi
  claim=$(kc get resourceclaim "$(claim_of upg-kept)" -o jsonpath='{.metadata.uid}')
  want=$(ctr_devs upg-kept)
  # the baseline: claim pods before the upgrade
  touch "$BASE/upg-on"
  upg_loop upg-pre &
  loop=$!
  sleep 8
  rm -f "$BASE/upg-on"
  wait "$loop"
  wait_for 60 upg_settled || true
  before=$(upg_latency upg-pre)
  old=$(dra_driver_uids)
  ctrc -n k8s.io images tag --force localhost/lpu-node:e2e localhost/lpu-node:e2e-upgrade >>"$LOGS/images.log" 2>&1 ||
    { nok "upgrade dra: tag the image e2e-upgrade" "$(tail -2 "$LOGS/images.log")"; return; }
  touch "$BASE/upg-on"
  upg_loop upg &
  loop=$!
  sleep 3
  out=$("$helm" upgrade lpu-node "$chart" --kubeconfig "$CL/admin.kubeconfig" -n "$CHART_NS" --reuse-values \
    --set image.tag=e2e-upgrade --wait --timeout 150s 2>&1) || nok "upgrade dra: helm upgrade --set image.tag=e2e-upgrade" "$(tail -3 <<<"$out")"
  wait_for 90 ds_ready "$CHART_NS" || nok "upgrade dra: the DaemonSets are Ready again" "$(ds_not_ready "$CHART_NS")"
  wait_for 60 prints 1 dra_driver_count || true
  sleep 5
  rm -f "$BASE/upg-on"
  wait "$loop"
  new=$(dra_driver_uids)
  expect "upgrade dra: helm upgrade (image tag e2e-upgrade) replaced the lpu-dra pod by surge" "before [$old], after [$new]" \
    replaced_by_one "$new" "$old"
  wait_for 90 upg_settled || log "upgrade pods not finished: $(kc get pods -l e2e-upg=1 --no-headers | grep -v Completed | head -3 | tr '\n' ';')"
  upg_check upg
  after=$(upg_latency upg)
  expect "upgrade dra: none of the claim pods created during the upgrade failed or started bare ($UPG_STARTED started)" \
    "bad: $UPG_BAD" none_bare "$UPG_STARTED" "$UPG_BAD"
  echo "# upgrade dra: pod-creation gap (longest create-to-start of a claim pod): ${after}s during the upgrade, ${before}s before it"
  # the claim prepared before the upgrade
  spec=$(cdi_specs_for "$claim" | head -1)
  expect "upgrade dra: the claim prepared before the upgrade ($claim) keeps its CDI spec" "specs in $DRA_CDI: $(find "$DRA_CDI" -maxdepth 1 -printf "%f " 2>&1)" test -n "$spec"
  if restart_ctr upg-kept; then
    got=$(ctr_devs upg-kept)
    expect "upgrade dra: its pod's restarted container passes lpu-nri with the same LPUs ([$got])" "before [$want], after [$got]" \
      same_nonempty "$got" "$want"
  else
    nok "upgrade dra: its pod's container restarts after the upgrade" "$(pod_why upg-kept)"
  fi
  # the lock journal: holds of the old and the new pod, never two at once
  journal=$state/dra-lock.log
  ov=$(lock_overlap "$journal")
  holders=$(awk '{print $3}' "$journal" 2>/dev/null | sort -u | tr '\n' ' ')
  expect "upgrade dra: the two lpu-dra pods never held the checkpoint lock at once ($(wc -l <"$journal") holds by [$holders])" \
    "$ov" held_in_turn "$journal" "$ov"
  expect "upgrade dra: both the old and the new pod held it" "old [$old], new [$new], holders [$holders]" \
    words_in "$old $new" "$holders"
  kc delete pods -l e2e-upg=1 --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1
  delete_pod upg-kept
}
