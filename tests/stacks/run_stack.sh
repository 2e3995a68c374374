#!/usr/bin/env bash
# One training stack on 2 ranks under torchrun, over gloo and then over strata, on the same script: strata must
# print exactly gloo's final line(s) (every loss to the last bit, and the sha256 of the final parameters).
# Prints both times. The stacks (one script each, beside this one; stack_common.py is their shared part):
#   ds_zero3       DeepSpeed ZeRO stage 3 on the CPU accelerator (ds_zero3.py)
#   tp_compile     DTensor tensor parallelism, and functional all_reduce under torch.compile (tp_compile.py;
#                  COMPILE_BACKEND, default inductor, each backend's run with a cold inductor cache of its own)
#   pipeline_1f1b  torch.distributed.pipelining, Schedule1F1B over 2 stages (pipeline_1f1b.py)
#   fsdp2_dcp      FSDP2 fully_shard, a DCP save, then a second job that loads it and trains on (fsdp2_dcp.py)
# usage: PYTHONPATH=build/python tests/stacks/run_stack.sh STACK
# Exits 77 (ctest's skip) when torch (or, for ds_zero3, deepspeed) is missing; 1 on a mismatch, failure or hang
# (each torchrun job is bounded by STACK_TIMEOUT_S, default 300).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
stack=${1:?usage: run_stack.sh ds_zero3|tp_compile|pipeline_1f1b|fsdp2_dcp}
limit=${STACK_TIMEOUT_S:-300}
needs=(torch)
case $stack in
  ds_zero3) needs+=(deepspeed) ;;
  tp_compile | pipeline_1f1b | fsdp2_dcp) ;;
  *) echo "unknown stack: $stack" >&2; exit 2 ;;
esac
for module in "${needs[@]}"; do
  if ! "$python" -c "import $module" &>/dev/null; then
    echo "skipped: $stack needs $module"
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Small: 2 ranks share the machine with whatever else runs. DeepSpeed on its CPU accelerator. No bytecode of
# stack_common.py written into the source tree.
export OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu PYTHONDONTWRITEBYTECODE=1

launch() {  # launch BACKEND ARGS...: one torchrun job of the stack's script; prints its final line(s)
  local backend=$1 port out
  shift
  port=$("$python" "$here/../multiproc/free_port.py")  # below the ephemeral range
  # TMPDIR in the work directory: torchrun's log directory and any other temporary file go with it.
  if ! out=$(TMPDIR=$work timeout -k 10 "$limit" "$python" -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
      --master-addr 127.0.0.1 --master-port "$port" "$here/$stack.py" "$backend" "$@" 2>&1); then
    echo "$stack over $backend failed or hung (args: $*):" >&2
    echo "$out" | tail -40 >&2
    return 1
  fi
  if ! echo "$out" | grep '^final '; then
    echo "$stack over $backend printed no final line (args: $*):" >&2
    echo "$out" | tail -40 >&2
    return 1
  fi
}

run() {  # run BACKEND: the stack's job(s) over BACKEND into $work/BACKEND.out; prints the seconds taken
  local backend=$1 dir=$work/$1 start end
  mkdir -p "$dir"
  start=$(date +%s.%N)
  # Each launch checked by hand: `set -e` does not apply inside `$(run ...) || exit 1`.
  case $stack in
    fsdp2_dcp)  # two jobs: the second loads what the first saved
      launch "$backend" "$dir/ckpt" save >"$dir.out" || return 1
      launch "$backend" "$dir/ckpt" resume >>"$dir.out" || return 1 ;;
    tp_compile)  # a cold compile on both backends, so neither reuses the other's generated code
      TORCHINDUCTOR_CACHE_DIR=$dir/inductor launch "$backend" >"$dir.out" || return 1 ;;
    *)
      launch "$backend" >"$dir.out" || return 1 ;;
  esac
  end=$(date +%s.%N)
  awk "BEGIN{printf \"%.1f\", $end - $start}"
}

gt=$(run gloo) || exit 1
st=$(run strata) || exit 1
echo "$stack: gloo ${gt} s, strata ${st} s"
sed 's/^/  gloo:   /' "$work/gloo.out"
sed 's/^/  strata: /' "$work/strata.out"
if ! cmp -s "$work/gloo.out" "$work/strata.out"; then
  echo "$stack: strata's result differs from gloo's" >&2
  exit 1
fi
echo "$stack: identical"
