"""The "strata" torch.distributed backend, DDP over it, and examples/ddp_train.py under torchrun."""
import os
import random
import re
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR, launch, needs_torch

pytestmark = needs_torch


def test_backend_collectives():
    out = launch(3, "torch_backend", timeout=300)
    assert out.count("torch backend ok") == 3, out


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """20 DDP steps of examples/ddp_train.py's model from one seed on 2 ranks: over gloo, over "strata", and
    over gloo with Strata's comm hook (one job; rank 0 leaves gloo's parameters in gloo.pt)."""
    d = tmp_path_factory.mktemp("ddp")
    return d, launch(2, "ddp_compare", d, timeout=300)


def test_ddp_matches_gloo(ddp_runs):
    _, out = ddp_runs
    print(out)
    assert out.count("allclose(rtol=1e-5) True") == 4, out


def test_torchrun_example_matches_gloo(ddp_runs, tmp_path):
    """torchrun --nproc-per-node 2 examples/ddp_train.py --backend strata ends where gloo does."""
    import torch

    ref_dir, _ = ddp_runs
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(random.randrange(20000, 32000)),
           os.path.join(SOURCE_DIR, "examples", "ddp_train.py"), "--backend", "strata",
           "--save", str(tmp_path / "strata.pt")]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, f"torchrun exited {p.returncode}:\n{p.stdout[-6000:]}"
    assert len(re.findall(r"^step \d+ loss", p.stdout, re.M)) == 20, p.stdout
    assert re.search(r"^backend strata ranks 2 steps 20 .* param checksum -?[0-9.]+$", p.stdout, re.M), p.stdout
    got, ref = torch.load(tmp_path / "strata.pt"), torch.load(ref_dir / "gloo.pt")
    diff = max(float((a - b).abs().max()) for a, b in zip(got, ref))
    print(f"torchrun ddp_train.py --backend strata vs gloo: max |diff| {diff:.3g}")
    assert len(got) == len(ref) and all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, ref)), diff
