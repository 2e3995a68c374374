"""Pipeline parallelism with torch.distributed.pipelining: a small MLP cut in two stages, stage 0 on rank 0 and
stage 1 on rank 1, trained a few steps with the 1F1B schedule (Schedule1F1B: one forward, one backward,
alternating per microbatch once the pipeline is full). The stages exchange activations forward and gradients
backward with point-to-point send/recv (batch_isend_irecv), which plain data parallelism never uses.

Rank 1, the last stage, computes the loss per microbatch; the mean is sent to rank 0 for the report, and each
stage's parameters are gathered whole to rank 0 for the digest.

usage: torchrun --nproc-per-node 2 pipeline_1f1b.py BACKEND [STEPS]
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

import stack_common

MICROBATCHES = 4


def main():
    backend = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    rank, world = stack_common.init(backend)
    if world != 2:
        raise SystemExit("pipeline_1f1b.py runs two stages: one per rank, world size 2")
    # Every rank builds the whole model from the same seed and keeps its half: the two halves together are
    # exactly the model one process would train.
    full = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32),
                         nn.Tanh(), nn.Linear(32, 4))
    part = full[:4] if rank == 0 else full[4:]
    stage = PipelineStage(part, stage_index=rank, num_stages=world, device=torch.device("cpu"))
    # The loss is the last stage's; the schedule averages it over microbatches for the backward.
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(part.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        # Both ranks draw the same batch; only stage 0 feeds the inputs and only the last stage the targets.
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(16, 16, generator=gen)
        y = torch.randn(16, 4, generator=gen)
        opt.zero_grad()
        mb_losses = []
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=mb_losses)
        opt.step()
        # The step's loss (mean over microbatches) from the last stage to everyone.
        loss = torch.stack(mb_losses).mean().detach() if rank == 1 else torch.zeros(())
        dist.broadcast(loss, src=1)
        losses.append(loss.item())
    # Rank 0 gets both stages' parameters in stage order.
    gathered = [None] * world
    dist.all_gather_object(gathered, [p.detach() for p in part.parameters()])
    stack_common.report("pipeline_1f1b", losses, stack_common.digest([p for ps in gathered for p in ps]))
    stack_common.finish()


if __name__ == "__main__":
    main()
