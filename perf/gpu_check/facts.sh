# shellcheck shell=bash
# The GPU check's facts: what the machine and the carried build are (nvidia-smi, driver, compute mode, MIG, the
# build's architecture, its libraries, the probe, NCCL, torch), one line PASS/WARN/FAIL/SKIP each. They decide which
# steps can run: GPU_OK/GPU_WHY, MULTI_OK/MULTI_WHY, NCCL_DIR/HAVE_NCCL, TORCH_OK/TORCH_WHY.
# Sourced by perf/gpu_check.sh, whose globals (BUILD, BIN, OUT, DRY) and helpers (trim) it uses.

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
