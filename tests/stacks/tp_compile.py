"""Tensor parallelism with DTensor, and functional collectives under torch.compile.

Part 1, tensor parallel: a two-layer MLP over a 1-D DeviceMesh of all ranks on "cpu", the first layer split by
output columns (ColwiseParallel) and the second by input rows (RowwiseParallel), trained a few steps with SGD on
the same batch on every rank. DTensor runs the collectives: an all_reduce of the row-parallel layer's partial
sums in forward, of the input gradient in backward, and all_gather for full_tensor at the end.

Part 2, compiled: data-parallel training of a small model whose gradient averaging is a function that calls
torch.distributed._functional_collectives.all_reduce, compiled with torch.compile; the collective is traced
into the graph (as _c10d_functional.all_reduce + wait_tensor) and run from the compiled code, not eagerly.
The compiler backend is COMPILE_BACKEND (default "inductor", which generates and compiles C++; "aot_eager"
traces the same graph without a C++ compiler).

usage: torchrun --nproc-per-node 2 tp_compile.py BACKEND [STEPS]
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import stack_common


def tensor_parallel(steps, world):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # the same full weights on every rank before they are split
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        # Tensor parallelism: every rank computes on the same batch.
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 16, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Each rank holds a shard of each weight: full_tensor gathers it whole.
    params = [p.full_tensor() for p in model.parameters()]
    return losses, params


def compiled_data_parallel(steps, rank, world):
    group = dist.group.WORLD

    def average(grads):
        # One functional all_reduce per gradient; under torch.compile each becomes a graph node.
        return [funcol.all_reduce(g, "sum", group) / world for g in grads]

    compiled_average = torch.compile(average, backend=os.environ.get("COMPILE_BACKEND", "inductor"),
                                     fullgraph=True)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        # Data parallelism: each rank its own batch.
        gen = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        params = list(model.parameters())
        # The gradients and the loss in one call: one graph to compile, not one per list length.
        *grads, mean_loss = compiled_average([p.grad for p in params] + [loss.detach()])
        for p, g in zip(params, grads):
            p.grad.copy_(g)
        opt.step()
        losses.append(mean_loss.item())
    return losses, list(model.parameters())


def main():
    backend = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    rank, world = stack_common.init(backend)
    tp_losses, tp_params = tensor_parallel(steps, world)
    dp_losses, dp_params = compiled_data_parallel(steps, rank, world)
    stack_common.report("tp_compile", tp_losses + dp_losses, stack_common.digest(tp_params + dp_params))
    stack_common.finish()


if __name__ == "__main__":
    main()
