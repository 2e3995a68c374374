# shellcheck shell=bash
# The GPU check's steps, most important first (the device executor, the default path, before the direct and staged
# paths it falls back to): each with its cap, its kind, the files it needs, what it proves and
# its command; and the DDP program the ddp_* steps run.
# Sourced by perf/gpu_check.sh, whose globals (BUILD, BIN, OUT, DRY, LD_LIBRARY_PATH) and helpers (q) it uses, and
# the facts' findings (NCCL_DIR, HAVE_NCCL, TORCH_OK, TORCH_WHY).

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
  local R C P b o X0
  b=$(q "$BIN")
  o=$(q "$OUT")
  R="$b/strata-run"
  # The device executor is the default: the steps of the direct and staged paths turn it off.
  X0="env STRATA_GPU_EXECUTOR=0"
  C="$b/strata_gpu_coll_test --device"
  P="$b/strata-perf allreduce --device"
  step kernels 60 gpu1 "?$BIN/strata_gpu_kernel_tests" \
    "the CUDA reduction kernels bit for bit against the host kernels (every dtype and op)" \
    "$b/strata_gpu_kernel_tests --gtest_brief=1 --gtest_output=json:$o/kernels.json"
  # The device executor (STRATA_GPU_EXECUTOR=1, src/device/): every single collective as one kernel over CUDA IPC
  # FIFOs, the protocol the CPU tests verify; its first run on a GPU. INFO says whether it was set up.
  step exec_n2 60 gpuN "" "the device executor: every collective x dtype x op, 2 ranks" \
    "env STRATA_GPU_EXECUTOR=1 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=NET $R -n 2 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  step exec_n8 75 gpuN "" "the device executor, 8 ranks, and 100 calls in flight on 2 streams" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 70 -- $C --counts 7,70001 --colls allreduce,reducescatter,allgather && env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 70 -- $C --no-sync 100"
  # Loaded plan programs (STRATA_PLANS) forced on the device executor, 4 ranks: MSCCL files (tests/plans/
  # gen_msccl.py) of a 2-channel ring all-reduce out of place, an all-pairs all-reduce in place whose reducing lane
  # waits behind nops, a 2-channel ring all-gather in place; each thread block a lane on its own channel's FIFOs.
  # INFO (TUNING) names each file that served a call.
  local pl
  pl="$o/plans"
  step exec_loaded_plans 45 gpuN "" "loaded MSCCL files forced on the device executor (thread blocks on their own \
channels, nops), 4 ranks, every dtype x op, checked" \
    "python3 $(q "$ROOT/tests/plans/gen_msccl.py") $pl 4 && env STRATA_GPU_EXECUTOR=1 STRATA_PLANS=$pl \
STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNING $R -n 4 --timeout 40 -- $C --counts 7,70001 --colls allreduce,allgather \
--algos 'allreduce:msccl_ring_4,allgather:msccl_ring_allgather_4;allreduce:msccl_allpairs_4'"
  step graph_capture 45 gpuN "" "executor calls captured into a CUDA graph, replayed 20 times and checked, 2 and 8 ranks" \
    "env STRATA_GPU_EXECUTOR=1 $R -n 2 --timeout 20 -- $C --counts 1 --colls barrier --graph 20 && env STRATA_GPU_EXECUTOR=1 $R -n 8 --timeout 20 -- $C --counts 1 --colls barrier --graph 20"
  # The executor's busbw at 1, 2, 4 and 8 ranks sharing the one GPU: every size checked (strata-perf -c 1) and its
  # fixed cost; ranks time-slice the GPU, so these are no real machine's bandwidths (1 rank: one device copy).
  local bw="" k
  for k in 1 2 4 8; do
    bw+="${bw:+ && }env STRATA_GPU_EXECUTOR=1 $R -n $k --timeout 25 -- $P -b 64K -e 64M -f 4 -n 5 -w 1 -d bfloat16 -c 1 \
-T 20 --json $o/perf_exec_busbw_n$k.json"
  done
  step perf_exec_busbw 100 gpuN "" "the device executor's all-reduce, 64 KiB - 64 MiB bf16, checked, at 1, 2, 4 and 8 \
ranks sharing the GPU (fixed cost and correctness, not bandwidth)" "$bw"
  # Where the protocols cross: every op in LL (up to a 128 KiB piece), in LL128, in Simple, then auto (LL128 on),
  # 2 ranks, 8 B - 8 MiB; the note names the fastest protocol per size.
  local cross="" pr
  for pr in ll ll128 simple auto; do
    cross+="${cross:+ && }env STRATA_GPU_EXECUTOR=1 STRATA_GPU_PROTO=$pr STRATA_GPU_LL128=on $R -n 2 --timeout 20 -- \
$P -b 8 -e 8M -f 4 -n 50 -w 5 -d float -c 1 -T 15 --json $o/perf_proto_$pr.json"
  done
  step perf_proto_crossover 90 gpuN "" "LL, LL128 and Simple forced (STRATA_GPU_PROTO), then auto: all-reduce 8 B - \
8 MiB, 2 ranks: where the protocols cross" "$cross"
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
  # The direct and staged paths (the executor off: its fallback), on real CUDA: asynchrony, stream memory operations on IPC-mapped memory, host functions, mapped pinned
  # flags. INFO logs at n=2 say which paths ran (stream memory operations or the polling kernel; IPC on or off, why).
  step coll_n2 60 gpuN "" "every collective x dtype x op on device buffers, 2 ranks" \
    "env STRATA_GPU_EXECUTOR=0 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=INIT,NET $R -n 2 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  step coll_n4 60 gpuN "" "the same, 4 ranks" "$X0 $R -n 4 --timeout 55 -- $C --counts 0,1,7,1023,70001"
  # n=8: the production shape and kCudaMaxReduceSources.
  step coll_n8 75 gpuN "" "all-reduce, reduce-scatter, all-gather, 8 ranks" \
    "$X0 $R -n 8 --timeout 70 -- $C --counts 7,70001 --colls allreduce,reducescatter,allgather"
  # Calls in flight: the matrix waits after every call, so parities, epochs and slot reuse are only exercised here.
  step async_n2 45 gpuN "" "200 calls in flight on 2 streams (one-shot, two-shot, rounds, staged), 2 ranks" \
    "$X0 $R -n 2 --timeout 40 -- $C --no-sync 200"
  step async_n8 60 gpuN "" "100 calls in flight on 2 streams, 8 ranks" "$X0 $R -n 8 --timeout 55 -- $C --no-sync 100"
  step coll_n2_large 45 gpuN "" "1048579 elements, 2 ranks: two-shot, and rounds for 8-byte types" \
    "$X0 $R -n 2 --timeout 40 -- $C --counts 1048579 --colls allreduce,reducescatter,allgather"
  step coll_n4_twoshot 40 gpuN "" "every IPC all-reduce two-shot (STRATA_GPU_ONESHOT_BYTES=0), 4 ranks" \
    "env STRATA_GPU_EXECUTOR=0 STRATA_GPU_ONESHOT_BYTES=0 $R -n 4 --timeout 35 -- $C --counts 7,70001 --colls allreduce"
  step coll_n2_staged 40 gpuN "" "IPC off, everything staged in 64 KiB chunks, 2 ranks" \
    "env STRATA_GPU_EXECUTOR=0 STRATA_GPU_DIRECT_BYTES=0 STRATA_GPU_STAGE_CHUNK_BYTES=65536 $R -n 2 --timeout 35 -- $C \
--counts 7,70001,1048579 --colls allreduce"
  step coll_n8_rounds 45 gpuN "" "1048579 elements, 8 ranks: rounds (8-byte types) and two-shot" \
    "$X0 $R -n 8 --timeout 40 -- $C --counts 1048579 --colls allreduce"
  # Fixed costs of ranks sharing one GPU (time-sliced contexts, no NVLink): measured, not targets.
  step perf_small_n2 40 gpuN "" "fixed cost, 2 ranks sharing the GPU: all-reduce 8 B - 64 KiB" \
    "$X0 $R -n 2 --timeout 35 -- $P -b 8 -e 64K -f 8 -n 200 -w 20 -d float -T 30 --json $o/perf_small_n2.json"
  step perf_small_n8 45 gpuN "" "fixed cost, 8 ranks sharing the GPU: all-reduce 8 B - 64 KiB" \
    "$X0 $R -n 8 --timeout 40 -- $P -b 8 -e 64K -f 8 -n 100 -w 10 -d float -T 35 --json $o/perf_small_n8.json"
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
--json $o/perf_exec_sendrecv_n2.json && $X0 $R -n 2 --timeout 22 -- $S -b 8 -e 64M -f 8 -n 20 -w 5 -T 20 \
--json $o/perf_staged_sendrecv_n2.json"
  step perf_large_n8 50 gpuN "" "8 ranks sharing the GPU: all-reduce 256 KiB - 256 MiB, bf16, 4 MiB rounds" \
    "$X0 $R -n 8 --timeout 45 -- $P -b 256K -e 256M -f 4 -n 5 -w 1 -d bfloat16 -T 40 --json $o/perf_large_n8.json"
  step perf_large_n8_round64M 50 gpuN "" "the same with 64 MiB rounds: what the per-round synchronisation costs" \
    "env STRATA_GPU_EXECUTOR=0 STRATA_GPU_DIRECT_BYTES=67108864 $R -n 8 --timeout 45 -- $P -b 256K -e 256M -f 4 -n 5 -w 1 -d bfloat16 -T 40 \
--json $o/perf_large_n8_round64M.json"
}

# The DDP program (torch.distributed, any backend) that the ddp_* steps run, next to their logs.
write_ddp_script() {
  cp "$GPU_CHECK_DIR/ddp_dropin.py" "$OUT/ddp_dropin.py"
}
