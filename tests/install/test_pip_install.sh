#!/usr/bin/env bash
# `pip install .` from the source tree into a fresh virtual environment, then `import strata` and a
# 2-rank all-reduce through `python -m strata.run`, from outside the source tree so nothing but the
# installed package can be imported. Build dependencies (scikit-build-core, nanobind) and numpy come from
# the system site-packages that scripts/install_deps.sh filled, so this needs no network.
# usage: test_pip_install.sh SOURCE_DIR [PYTHON]
set -euo pipefail
src=$1
py=${2:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m venv --system-site-packages "$work/venv"
# A copy of the tree, so the source checkout's own build/ and any stale _skbuild state are not used.
mkdir -p "$work/src" && (cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src")
"$work/venv/bin/pip" install -q --no-build-isolation --no-deps "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, strata, numpy as np
where = os.path.dirname(strata.__file__)
assert "/venv/" in where, f"strata imported from {where}, not the venv"
uid = strata.get_unique_id()
comm = strata.init(0, 1, uid)
x = np.arange(8, dtype=np.float32)
comm.all_reduce(x)
assert (x == np.arange(8, dtype=np.float32)).all()
print("import strata from", where, "OK")
PY
cat > "$work/ar.py" <<'PY'
import numpy as np, strata
comm = strata.init()
x = np.full(1000, comm.rank + 1, np.float64)
comm.all_reduce(x)
expect = comm.size * (comm.size + 1) / 2
assert (x == expect).all(), (x[:4], expect)
print(f"rank {comm.rank}/{comm.size}: all_reduce OK")
PY
"$work/venv/bin/python" -m strata.run -n 2 --timeout 120 "$work/ar.py"
# With torch present at build time, the wheel carries the C++ torch.distributed backend.
if "$work/venv/bin/python" -c "import torch" 2>/dev/null; then
  cat > "$work/tdist.py" <<'PY'
import torch, torch.distributed as dist, strata.torch
assert strata.torch.backend_kind() == "c++", "the installed strata.torch has no C++ backend"
dist.init_process_group("strata")
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
backend = type(dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))).__name__
assert backend == "ProcessGroupStrata" and t.tolist() == [3.0] * 4, (backend, t)
print(f"rank {dist.get_rank()}: torch.distributed over {backend} OK")
dist.destroy_process_group()
PY
  "$work/venv/bin/python" -m strata.run -n 2 --timeout 120 "$work/tdist.py"
fi
echo PASS
