"""The Python-level torch.distributed backend: the fallback of strata.torch where the C++ backend
(strata._strata_torch) was not built, or when STRATA_TORCH_BACKEND=python asks for it.

A Python subclass of torch's c10d Backend over strata's Python bindings. It serves what the C++ backend serves
except what torch does not dispatch to Python backends: startCoalescing/endCoalescing (batch_isend_irecv runs
call by call) and Work.is_completed() (the Work torch wraps around ours reports False until waited).
"""
from __future__ import annotations

import datetime
import os
import queue
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import ReduceOp as _TorchReduceOp
from torch.futures import Future

from . import _comm
from ._comm import Communicator, ReduceOp

__all__ = ["StrataBackend", "create_backend"]

_BACKEND_NAME = "strata"

# Strata's dtypes; other dtypes travel as bytes where no arithmetic is needed.
_NATIVE = {
    torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64,
    torch.bfloat16,
}
for _name in ("uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _NATIVE.add(getattr(torch, _name))

_OPS = {
    _TorchReduceOp.RedOpType.SUM: ReduceOp.SUM,
    _TorchReduceOp.RedOpType.AVG: ReduceOp.AVG,
    _TorchReduceOp.RedOpType.PRODUCT: ReduceOp.PROD,
    _TorchReduceOp.RedOpType.MIN: ReduceOp.MIN,
    _TorchReduceOp.RedOpType.MAX: ReduceOp.MAX,
}


def _op(reduce_op, what: str) -> ReduceOp:
    kind = getattr(reduce_op, "op", reduce_op)
    try:
        return _OPS[kind]
    except (KeyError, TypeError):
        raise ValueError(f"strata backend: {what} does not support reduce op {kind}; "
                         "use SUM, AVG, PRODUCT, MIN or MAX") from None


class _Prepared:
    """Tensors as Strata takes them (contiguous, a Strata dtype) plus the copies back that follow."""

    def __init__(self):
        self.post = []

    def arg(self, t: torch.Tensor, what: str, reduce_op: ReduceOp | None = None, writes: bool = False):
        t = t.detach()
        src = t
        if not t.is_contiguous():
            t = t.contiguous()
        if t.dtype not in _NATIVE:
            if t.dtype == torch.bool and reduce_op is not None:
                # bool: sum and max are logical or, prod and min logical and (as gloo computes them).
                t = t.to(torch.uint8)
            elif reduce_op is None:
                t = t.reshape(-1).view(torch.uint8)
            else:
                raise TypeError(f"strata backend: {what} cannot reduce dtype {t.dtype}; Strata reduces "
                                f"int8, uint8, int32, int64, float16, bfloat16, float32, float64 (and bool)")
        if writes and t.data_ptr() != src.data_ptr():
            self.post.append((src, t))
        return t

    def finish(self):
        for dst, staged in self.post:
            if staged.dtype != dst.dtype and dst.dtype != torch.bool:
                staged = staged.view(dst.dtype)  # a byte view of the original dtype
            dst.copy_(staged.reshape(dst.shape))


def _bool_op(t: torch.Tensor, op: ReduceOp) -> ReduceOp:
    if t.dtype == torch.bool:
        return ReduceOp.MAX if op in (ReduceOp.SUM, ReduceOp.MAX) else ReduceOp.MIN
    return op


class _Waiter:
    """One thread per process group: waits for each Strata Work in issue order (the order a communicator
    completes them in) and completes its torch Futures. It blocks in Strata's wait with the GIL released."""

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, work, calls):
        """calls: (future, value, copies back) completed, in order, once work is done."""
        self._queue.put((work, calls))

    def stop(self):
        self._queue.put(None)

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, calls = item
            try:
                if work is not None:
                    work.wait()
            except BaseException as e:  # the Futures carry the failure to whoever waits on them
                for fut, _, _ in calls:
                    fut.set_exception(e)
                continue
            for fut, value, post in calls:
                try:
                    for fn in post:
                        fn()
                except BaseException as e:
                    fut.set_exception(e)
                    continue
                fut.set_result(value)


class _FutureWork(dist.Work):
    """torch's Work over the Future the waiter completes. (The Work _create_work_from_future makes never
    reports is_completed(), so DDP-style polling would spin; this one answers from the Future.)"""

    def __init__(self, fut: Future):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None) -> bool:
        self._fut.wait()  # raises the collective's error
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            raise RuntimeError("strata backend: is_success() called before the work completed")
        try:
            self._fut.value()
        except Exception:
            return False
        return True

    def exception(self):
        try:
            self._fut.value()
        except Exception as e:
            return e
        return None

    def get_future(self) -> Future:
        return self._fut


class StrataBackend(_C10dBackend):
    """A torch.distributed backend whose collectives run on a Strata communicator."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None = None,
                 comm: Communicator | None = None):
        super().__init__(rank, size)
        if comm is None:
            comm = _init_from_store(store, rank, size, timeout)
        self.comm = comm
        self._waiter = _Waiter(f"strata-backend-{rank}")

    # Plain attributes shadowing the C++ properties: torch reads them with getattr(), and for a Python
    # backend that lookup recurses between pybind's property and the trampoline's override check.
    # startCoalescing/endCoalescing do not reach Python backends, so batch_isend_irecv and
    # _coalescing_manager issue calls one by one (still asynchronous); the fast paths (allreduce_coalesced,
    # all_gather_single_coalesced, reduce_scatter_single_coalesced) run each batch as one Strata group.
    supports_coalescing = False
    supports_splitting = False

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return _BACKEND_NAME

    def __del__(self):
        waiter = getattr(self, "_waiter", None)
        if waiter is not None:
            waiter.stop()

    def shutdown(self):
        self._waiter.stop()
        self.comm.destroy()

    def abort(self):
        self._waiter.stop()
        self.comm.abort()

    # ---- plumbing -----------------------------------------------------------------------------------------
    def _run(self, issue, result, prep: _Prepared | None = None, after=()):
        """issue() issues Strata calls; they run as one asynchronous group. The returned Work completes
        (with `result` as its Future's value) after they finish and the copies back are done."""
        fut = Future()
        post = ([prep.finish] if prep is not None and prep.post else []) + list(after)
        with _comm.group(async_op=True) as g:
            issue()
        self._waiter.submit(g.work, [(fut, result, post)])
        return _FutureWork(fut)

    # ---- collectives (the method names and signatures torch's Python backend trampoline calls) -----------
    def allreduce(self, tensors, opts):
        op = _op(opts.reduceOp, "allreduce")
        prep = _Prepared()
        args = [(prep.arg(t, "allreduce", op, writes=True), _bool_op(t, op)) for t in tensors]
        return self._run(lambda: [self.comm.all_reduce(a, o) for a, o in args], list(tensors), prep)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        prep = _Prepared()
        args = [prep.arg(t, "broadcast", writes=True) for t in tensors]
        return self._run(lambda: [self.comm.broadcast(a, opts.rootRank) for a in args], list(tensors), prep)

    def reduce(self, tensors, opts):
        op = _op(opts.reduceOp, "reduce")
        prep = _Prepared()
        args = [(prep.arg(t, "reduce", op, writes=True), _bool_op(t, op)) for t in tensors]
        return self._run(lambda: [self.comm.reduce(a, opts.rootRank, o) for a, o in args], list(tensors), prep)

    def all_gather_single(self, output, input, opts):  # noqa: A002 (torch's name)
        return self.all_gather_single_coalesced([output], [input], opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        prep = _Prepared()
        pairs = [(prep.arg(i, "all_gather"), prep.arg(o, "all_gather", writes=True)) for o, i in zip(outputs, inputs)]
        return self._run(lambda: [self.comm.all_gather(i, out=o) for i, o in pairs], list(outputs), prep)

    def allgather(self, output_lists, inputs, opts):
        # The outputs are separate tensors: gather into one buffer, then copy each block out.
        prep = _Prepared()
        staged = []
        for outs, inp in zip(output_lists, inputs):
            src = prep.arg(inp, "allgather")
            flat = torch.empty((self.size(),) + tuple(src.shape), dtype=src.dtype)
            staged.append((src, flat, outs))

        def copy_out():
            for src, flat, outs in staged:
                for block, out in zip(flat, outs):
                    out.copy_(block.view(out.dtype).reshape(out.shape) if block.dtype != out.dtype else
                              block.reshape(out.shape))

        return self._run(lambda: [self.comm.all_gather(s, out=f) for s, f, _ in staged], list(output_lists),
                         prep, after=[copy_out])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts):  # noqa: A002
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        op = _op(opts.reduceOp, "reduce_scatter")
        prep = _Prepared()
        pairs = [(prep.arg(i, "reduce_scatter", op), prep.arg(o, "reduce_scatter", op, writes=True),
                  _bool_op(i, op)) for o, i in zip(outputs, inputs)]
        return self._run(lambda: [self.comm.reduce_scatter(i, o2, out=o) for i, o, o2 in pairs], list(outputs), prep)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, outputs, input_lists, opts):
        op = _op(opts.reduceOp, "reduce_scatter")
        prep = _Prepared()
        pairs = []
        for out, ins in zip(outputs, input_lists):
            flat = torch.cat([prep.arg(t, "reduce_scatter", op).reshape(-1) for t in ins])
            pairs.append((flat, prep.arg(out, "reduce_scatter", op, writes=True), _bool_op(out, op)))
        return self._run(lambda: [self.comm.reduce_scatter(f, o2, out=o) for f, o, o2 in pairs], list(outputs), prep)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        n = self.size()
        prep = _Prepared()
        src = prep.arg(input, "all_to_all")
        dst = prep.arg(output, "all_to_all", writes=True)
        if not output_split_sizes and not input_split_sizes:
            return self._run(lambda: self.comm.all_to_all(src, out=dst), output, prep)
        # Uneven splits (in rows of dim 0): one send and one receive per peer, all in one group.
        row_in = src.numel() // max(src.shape[0], 1) if src.dim() else 1
        row_out = dst.numel() // max(dst.shape[0], 1) if dst.dim() else 1
        ins = list(input_split_sizes) or [src.shape[0] // n] * n
        outs = list(output_split_sizes) or [dst.shape[0] // n] * n
        s_flat, d_flat = src.reshape(-1), dst.reshape(-1)
        s_off = [sum(ins[:j]) * row_in for j in range(n)]
        d_off = [sum(outs[:j]) * row_out for j in range(n)]
        me = self.rank()

        def issue():
            for j in range(n):
                if j == me:
                    continue
                self.comm.send(s_flat[s_off[j]:s_off[j] + ins[j] * row_in], j)
                self.comm.recv(d_flat[d_off[j]:d_off[j] + outs[j] * row_out], j)

        def copy_own():
            d_flat[d_off[me]:d_off[me] + outs[me] * row_out].copy_(s_flat[s_off[me]:s_off[me] + ins[me] * row_in])

        copy_own()
        return self._run(issue, output, prep)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, outputs, inputs, opts):
        n, me = self.size(), self.rank()
        prep = _Prepared()
        srcs = [prep.arg(t, "alltoall") for t in inputs]
        dsts = [prep.arg(t, "alltoall", writes=True) for t in outputs]
        dsts[me].copy_(srcs[me].reshape(dsts[me].shape))

        def issue():
            for j in range(n):
                if j != me:
                    self.comm.send(srcs[j], j)
                    self.comm.recv(dsts[j], j)

        return self._run(issue, list(outputs), prep)

    def gather(self, output_lists, inputs, opts):
        root, me = opts.rootRank, self.rank()
        prep = _Prepared()
        src = prep.arg(inputs[0], "gather")
        outs = [prep.arg(t, "gather", writes=True) for t in output_lists[0]] if me == root else []

        def issue():
            if me != root:
                self.comm.send(src, root)
                return
            for j in range(self.size()):
                if j != me:
                    self.comm.recv(outs[j], j)

        if me == root:
            outs[me].copy_(src.reshape(outs[me].shape))
        return self._run(issue, list(output_lists), prep)

    def scatter(self, outputs, input_lists, opts):
        root, me = opts.rootRank, self.rank()
        prep = _Prepared()
        dst = prep.arg(outputs[0], "scatter", writes=True)
        ins = [prep.arg(t, "scatter") for t in input_lists[0]] if me == root else []

        def issue():
            if me != root:
                self.comm.recv(dst, root)
                return
            for j in range(self.size()):
                if j != me:
                    self.comm.send(ins[j], j)

        if me == root:
            dst.copy_(ins[me].reshape(dst.shape))
        return self._run(issue, list(outputs), prep)

    def barrier(self, opts=None):
        return self._run(lambda: self.comm.barrier(), None)

    def send(self, tensors, dst_rank, tag=0):
        prep = _Prepared()
        args = [prep.arg(t, "send") for t in tensors]
        return self._run(lambda: [self.comm.send(a, dst_rank) for a in args], list(tensors), prep)

    def recv(self, tensors, src_rank, tag=0):
        prep = _Prepared()
        args = [prep.arg(t, "recv", writes=True) for t in tensors]
        return self._run(lambda: [self.comm.recv(a, src_rank) for a in args], list(tensors), prep)


def _init_from_store(store, rank: int, size: int, timeout) -> Communicator:
    """Rank 0 makes the unique id and publishes it in the group's store; every rank joins with it. The key is
    numbered by how many groups this rank has made on the store, as the C++ backend's is: a store that outlives
    the group must not hand the last generation's id to this one."""
    key = f"strata_unique_id/{store.add(f'strata_generation/{rank}', 1)}"
    if rank == 0:
        uid = _comm.get_unique_id()
        store.set(key, uid)
    else:
        uid = bytes(store.get(key))
    # torch's timeout becomes Strata's deadline unless STRATA_TIMEOUT_MS says otherwise.
    saved = os.environ.get("STRATA_TIMEOUT_MS")
    if saved is None and timeout is not None:
        os.environ["STRATA_TIMEOUT_MS"] = str(int(timeout.total_seconds() * 1000))
    try:
        return _comm.init(rank, size, uid)
    finally:
        if saved is None:
            os.environ.pop("STRATA_TIMEOUT_MS", None)


def create_backend(store, rank, size, timeout):
    return StrataBackend(store, rank, size, timeout)
