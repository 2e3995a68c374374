"""What every stack script under tests/stacks shares: joining the process group on the backend named on the
command line (gloo or strata), and the final line run_stack.sh compares between the two backends.

The final line must be the same, byte for byte, over gloo and over strata: losses are printed with repr (the
shortest string that reads back as the same float, so every bit counts) and the parameters as the sha256 of
their bytes.
"""
import hashlib
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def init(backend):
    """Joins the default process group under torchrun's environment; returns (rank, world_size)."""
    if backend == "strata":
        import strata.torch  # noqa: F401  (registers the "strata" backend)
    # A bound on a hang: a collective that never completes fails the run instead of waiting for ctest's timeout.
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    check_backend(backend)
    # Same seed on every rank and backend: both runs start from identical weights and data.
    torch.manual_seed(0)
    return dist.get_rank(), dist.get_world_size()


def check_backend(backend):
    """Fails unless the default group runs on BACKEND: a stack that built its own group must not fall back."""
    got = dist.get_backend()
    if got != backend:
        raise RuntimeError(f"the default process group's backend is {got!r}, not {backend!r}")


def digest(tensors):
    """sha256 (hex) of the tensors' bytes, in order; tensors must be full (gathered), plain CPU tensors."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def report(stack, losses, params_digest):
    """Rank 0 prints the line run_stack.sh greps and compares: 'final STACK losses [...] params SHA'."""
    if dist.get_rank() == 0:
        text = " ".join(repr(float(x)) for x in losses)
        print(f"final {stack} world {dist.get_world_size()} losses [{text}] params {params_digest}", flush=True)


def finish():
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
