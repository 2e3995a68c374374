# A few DDP steps of a small model, 2 ranks on one GPU; rank 0 prints the final loss (averaged over the ranks)
# and whether the parameters are equal on every rank. usage: torchrun --nproc-per-node 2 ddp_dropin.py BACKEND STEPS
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend, steps = sys.argv[1], int(sys.argv[2])
if backend == "strata":
    import strata.torch  # noqa: F401  (ProcessGroupStrata, from PYTHONPATH=$BUILD/python)
device = torch.device("cuda:0")  # every rank on the one GPU
torch.cuda.set_device(device)
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same initial weights on every rank and in every run
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
ddp = DDP(model, device_ids=[0])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches, the same in every run
for step in range(steps):
    x = torch.randn(64, 32, generator=data).to(device)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
final = loss.detach().clone()
dist.all_reduce(final)
checksum = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum()
# Equal on every rank when the largest equals the least (all-reduce: what gloo supports on CUDA tensors).
hi, lo = checksum.clone(), checksum.clone()
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
if rank == 0:
    same = bool(hi == lo)
    print("DDP %s: %d ranks, %d steps, final loss %.9g, parameter checksum %.12g, equal on every rank: %s"
          % (backend, world, steps, final.item() / world, checksum.item(), same))
    print("FINAL_LOSS %.9g" % (final.item() / world))
    print("PARAMS_EQUAL %s" % same)
# No barrier: ProcessGroupNCCL's barrier picks GPU `rank`, which one GPU does not have.
dist.destroy_process_group()
