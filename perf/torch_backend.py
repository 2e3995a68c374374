"""One rank of the torch backend benchmark (perf/torch_backend.sh runs it under strata-run, 2 ranks).

    torch_backend.py latency BACKEND ITERS   blocking dist.all_reduce of 8 B (2 float32): median us per call
                                             over 5 rounds of ITERS calls
    torch_backend.py ddp BACKEND MODEL STEPS DDP training steps on CPU: median ms per step after 3 untimed
                                             steps; MODEL is "example" (examples/ddp_train.py's MLP, batch 32)
                                             or "mlp25m" (25.2 M parameters, batch 32)

BACKEND is gloo or strata (the C++ ProcessGroupStrata; STRATA_TORCH_BACKEND=python selects the Python one), or
fake: torch's own FakeProcessGroup, a backend whose calls do nothing (one process, no launcher needed), so its
latency is the floor of torch's Python and dispatcher layers that every backend's dist.all_reduce pays.
Rank 0 prints one line: "RESULT <mode> <backend> <figure>".
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def latency(iters):
    t = torch.ones(2)
    for _ in range(200):
        dist.all_reduce(t)
    rounds = []
    for _ in range(5):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        rounds.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(rounds)


def model_of(name):
    torch.manual_seed(0)
    if name == "example":
        return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)), 16, 0.01
    if name == "mlp25m":
        # 4096x4096 + 4096x2048 + 2048x256 (+ biases): 25.3 M parameters, about 100 MB of float32 gradients.
        return nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(),
                             nn.Linear(2048, 256)), 4096, 25
    raise SystemExit(f"unknown model {name}")


def ddp(name, steps):
    model, width, bucket_mb = model_of(name)
    net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(dist.get_rank())
    times = []
    for step in range(steps + 3):
        x = torch.randn(32, width, generator=gen)
        start = time.perf_counter()
        loss = net(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    mode, backend = sys.argv[1], sys.argv[2]
    if backend == "strata":
        import strata.torch  # noqa: F401
    torch.set_num_threads(1)  # two ranks share two cores
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    else:
        dist.init_process_group(backend)
    figure = latency(int(sys.argv[3])) if mode == "latency" else ddp(sys.argv[3], int(sys.argv[4]))
    if dist.get_rank() == 0:
        print(f"RESULT {mode} {backend} {figure:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
