#!/usr/bin/env bash
# The GPU check: the one bounded script run on the day a GPU is lent (one H100 or H200, every rank on that one GPU).
# Nothing is compiled there: build here with scripts/build_gpu_check.sh (build-gpu, sm_90) and carry build-gpu.
#   perf/gpu_check.sh [--dry-run] [--step NAME] OUTDIR      perf/gpu_check.sh --list
# First the facts (nvidia-smi: a driver >= 580 for the CUDA 13 runtime, a compute mode that lets several processes
# share the GPU, MIG, the build's architecture, the probe), each one line PASS/WARN/FAIL/SKIP. Then the steps, most
# important first, each under its own `timeout` (its cap), all under one deadline (GPU_CHECK_DEADLINE_S, 420 s):
# a step whose cap no longer fits is skipped and says so, and `--step NAME` reruns that one step alone later
# (its result replaces the step's entry in OUTDIR/summary.json).
# What the steps prove, and what they cannot: all ranks share one GPU (no NVLink, no peer access between GPUs,
# contexts time-sliced), so multi-rank timings are fixed costs, not bandwidths of a real machine. The one latency
# target is 1 rank against NCCL's 1 rank; the other target is the reduction kernels at >= 90% of cudaMemcpy D2D.
# Targets missed are reported in summary.json, not failures.
# --dry-run runs anywhere (no GPU, nvidia-smi or build-gpu needed): every step printed with its command and
# "SKIP (dry run: ...)", naming what this machine lacks; summary.json lists every step; exit 0.
# OUTDIR: gpu_check.log (all of the output; gpu_check-step-NAME.log for --step), facts.txt (nvidia-smi),
# NAME.log per step (its command first), commands.sh (every command, as run), summary.json, and the JSON files
# the steps write. Exit status: 0 when no fact or step failed (skips are not failures), 1 when one did, 2 when no
# usable GPU or build was found (the steps are then skipped, with the reason), 2 also on bad usage.
# Environment: BUILD (default <repo>/build-gpu), GPU_CHECK_DEADLINE_S (420).
# This file is the driver; its parts are beside it in perf/gpu_check/: facts.sh (what the machine is), steps.sh (what
# runs, and ddp_dropin.py), run_step.sh (running a step, summary.json), post_checks.sh (notes and targets).
# shellcheck source-path=SCRIPTDIR
set -uo pipefail

usage() {
  sed -n '4p' "$0" | sed 's/^# *//' >&2
  exit 2
}
DRY=0
ONLY=""
LIST=0
OUT=""
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --step)
      [[ $# -ge 2 ]] || usage
      ONLY=$2
      shift
      ;;
    --list) LIST=1 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) [[ -z $OUT ]] || usage; OUT=$1 ;;
  esac
  shift
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD
BIN=$BUILD/bin
export PATH=$PATH:/usr/local/cuda/bin
# libstrata.so from the build (the binaries also find it through $ORIGIN, wherever the checkout is). The CUDA runtime
# the build carries (build-gpu/cuda-runtime) is added by the facts only where the machine has no libcudart.so.13.
export LD_LIBRARY_PATH="$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DEADLINE=${GPU_CHECK_DEADLINE_S:-420}
KILL_GRACE=5  # a step still running at its cap gets SIGTERM, and SIGKILL this much later
RESERVE=20    # what the post-checks and the summary may take after the last step (their commands are capped)
T0=$(date +%s)
if ((LIST)); then
  OUT=${OUT:-/nonexistent}
elif [[ -z $OUT ]]; then
  usage
else
  mkdir -p "$OUT" || exit 2
  OUT=$(cd "$OUT" && pwd)
fi

# ---- small helpers -----------------------------------------------------------------------------------------------
q() { printf '%q' "$1"; }
json_str() {  # a JSON string literal
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}
elapsed() { echo $(($(date +%s) - T0)); }
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

GPU_CHECK_DIR=$ROOT/perf/gpu_check
# shellcheck source=gpu_check/facts.sh
source "$GPU_CHECK_DIR/facts.sh"
# shellcheck source=gpu_check/steps.sh
source "$GPU_CHECK_DIR/steps.sh"
# shellcheck source=gpu_check/post_checks.sh
source "$GPU_CHECK_DIR/post_checks.sh"
# shellcheck source=gpu_check/run_step.sh
source "$GPU_CHECK_DIR/run_step.sh"

# ---- the check: the facts, the selected steps, summary.json -----------------------------------------------------
main() {
  echo "=== GPU check$([[ $DRY == 1 ]] && echo " (dry run)")$([[ -n $ONLY ]] && echo ": step $ONLY only"): build \
$BUILD, output $OUT, deadline $DEADLINE s, $(date -u +%FT%TZ) on $(hostname)"
  check_facts
  define_steps
  local i sel=()
  for i in "${!S_NAME[@]}"; do
    [[ -z $ONLY || ${S_NAME[$i]} == "$ONLY" ]] && sel+=("$i")
  done
  if ((${#sel[@]} == 0)); then
    echo "no step named '$ONLY'; the steps: ${S_NAME[*]}"
    return 2
  fi
  write_ddp_script
  if [[ -z $ONLY ]]; then
    printf '#!/usr/bin/env bash\n# The commands of perf/gpu_check.sh, as run (%s)\n' "$(date -u +%FT%TZ)" \
      >"$OUT/commands.sh"
  fi
  for i in "${sel[@]}"; do run_step "$i"; done

  if [[ -z $ONLY || ! -f $OUT/summary.json ]]; then
    write_summary "$OUT/summary.json" "${sel[@]}"
  else
    # One step again: its entry (and the facts) replace the old ones in summary.json.
    write_summary "$OUT/summary.step-$ONLY.json" "${sel[@]}"
    timeout 5 python3 - "$OUT/summary.json" "$OUT/summary.step-$ONLY.json" <<'PY' ||
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
entry = new["steps"][0]
entry["rerun"] = new["date"]
old["steps"] = [entry if s["name"] == entry["name"] else s for s in old["steps"]]
old["facts_at_rerun"] = new["facts"]
old["targets"] = new["targets"]
json.dump(old, open(sys.argv[1], "w"), indent=2)
PY
      echo "(summary.json not merged: see summary.step-$ONLY.json)"
  fi

  local counts="" s n fails=0
  for s in PASS FAIL TIMEOUT SKIP NOT_BUILT; do
    n=0
    for i in "${sel[@]}"; do [[ ${R_STATUS[$i]} == "$s" ]] && n=$((n + 1)); done
    counts+=" $s $n"
    [[ $s == FAIL || $s == TIMEOUT ]] && fails=$((fails + n))
  done
  for i in "${!FACT_STATUS[@]}"; do [[ ${FACT_STATUS[$i]} == FAIL ]] && fails=$((fails + 1)); done
  echo
  echo "=== [$(elapsed) s] done:$counts; summary $OUT/summary.json"
  ((DRY)) && return 0
  ((GPU_OK)) || return 2
  ((fails == 0)) || return 1
  return 0
}

if ((LIST)); then
  DRY=1
  define_steps
  printf '%s\n' "${S_NAME[@]}"
  exit 0
fi
log="$OUT/gpu_check.log"
[[ -n $ONLY ]] && log="$OUT/gpu_check-step-$ONLY.log"
main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
