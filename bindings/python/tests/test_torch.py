"""The "strata" torch.distributed backend, DDP over it, and examples/ddp_train.py under torchrun."""
import os
import random
import re
import subprocess
import sys

from conftest import SOURCE_DIR, launch, needs_torch

pytestmark = needs_torch


def test_backend_collectives():
    out = launch(3, "torch_backend", timeout=300)
    assert out.count("torch backend ok") == 3, out


def test_ddp_matches_gloo(tmp_path):
    """20 DDP steps from one seed on 2 ranks: over "strata", and over gloo with Strata's comm hook, the
    parameters equal gloo's (allclose, rtol 1e-5)."""
    out = launch(2, "ddp_compare", tmp_path, timeout=300)
    print(out)
    assert out.count("allclose(rtol=1e-5) True") == 4, out


def _torchrun(backend, save, port):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           os.path.join(SOURCE_DIR, "examples", "ddp_train.py"), "--backend", backend, "--save", str(save)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    assert p.returncode == 0, f"torchrun {backend} exited {p.returncode}:\n{p.stdout[-6000:]}"
    m = re.search(r"param checksum (-?[0-9.]+)", p.stdout)
    assert m, p.stdout
    assert len(re.findall(r"^step \d+ loss", p.stdout, re.M)) == 20, p.stdout
    return float(m.group(1)), p.stdout


def test_torchrun_example_matches_gloo(tmp_path):
    import torch

    port = random.randrange(20000, 31000)
    strata_sum, out = _torchrun("strata", tmp_path / "strata.pt", port)
    gloo_sum, _ = _torchrun("gloo", tmp_path / "gloo.pt", port + 7)
    a, b = torch.load(tmp_path / "strata.pt"), torch.load(tmp_path / "gloo.pt")
    diff = max(float((x - y).abs().max()) for x, y in zip(a, b))
    print(f"torchrun ddp_train.py: strata checksum {strata_sum:.10f}, gloo {gloo_sum:.10f}, max |diff| {diff:.3g}")
    assert all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a, b)), diff
    assert abs(strata_sum - gloo_sum) <= 1e-5 * max(1.0, abs(gloo_sum))
