#!/usr/bin/env bash
# torchrun --nproc-per-node 2 --max-restarts 1 with rank 1 killed mid-training (elastic_train.py), over gloo and
# over strata, RUNS times (default 1; the issue's acceptance asks for 20 in a row): each strata run must finish,
# resume from the checkpoint and end with gloo's loss and parameters, within gloo's time + SLACK_S seconds
# (default 60: in make test a bound on a hang, not a speed claim; the issue's acceptance runs it as `20 5`).
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
run() {  # run BACKEND N: one torchrun job; prints "<seconds> <final line>"
  local backend=$1 n=$2 port
  port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rm -rf "$work/$backend"
  mkdir -p "$work/$backend"
  local start end out
  start=$(date +%s.%N)
  if ! out=$(OMP_NUM_THREADS=1 timeout 300 "$python" -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
      --max-restarts 1 --monitor-interval 0.2 --master-addr 127.0.0.1 --master-port "$port" \
      "$here/elastic_train.py" "$backend" "$work/$backend" 2>&1); then
    echo "run $n: $backend failed or hung:" >&2
    echo "$out" | tail -40 >&2
    return 1
  fi
  end=$(date +%s.%N)
  echo "$(awk "BEGIN{printf \"%.1f\", $end - $start}") $(echo "$out" | grep -o 'final attempt.*' | tail -1)"
}
fail=0
for ((i = 1; i <= runs; ++i)); do
  g=$(run gloo "$i") || exit 1
  s=$(run strata "$i") || exit 1
  gt=${g%% *} st=${s%% *}
  echo "run $i: gloo ${gt} s (${g#* }), strata ${st} s (${s#* })"
  if [[ ${g#* } != "${s#* }" || ${g#* } != "final attempt 1 "* ]]; then
    echo "run $i: strata did not resume to gloo's result" >&2
    fail=1
  fi
  if awk "BEGIN{exit !($st > $gt + $slack)}"; then
    echo "run $i: strata took ${st} s, more than gloo's ${gt} s + ${slack} s" >&2
    fail=1
  fi
done
exit $fail
