#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU and driver (sized for one H200, 16 cores, under 8 minutes),
# builds Strata for sm_90 only, runs the GPU tests, measures the reduction kernels against the device's own
# cudaMemcpy D2D bandwidth, and runs strata-perf on device buffers with 1, 2 and 4 ranks on the GPU next to
# NCCL. Everything it prints and every JSON file lands in OUTDIR; summary.json holds the two targets:
#   - reduction kernels (2 inputs -> 1 output, bf16 and f32, 256 MiB buffers) >= 90% of memcpy D2D bytes/s;
#   - Strata's all-reduce latency, 8 B - 64 KiB, between 2 (and 4) ranks sharing the GPU (CUDA IPC one-shot),
#     below NCCL's single-rank all-reduce, both timed from launch to stream completion.
# When the NCCL drop-in is built (an nccl.h was found) it also runs tests/nccl's nccl.h program on 2 ranks (device
# buffers when the program has --device), and, when torch with CUDA is importable, torch's ProcessGroupNCCL on the
# drop-in (LD_PRELOAD): a few DDP steps of 2 processes on the one GPU, whose final loss must equal the same run's
# on backend gloo (ddp_dropin.json).
# Usage: perf/gpu_check.sh OUTDIR        (BUILD=dir to reuse a build; JOBS=n; CUDA_ARCH=90)
# Exit status: 0 when the build and every test passed (targets missed are reported, not failures), 1 otherwise.
# Time: about 2 minutes of build on 16 cores, then every step has its own limit (the worst case is ~13 minutes,
# a healthy run ~5). The full GPU test suite is `ctest -L gpu` in the build directory.
set -uo pipefail
OUT=${1:?usage: perf/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu-check}
JOBS=${JOBS:-$(nproc)}
ARCH=${CUDA_ARCH:-90}
exec > >(tee "$OUT/gpu_check.log") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
status=0
export PATH=/usr/local/cuda/bin:$PATH

stamp "machine"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (no driver?)"
head -15 "$OUT/nvidia-smi.txt"
nvcc --version | tail -1
ls /usr/local/cuda/lib64 2>/dev/null | grep -i nccl || echo "(no NCCL in /usr/local/cuda/lib64)"
ldconfig -p | grep -i nccl || true

# Tools: cmake, ninja and a C++ compiler. A bare machine may lack them; try the package manager briefly (it may
# have no network), then pip.
need=()
for t in cmake ninja g++; do command -v $t >/dev/null || need+=($t); done
if ((${#need[@]})); then
  stamp "missing ${need[*]}: trying apt-get / pip (120 s at most)"
  timeout 120 bash -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq cmake ninja-build g++ libgtest-dev >/dev/null' || true
  command -v cmake >/dev/null || timeout 60 python3 -m pip install -q cmake ninja || true
fi
GEN=Ninja
command -v ninja >/dev/null || GEN="Unix Makefiles"

stamp "configure ($BUILD, sm_$ARCH)"
# Only what the check needs: optional discovery libraries and MPI/UCX off keep configure and build short, and
# tests that need GoogleTest are skipped if it is missing.
cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DSTRATA_WITH_CUDA=ON \
  -DSTRATA_CUDA_ARCHITECTURES="$ARCH" -DSTRATA_WITH_UCX=OFF -DSTRATA_WITH_MPI=OFF -DSTRATA_WITH_HWLOC=OFF \
  -DSTRATA_WITH_IBVERBS=OFF -DSTRATA_TESTS_WITHOUT_GTEST=ON > "$OUT/configure.log" 2>&1 || {
  tail -30 "$OUT/configure.log"; echo "configure FAILED"; exit 1; }
targets=(strata strata_cuda strata-run strata-perf strata_gpu_coll_test strata_bench_gpu_reduce)
if grep -q strata_gpu_kernel_tests "$BUILD"/CMakeFiles/TargetDirectories.txt 2>/dev/null; then
  targets+=(strata_gpu_kernel_tests)
else
  echo "WARNING: GoogleTest not found: strata_gpu_kernel_tests (the kernels against the host) is not built and will not run"
  status=1
fi
# The NCCL drop-in and its nccl.h test program exist when configure found an nccl.h.
for t in strata_nccl strata_nccl_api_test strata_python; do
  grep -q "/$t.dir\$" "$BUILD"/CMakeFiles/TargetDirectories.txt 2>/dev/null && targets+=("$t")
done
stamp "build ${targets[*]}"
if ! cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" > "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; echo "build FAILED"; exit 1
fi
BIN=$BUILD/bin
if ! "$BIN/strata_gpu_coll_test" --probe; then
  echo "no usable GPU here: nothing to check (the build above succeeded)"
  echo '{"gpu": false}' > "$OUT/summary.json"
  exit 1
fi

# The GPU tests, each under its own time limit so the whole check fits in 8 minutes (ctest -L gpu runs the same
# programs with more counts). Results: tests.json.
results=()
run_test() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/test_$name.log" 2>&1
  local rc=$?
  local verdict=passed
  ((rc == 77)) && verdict=skipped
  ((rc == 124)) && verdict="timed out after ${limit} s"
  ((rc != 0 && rc != 77 && rc != 124)) && verdict="failed (exit $rc)"
  [[ $verdict == passed ]] || status=1
  echo "  $name: $verdict ($(( $(date +%s) - t )) s)"; tail -2 "$OUT/test_$name.log" | sed 's/^/    /'
  results+=("{\"test\": \"$name\", \"result\": \"$verdict\", \"seconds\": $(( $(date +%s) - t ))}")
}
stamp "GPU tests"
if [[ -x $BIN/strata_gpu_kernel_tests ]]; then
  run_test kernels 120 "$BIN/strata_gpu_kernel_tests" --gtest_output="json:$OUT/gpu_kernel_tests.json"
fi
COLL="$BIN/strata_gpu_coll_test --device"
run_test coll_n1 60 "$BIN/strata-run" -n 1 --timeout 55 -- $COLL --counts 0,1,7,1023,70001,1048579
# With INFO logs: which paths ran (stream memory operations or the polling kernel; CUDA IPC on or off, and why).
run_test coll_n2 90 env STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=INIT,NET "$BIN/strata-run" -n 2 --timeout 85 -- $COLL --counts 0,1,7,1023,70001
grep -E "STRATA INFO .*(CUDA: |CUDA IPC)" "$OUT/test_coll_n2.log" | head -4 | sed 's/^/    /'
run_test coll_n4 90 "$BIN/strata-run" -n 4 --timeout 85 -- $COLL --counts 0,1,7,1023,70001
run_test coll_n2_large 60 "$BIN/strata-run" -n 2 --timeout 55 -- $COLL --counts 1048579 --colls allreduce,reducescatter,allgather
run_test coll_n4_twoshot 60 env STRATA_GPU_ONESHOT_BYTES=0 "$BIN/strata-run" -n 4 --timeout 55 -- $COLL --counts 7,70001 --colls allreduce
run_test coll_n2_staged 60 env STRATA_GPU_DIRECT_BYTES=0 STRATA_GPU_STAGE_CHUNK_BYTES=65536 "$BIN/strata-run" -n 2 --timeout 55 -- \
  $COLL --counts 7,70001,1048579 --colls allreduce

# A few DDP steps of a small model on 2 processes sharing the one GPU, for any backend (ddp_dropin.py).
write_ddp_script() {
  cat > "$OUT/ddp_dropin.py" <<'PY'
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
dist.destroy_process_group()
PY
}

# The NCCL drop-in (build/strata-nccl/libnccl.so.2): tests/nccl's program written against nccl.h alone, then torch.
DROPIN=$BUILD/strata-nccl/libnccl.so.2
if [[ -e $DROPIN ]]; then
  stamp "NCCL drop-in"
  if [[ -x $BIN/strata_nccl_api_test ]]; then
    api_args=()
    if "$BIN/strata_nccl_api_test" --help 2>&1 | grep -q -- "--device"; then
      api_args+=(--device)
    else
      echo "  (strata_nccl_api_test has no --device option: it runs on host buffers)"
    fi
    run_test nccl_api_n2 90 "$BIN/strata-run" -n 2 --timeout 85 -- "$BIN/strata_nccl_api_test" "${api_args[@]}"
  fi
  # torch's ProcessGroupNCCL on the drop-in: 2 processes on the one GPU (the real NCCL refuses that), a few DDP
  # steps; the same run on gloo must end with the same loss.
  if timeout 60 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    write_ddp_script
    # No barrier in the script: ProcessGroupNCCL's barrier picks GPU `rank`, which one GPU does not have.
    run_test ddp_dropin_nccl 120 env NCCL_DEBUG=VERSION LD_PRELOAD="$DROPIN" timeout 115 python3 -m torch.distributed.run \
      --standalone --nproc-per-node 2 "$OUT/ddp_dropin.py" nccl 20
    grep -m1 "implementing the NCCL" "$OUT/test_ddp_dropin_nccl.log" | sed 's/^/    /'
    run_test ddp_gloo 120 timeout 115 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
      "$OUT/ddp_dropin.py" gloo 20
    python3 - "$OUT" <<'PY' || status=1
import json, os, re, sys
out = sys.argv[1]
def run(name):
    path = os.path.join(out, "test_%s.log" % name)
    text = open(path).read() if os.path.exists(path) else ""
    loss = re.search(r"^FINAL_LOSS (\S+)$", text, re.M)
    same = re.search(r"^PARAMS_EQUAL (\S+)$", text, re.M)
    return {"final_loss": float(loss.group(1)) if loss else None,
            "params_equal": same.group(1) == "True" if same else None,
            "dropin_loaded": "implementing the NCCL" in text}
r = {"nccl_dropin": run("ddp_dropin_nccl"), "gloo": run("ddp_gloo")}
a, b = r["nccl_dropin"]["final_loss"], r["gloo"]["final_loss"]
r["losses_match"] = a is not None and b is not None and abs(a - b) <= 1e-5 * max(1.0, abs(b))
r["passed"] = (r["losses_match"] and r["nccl_dropin"]["params_equal"] is True and r["nccl_dropin"]["dropin_loaded"])
json.dump(r, open(os.path.join(out, "ddp_dropin.json"), "w"), indent=2)
print("  DDP final loss: nccl (drop-in) %s, gloo %s: %s" % (a, b, "equal" if r["losses_match"] else "DIFFERENT"))
sys.exit(0 if r["passed"] else 1)
PY
  else
    echo "  torch with CUDA is not importable: ProcessGroupNCCL on the drop-in not run"
  fi
else
  echo "(no NCCL drop-in in $BUILD: no nccl.h found at configure; its steps are skipped)"
fi
# The C++ torch backend (ProcessGroupStrata, strata._strata_torch) on CUDA tensors: its stream model on a real
# device (communication stream, events, caching allocator), the same DDP steps ending with gloo's loss.
if compgen -G "$BUILD/python/strata/_strata_torch*.so" >/dev/null &&
  timeout 60 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  stamp "torch backend (ProcessGroupStrata) on CUDA"
  write_ddp_script
  run_test ddp_strata_cuda 120 env PYTHONPATH="$BUILD/python" timeout 115 python3 -m torch.distributed.run \
    --standalone --nproc-per-node 2 "$OUT/ddp_dropin.py" strata 20
  [[ -f $OUT/test_ddp_gloo.log ]] || run_test ddp_gloo 120 timeout 115 python3 -m torch.distributed.run \
    --standalone --nproc-per-node 2 "$OUT/ddp_dropin.py" gloo 20
  python3 - "$OUT" <<'PY' || status=1
import json, os, re, sys
out = sys.argv[1]
def loss(name):
    path = os.path.join(out, "test_%s.log" % name)
    m = re.search(r"^FINAL_LOSS (\S+)$", open(path).read(), re.M) if os.path.exists(path) else None
    return float(m.group(1)) if m else None
a, b = loss("ddp_strata_cuda"), loss("ddp_gloo")
r = {"strata_cuda": a, "gloo": b, "passed": a is not None and b is not None and abs(a - b) <= 1e-5 * max(1.0, abs(b))}
json.dump(r, open(os.path.join(out, "ddp_strata_cuda.json"), "w"), indent=2)
print("  DDP final loss: strata (CUDA tensors) %s, gloo %s: %s" % (a, b, "equal" if r["passed"] else "DIFFERENT"))
sys.exit(0 if r["passed"] else 1)
PY
else
  echo "(no torch backend extension in $BUILD/python, or no torch with CUDA: ProcessGroupStrata on CUDA not run)"
fi
(IFS=,; echo "[${results[*]}]") > "$OUT/tests.json"

stamp "reduction kernels vs cudaMemcpy D2D"
"$BIN/strata_bench_gpu_reduce" --bytes $((256 << 20)) --iters 20 --json "$OUT/reduce_bw_256MiB.json" || status=1
"$BIN/strata_bench_gpu_reduce" --bytes $((1 << 30)) --iters 10 --json "$OUT/reduce_bw_1GiB.json" || status=1

stamp "strata-perf on device buffers"
for n in 1 2 4; do
  base=""
  [[ $n == 1 ]] && base="--baseline nccl"
  # Latency sweep: 8 B - 64 KiB (the CUDA IPC one-shot range), many iterations.
  timeout 60 "$BIN/strata-run" -n $n --timeout 55 -- "$BIN/strata-perf" allreduce -b 8 -e 64K -f 2 -n 200 -w 20 \
    -d float --device $base -T 50 --json "$OUT/perf_allreduce_small_n$n.json" > "$OUT/perf_allreduce_small_n$n.log" 2>&1 \
    || status=1
  tail -22 "$OUT/perf_allreduce_small_n$n.log"
  # Bandwidth sweep: 128 KiB - 256 MiB (CUDA IPC two-shot, in rounds above 4 MiB; one rank: staged).
  timeout 45 "$BIN/strata-run" -n $n --timeout 40 -- "$BIN/strata-perf" allreduce -b 128K -e 256M -f 8 -n 10 -w 2 \
    -d bfloat16 --device $base -T 35 --json "$OUT/perf_allreduce_large_n$n.json" > "$OUT/perf_allreduce_large_n$n.log" 2>&1 \
    || status=1
  tail -12 "$OUT/perf_allreduce_large_n$n.log"
done
# NCCL on one rank is the latency reference; with ranks sharing a GPU NCCL refuses to run (reported, not run).

stamp "summary"
python3 - "$OUT" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
summary = {"targets": {}}
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
bw = load("reduce_bw_256MiB.json")
if bw:
    shares = {r["dtype"]: r["share_of_memcpy"] for r in bw["reduce"]}
    summary["reduce_bw_256MiB"] = bw
    summary["targets"]["reduce_ge_90pct_of_memcpy"] = {
        "bf16": shares.get("bf16"), "f32": shares.get("f32"),
        "met": all(shares.get(t, 0) >= 0.9 for t in ("bf16", "f32"))}
n1 = load("perf_allreduce_small_n1.json")
nccl = {}
if n1:
    for r in n1["results"]:
        b = (r.get("baselines") or {}).get("nccl")
        if b and b.get("time_us") is not None:
            nccl[r["size"]] = b["time_us"]
lat = {}
for n in (2, 4):
    j = load(f"perf_allreduce_small_n{n}.json")
    if not j: continue
    rows = {r["size"]: r["out_of_place"]["time_us"] for r in j["results"]}
    lat[n] = rows
cmp = []
for n, rows in lat.items():
    for size, t in sorted(rows.items()):
        ref = nccl.get(size)
        cmp.append({"ranks": n, "bytes": size, "strata_us": t, "nccl_1rank_us": ref,
                    "below": (ref is not None and t is not None and t < ref)})
summary["allreduce_latency_vs_nccl_single_rank"] = cmp
ddp = load("ddp_dropin.json")
if ddp:
    summary["nccl_dropin_ddp"] = ddp
summary["targets"]["oneshot_below_nccl_single_rank"] = {
    "met": bool(cmp) and all(c["below"] for c in cmp),
    "note": "NCCL numbers come from the 1-rank run; NCCL refuses ranks sharing a GPU"}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
print(json.dumps(summary["targets"], indent=2))
for c in cmp:
    print("n=%d %8d B  strata %s us  nccl(1 rank) %s us" % (c["ranks"], c["bytes"],
          "%8.2f" % c["strata_us"] if c["strata_us"] is not None else "n/a",
          "%.2f" % c["nccl_1rank_us"] if c["nccl_1rank_us"] is not None else "n/a"))
PY
stamp "done (status $status); files in $OUT"
exit $status
