#!/usr/bin/env bash
# Installs every dependency Strata needs, idempotently: Debian packages, then PyPI packages.
# Safe to run repeatedly; it only calls apt-get/pip when something is missing.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwloc-dev libibverbs-dev libucx-dev
  libopenmpi-dev openmpi-bin
  libgloo-dev libopenblas-dev libpugixml-dev
  iproute2 procps bc python3-dev valgrind
  clang-format
  clang libclang-rt-14-dev
)
# module[:pip name]. nanobind and scikit-build-core build the Python package (bindings/python); torch is
# for its torch.distributed backend and DDP tests (PyPI's wheel, with its CUDA libraries: about 5 GB); expecttest
# is imported by torch's own test helpers, which tests/torch/ runs against the backend; deepspeed is for
# tests/stacks' ZeRO-3 stack (0.19.8 is the version tested, on its CPU accelerator; DS_BUILD_OPS=0 installs it
# without compiling its C++/CUDA ops, which that stack does not use).
PIP_PACKAGES=(numpy pytest matplotlib nanobind scikit_build_core:scikit-build-core torch expecttest
  deepspeed:deepspeed==0.19.8)
export DS_BUILD_OPS=0

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[install_deps] apt-get install ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pmissing=()
for entry in "${PIP_PACKAGES[@]}"; do
  module=${entry%%:*}
  package=${entry#*:}
  $PY -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$module') else 1)" 2>/dev/null ||
    pmissing+=("$package")
done
if ((${#pmissing[@]})); then
  echo "[install_deps] pip install ${pmissing[*]}"
  # --no-cache-dir: the torch wheel and its CUDA libraries are ~5 GB installed; a cached copy would double it.
  $PY -m pip install -q --no-cache-dir "${pmissing[@]}"
fi
# cuobjdump and nvdisasm (PyPI's wheels: the toolkit here has neither), which read the machine code of the executor's
# kernels for perf/sass_check.sh. They install as nvidia/cu13/bin/ in site-packages; --no-deps keeps torch's CUDA
# wheels as they are.
if ! $PY - <<'PYEOF' 2>/dev/null; then
import os, sys
sys.exit(0 if all(any(os.path.exists(os.path.join(p, "nvidia", "cu13", "bin", t)) for p in sys.path)
                  for t in ("cuobjdump", "nvdisasm")) else 1)
PYEOF
  echo "[install_deps] pip install nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37"
  $PY -m pip install -q --no-cache-dir --no-deps nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
fi
# oneCCL, a baseline of strata-perf (--baseline oneccl), in a prefix of its own: its Intel MPI runtime brings an
# mpiexec and a libmpi that must not shadow Open MPI's. 2021.16.2 is the newest CPU wheel that installs as published
# (2021.17 and later need a libfabric>=2.6 that PyPI lacks, and a libccl.so.2 only the GPU wheel has).
ONECCL_PREFIX=${ONECCL_PREFIX:-/opt/strata-deps/oneccl}
if [[ ! -e $ONECCL_PREFIX/lib/libccl.so || ! -e $ONECCL_PREFIX/include/oneapi/ccl.hpp ]]; then
  echo "[install_deps] pip install --prefix $ONECCL_PREFIX oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2"
  $PY -m pip install -q --no-cache-dir --prefix "$ONECCL_PREFIX" oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2 ||
    echo "[install_deps] oneCCL could not be installed: strata-perf is built without --baseline oneccl"
fi
echo "[install_deps] all dependencies present"
