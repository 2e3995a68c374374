"""torch.distributed over Strata.

Importing this module registers the "strata" backend (an installed package also registers it through the
`torch.distributed.backends` entry point, so the import is optional there):

    import torch.distributed as dist
    dist.init_process_group("strata")          # under torchrun or python -m strata.run
    model = torch.nn.parallel.DistributedDataParallel(model)

The backend is ProcessGroupStrata, a C++ c10d::Backend (the extension strata._strata_torch, built against the
installed torch), as torch's own backends are. It serves every collective torch routes to a backend on CPU
and CUDA tensors: all_reduce (and coalesced), all_gather (list, into_tensor, coalesced), reduce_scatter (list,
tensor, coalesced), broadcast, reduce, all_to_all (list, single with any split sizes), gather, scatter,
send/recv, barrier and monitored_barrier; coalescing (batch_isend_irecv, DDP's and FSDP's coalesced calls run
as one Strata group), split_group (strataCommSplit, no new rendezvous), sequence numbers, and Works that
report completion and carry futures. CUDA tensors follow ProcessGroupNCCL's stream model. The group's timeout
becomes the communicator's (STRATA_TIMEOUT_MS, unless set). recv without src (from any source) is
strataRecvAny, on CPU tensors; the Work's source rank names the sender.

Where the extension was not built (no torch at build time), or with STRATA_TORCH_BACKEND=python, the backend
is the Python-level one in strata._torch_python (no coalescing; see its docstring).

allreduce_hook routes DDP's gradient buckets through a Strata communicator while the model's process group
stays gloo or nccl:

    ddp.register_comm_hook(strata.torch.StrataHookState(comm), strata.torch.allreduce_hook)
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.futures import Future

from . import _comm
from ._comm import Communicator, ReduceOp
from ._torch_python import _Waiter

try:
    from . import _strata_torch
    ProcessGroupStrata = _strata_torch.ProcessGroupStrata
    _EXTENSION_ERROR = None
except ImportError as e:  # built without torch: the Python-level backend serves
    _strata_torch = None
    ProcessGroupStrata = None
    _EXTENSION_ERROR = e

__all__ = ["ProcessGroupStrata", "StrataHookState", "allreduce_hook", "backend_kind", "register"]

_BACKEND_NAME = "strata"


def backend_kind() -> str:
    """"c++" when dist.init_process_group("strata") makes ProcessGroupStrata, "python" for the fallback."""
    if os.environ.get("STRATA_TORCH_BACKEND", "").lower() == "python" or _strata_torch is None:
        return "python"
    return "c++"


def _create_backend(opts, backend_options):
    """torch's extended creator: opts is a _DistributedBackendOptions (store, group_rank, group_size, timeout,
    group_id, global_ranks_in_group, split_from)."""
    if backend_kind() == "python":
        from . import _torch_python
        return _torch_python.create_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    global_ranks = list(opts.global_ranks_in_group or [])
    split_from = getattr(opts, "split_from", None)
    if split_from is not None and isinstance(split_from, ProcessGroupStrata):
        # A new group made from the default one by strataCommSplit; torch calls perform_nocolor_split on the
        # ranks outside it.
        return split_from._split(opts.store, global_ranks, opts.timeout, opts.group_id)
    return ProcessGroupStrata(opts.store, opts.group_rank, opts.group_size, opts.timeout, opts.group_id,
                              global_ranks)


def register() -> None:
    """Registers the "strata" backend with torch.distributed (idempotent; done on import)."""
    if _BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(_BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])


register()


# ---- DDP comm hook --------------------------------------------------------------------------------------


class StrataHookState:
    """State of allreduce_hook: the Strata communicator the gradient buckets travel on (default: one made
    from the launcher's environment) and a waiter thread that completes the hook's futures."""

    def __init__(self, comm: Communicator | None = None):
        self.comm = comm if comm is not None else _comm.init()
        self._waiter = _Waiter("strata-ddp-hook")

    def __getstate__(self):
        raise TypeError("StrataHookState holds a communicator and cannot be pickled")


def allreduce_hook(state: StrataHookState, bucket) -> Future:
    """DDP comm hook: averages each gradient bucket over state.comm (Strata's AVG) instead of the
    process group, asynchronously. Register with ddp.register_comm_hook(StrataHookState(comm), allreduce_hook)."""
    tensor = bucket.buffer()
    fut = Future()
    work = state.comm.all_reduce(tensor.detach(), ReduceOp.AVG, async_op=True)
    state._waiter.submit(work, [(fut, tensor, ())])
    return fut


# DDP compares the hook's annotations with these objects; this module's annotations are strings.
allreduce_hook.__annotations__.update(bucket=dist.GradBucket, state=StrataHookState,
                                      **{"return": Future[torch.Tensor]})
