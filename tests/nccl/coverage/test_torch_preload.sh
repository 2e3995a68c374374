#!/usr/bin/env bash
# torch on the NCCL drop-in: with LD_PRELOAD=<drop-in>, `import torch` works (no missing or clashing symbol),
# torch.cuda.nccl.version() is the version of the nccl.h the drop-in was built against and unique_id() is 128
# bytes, on a machine with or without a GPU. Checks that the calls really went to the drop-in: its
# "Strata ... implementing the NCCL X.Y.Z API" line (NCCL_DEBUG=VERSION) is on stderr, the drop-in is mapped in the
# process, and nccl* resolve into it both in the global scope and from libtorch_cuda.so.
# torch's __init__ also dlopens the nvidia-nccl wheel's libnccl.so.2 by its path (RTLD_LOCAL, to front-load CUDA
# wheels), so that file is mapped too; it serves no call (the resolution checks say which file does).
# usage: test_torch_preload.sh DROPIN EXPECTED_VERSION        (e.g. build/strata-nccl/libnccl.so.2 2.30.7)
# Exit status: 0 pass, 1 fail, 77 skipped (torch is not installed).
set -uo pipefail
dropin=${1:?usage: test_torch_preload.sh DROPIN EXPECTED_VERSION}
expected=${2:?usage: test_torch_preload.sh DROPIN EXPECTED_VERSION}
dropin_real=$(readlink -f "$dropin")
# The interpreter itself, not a pyenv shim: a shim is a chain of shell scripts, each of which would load the
# preloaded library too and print its version line.
py=$(python3 -c 'import sys; print(sys.executable)') || { echo "SKIP: no python3"; exit 77; }
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "SKIP: torch is not importable by $py (scripts/install_deps.sh installs it)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cat > "$out/probe.py" <<'EOF'
import ctypes, os
import torch

print(torch.cuda.nccl.version())
print(len(torch.cuda.nccl.unique_id()))


class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]


def where(lib, name):  # the file that defines `name` as `lib`'s lookup scope finds it
    try:
        addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return "(not found)"
    info = DlInfo()
    if not dladdr(addr, ctypes.byref(info)) or not info.fname:
        return "(unknown)"
    return os.path.realpath(info.fname.decode())


process = ctypes.CDLL(None)
dladdr = process.dladdr
dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
torch_cuda = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"),
                         mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
for scope, lib in (("global", process), ("libtorch_cuda", torch_cuda)):
    for name in ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclAllReduce"):
        print("resolves", scope, name, where(lib, name))
for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnccl" in line}):
    print("mapped", os.path.realpath(path))
EOF

NCCL_DEBUG=VERSION LD_PRELOAD="$dropin_real${LD_PRELOAD:+:$LD_PRELOAD}" "$py" "$out/probe.py" \
  > "$out/stdout" 2> "$out/stderr"
rc=$?
echo "--- stdout"; cat "$out/stdout"
echo "--- stderr"; cat "$out/stderr"
echo "---"
fail=0
check() {  # description, then a command that succeeds when it holds
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
want_version="(${expected//./, })"
check "python exits 0 (got $rc)" test "$rc" -eq 0
check "no symbol error" bash -c "! grep -Eiq 'symbol lookup error|undefined symbol|version .* not found' '$out/stderr'"
check "torch.cuda.nccl.version() is $want_version" test "$(sed -n 1p "$out/stdout")" == "$want_version"
check "unique_id() has 128 bytes" test "$(sed -n 2p "$out/stdout")" == "128"
check "the drop-in's version line is on stderr" \
  grep -Eq "Strata [0-9.]+ implementing the NCCL $expected API" "$out/stderr"
check "the drop-in is mapped" grep -qxF "mapped $dropin_real" "$out/stdout"
resolved=$(grep -c "^resolves " "$out/stdout")
elsewhere=$(grep "^resolves " "$out/stdout" | grep -vc " $dropin_real\$")
check "nccl* resolve into the drop-in ($resolved lookups, $elsewhere elsewhere)" \
  test "$resolved" -eq 8 -a "$elsewhere" -eq 0
if grep "^mapped " "$out/stdout" | grep -vqxF "mapped $dropin_real"; then
  echo "note: another libnccl is mapped as well (torch dlopens the nvidia-nccl wheel's by path, RTLD_LOCAL);" \
    "every lookup above resolves into the drop-in"
fi
((fail)) && { echo "nccl_torch_preload: FAIL"; exit 1; }
echo "nccl_torch_preload: PASS"
