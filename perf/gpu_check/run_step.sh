# shellcheck shell=bash
# Running the GPU check's steps: each under its cap in a session of its own, or skipped with the reason (dry run,
# not built, no usable GPU, one process only, would not fit the deadline); its log, its line in commands.sh, and
# its entry in summary.json.
# Sourced by perf/gpu_check.sh, whose globals (OUT, DRY, DEADLINE, KILL_GRACE, RESERVE, BUILD) and helpers
# (elapsed, json_str) it uses, with the steps (steps.sh), the facts (facts.sh) and post_check (post_checks.sh).

R_STATUS=() R_SECONDS=() R_REASON=() R_NOTE=()
run_step() {  # index
  local i=$1 name=${S_NAME[$1]} cap=${S_CAP[$1]} kind=${S_KIND[$1]} cmd=${S_CMD[$1]}
  local status="" reason="" note="" secs=0 ran=0 f missing=() optional=()
  for f in ${S_FILES[$i]}; do
    if [[ $f == \?* ]]; then
      [[ -e ${f#\?} ]] || optional+=("${f#\?}")
    fi
  done
  printf '\n=== [%3d s] %s: %s\n    $ %s\n' "$(elapsed)" "$name" "${S_DESC[$i]}" "$cmd"
  printf '# %s (cap %s s): %s\n%s\n' "$name" "$cap" "${S_DESC[$i]}" "$cmd" >>"$OUT/commands.sh"
  if ((DRY)); then
    status=SKIP
    if [[ -n ${S_NOTBUILT[$i]} ]]; then
      reason="dry run: not built: ${S_NOTBUILT[$i]}"
    else
      ((GPU_OK)) || missing+=("missing here: $GPU_WHY")
      ((${#optional[@]})) && missing+=("not in this build: ${optional[*]}")
      command -v nvidia-smi >/dev/null || missing+=("no nvidia-smi here")
      reason="dry run: would run under a ${cap} s cap"
      local m
      for m in "${missing[@]}"; do reason+="; $m"; done
    fi
  elif [[ -n ${S_NOTBUILT[$i]} ]]; then
    status=NOT_BUILT reason=${S_NOTBUILT[$i]}
  elif ((${#optional[@]})); then
    status=NOT_BUILT reason="not in this build: ${optional[*]}"
  elif ((!GPU_OK)); then
    status=SKIP reason="no usable GPU: $GPU_WHY"
  elif [[ $kind == gpuN ]] && ((!MULTI_OK)); then
    status=SKIP reason=$MULTI_WHY
  elif [[ -n ${S_SKIP[$i]} ]]; then
    status=SKIP reason=${S_SKIP[$i]}
  elif (($(elapsed) + cap + KILL_GRACE + RESERVE > DEADLINE)); then
    status=SKIP reason="would not fit: its cap is $cap s (+$((KILL_GRACE + RESERVE)) s to stop and report), \
$((DEADLINE - $(elapsed))) s left of the $DEADLINE s deadline (rerun: perf/gpu_check.sh --step $name OUTDIR)"
  else
    local t rc
    ran=1
    t=$(date +%s)
    {
      echo "# $name: ${S_DESC[$i]}"
      echo "# cap $cap s; started $(date -u +%FT%TZ); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
      echo "# \$ $cmd"
    } >"$OUT/$name.log"
    # timeout signals the command's whole process group at the cap (SIGTERM; SIGKILL KILL_GRACE s later), and
    # strata-run passes that on to its ranks. Ranks run in process groups of their own, so the step also runs in a
    # session of its own: whatever of it is still alive afterwards is killed by that session's id.
    local sidfile="$OUT/.$name.sid" sid="" left
    rm -f "$sidfile"
    if command -v setsid >/dev/null; then
      # shellcheck disable=SC2016  # expanded by the inner bash
      setsid -w bash -c 'echo $$ >"$0"; exec timeout -k "$1" "$2" bash -c "$3"' "$sidfile" "$KILL_GRACE" "$cap" "$cmd" \
        >>"$OUT/$name.log" 2>&1 </dev/null
      rc=$?
      sid=$(cat "$sidfile" 2>/dev/null)
      rm -f "$sidfile"
    else
      timeout -k "$KILL_GRACE" "$cap" bash -c "$cmd" >>"$OUT/$name.log" 2>&1 </dev/null
      rc=$?
    fi
    secs=$(($(date +%s) - t))
    if [[ $sid =~ ^[0-9]+$ ]] && left=$(pgrep -s "$sid" | tr '\n' ' ') && [[ -n $left ]]; then
      echo "# still running after the step, killed: $left" >>"$OUT/$name.log"
      pkill -KILL -s "$sid"
      LEFTOVER="killed processes the step left behind: $left"
    fi
    case $rc in
      0) STATUS=PASS REASON="" ;;
      77) STATUS=SKIP REASON="the program skipped: $(grep -h SKIPPED "$OUT/$name.log" | head -1)" ;;
      124 | 137) STATUS=TIMEOUT REASON="exceeded its cap of $cap s (exit $rc)" ;;
      *) STATUS=FAIL REASON="exit status $rc" ;;
    esac
    post_check "$name"
    status=$STATUS reason=$REASON note=$NOTE
    [[ -n $LEFTOVER ]] && note="${note:+$note; }$LEFTOVER"
    LEFTOVER=""
  fi
  if ((!ran)); then
    # Not run: the log says so, with the command it would have run.
    printf '# %s: %s\n# cap %s s\n# $ %s\n%s: %s\n' "$name" "${S_DESC[$i]}" "$cap" "$cmd" "$status" "$reason" \
      >"$OUT/$name.log"
  fi
  R_STATUS[i]=$status
  R_SECONDS[i]=$secs
  R_REASON[i]=$reason
  R_NOTE[i]=$note
  if [[ $status == PASS || $status == FAIL || $status == TIMEOUT ]]; then
    printf '    %s (%d s)%s\n' "$status" "$secs" "${reason:+: $reason}"
  else
    printf '    %s (%s)\n' "$status" "$reason"
  fi
  [[ -n $note ]] && printf '    %s\n' "$note"
  if [[ $status == FAIL || $status == TIMEOUT ]]; then
    grep -v '^#' "$OUT/$name.log" | tail -4 | sed 's/^/    | /'
  fi
  return 0
}

step_json() {  # index
  local i=$1
  printf '    {"name": %s, "status": %s, "seconds": %s, "cap_s": %s, "kind": %s, "description": %s, ' \
    "$(json_str "${S_NAME[$i]}")" "$(json_str "${R_STATUS[$i]}")" "${R_SECONDS[$i]}" "${S_CAP[$i]}" \
    "$(json_str "${S_KIND[$i]}")" "$(json_str "${S_DESC[$i]}")"
  printf '"command": %s, "reason": %s, "note": %s, "log": %s}' \
    "$(json_str "${S_CMD[$i]}")" "$(json_str "${R_REASON[$i]}")" "$(json_str "${R_NOTE[$i]}")" \
    "$(json_str "${S_NAME[$i]}.log")"
}

write_summary() {  # file indexes...
  local file=$1 i first=1 k
  shift
  {
    printf '{\n  "mode": %s,\n  "date": %s,\n  "build": %s,\n  "deadline_s": %s,\n  "elapsed_s": %s,\n' \
      "$(json_str "$([[ $DRY == 1 ]] && echo dry-run || echo run)")" "$(json_str "$(date -u +%FT%TZ)")" \
      "$(json_str "$BUILD")" "$DEADLINE" "$(elapsed)"
    printf '  "gpu_usable": %s,\n  "facts": [\n' "$([[ $GPU_OK == 1 && $DRY == 0 ]] && echo true || echo false)"
    for k in "${!FACT_NAME[@]}"; do
      ((k)) && printf ',\n'
      printf '    {"name": %s, "status": %s, "text": %s}' "$(json_str "${FACT_NAME[$k]}")" \
        "$(json_str "${FACT_STATUS[$k]}")" "$(json_str "${FACT_TEXT[$k]}")"
    done
    printf '\n  ],\n  "steps": [\n'
    for i in "$@"; do
      ((first)) || printf ',\n'
      first=0
      step_json "$i"
    done
    local targets='{"evaluated": false}'
    ((DRY)) || targets=$(targets_json)
    printf '\n  ],\n  "targets": %s\n}\n' "$targets"
  } >"$file"
}
