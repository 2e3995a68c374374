"""DeepSpeed ZeRO stage 3 on CPU: a small MLP whose parameters, gradients and optimizer state are partitioned
across the ranks, trained a few steps. ZeRO-3 exercises what plain DDP does not: parameters all-gathered before
every layer's forward and backward (allgather_into_tensor, coalesced), gradients reduce-scattered, broadcasts
at engine setup, and all_reduce for the loss scale and gradient norm bookkeeping.

DeepSpeed is told to use the backend on the command line through deepspeed.init_distributed(dist_backend=...).
It runs on the CPU accelerator (DS_ACCELERATOR=cpu) without compiled ops (DS_BUILD_OPS=0), so the optimizer
is torch's own AdamW handed to deepspeed.initialize, which ZeRO accepts with zero_allow_untested_optimizer.

usage: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 ds_zero3.py BACKEND [STEPS]
"""
import os
import sys

# Before deepspeed is imported: its accelerator is chosen at import time.
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import stack_common  # noqa: E402


def main():
    backend = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if backend == "strata":
        import strata.torch  # noqa: F401
    # DeepSpeed's comm layer JIT-compiles its shared-memory all_reduce op for the CPU accelerator when it starts
    # (about 100 s with g++ here, once per machine). Only inference_all_reduce uses that op, never training; marking
    # it incompatible skips the compile (on both backends alike) and needs no compiler.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    # DeepSpeed's comm layer calls torch.distributed.init_process_group with this backend under torchrun's
    # environment; the group is then the default one, which torch.distributed calls below use too.
    deepspeed.init_distributed(dist_backend=backend)
    stack_common.check_backend(backend)
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {
            "stage": 3,
            # Small thresholds so the tiny model is really partitioned and prefetched, not kept whole.
            "stage3_param_persistence_threshold": 0,
            "stage3_prefetch_bucket_size": 256,
            "reduce_bucket_size": 512,
        },
        "zero_allow_untested_optimizer": True,
        "gradient_clipping": 1.0,
        "steps_per_print": 1000,
        "wall_clock_breakdown": False,
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    losses = []
    for step in range(steps):
        # Each rank its own batch, the same on both backends.
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 32, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        losses.append(mean.item() / world)
    # ZeRO-3 leaves each rank a shard: gather every parameter whole for the digest.
    params = list(engine.module.parameters())
    # Outside a gather a ZeRO-3 parameter holds no data here (its shard lives in ds_tensor): the model really was
    # partitioned, not kept whole because it is small.
    assert all(p.numel() == 0 for p in params), "ZeRO-3 did not partition the parameters"
    with deepspeed.zero.GatheredParameters(params):
        d = stack_common.digest(params)
    stack_common.report("ds_zero3", losses, d)
    stack_common.finish()


if __name__ == "__main__":
    main()
