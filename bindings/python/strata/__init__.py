"""Strata collectives for Python: numpy arrays and DLPack tensors (torch CPU tensors included).

    import strata, numpy as np
    comm = strata.init()                  # under strata-run / torchrun / mpirun / srun
    x = np.ones(1024, np.float32)
    comm.all_reduce(x)                    # in place, sum over ranks
    work = comm.all_gather(x, async_op=True)
    gathered = work.result()              # waits; the (size, 1024) array

`strata.torch` registers the "strata" torch.distributed backend; `python -m strata.run -n 4 script.py`
starts local ranks.
"""
from ._strata import (  # noqa: F401  (re-exported)
    CudaError,
    InvalidArgumentError,
    InvalidUsageError,
    RemoteError,
    StrataError,
    StrataTimeoutError,
    UNIQUE_ID_BYTES,
    version_code,
)
from ._comm import Communicator, ReduceOp, Work, get_unique_id, group, init  # noqa: F401

__version__ = f"{version_code // 10000}.{version_code // 100 % 100}.{version_code % 100}"

__all__ = [
    "Communicator",
    "CudaError",
    "InvalidArgumentError",
    "InvalidUsageError",
    "ReduceOp",
    "RemoteError",
    "StrataError",
    "StrataTimeoutError",
    "Work",
    "get_unique_id",
    "group",
    "init",
]
