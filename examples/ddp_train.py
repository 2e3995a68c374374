"""Trains a small MLP with DistributedDataParallel over Strata (or gloo, to compare).

    torchrun --nproc-per-node 2 examples/ddp_train.py --backend strata
    python -m strata.run -n 2 examples/ddp_train.py --backend gloo

Every rank draws its own batches from --seed and its rank, so a run is reproducible and the two backends
can be compared: rank 0 prints each step's loss (averaged over ranks) and a checksum of the final
parameters; --save FILE writes them (torch.save) for an exact comparison.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["strata", "gloo"], default="strata")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--save", help="write the final parameters here (rank 0)")
    args = p.parse_args()

    torch.set_num_threads(1)  # ranks share the host's cores
    if args.backend == "strata":
        import strata.torch  # noqa: F401  registers the backend (an installed package does so by itself)
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    # Small buckets, so that several all-reduces per step overlap backward.
    ddp = DDP(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    target = nn.Linear(16, 4)  # the function to learn, the same on every rank
    with torch.no_grad():
        target.weight.copy_(torch.linspace(-1, 1, 64).reshape(4, 16))
        target.bias.fill_(0.5)

    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for step in range(args.steps):
        x = torch.randn(args.batch, 16, generator=gen)
        with torch.no_grad():
            y = target(x)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step} loss {mean.item() / size:.6f}", flush=True)

    params = [q.detach().clone() for q in model.parameters()]
    checksum = sum(float(q.double().sum()) for q in params)
    if rank == 0:
        print(f"backend {args.backend} ranks {size} steps {args.steps} param checksum {checksum:.10f}", flush=True)
        if args.save:
            torch.save(params, args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" not in os.environ:
        raise SystemExit("run under a launcher: torchrun --nproc-per-node 2 examples/ddp_train.py "
                         "(or python -m strata.run -n 2 examples/ddp_train.py)")
    main()
