#!/usr/bin/env bash
# torchrun --nproc-per-node 2 --max-restarts 1 with rank 1 killed mid-training (elastic_train.py), over gloo and
# over strata, RUNS times (default 1; the issue's acceptance asks for 20 in a row): each strata run must finish,
# resume from the checkpoint and end with gloo's loss and parameters, within gloo's time + SLACK_S seconds
# (default 60: in make test a bound on a hang, not a speed claim; the issue's acceptance runs it as `20 5`).
# gloo itself may fail its restart (a stale peer address in the reused agent store): it gets GLOO_TRIES tries
# (default 3; each failed one costs 8 s to 160 s), then the reference is its run without the kill (same result, no
# time to compare). make test sets GLOO_TRIES=0: gloo's run without the kill is the reference at once (strata must
# still resume and end with gloo's result; no time is compared).
# Prints each run's times.
# usage: PYTHONPATH=build/python tests/stacks/test_elastic_restart.sh [RUNS] [SLACK_S]
# Exits 77 (ctest's skip) when torch is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
runs=${1:-1}
slack=${2:-60}
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "skipped: needs torch"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # run BACKEND N [KILL_STEP]: one torchrun job; prints "<seconds> <final line>"
  local backend=$1 n=$2 kill=${3:-4} port
  port=$("$python" "$here/../multiproc/free_port.py")  # below the ephemeral range
  rm -rf "$work/$backend"
  mkdir -p "$work/$backend"
  local start end out
  start=$(date +%s.%N)
  if ! out=$(OMP_NUM_THREADS=1 timeout 180 "$python" -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
      --max-restarts 1 --monitor-interval 0.2 --master-addr 127.0.0.1 --master-port "$port" \
      "$here/elastic_train.py" "$backend" "$work/$backend" 10 "$kill" 2>&1); then
    echo "run $n: $backend failed or hung:" >&2
    echo "$out" | tail -40 >&2
    return 1
  fi
  end=$(date +%s.%N)
  echo "$(awk "BEGIN{printf \"%.1f\", $end - $start}") $(echo "$out" | grep -o 'final attempt.*' | tail -1)"
}
fail=0
for ((i = 1; i <= runs; ++i)); do
  # gloo's own restart is not reliable on torch 2.15: torchrun reuses the agent's store across attempts without a
  # prefix, and a gloo rank may read the last attempt's address of its peer and time out connecting to it (strata's
  # ids are keyed by generation). So gloo gets up to 3 tries; if none resumes, the reference is gloo's run without
  # the kill (the checkpoint makes the result the same) and there is no time to compare with.
  g="" gtries=0
  while [[ -z $g && $gtries -lt ${GLOO_TRIES:-3} ]]; do
    gtries=$((gtries + 1))
    t0=$(date +%s)
    g=$(run gloo "$i" 2>/dev/null) || { g=""; echo "run $i: gloo try $gtries failed after $(($(date +%s) - t0)) s"; }
  done
  if [[ -z $g ]]; then
    ((gtries == 0)) || echo "run $i: gloo failed its own restart $gtries times; reference: gloo without the kill"
    g=$(run gloo "$i" -1) || exit 1
    gloo_timed=0
  else
    gloo_timed=1
  fi
  s=$(run strata "$i") || exit 1
  gt=${g%% *} st=${s%% *}
  echo "run $i: gloo ${gt} s (${g#* }; $gtries tries), strata ${st} s (${s#* })"
  if [[ ${g#* final attempt ? } != "${s#* final attempt ? }" || ${s#* } != "final attempt 1 "* ]]; then
    echo "run $i: strata did not resume to gloo's result" >&2
    fail=1
  fi
  if ((gloo_timed)) && awk "BEGIN{exit !($st > $gt + $slack)}"; then
    echo "run $i: strata took ${st} s, more than gloo's ${gt} s + ${slack} s" >&2
    fail=1
  fi
done
exit $fail
