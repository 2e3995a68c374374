"""Bad input raises an exception that names what was wrong (a one-rank communicator in this process)."""
import ctypes

import numpy as np
import pytest

import strata


@pytest.fixture(scope="module")
def comm():
    c = strata.init(0, 1, strata.get_unique_id())
    yield c
    c.destroy()


def test_unsupported_dtype(comm):
    with pytest.raises(TypeError, match=r"strata.all_reduce: tensor has dtype int16, which Strata does not support"):
        comm.all_reduce(np.ones(4, np.int16))
    with pytest.raises(TypeError, match="dtype complex64"):
        comm.broadcast(np.ones(4, np.complex64))
    with pytest.raises(TypeError, match="dtype bool"):
        comm.all_gather(np.ones(4, bool))


def test_non_contiguous(comm):
    x = np.ones((4, 6), np.float32)[:, ::2]
    with pytest.raises(ValueError, match=r"strata.all_reduce: tensor is not contiguous \(shape \(4, 3\), "
                                         r"strides \(6, 2\) in elements\)"):
        comm.all_reduce(x)
    with pytest.raises(ValueError, match="output is not contiguous"):
        comm.all_reduce(np.ones(4, np.float32), out=np.ones(8, np.float32)[::2])
    # A transposed (Fortran-ordered) array is dense but its elements are not in order.
    with pytest.raises(ValueError, match="not contiguous"):
        comm.all_gather(np.ones((3, 2), np.float32).T)
    # Degenerate strides are fine: one element, or extents of 1.
    comm.all_reduce(np.ones((1, 5), np.float32)[:, :1])


def test_size_mismatch(comm):
    with pytest.raises(ValueError, match="strata.all_reduce: output has 3 elements but tensor has 4"):
        comm.all_reduce(np.ones(4, np.float32), out=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"strata.all_gather: output has 5 elements; it must have size x tensor "
                                         r"elements = 1 x 4 = 4"):
        comm.all_gather(np.ones(4, np.float32), out=np.ones(5, np.float32))
    with pytest.raises(ValueError, match=r"strata.reduce_scatter: tensor has 4 elements; it must have size x output"):
        comm.reduce_scatter(np.ones(4, np.float32), out=np.ones(2, np.float32))
    with pytest.raises(ValueError, match="strata.broadcast: output has 2 elements but tensor has 4"):
        comm.broadcast(np.ones(4, np.float32), out=np.ones(2, np.float32))


def test_mismatched_dtypes(comm):
    with pytest.raises(TypeError, match="strata.all_reduce: tensor has dtype float32 but output has dtype float64"):
        comm.all_reduce(np.ones(4, np.float32), out=np.ones(4, np.float64))
    with pytest.raises(TypeError, match="tensor has dtype int32 but output has dtype int64"):
        comm.all_gather(np.ones(4, np.int32), out=np.ones(4, np.int64))


def test_not_an_array_and_read_only(comm):
    with pytest.raises(TypeError, match="strata.all_reduce: tensor must be a numpy array or a DLPack tensor.*got list"):
        comm.all_reduce([1.0, 2.0])
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="strata.all_reduce: output is read-only"):
        comm.all_reduce(ro)
    comm.all_reduce(ro, out=np.empty(4, np.float32))  # a read-only input is fine


def test_bad_op_root_peer(comm):
    with pytest.raises(ValueError, match="unknown op 'mean'"):
        comm.all_reduce(np.ones(2), "mean")
    with pytest.raises(strata.InvalidArgumentError, match="root 3 is not a rank of this 1-rank communicator") as e:
        comm.broadcast(np.ones(2), root=3)
    assert e.value.code_name == "strataInvalidArgument" and isinstance(e.value, ValueError)
    with pytest.raises(strata.StrataError, match="peer"):
        comm.send(np.ones(2), 5)


def test_init_arguments():
    with pytest.raises(TypeError, match="pass rank, size and unique_id together"):
        strata.init(0, 2)
    with pytest.raises(ValueError, match="unique_id must be the 128 bytes"):
        strata.init(0, 1, b"short")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaTensor:
    """A DLPack producer that claims CUDA memory (what a torch CUDA tensor exports), for a machine with no
    GPU. Its data pointer is never valid: Strata must refuse it before touching memory."""

    def __init__(self, n=4):
        self._shape = (ctypes.c_int64 * 1)(n)
        self._mt = _DLManagedTensor()
        self._mt.dl_tensor.data = 0x10000  # not host memory
        self._mt.dl_tensor.device = _DLDevice(2, 0)  # kDLCUDA
        self._mt.dl_tensor.ndim = 1
        self._mt.dl_tensor.dtype = _DLDataType(2, 32, 1)  # float32
        self._mt.dl_tensor.shape = self._shape

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._mt), b"dltensor", None)


def test_device_tensor_gives_cuda_error(comm):
    with pytest.raises(strata.CudaError, match="strata.all_reduce: .*CUDA.*strataUnhandledCudaError"):
        comm.all_reduce(FakeCudaTensor())
    with pytest.raises(ValueError, match="both be in host memory or both on a CUDA device"):
        comm.all_reduce(FakeCudaTensor(), out=np.ones(4, np.float32))


def test_work_api_single_rank(comm):
    x = np.arange(5, dtype=np.float64)
    w = comm.all_reduce(x, "max", async_op=True)
    assert isinstance(w, strata.Work)
    assert w.wait(timeout=60) is True and w.is_completed() and w.error() == ""
    assert w.result() is x
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        comm.barrier(async_op=True).wait(timeout=-1)
    with pytest.raises(ValueError, match="async_op=True inside strata.group"):
        with strata.group():
            comm.all_reduce(x, async_op=True)
    with strata.group():  # a group that holds nothing
        pass
    assert strata._strata.group_depth() == 0
    # The dropped barrier Work is done once a later blocking call returns (work runs in issue order), and
    # the handle's arrays are then released.
    comm.barrier()
    assert strata._strata.pending_orphans() == 0


def test_explain(comm):
    assert comm.explain("all_reduce", np.ones(1024, np.float32))
    with pytest.raises(ValueError, match="unknown collective"):
        comm.explain("gather", np.ones(2))
