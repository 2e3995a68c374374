#!/usr/bin/env bash
# Builds what perf/gpu_check.sh runs, here on the CPU machine, so the GPU machine compiles nothing: a small build
# directory (default build-gpu) for sm_90 only (H100/H200), CUDA on, UCX/MPI/hwloc/ibverbs and the Python package
# off, Release, and only the check's targets. Then it prints the directory's size: the device tool carries the
# working tree (tracked and untracked files git does not ignore) plus the carried paths, 64 MiB in all.
#   scripts/build_gpu_check.sh [--slim] [BUILD_DIR]     (JOBS=n, default nproc; CUDA_ARCH=90)
# --slim deletes the object files and static archives after the build (the next build recompiles everything);
# it is applied on its own when the tree and the directory together would exceed CARRY_LIMIT_MIB (default 60, a
# margin under the tool's 64).
# Then, on the device: run(command="perf/gpu_check.sh perf/results/gpu/<date>", carry=["build-gpu"]).
# Exit status: 0 when built and under the limit, 1 otherwise.
set -uo pipefail
slim=0
if [[ ${1:-} == --slim ]]; then
  slim=1
  shift
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD
JOBS=${JOBS:-$(nproc)}
ARCH=${CUDA_ARCH:-90}
LIMIT_MIB=${CARRY_LIMIT_MIB:-60}
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
stamp() { echo "=== [$(($(date +%s) - T0)) s] $*"; }

if ! command -v nvcc >/dev/null; then
  echo "nvcc not found (PATH, /usr/local/cuda/bin): the check needs libstrata_cuda.so, which only nvcc can build"
  exit 1
fi
gen=Ninja
command -v ninja >/dev/null || gen="Unix Makefiles"
# Configure once; later builds re-run CMake only when its inputs changed.
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  stamp "configure $BUILD (sm_$ARCH, $gen)"
  # STRATA_TESTS_WITHOUT_GTEST: GoogleTest and Google Benchmark are optional (without GoogleTest the kernel tests
  # are not built, and the check reports them not built). CMAKE_BUILD_RPATH_USE_ORIGIN: the binaries find
  # libstrata.so through $ORIGIN, so the directory works wherever the device's checkout is.
  if ! cmake -S "$ROOT" -B "$BUILD" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DSTRATA_WITH_CUDA=ON \
    -DSTRATA_CUDA_ARCHITECTURES="$ARCH" -DSTRATA_WITH_UCX=OFF -DSTRATA_WITH_MPI=OFF -DSTRATA_WITH_HWLOC=OFF \
    -DSTRATA_WITH_IBVERBS=OFF -DSTRATA_BUILD_PYTHON=OFF -DSTRATA_LAYER_CHECK=OFF -DSTRATA_TESTS_WITHOUT_GTEST=ON \
    -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON >"$BUILD.configure.log" 2>&1; then
    tail -30 "$BUILD.configure.log"
    echo "configure FAILED (log: $BUILD.configure.log)"
    exit 1
  fi
  grep -E "strata: (CUDA|NCCL)|GoogleTest" "$BUILD.configure.log"
fi

targets=(strata strata_cuda strata-run strata-perf strata_gpu_coll_test strata_bench_gpu_reduce)
have_target() { grep -q "/$1.dir\$" "$BUILD/CMakeFiles/TargetDirectories.txt" 2>/dev/null; }
# Optional: the kernel tests need GoogleTest; the NCCL drop-in and its nccl.h program need an nccl.h at configure.
for t in strata_gpu_kernel_tests strata_nccl strata_nccl_api_test; do
  if have_target "$t"; then
    targets+=("$t")
  else
    echo "(target $t is not defined in this configuration: its steps will report it not built)"
  fi
done
stamp "build (-j $JOBS): ${targets[*]}"
if ! cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$BUILD/build_gpu_check.log" 2>&1; then
  grep -E "error|FAILED" -A5 "$BUILD/build_gpu_check.log" | head -60
  echo "build FAILED (log: $BUILD/build_gpu_check.log)"
  exit 1
fi

# The test programs link the shared CUDA runtime (libstrata_cuda.so has it statically): a copy travels along for a
# device whose image lacks libcudart.so.13: gpu_check.sh adds this folder to LD_LIBRARY_PATH only then.
cudalib=$(sed -n 's/^CUDAToolkit_LIBRARY_DIR:PATH=//p' "$BUILD/CMakeCache.txt")
mkdir -p "$BUILD/cuda-runtime"
cp -P "${cudalib:-/usr/local/cuda/lib64}"/libcudart.so.* "$BUILD/cuda-runtime/" 2>/dev/null ||
  echo "(no libcudart.so.* in ${cudalib:-/usr/local/cuda/lib64}: not copied)"

size_mib() { du -sb "$1" | awk '{printf "%.1f", $1 / 1048576}'; }
# What travels besides: the working tree as the device tool sends it (a build folder inside it is ignored by git).
tree=$(git -C "$ROOT" ls-files -co --exclude-standard -z 2>/dev/null | (cd "$ROOT" && xargs -0 stat -c %s 2>/dev/null) |
  awk '{ s += $1 } END { printf "%.1f", s / 1048576 }')
over() { awk -v b="$1" -v t="$tree" -v l="$LIMIT_MIB" 'BEGIN { exit !(b + t > l) }'; }
total=$(size_mib "$BUILD")
if ((slim == 0)) && over "$total"; then
  echo "$BUILD ($total MiB) and the tree ($tree MiB) exceed $LIMIT_MIB MiB: dropping object files (--slim)"
  slim=1
fi
if ((slim)); then
  find "$BUILD" \( -name '*.o' -o -name '*.a' \) -type f -delete
  total=$(size_mib "$BUILD")
fi
stamp "built $BUILD: $total MiB; with the working tree ($tree MiB) $(awk -v b="$total" -v t="$tree" \
  'BEGIN { printf "%.1f", b + t }') MiB of the device tool's 64 MiB"
# What the check runs, and what takes the room.
(cd "$BUILD" && find . -maxdepth 2 -type f \( -path './bin/*' -o -name 'lib*.so*' \) -printf '%s %p\n' |
  sort -k2 | awk '{printf "  %8.1f MiB  %s\n", $1 / 1048576, $2}')
du -sb "$BUILD"/* 2>/dev/null | sort -rn | head -5 | awk '{printf "  %8.1f MiB  %s (folder total)\n", $1 / 1048576, $2}'
if over "$total"; then
  echo "FAIL: $BUILD ($total MiB) and the tree ($tree MiB) still exceed $LIMIT_MIB MiB: they cannot be carried"
  exit 1
fi
echo "carry it: run(command=\"perf/gpu_check.sh perf/results/gpu/\$(date +%F)\", carry=[\"$(basename "$BUILD")\"])"
