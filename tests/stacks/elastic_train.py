"""An elastic job as torchrun runs one: DDP training that checkpoints every step and resumes from the last
checkpoint after a restart. On the first attempt (TORCHELASTIC_RESTART_COUNT=0) rank 1 kills itself at step
KILL_STEP, so the agent stops the other rank and starts both again; the second attempt re-creates the process
group on the agent's store (which outlived the first) and finishes. Rank 0 prints the final loss and a digest of
the parameters, which must equal those of the same job over gloo.

usage: torchrun --nproc-per-node 2 --max-restarts 1 elastic_train.py BACKEND CKPT_DIR [STEPS] [KILL_STEP]
"""
import hashlib
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    backend, ckpt_dir = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    kill_step = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    if backend == "strata":
        import strata.torch  # noqa: F401
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The group's timeout bounds a gloo restart that reads a stale peer address (see test_elastic_restart.sh); it
    # is the same for both backends. ELASTIC_PG_TIMEOUT_S overrides it.
    dist.init_process_group(backend, timeout=timedelta(seconds=float(os.environ.get("ELASTIC_PG_TIMEOUT_S", "30"))))
    r = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path = os.path.join(ckpt_dir, "last.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
    ddp = DDP(model)
    for step in range(start, steps):
        if attempt == 0 and r == 1 and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000 * step + r)
        x = torch.randn(16, 32, generator=gen)
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        dist.barrier()  # every rank finished the step: rank 0's checkpoint below is the step's
        if r == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()
    if r == 0:
        digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
        print(f"final attempt {attempt} loss {mean.item() / dist.get_world_size():.9f} params {digest[:16]}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
