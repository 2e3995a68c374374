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

# ---- facts ---------------------------------------------------------------------------------------------------------
FACT_NAME=() FACT_STATUS=() FACT_TEXT=()
fact() {  # name status text
  FACT_NAME+=("$1")
  FACT_STATUS+=("$2")
  FACT_TEXT+=("$3")
  printf 'FACT %-14s %-4s %s\n' "$1" "$2" "$3"
}
GPU_OK=1 GPU_WHY=""       # 0: no GPU step can run (GPU_WHY says why)
MULTI_OK=1 MULTI_WHY=""   # 0: no step with several ranks can run
nogpu() { GPU_OK=0; GPU_WHY=${GPU_WHY:-$1}; }
NCCL_DIR=""               # where the real libnccl.so.2 is, for the NCCL baseline (empty: the loader's path)
HAVE_NCCL=0
TORCH_OK=0 TORCH_WHY="torch not checked"

check_facts() {
  local missing=() f
  for f in strata-run strata-perf strata_gpu_coll_test strata_bench_gpu_reduce; do
    [[ -x $BIN/$f ]] || missing+=("bin/$f")
  done
  [[ -e $BUILD/libstrata.so ]] || missing+=("libstrata.so")
  [[ -e $BUILD/libstrata_cuda.so ]] || missing+=("libstrata_cuda.so")
  local bad=FAIL
  ((DRY)) && bad=SKIP  # a dry run says what is missing, and goes on
  if [[ ! -d $BUILD ]]; then
    fact build $bad "$BUILD does not exist: build it on the CPU machine (scripts/build_gpu_check.sh) and carry it"
    nogpu "no build ($BUILD does not exist)"
  elif ((${#missing[@]})); then
    fact build $bad "$BUILD lacks ${missing[*]}: rerun scripts/build_gpu_check.sh and carry it"
    nogpu "the build lacks ${missing[*]}"
  else
    local arch
    arch=$(sed -n 's/^STRATA_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
    fact build PASS "$BUILD (CUDA architectures: ${arch:-unknown})"
  fi
  if ((DRY)); then
    local smi="nvidia-smi is not installed here"
    command -v nvidia-smi >/dev/null && smi="nvidia-smi is here, not queried"
    for f in nvidia-smi driver compute_mode mig; do fact "$f" SKIP "dry run: not checked ($smi)"; done
    fact arch SKIP "dry run: not checked (the GPU's compute capability against the build's architectures)"
    fact libraries SKIP "dry run: not checked (ldd of the build's programs)"
    fact probe SKIP "dry run: not run (strata_gpu_coll_test --probe)"
    fact nccl SKIP "dry run: not looked for (libnccl.so.2, for the NCCL baseline)"
    fact torch SKIP "dry run: not imported (torch with CUDA, for the DDP steps)"
    return
  fi
  # Everything nvidia-smi says, for the record.
  {
    echo "# nvidia-smi"
    timeout 15 nvidia-smi 2>&1
    echo "# nvidia-smi topo -m"
    timeout 10 nvidia-smi topo -m 2>&1
    echo "# compute apps already running"
    timeout 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
    echo "# nvcc (not used: nothing is compiled here)"
    timeout 5 nvcc --version 2>&1 | tail -1
  } >"$OUT/facts.txt" 2>&1
  local line
  if ! command -v nvidia-smi >/dev/null; then
    fact nvidia-smi FAIL "nvidia-smi not found: no NVIDIA driver on this machine"
    nogpu "no nvidia-smi (no driver)"
    for f in driver compute_mode mig arch; do fact "$f" SKIP "not checked: no nvidia-smi"; done
  elif ! line=$(timeout 15 nvidia-smi --format=csv,noheader \
    --query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,compute_cap 2>&1) || [[ -z $line ]]; then
    fact nvidia-smi FAIL "nvidia-smi failed or timed out: $(head -c 300 <<<"$line")"
    nogpu "nvidia-smi failed"
    for f in driver compute_mode mig arch; do fact "$f" SKIP "not checked: nvidia-smi failed"; done
  else
    local ngpu name drv mode mig mem cc
    ngpu=$(grep -c . <<<"$line")
    IFS=, read -r name drv mode mig mem cc <<<"$(head -1 <<<"$line")"
    name=$(trim "$name") drv=$(trim "$drv") mode=$(trim "$mode") mig=$(trim "$mig") mem=$(trim "$mem") cc=$(trim "$cc")
    fact nvidia-smi PASS "$ngpu GPU(s); GPU 0: $name, $mem, compute capability $cc"
    local major=${drv%%.*}
    if [[ $major =~ ^[0-9]+$ ]] && ((major >= 580)); then
      fact driver PASS "$drv (>= 580, as the CUDA 13 runtime needs)"
    else
      fact driver FAIL "$drv: the CUDA 13 runtime (libstrata_cuda.so, cudart_static) needs driver >= 580"
      nogpu "driver $drv < 580"
    fi
    case $mode in
      Default) fact compute_mode PASS "Default: several processes (ranks) may share the GPU" ;;
      Exclusive_Process | "Exclusive Process")
        fact compute_mode SKIP "$mode: one process per GPU, so every step with several ranks is skipped"
        MULTI_OK=0 MULTI_WHY="compute mode $mode allows one process on the GPU"
        ;;
      Prohibited)
        fact compute_mode FAIL "Prohibited: no process may use the GPU"
        nogpu "compute mode Prohibited"
        ;;
      *) fact compute_mode WARN "$mode (unknown to this script)" ;;
    esac
    case $mig in
      Enabled) fact mig WARN "MIG enabled: the ranks share the instance CUDA shows them (no IPC between instances)" ;;
      *) fact mig PASS "MIG ${mig:-not reported}" ;;
    esac
    local arch want=${cc//./}
    arch=$(sed -n 's/^STRATA_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
    if [[ -z $arch || -z $want ]]; then
      fact arch WARN "not compared (build: ${arch:-unknown}, GPU: ${cc:-unknown})"
    elif [[ ";$arch;" == *";$want;"* || ";$arch;" == *";$want-real;"* || ";$arch;" == *";$want-virtual;"* ]]; then
      fact arch PASS "the build has sm_$want ($arch)"
    else
      fact arch FAIL "GPU is sm_$want, the build has $arch: rebuild with CUDA_ARCH=$want scripts/build_gpu_check.sh"
      nogpu "the build has no code for sm_$want"
    fi
  fi
  if [[ -x $BIN/strata_gpu_coll_test ]]; then
    local unresolved
    local progs=() p
    for p in "$BIN"/strata_gpu_coll_test "$BIN"/strata-perf "$BIN"/strata_gpu_kernel_tests \
      "$BIN"/strata_bench_gpu_reduce "$BUILD"/libstrata_cuda.so "$BIN"/strata_nccl_api_test; do
      [[ -e $p ]] && progs+=("$p")
    done
    unresolved=$(timeout 10 ldd "${progs[@]}" 2>&1 | grep "not found" | sort -u | tr '\n' ' ')
    if [[ $unresolved == *libcudart.so.13* && -d $BUILD/cuda-runtime ]]; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$BUILD/cuda-runtime"
      echo "(no libcudart.so.13 on this machine: using the copy in $BUILD/cuda-runtime)"
      unresolved=$(timeout 10 ldd "${progs[@]}" 2>&1 | grep "not found" | sort -u | tr '\n' ' ')
    fi
    if [[ -n $unresolved ]]; then
      fact libraries FAIL "unresolved: $unresolved"
      nogpu "libraries not found: $unresolved"
    else
      fact libraries PASS "every library of the test programs resolves (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
    fi
    if ((GPU_OK)); then
      local probe rc
      probe=$(timeout 30 "$BIN/strata_gpu_coll_test" --probe 2>&1)
      rc=$?
      if ((rc == 0)); then
        fact probe PASS "a CUDA device is usable from the build's programs"
      else
        fact probe FAIL "strata_gpu_coll_test --probe exited $rc: $(tr '\n' ' ' <<<"$probe" | head -c 300)"
        nogpu "the probe found no usable CUDA device"
      fi
    else
      fact probe SKIP "not run: $GPU_WHY"
    fi
  else
    fact libraries SKIP "no build to check"
    fact probe SKIP "no build to check"
  fi
  # The real NCCL, for the 1-rank baseline: the loader's path, else the pip package torch brings (nvidia-nccl-*).
  if timeout 5 ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
    HAVE_NCCL=1
    fact nccl PASS "libnccl.so.2 on the loader's path"
  else
    NCCL_DIR=$(timeout 20 python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' \
      2>/dev/null)
    if [[ -n $NCCL_DIR && -e $NCCL_DIR/libnccl.so.2 ]]; then
      HAVE_NCCL=1
      fact nccl PASS "$NCCL_DIR/libnccl.so.2 (Python package nvidia.nccl)"
    else
      NCCL_DIR=""
      fact nccl SKIP "no libnccl.so.2 (ldconfig, Python's nvidia.nccl): the NCCL baseline is skipped"
    fi
  fi
  local t
  if t=$(timeout 45 python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1) &&
    [[ $t == *" True" ]]; then
    TORCH_OK=1
    fact torch PASS "torch ${t% True} sees the GPU"
  else
    TORCH_WHY="torch with CUDA is not importable ($(tail -1 <<<"$t" | head -c 200))"
    fact torch SKIP "$TORCH_WHY: the DDP steps are skipped"
  fi
}

# ---- the steps -----------------------------------------------------------------------------------------------------
# step NAME CAP KIND FILES DESCRIPTION COMMAND: KIND is gpu1 (one process) or gpuN (several processes on the GPU);
# FILES must exist for the step to run (a leading ? marks what only some builds have: missing, the step is "not
# built"). UNAVAIL_<i> (set by the definitions) makes a step SKIP with a reason; NOTBUILT makes it NOT_BUILT.
S_NAME=() S_CAP=() S_KIND=() S_FILES=() S_DESC=() S_CMD=() S_SKIP=() S_NOTBUILT=()
step() {
  S_NAME+=("$1")
  S_CAP+=("$2")
  S_KIND+=("$3")
  S_FILES+=("$4")
  S_DESC+=("$5")
  S_CMD+=("$6")
  S_SKIP+=("")
  S_NOTBUILT+=("")
}
last_skip() { S_SKIP[${#S_NAME[@]} - 1]=$1; }
last_notbuilt() { S_NOTBUILT[${#S_NAME[@]} - 1]=$1; }

define_steps() {
  local R C P b o
  b=$(q "$BIN")
  o=$(q "$OUT")
  R="$b/strata-run"
  C="$b/strata_gpu_coll_test --device"
  P="$b/strata-perf allreduce --device"
  step kernels 60 gpu1 "?$BIN/strata_gpu_kernel_tests" \
    "the CUDA reduction kernels bit for bit against the host kernels (every dtype and op)" \
    "$b/strata_gpu_kernel_tests --gtest_brief=1 --gtest_output=json:$o/kernels.json"
  # The engine on real CUDA: asynchrony, stream memory operations on IPC-mapped memory, host functions, mapped pinned
  # flags. INFO logs at n=2 say which paths ran (stream memory operations or the polling kernel; IPC on or off, why).
  step coll_n2 60 gpuN "" "every collective x dtype x op on device buffers, 2 ranks" \
    "env STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=INIT,NET $R -n 2 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  step coll_n4 60 gpuN "" "the same, 4 ranks" "$R -n 4 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  # n=8: the production shape and kCudaMaxReduceSources.
  step coll_n8 75 gpuN "" "all-reduce, reduce-scatter, all-gather, 8 ranks" \
    "$R -n 8 --timeout 70 -- $C --counts 7,70001 --colls allreduce,reducescatter,allgather"
  # Calls in flight: the matrix waits after every call, so parities, epochs and slot reuse are only exercised here.
  step async_n2 45 gpuN "" "200 calls in flight on 2 streams (one-shot, two-shot, rounds, staged), 2 ranks" \
    "$R -n 2 --timeout 40 -- $C --no-sync 200"
  step async_n8 60 gpuN "" "100 calls in flight on 2 streams, 8 ranks" "$R -n 8 --timeout 55 -- $C --no-sync 100"
  # The device executor (STRATA_GPU_EXECUTOR=1, src/device/): every single collective as one kernel over CUDA IPC
  # FIFOs, the protocol the CPU tests verify; its first run on a GPU. INFO says whether it was set up.
  step exec_n2 60 gpuN "" "the device executor: every collective x dtype x op, 2 ranks" \
    "env STRATA_GPU_EXECUTOR=1 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=NET $R -n 2 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  step exec_n8 75 gpuN "" "the device executor, 8 ranks, and 100 calls in flight on 2 streams" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 70 -- $C --counts 7,70001 --colls allreduce,reducescatter,allgather && env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 70 -- $C --no-sync 100"
  step graph_capture 45 gpuN "" "executor calls captured into a CUDA graph, replayed 20 times and checked, 2 and 8 ranks" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 2 --timeout 20 -- $C --counts 1 --colls barrier --graph 20 && env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 20 -- $C --counts 1 --colls barrier --graph 20"
  # Across hosts: 2 "hosts" of 2 ranks (STRATA_HOSTID per rank): the hierarchical all-reduce, host phases in the
  # executor and the shard staged over TCP, in pieces of 64 KiB shards; INFO says it ran hierarchically.
  step exec_hier_n4 50 gpuN "" "hierarchical all-reduce across 2 fake hosts of 2 ranks: executor + 1/L shard staged" \
    "env STRATA_GPU_EXECUTOR=1 STRATA_GPU_STAGE_CHUNK_BYTES=16384 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=COLL $R -n 4 \
--timeout 45 -- $C --counts 1,7,70001,1048579 --colls allreduce --fake-hosts 2"
  step abort_stopped_peer 40 gpuN "" \
    "SIGSTOP one rank with a device all-reduce pending on the others (the executor); strataCommAbort and their \
streams end within 2 s, 3 ranks" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 3 --timeout 35 -- $C --abort-stopped-peer"
  # The one latency target: launch to stream completion, 1 rank, Strata (one device copy) against NCCL.
  local ld=""
  [[ -n $NCCL_DIR ]] && ld="env LD_LIBRARY_PATH=$(q "$NCCL_DIR"):$(q "$LD_LIBRARY_PATH") "
  step perf_n1_nccl 45 gpu1 "" "fixed cost, 1 rank: Strata vs NCCL all-reduce, 8 B - 32 KiB (target: 8 B below NCCL)" \
    "$ld$R -n 1 --timeout 40 -- $P -b 8 -e 32K -f 8 -n 1000 -w 100 -d float -T 30 --baseline nccl \
--json $o/perf_n1_nccl.json"
  ((DRY || HAVE_NCCL)) || last_skip "no libnccl.so.2 on this machine (see the nccl fact)"
  step reduce_bw 40 gpu1 "" "reduction kernels (2 inputs, bf16 and f32, 256 MiB) vs cudaMemcpy D2D (target: >= 90%)" \
    "$b/strata_bench_gpu_reduce --bytes $((256 << 20)) --iters 10 --json $o/reduce_bw.json"
  step coll_n1 45 gpu1 "" "every collective on device buffers, 1 rank (one device copy; PreMulSum staged)" \
    "$R -n 1 --timeout 40 -- $C --counts 0,1,7,1023,70001,1048579"
  step coll_n2_large 45 gpuN "" "1048579 elements, 2 ranks: two-shot, and rounds for 8-byte types" \
    "$R -n 2 --timeout 40 -- $C --counts 1048579 --colls allreduce,reducescatter,allgather"
  step coll_n4_twoshot 40 gpuN "" "every IPC all-reduce two-shot (STRATA_GPU_ONESHOT_BYTES=0), 4 ranks" \
    "env STRATA_GPU_ONESHOT_BYTES=0 $R -n 4 --timeout 35 -- $C --counts 7,70001 --colls allreduce"
  step coll_n2_staged 40 gpuN "" "IPC off, everything staged in 64 KiB chunks, 2 ranks" \
    "env STRATA_GPU_DIRECT_BYTES=0 STRATA_GPU_STAGE_CHUNK_BYTES=65536 $R -n 2 --timeout 35 -- $C \
--counts 7,70001,1048579 --colls allreduce"
  step coll_n8_rounds 45 gpuN "" "1048579 elements, 8 ranks: rounds (8-byte types) and two-shot" \
    "$R -n 8 --timeout 40 -- $C --counts 1048579 --colls allreduce"
  # The NCCL drop-in (build-gpu/strata-nccl/libnccl.so.2): a program written against nccl.h alone, then torch.
  local api="$BIN/strata_nccl_api_test" dropin="$BUILD/strata-nccl/libnccl.so.2" dev=""
  [[ -x $api ]] && grep -q -- "--device" "$api" 2>/dev/null && dev=" --device"
  step nccl_api_n2 60 gpuN "?$api ?$dropin" "the NCCL drop-in under a program written against nccl.h, 2 ranks\
$([[ -z $dev ]] && echo " (host buffers: the program has no --device)")" \
    "env LD_LIBRARY_PATH=$(q "$BUILD/strata-nccl"):$(q "$LD_LIBRARY_PATH") $R -n 2 --timeout 55 -- $(q "$api")$dev"
  # A few DDP steps of a small model, 2 processes on the one GPU: the drop-in under torch's ProcessGroupNCCL (the
  # real NCCL refuses two ranks on one GPU) must end with gloo's loss.
  local torchrun="timeout 55 python3 -m torch.distributed.run --standalone --nproc-per-node 2 $o/ddp_dropin.py"
  step ddp_gloo 60 gpuN "" "20 DDP steps on backend gloo (CUDA tensors), 2 processes: the reference loss" \
    "$torchrun gloo 20"
  ((DRY || TORCH_OK)) || last_skip "$TORCH_WHY"
  step ddp_dropin_nccl 60 gpuN "?$dropin" "the same on ProcessGroupNCCL over the drop-in (LD_PRELOAD): gloo's loss" \
    "env NCCL_DEBUG=VERSION LD_PRELOAD=$(q "$dropin") $torchrun nccl 20"
  ((DRY || TORCH_OK)) || last_skip "$TORCH_WHY"
  local ext
  ext=$(compgen -G "$BUILD/python/strata/_strata_torch*.so" | head -1)
  step ddp_strata_cuda 60 gpuN "" "the same on ProcessGroupStrata (strata._strata_torch) with CUDA tensors" \
    "env PYTHONPATH=$(q "$BUILD/python") $torchrun strata 20"
  [[ -n $ext ]] || last_notbuilt "build-gpu has no strata._strata_torch: the extension must match the device's \
Python and torch (3.12, torch 2.11 there), which this machine cannot build against; nothing is compiled on the device"
  ((DRY || TORCH_OK)) || last_skip "$TORCH_WHY"
  # Fixed costs of ranks sharing one GPU (time-sliced contexts, no NVLink): measured, not targets.
  step perf_small_n2 40 gpuN "" "fixed cost, 2 ranks sharing the GPU: all-reduce 8 B - 64 KiB" \
    "$R -n 2 --timeout 35 -- $P -b 8 -e 64K -f 8 -n 200 -w 20 -d float -T 30 --json $o/perf_small_n2.json"
  step perf_small_n8 45 gpuN "" "fixed cost, 8 ranks sharing the GPU: all-reduce 8 B - 64 KiB" \
    "$R -n 8 --timeout 40 -- $P -b 8 -e 64K -f 8 -n 100 -w 10 -d float -T 35 --json $o/perf_small_n8.json"
  # The executor's fixed cost (one kernel per call over IPC FIFOs, LL up to 16 KiB). Target: 8 B within 1.5x of
  # NCCL's 1-rank call (perf_n1_nccl).
  step perf_exec_small_n2 40 gpuN "" "the device executor's fixed cost, 2 ranks: all-reduce 8 B - 64 KiB (target: 8 B \
within 1.5x of NCCL's 1-rank call)" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 2 --timeout 35 -- $P -b 8 -e 64K -f 8 -n 200 -w 20 -d float -T 30 \
--json $o/perf_exec_small_n2.json"
  step perf_exec_small_n8 45 gpuN "" "the same, 8 ranks" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 40 -- $P -b 8 -e 64K -f 8 -n 100 -w 10 -d float -T 35 \
--json $o/perf_exec_small_n8.json"
  # Send/recv in the executor (one kernel per group) against the same sweep staged, in one step.
  local S="$b/strata-perf sendrecv --device"
  step perf_exec_sendrecv_n2 50 gpuN "" "send/recv, 2 ranks, 8 B - 64 MiB: the executor, then staged (the baseline)" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 2 --timeout 22 -- $S -b 8 -e 64M -f 8 -n 20 -w 5 -T 20 \
--json $o/perf_exec_sendrecv_n2.json && $R -n 2 --timeout 22 -- $S -b 8 -e 64M -f 8 -n 20 -w 5 -T 20 \
--json $o/perf_staged_sendrecv_n2.json"
  step perf_large_n8 50 gpuN "" "8 ranks sharing the GPU: all-reduce 256 KiB - 256 MiB, bf16, 4 MiB rounds" \
    "$R -n 8 --timeout 45 -- $P -b 256K -e 256M -f 4 -n 5 -w 1 -d bfloat16 -T 40 --json $o/perf_large_n8.json"
  step perf_large_n8_round64M 50 gpuN "" "the same with 64 MiB rounds: what the per-round synchronisation costs" \
    "env STRATA_GPU_DIRECT_BYTES=67108864 $R -n 8 --timeout 45 -- $P -b 256K -e 256M -f 4 -n 5 -w 1 -d bfloat16 -T 40 \
--json $o/perf_large_n8_round64M.json"
}

# What a step's output says, beyond its exit status: NOTE, one line, printed and put in summary.json. It may turn
# STATUS from PASS into FAIL, with REASON (ddp_dropin_nccl: a loss different from gloo's).
NOTE="" STATUS="" REASON="" LEFTOVER=""
post_check() {  # name
  local name=$1 log="$OUT/$1.log"
  NOTE=""
  case $name in
    coll_n2)  # which paths ran: stream memory operations or the polling kernel, CUDA IPC on or off and why
      NOTE=$(grep -hE "STRATA (INFO|WARN) .*(CUDA: |CUDA IPC)" "$log" | head -3 | sed -E 's/^.*STRATA (INFO|WARN) *//' | tr '\n' ';')
      ;;
    graph_capture)
      NOTE=$(grep -h "graph capture:" "$log" | head -1)
      [[ -n $NOTE ]] || NOTE=$(grep -h "captured collective" "$log" | head -1)
      ;;
    async_*) NOTE=$(grep -h "^no-sync:" "$log" | head -1) ;;
    abort_stopped_peer) NOTE=$(grep -h "abort-stopped-peer:" "$log" | head -2 | tr '\n' ' ') ;;
    kernels) NOTE=$(grep -hE "PASSED|FAILED|SKIPPED" "$log" | tail -2 | tr '\n' ' ') ;;
    perf_* | reduce_bw) NOTE=$(targets_note "$name") ;;
    ddp_dropin_nccl)
      local verdict
      verdict=$(ddp_compare)
      NOTE=${verdict#*|}
      # Only a result that differs, or none at all, fails: without a gloo run there is nothing to compare.
      if [[ $STATUS == PASS && ${verdict%%|*} != same && ${verdict%%|*} != nogloo ]]; then
        STATUS=FAIL REASON="not gloo's result"
      fi
      ;;
    ddp_strata_cuda | ddp_gloo) NOTE=$(grep -h "^DDP " "$log" | head -1) ;;
  esac
  [[ -n $NOTE ]] || NOTE=$(grep -v '^#' "$log" 2>/dev/null | grep . | tail -1 | head -c 300)
  return 0
}

final_loss() { sed -n 's/^FINAL_LOSS //p' "$OUT/$1.log" 2>/dev/null | head -1; }
ddp_compare() {  # "same|TEXT", "different|TEXT", "missing|TEXT" or "nogloo|TEXT"
  local a b eq loaded
  a=$(final_loss ddp_dropin_nccl)
  b=$(final_loss ddp_gloo)
  eq=$(sed -n 's/^PARAMS_EQUAL //p' "$OUT/ddp_dropin_nccl.log" 2>/dev/null | head -1)
  loaded=no
  grep -q "implementing the NCCL" "$OUT/ddp_dropin_nccl.log" 2>/dev/null && loaded=yes
  if [[ -z $a ]]; then
    echo "missing|no final loss from the drop-in run"
  elif [[ -z $b ]]; then
    echo "nogloo|drop-in final loss $a; no gloo loss to compare it with (run --step ddp_gloo)"
  elif awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); if (m < 1) m = 1
      exit !(d <= 1e-5 * m) }' &&
    [[ $eq == True && $loaded == yes ]]; then
    echo "same|the same final loss: drop-in $a, gloo $b; parameters equal on every rank; drop-in loaded"
  else
    echo "different|NOT gloo's: final loss drop-in $a, gloo $b; parameters equal: ${eq:-?}; drop-in loaded: $loaded"
  fi
}

# The targets, from the JSON files (python3 reads them; without it they are not evaluated).
targets_note() {
  timeout 5 python3 - "$OUT" "$1" <<'PY' 2>/dev/null
import json, os, sys
out, which = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
if which == "reduce_bw":
    j = load("reduce_bw.json")
    if j:
        shares = {r["dtype"]: r["share_of_memcpy"] for r in j["reduce"]}
        print("memcpy D2D %s GB/s; share of it: %s (target >= 0.90)" % (j["memcpy_d2d"]["gbs_moved"],
              ", ".join("%s %.2f" % kv for kv in sorted(shares.items()))))
elif which == "perf_n1_nccl":
    j = load("perf_n1_nccl.json")
    rows = [r for r in j["results"] if r["size"] == 8] if j else []
    if rows:
        s = rows[0]["out_of_place"]["time_us"]
        n = ((rows[0].get("baselines") or {}).get("nccl") or {}).get("time_us")
        print("8 B all-reduce, 1 rank: Strata %s us, NCCL %s us (target: Strata below NCCL)" % (s, n))
else:  # the first and last sizes of a sweep: time out of place, and bus bandwidth
    j = load(which + ".json")
    rows = j["results"] if j else []
    def row(r):
        m = r["out_of_place"]
        return "%d B %s us %s GB/s" % (r["size"], m.get("time_us"), m.get("busbw_gbps"))
    if rows:
        print("; ".join(row(r) for r in (rows[:1] + rows[-1:] if len(rows) > 1 else rows)))
PY
}

targets_json() {
  timeout 5 python3 - "$OUT" <<'PY' 2>/dev/null || echo '{"evaluated": false}'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    try:
        return json.load(open(p)) if os.path.exists(p) else None
    except ValueError:
        return None
t = {"evaluated": True}
j = load("reduce_bw.json")
if j:
    shares = {r["dtype"]: r["share_of_memcpy"] for r in j["reduce"]}
    t["reduce_ge_90pct_of_memcpy"] = {"shares": shares, "memcpy_d2d_gbs": j["memcpy_d2d"]["gbs_moved"],
                                      "met": all(shares.get(d, 0) >= 0.9 for d in ("bf16", "f32"))}
j = load("perf_n1_nccl.json")
if j:
    rows = [r for r in j["results"] if r["size"] == 8]
    if rows:
        s = rows[0]["out_of_place"]["time_us"]
        n = ((rows[0].get("baselines") or {}).get("nccl") or {}).get("time_us")
        t["allreduce_8B_1rank_below_nccl"] = {"strata_us": s, "nccl_us": n,
                                              "met": s is not None and n is not None and s < n}
        for k in (2, 8):
            e = load("perf_exec_small_n%d.json" % k)
            er = [r for r in e["results"] if r["size"] == 8] if e else []
            if er and n:
                x = er[0]["out_of_place"]["time_us"]
                t["executor_8B_n%d_within_1p5x_nccl_1rank" % k] = {"strata_us": x, "nccl_1rank_us": n,
                                                                    "met": x is not None and x <= 1.5 * n}
print(json.dumps(t))
PY
}

# ---- the DDP program (torch.distributed, any backend) ---------------------------------------------------------------
write_ddp_script() {
  cat >"$OUT/ddp_dropin.py" <<'PY'
# A few DDP steps of a small model, 2 ranks on one GPU; rank 0 prints the final loss (averaged over the ranks)
# and whether the parameters are equal on every rank. usage: torchrun --nproc-per-node 2 ddp_dropin.py BACKEND STEPS
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend, steps = sys.argv[1], int(sys.argv[2])
if backend == "strata":
    import strata.torch  # noqa: F401  (ProcessGroupStrata, from PYTHONPATH=$BUILD/python)
device = torch.device("cuda:0")  # every rank on the one GPU
torch.cuda.set_device(device)
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same initial weights on every rank and in every run
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
ddp = DDP(model, device_ids=[0])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches, the same in every run
for step in range(steps):
    x = torch.randn(64, 32, generator=data).to(device)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
final = loss.detach().clone()
dist.all_reduce(final)
checksum = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum()
# Equal on every rank when the largest equals the least (all-reduce: what gloo supports on CUDA tensors).
hi, lo = checksum.clone(), checksum.clone()
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
if rank == 0:
    same = bool(hi == lo)
    print("DDP %s: %d ranks, %d steps, final loss %.9g, parameter checksum %.12g, equal on every rank: %s"
          % (backend, world, steps, final.item() / world, checksum.item(), same))
    print("FINAL_LOSS %.9g" % (final.item() / world))
    print("PARAMS_EQUAL %s" % same)
# No barrier: ProcessGroupNCCL's barrier picks GPU `rank`, which one GPU does not have.
dist.destroy_process_group()
PY
}

# ---- running -------------------------------------------------------------------------------------------------------
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
