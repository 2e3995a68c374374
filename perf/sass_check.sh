#!/usr/bin/env bash
# The machine-code check of the device executor (perf/sass_check.py; ctest sass_check): the sm_90 image of the
# executor's kernels in BUILD_DIR/libstrata_cuda.so must move data in 16-byte loads and stores in its data loops,
# without spills. Then, as its own proof, the check must fail on a deliberately scalarised build of one kernel file
# (exec_float.cu with STRATA_SCALARISE_DATA_LOOPS, compiled here by nvcc for sm_90).
# usage: perf/sass_check.sh BUILD_DIR
# Exits 77 (ctest's skip) when there is no CUDA build, no nvcc, or no cuobjdump/nvdisasm, saying why.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:?usage: perf/sass_check.sh BUILD_DIR}
python=${PYTHON:-python3}
lib=$build/libstrata_cuda.so
if [[ ! -e $lib ]]; then
  echo "skipped: $lib does not exist (a build without CUDA)"
  exit 77
fi
rc=0
"$python" "$here/sass_check.py" "$lib" || rc=$?
if ((rc != 0)); then exit "$rc"; fi
if ! command -v nvcc >/dev/null; then
  echo "sass_check.sh: the library passed; the self-test needs nvcc, which is not on the PATH: skipped"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "=== self-test: exec_float.cu built with STRATA_SCALARISE_DATA_LOOPS (the check must fail) ==="
nvcc -std=c++17 -O3 -lineinfo -arch=sm_90 --expt-relaxed-constexpr -DSTRATA_SCALARISE_DATA_LOOPS \
  -I"$root/include" -I"$root/src" -c "$root/src/device/cuda/exec_float.cu" -o "$work/exec_float.o"
out=$("$python" "$here/sass_check.py" "$work/exec_float.o" 2>&1) && srC=0 || srC=$?
echo "$out" | tail -6
if ((srC == 1)) && grep -q "narrower than 16 bytes" <<<"$out"; then
  echo "sass_check.sh: passed (the library's data loops are 16-byte; the scalarised build was caught)"
  exit 0
fi
echo "sass_check.sh: FAILED: the check did not catch the scalarised data loops (exit $srC)"
exit 1
