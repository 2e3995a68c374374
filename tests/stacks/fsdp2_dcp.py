"""FSDP2 and distributed checkpointing: a small MLP sharded with torch.distributed.fsdp.fully_shard (per layer,
then the root), trained a few steps with AdamW, saved with torch.distributed.checkpoint (DCP), then restored in
a later job into a freshly built model and optimizer that continue training.

PHASE "save" trains STEPS steps and saves model and optimizer state (each rank writes its shards; the planner
agrees on the plan with gather/scatter of objects). PHASE "resume" is a new torchrun job, so a new process group:
it builds the model from another seed (a load that did nothing would show), loads the checkpoint with DCP and
trains STEPS more steps. FSDP2 runs all_gather_into_tensor for parameters in forward and backward and
reduce_scatter_tensor for gradients; full_tensor gathers the parameters whole for the digest.

usage: torchrun --nproc-per-node 2 fsdp2_dcp.py BACKEND CKPT_DIR save|resume [STEPS]
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import stack_common


def build(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    # One FSDP unit per linear layer, then the root: the usual way to wrap, and several all_gathers per step.
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def train(model, opt, first, steps, rank, world):
    losses = []
    for step in range(first, first + steps):
        # Data parallel: each rank its own batch; the step number keeps the data going on after the resume.
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses


def main():
    backend, ckpt_dir, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    rank, world = stack_common.init(backend)
    if phase == "save":
        model, opt = build(seed=0)
        losses = train(model, opt, 0, steps, rank, world)
        model_state, optim_state = get_state_dict(model, opt)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=ckpt_dir)
    elif phase == "resume":
        model, opt = build(seed=1)
        # The state dicts of the new model and optimizer name the tensors to fill (sharded as FSDP2 holds them);
        # DCP reads each rank's part of the checkpoint into them.
        model_state, optim_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=ckpt_dir)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        losses = train(model, opt, steps, steps, rank, world)
    else:
        raise SystemExit(f"unknown phase {phase!r}: save or resume")
    params = [p.full_tensor() for p in model.parameters()]
    stack_common.report(f"fsdp2_dcp {phase}", losses, stack_common.digest(params))
    stack_common.finish()


if __name__ == "__main__":
    main()
