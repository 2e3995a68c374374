"""Communicator, Work and groups over the native layer (_strata).

The native layer checks every array (dtype, contiguity, sizes, device) and raises with a message naming
the argument; this layer parses ops, allocates outputs that were not given, detaches torch tensors and
finds the CUDA stream of device tensors.
"""
from __future__ import annotations

import atexit
import contextlib
import enum
import threading
import weakref

from . import _strata

class ReduceOp(enum.IntEnum):
    """Reduction operators (strataRedOp_t). Avg divides the sum by size (integers truncate)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


_OP_NAMES = {op.name.lower(): op for op in ReduceOp}


def _parse_op(op, what: str) -> int:
    if isinstance(op, str):
        parsed = _OP_NAMES.get(op.lower())
        if parsed is None:
            raise ValueError(f"{what}: unknown op {op!r}; use one of {', '.join(_OP_NAMES)}")
        return int(parsed)
    if isinstance(op, ReduceOp):
        return int(op)
    if isinstance(op, int) and not isinstance(op, bool) and 0 <= op < len(ReduceOp):
        return op
    # torch.distributed.ReduceOp (and its RedOpType) without importing torch.
    name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
    parsed = _OP_NAMES.get(str(name).lower())
    if parsed is None:
        raise ValueError(f"{what}: unsupported op {op!r}; use one of {', '.join(_OP_NAMES)}")
    return int(parsed)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _prepare(x):
    """The array to hand to the native layer, and the CUDA stream its work is ordered on: the caller's
    current stream for a torch CUDA tensor; 0 otherwise (for other device tensors the native layer uses the
    legacy default stream, and host memory takes none)."""
    if _is_torch(x):
        if x.requires_grad:
            # DLPack refuses tensors that require grad; collectives act on the data, as torch.distributed does.
            x = x.detach()
        if x.device.type == "cuda":
            import torch

            return x, torch.cuda.current_stream(x.device).cuda_stream
    return x, 0


def _empty(like, shape, what: str):
    """A new array of `shape` with like's dtype and device, for outputs the caller did not pass."""
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if hasattr(like, "__array_interface__") or hasattr(like, "__array__"):
        import numpy as np

        return np.empty(shape, dtype=np.asarray(like).dtype)
    raise TypeError(f"{what}: pass out= for a {type(like).__name__}; outputs are allocated only for numpy "
                    "arrays and torch tensors")


def _shape(x):
    return tuple(int(d) for d in x.shape)


def _numel(x) -> int:
    n = 1
    for d in _shape(x):
        n *= d
    return n


class Work:
    """Completion handle of an asynchronous call (async_op=True or strata.group(async_op=True)).

    wait(timeout=None) returns True once the work is complete and False if timeout seconds passed first;
    it raises the call's StrataError if the work failed. The arrays involved are kept alive until the work
    completes, even if this handle is dropped.
    """

    __slots__ = ("_native", "_result")

    def __init__(self, native, result=None):
        self._native = native
        self._result = result

    def wait(self, timeout: float | None = None) -> bool:
        return self._native.wait(timeout)

    def is_completed(self) -> bool:
        return self._native.is_completed()

    def result(self):
        """Waits without a limit and returns the call's output (None for barrier, send, groups)."""
        self._native.wait(None)
        return self._result

    def error(self) -> str:
        """The failure message once complete ("" while running or after success)."""
        return self._native.error()


_live = weakref.WeakSet()
_live_lock = threading.Lock()


class Communicator:
    """A group of ranks. Every collective takes numpy arrays or DLPack tensors (C-contiguous, one of
    Strata's dtypes) and works in place unless out= is given; with async_op=True it returns a Work.
    """

    def __init__(self, native):
        self._c = native
        with _live_lock:
            _live.add(self)

    # ---- properties and lifecycle -----------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    def __repr__(self) -> str:
        if not self._c.valid:
            return "<strata.Communicator (destroyed)>"
        return f"<strata.Communicator rank {self.rank} of {self.size}>"

    def split(self, color: int | None, key: int | None = None) -> Communicator | None:
        """Collective: ranks with the same color form a new communicator ordered by key (default: rank).
        color None (or negative) takes no part and gets None."""
        native = self._c.split(-1 if color is None else int(color), self.rank if key is None else int(key))
        return None if native is None else Communicator(native)

    def shrink(self, exclude, abort: bool = False) -> Communicator:
        """Collective over the remaining ranks: a new communicator of every rank but those in `exclude` (ranks of
        this one; every remaining rank passes the same list), in the same order, without a new rendezvous. Works
        after this communicator failed (a rank died): how survivors go on. abort=True revokes this one first.
        This communicator stays valid: destroy or abort it."""
        return Communicator(self._c.shrink([int(r) for r in exclude], bool(abort)))

    def revoke(self) -> None:
        """Stops this communicator's work here and on its other ranks (their calls in it fail naming this rank);
        nothing else of the job is affected. Afterwards: shrink, destroy or abort it."""
        self._c.revoke()

    def destroy(self) -> None:
        """Waits for outstanding work and frees the communicator (also done at exit)."""
        self._c.destroy()

    close = destroy

    def abort(self) -> None:
        """Stops outstanding work without waiting for peers and frees the communicator."""
        self._c.abort()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.destroy()
        else:
            self.abort()

    def explain(self, collective: str, tensor) -> str:
        """The algorithm Strata would choose for `collective` ("all_reduce", ...) called with tensor as its
        input (local: no communication)."""
        kinds = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"]
        if collective not in kinds:
            raise ValueError(f"strata.explain: unknown collective {collective!r}; use one of {', '.join(kinds)}")
        count = _numel(tensor)
        if collective in ("reduce_scatter", "all_to_all"):
            count //= self.size  # the C call's count is per rank there
        return self._c.explain(kinds.index(collective), count, tensor)

    # ---- collectives -------------------------------------------------------------------------------------
    def _finish(self, native_work, result, async_op):
        if async_op and native_work is not None:
            return Work(native_work, result)
        return result

    def all_reduce(self, tensor, op=ReduceOp.SUM, *, out=None, async_op: bool = False):
        """out (default: tensor, in place) = op over ranks of tensor."""
        op = _parse_op(op, "strata.all_reduce")
        tensor, stream = _prepare(tensor)
        out = tensor if out is None else _prepare(out)[0]
        return self._finish(self._c.all_reduce(tensor, out, op, stream, async_op), out, async_op)

    def reduce_scatter(self, tensor, op=ReduceOp.SUM, *, out=None, async_op: bool = False):
        """out (tensor's elements / size) = block `rank` of op over ranks of tensor.

        Without out, a new array of shape (tensor.shape[0] // size, *tensor.shape[1:]) is returned.
        In place when out is block `rank` of tensor."""
        op = _parse_op(op, "strata.reduce_scatter")
        tensor, stream = _prepare(tensor)
        if out is None:
            n, shape = self.size, _shape(tensor)
            if shape and shape[0] % n == 0:
                out = _empty(tensor, (shape[0] // n,) + shape[1:], "strata.reduce_scatter")
            elif _numel(tensor) % n == 0:
                out = _empty(tensor, (_numel(tensor) // n,), "strata.reduce_scatter")
            else:
                raise ValueError(f"strata.reduce_scatter: tensor has {_numel(tensor)} elements, which is not a "
                                 f"multiple of size {n}")
        else:
            out = _prepare(out)[0]
        return self._finish(self._c.reduce_scatter(tensor, out, op, stream, async_op), out, async_op)

    def all_gather(self, tensor, *, out=None, async_op: bool = False):
        """out (size x tensor's elements) = every rank's tensor in rank order.

        Without out, a new array of shape (size, *tensor.shape) is returned. In place when tensor is
        block `rank` of out."""
        tensor, stream = _prepare(tensor)
        out = _empty(tensor, (self.size,) + _shape(tensor), "strata.all_gather") if out is None else _prepare(out)[0]
        return self._finish(self._c.all_gather(tensor, out, stream, async_op), out, async_op)

    def broadcast(self, tensor, root: int = 0, *, out=None, async_op: bool = False):
        """out (default: tensor, in place) = root's tensor."""
        tensor, stream = _prepare(tensor)
        out = tensor if out is None else _prepare(out)[0]
        return self._finish(self._c.broadcast(tensor, out, int(root), stream, async_op), out, async_op)

    def reduce(self, tensor, root: int = 0, op=ReduceOp.SUM, *, out=None, async_op: bool = False):
        """On root, out (default: tensor, in place) = op over ranks of tensor; elsewhere out is untouched."""
        op = _parse_op(op, "strata.reduce")
        tensor, stream = _prepare(tensor)
        out = tensor if out is None else _prepare(out)[0]
        return self._finish(self._c.reduce(tensor, out, op, int(root), stream, async_op), out, async_op)

    def all_to_all(self, tensor, *, out=None, async_op: bool = False):
        """Block j of tensor (elements / size) goes to rank j, which stores it as its block `rank` of out
        (default: a new array shaped like tensor)."""
        tensor, stream = _prepare(tensor)
        out = _empty(tensor, _shape(tensor), "strata.all_to_all") if out is None else _prepare(out)[0]
        return self._finish(self._c.all_to_all(tensor, out, stream, async_op), out, async_op)

    def send(self, tensor, peer: int, *, async_op: bool = False):
        """Sends tensor to peer, which must post a matching recv."""
        tensor, stream = _prepare(tensor)
        return self._finish(self._c.send(tensor, int(peer), stream, async_op), None, async_op)

    def recv(self, tensor, peer: int, *, async_op: bool = False):
        """Receives into tensor from peer; returns tensor."""
        tensor, stream = _prepare(tensor)
        return self._finish(self._c.recv(tensor, int(peer), stream, async_op), tensor, async_op)

    def barrier(self, *, async_op: bool = False):
        """Returns once every rank has entered the barrier."""
        return self._finish(self._c.barrier(async_op), None, async_op)


def get_unique_id() -> bytes:
    """A rendezvous token for init(rank, size, unique_id). Call it on one rank (it starts the rendezvous
    service in that process) and give the bytes to every other rank."""
    return _strata.get_unique_id()


def init(rank: int | None = None, size: int | None = None, unique_id: bytes | None = None) -> Communicator:
    """Creates a communicator (collective over its ranks).

    init() reads the launcher's environment: strata-run / torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS).
    init(rank, size, unique_id) joins the group of the token from get_unique_id()."""
    given = [a is not None for a in (rank, size, unique_id)]
    if not any(given):
        return Communicator(_strata.Comm.from_env())
    if not all(given):
        raise TypeError("strata.init: pass rank, size and unique_id together, or none of them (environment)")
    return Communicator(_strata.Comm.init_rank(int(size), bytes(unique_id), int(rank)))


class _Group:
    __slots__ = ("work",)

    def __init__(self):
        self.work = None


@contextlib.contextmanager
def group(async_op: bool = False):
    """Calls issued inside run together when the block ends (strataGroupStart/End): send/recv pairs that
    would wait on each other, or many small collectives at once. With async_op=True the block's end returns
    at once and the context value's .work is a Work for all of them.

        with strata.group():
            comm.send(a, peer=1); comm.recv(b, peer=1)
    """
    g = _Group()
    _strata.group_start()
    try:
        yield g
    except BaseException:
        # The calls issued so far still run (peers may be waiting for them); nobody waits on them here.
        _strata.group_end(True)
        raise
    native = _strata.group_end(async_op)
    if native is not None:
        g.work = Work(native)


@atexit.register
def _destroy_live_communicators():
    with _live_lock:
        comms = list(_live)
    for c in comms:
        try:
            c._c.destroy()
        except Exception:  # exit must not fail because a peer is already gone
            pass
