"""Trains a small MLP with DistributedDataParallel over Strata (or gloo, to compare).

    torchrun --nproc-per-node 2 examples/ddp_train.py --backend strata
    python -m strata.run -n 2 examples/ddp_train.py --backend gloo

Every rank draws its own batches from --seed and its rank, so a run is reproducible and the backends can
be compared: rank 0 prints each step's loss (averaged over ranks) and a checksum of the final parameters;
--save FILE writes them (torch.save) for an exact comparison. --hook routes DDP's gradient buckets through
Strata (strata.torch.allreduce_hook) while the process group stays gloo.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(steps=20, batch=32, lr=0.02, seed=1234, comm_hook=None, log=None):
    """Trains in the current process group; returns (per-step losses averaged over ranks, parameters)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    # Small buckets, so that several all-reduces per step overlap backward.
    ddp = DDP(model, bucket_cap_mb=0.01)
    if comm_hook is not None:
        import strata.torch

        ddp.register_comm_hook(comm_hook, strata.torch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    target = nn.Linear(16, 4)  # the function to learn, the same on every rank
    with torch.no_grad():
        target.weight.copy_(torch.linspace(-1, 1, 64).reshape(4, 16))
        target.bias.fill_(0.5)

    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    losses = []
    for step in range(steps):
        x = torch.randn(batch, 16, generator=gen)
        with torch.no_grad():
            y = target(x)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / size)
        if log:
            log(f"step {step} loss {losses[-1]:.6f}")
    return losses, [q.detach().clone() for q in model.parameters()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["strata", "gloo"], default="strata")
    p.add_argument("--hook", action="store_true", help="all-reduce gradients with Strata's DDP comm hook")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--save", help="write the final parameters here (rank 0)")
    args = p.parse_args()

    torch.set_num_threads(1)  # ranks share the host's cores
    if args.backend == "strata" or args.hook:
        import strata.torch  # registers the backend (an installed package also does so by itself)
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    # The hook's communicator comes from the launcher's environment, like the process group.
    hook = strata.torch.StrataHookState() if args.hook else None
    log = (lambda s: print(s, flush=True)) if rank == 0 else None
    losses, params = train(args.steps, args.batch, args.lr, args.seed, hook, log)
    checksum = sum(float(q.double().sum()) for q in params)
    if rank == 0:
        via = "gloo + strata hook" if args.hook else args.backend
        print(f"backend {via} ranks {size} steps {args.steps} loss {losses[0]:.6f} -> {losses[-1]:.6f} "
              f"param checksum {checksum:.10f}", flush=True)
        if args.save:
            torch.save(params, args.save)
    # Leave together: gloo has been seen to abort at exit ("terminate called without an active exception")
    # when one rank tears its group down while its peer is still finishing the last step.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" not in os.environ:
        raise SystemExit("run under a launcher: torchrun --nproc-per-node 2 examples/ddp_train.py "
                         "(or python -m strata.run -n 2 examples/ddp_train.py)")
    main()
