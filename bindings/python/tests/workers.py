"""Rank programs for the Python tests: `workers.py NAME ARGS...` runs one of the functions below on every
rank of a strata-run job. A worker exits non-zero (with the failures listed) when a check fails.

Inputs are small integers drawn from a seed per (rank, case), so every rank computes the expected result of
every collective from all ranks' inputs; sums, products, max and min of them are exact in every dtype.
"""
import os
import sys
import threading
import time
import traceback

import numpy as np

import strata

NUMPY_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
OPS = ["sum", "prod", "max", "min", "avg"]
COUNTS = [0, 1, 7, 40000]  # 40000 x 4 bytes crosses the 128 KiB transport piece


# ---- array back ends: numpy and torch, behind one small interface ------------------------------------


class NumpyLib:
    name = "numpy"

    def make(self, values, dtype):
        return np.asarray(values).astype(dtype)

    def empty(self, n, dtype):
        return np.empty(n, dtype=dtype)

    def full(self, n, v, dtype):
        return np.full(n, v, dtype=dtype)

    def to_np(self, a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64 if a.dtype.kind == "i" else np.uint64)

    def is_float(self, dtype):
        return np.dtype(dtype).kind == "f"

    def is_signed(self, dtype):
        return np.dtype(dtype).kind in "if"

    def rtol(self, dtype):
        return {"float16": 2e-3, "float32": 1e-6, "float64": 1e-12}.get(dtype, 0)


class TorchLib:
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch

    def dt(self, dtype):
        return getattr(self.torch, dtype)

    def make(self, values, dtype):
        return self.torch.from_numpy(np.asarray(values, dtype=np.float64)).to(self.dt(dtype))

    def empty(self, n, dtype):
        return self.torch.empty(n, dtype=self.dt(dtype))

    def full(self, n, v, dtype):
        return self.torch.full((n,), v, dtype=self.dt(dtype))

    def to_np(self, a):
        return a.reshape(-1).to(self.torch.float64).numpy()

    def is_float(self, dtype):
        return self.dt(dtype).is_floating_point

    def is_signed(self, dtype):
        return self.dt(dtype).is_signed or self.is_float(dtype)

    def rtol(self, dtype):
        return {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-6, "float64": 1e-12,
                "float8_e4m3fn": 0.13, "float8_e5m2": 0.26}.get(dtype, 0)


def values(lib, dtype, op, rank, case, count):
    rng = np.random.default_rng([rank, case, count, OPS.index(op) if op in OPS else 9])
    small = dtype.startswith("float8")  # 3 and 2 mantissa bits: keep every sum of 4 exact
    if op == "prod":
        choices = [-1, 1, 2] if lib.is_signed(dtype) else [1, 2]
        return rng.choice(choices, size=count)
    lo, hi = (-2, 3) if small else ((-8, 9) if lib.is_signed(dtype) else (0, 17))
    return rng.integers(lo, hi, size=count)


def reduce_np(stack, op, lib, dtype):
    if op == "sum":
        return stack.sum(axis=0)
    if op == "prod":
        return stack.prod(axis=0)
    if op == "max":
        return stack.max(axis=0)
    if op == "min":
        return stack.min(axis=0)
    n = stack.shape[0]
    if lib.is_float(dtype):
        return stack.sum(axis=0) / n
    s = stack.sum(axis=0)
    return np.sign(s) * (np.abs(s) // n)  # integer avg truncates toward zero


class Checker:
    def __init__(self, comm, lib, label):
        self.comm, self.lib, self.label = comm, lib, label
        self.failures = []
        self.checked = 0

    def expect(self, what, got, want, dtype, op=None):
        self.checked += 1
        got = self.lib.to_np(got).reshape(-1)
        want = np.asarray(want).reshape(-1)
        rtol = self.lib.rtol(dtype) * (4 if op == "avg" else 1)
        if op == "avg" and dtype.startswith("float8"):
            rtol = 0.5  # each input is scaled by 1/n in fp8 before the sum
        try:
            if rtol:
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol * 8)
            else:
                np.testing.assert_array_equal(got, want.astype(got.dtype))
        except AssertionError as e:
            self.failures.append(f"{self.label} n={self.comm.size} {what} {dtype} {op or ''}: {str(e)[:400]}")

    def report(self):
        if self.failures:
            print(f"rank {self.comm.rank}: {len(self.failures)} of {self.checked} checks failed", file=sys.stderr)
            for f in self.failures[:30]:
                print("  " + f, file=sys.stderr)
            return 1
        print(f"rank {self.comm.rank}: {self.checked} checks passed ({self.label})")
        return 0


# ---- every collective x dtype x op x count, in place and out of place --------------------------------


def check_collective(ck, coll, dtypes, counts):
    comm, lib = ck.comm, ck.lib
    n, r = comm.size, comm.rank
    case = sum(map(ord, coll))
    for dtype in dtypes:
        for count in counts:
            ops = OPS if coll in ("all_reduce", "reduce_scatter", "reduce") else [None]
            for op in ops:
                vop = op or "sum"
                for inplace in (True, False):
                    if coll == "all_reduce":
                        ins = [values(lib, dtype, vop, k, case, count) for k in range(n)]
                        want = reduce_np(np.stack(ins), op, lib, dtype) if count else []
                        x = lib.make(ins[r], dtype)
                        if inplace:
                            res = comm.all_reduce(x, op)
                            ck.expect("all_reduce in place", res, want, dtype, op)
                            assert res is x or lib.name == "torch"
                        else:
                            out = lib.empty(count, dtype)
                            comm.all_reduce(x, op, out=out)
                            ck.expect("all_reduce out", out, want, dtype, op)
                            ck.expect("all_reduce input untouched", x, ins[r], dtype)
                    elif coll == "reduce_scatter":
                        ins = [values(lib, dtype, vop, k, case, n * count) for k in range(n)]
                        full = reduce_np(np.stack(ins), op, lib, dtype) if count else np.zeros(0)
                        want = full[r * count:(r + 1) * count]
                        x = lib.make(ins[r], dtype)
                        if inplace:
                            view = x[r * count:(r + 1) * count]
                            comm.reduce_scatter(x, op, out=view)
                            ck.expect("reduce_scatter in place", view, want, dtype, op)
                        else:
                            out = comm.reduce_scatter(x, op)
                            ck.expect("reduce_scatter out", out, want, dtype, op)
                    elif coll == "reduce":
                        for root in sorted({0, n - 1}):
                            ins = [values(lib, dtype, vop, k, case + root, count) for k in range(n)]
                            want = reduce_np(np.stack(ins), op, lib, dtype) if count else []
                            x = lib.make(ins[r], dtype)
                            if inplace:
                                comm.reduce(x, root, op)
                                ck.expect(f"reduce in place root {root}", x, want if r == root else ins[r], dtype,
                                          op if r == root else None)
                            else:
                                out = lib.full(count, 3, dtype)
                                comm.reduce(x, root, op, out=out)
                                ck.expect(f"reduce out root {root}", out, want if r == root else np.full(count, 3),
                                          dtype, op if r == root else None)
                    elif coll == "all_gather":
                        ins = [values(lib, dtype, vop, k, case, count) for k in range(n)]
                        want = np.concatenate(ins)
                        if inplace:
                            buf = lib.empty(n * count, dtype)
                            buf[r * count:(r + 1) * count] = lib.make(ins[r], dtype)
                            comm.all_gather(buf[r * count:(r + 1) * count], out=buf)
                            ck.expect("all_gather in place", buf, want, dtype)
                        else:
                            out = comm.all_gather(lib.make(ins[r], dtype))
                            assert tuple(out.shape) == (n, count), out.shape
                            ck.expect("all_gather out", out, want, dtype)
                    elif coll == "broadcast":
                        for root in sorted({0, n - 1}):
                            ins = [values(lib, dtype, vop, k, case + root, count) for k in range(n)]
                            x = lib.make(ins[r], dtype)
                            if inplace:
                                comm.broadcast(x, root)
                                ck.expect(f"broadcast in place root {root}", x, ins[root], dtype)
                            else:
                                out = lib.empty(count, dtype)
                                comm.broadcast(x, root, out=out)
                                ck.expect(f"broadcast out root {root}", out, ins[root], dtype)
                                ck.expect(f"broadcast input untouched root {root}", x, ins[r], dtype)
                    elif coll == "all_to_all":
                        if inplace:
                            continue  # all-to-all has no in-place form
                        ins = [values(lib, dtype, vop, k, case, n * count) for k in range(n)]
                        want = np.concatenate([ins[j][r * count:(r + 1) * count] for j in range(n)])
                        out = comm.all_to_all(lib.make(ins[r], dtype))
                        ck.expect("all_to_all", out, want, dtype)
                    elif coll == "send_recv":
                        ins = [values(lib, dtype, vop, k, case, count) for k in range(n)]
                        if inplace:
                            # A ring in one group: every rank sends right and receives from the left.
                            got = lib.full(count, 1, dtype)
                            with strata.group():
                                comm.send(lib.make(ins[r], dtype), (r + 1) % n)
                                comm.recv(got, (r - 1) % n)
                            ck.expect("group ring send/recv", got, ins[(r - 1) % n], dtype)
                        elif n >= 2 and r < 2:
                            # Plain blocking calls between ranks 0 and 1.
                            if r == 0:
                                comm.send(lib.make(ins[0], dtype), 1)
                            else:
                                got = comm.recv(lib.full(count, 1, dtype), 0)
                                ck.expect("send/recv", got, ins[0], dtype)
                    elif coll == "barrier":
                        comm.barrier()
                        comm.barrier(async_op=True).wait()
                        ck.checked += 1
                    else:
                        raise ValueError(coll)


def sub_communicators(world):
    """The world communicator split into one of each size 1..world.size (by colour), as (n, comm)."""
    out = []
    for n in range(1, world.size + 1):
        sub = world.split(0 if world.rank < n else None)
        if sub is not None:
            out.append((n, sub))
    return out


def collectives(coll, lib_name="numpy"):
    """coll on every communicator size 1..WORLD_SIZE (split from the world) for every dtype and op."""
    world = strata.init()
    lib = NumpyLib() if lib_name == "numpy" else TorchLib()
    if lib_name == "numpy":
        dtypes, counts = NUMPY_DTYPES, COUNTS
    else:
        dtypes = ["bfloat16", "float32", "int64", "float8_e4m3fn", "float8_e5m2"]
        counts = [0, 3, 70000]
    colls = [coll] if coll != "all" else ["all_reduce", "reduce_scatter", "reduce", "all_gather", "broadcast",
                                          "all_to_all", "send_recv", "barrier"]
    rc = 0
    for n, comm in sub_communicators(world):
        ck = Checker(comm, lib, f"{lib.name}")
        for c in colls:
            check_collective(ck, c, dtypes, counts)
        rc |= ck.report()
        comm.destroy()
    # The world communicator itself (fresh from init, not split) at its full size.
    ck = Checker(world, lib, f"{lib.name} world")
    for c in colls:
        check_collective(ck, c, dtypes[:3], [5])
    rc |= ck.report()
    world.destroy()
    return rc


def smoke(expected_size):
    """init() from the launcher's environment, one all-reduce over the whole job."""
    comm = strata.init()
    assert comm.size == int(expected_size), (comm.size, expected_size)
    x = np.full(3, comm.rank + 1, np.int64)
    comm.all_reduce(x)
    want = comm.size * (comm.size + 1) // 2
    assert x.tolist() == [want] * 3, x
    print(f"rank {comm.rank}: all_reduce over {comm.size} ranks = {x.tolist()}")
    return 0


def init_with_unique_id(path):
    """strata.init(rank, size, unique_id): rank 0 writes the id to a file, the others read it."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if rank == 0:
        uid = strata.get_unique_id()
        assert isinstance(uid, bytes) and len(uid) == strata.UNIQUE_ID_BYTES
        with open(path + ".tmp", "wb") as f:
            f.write(uid)
        os.rename(path + ".tmp", path)
    else:
        while not os.path.exists(path):
            time.sleep(0.05)
        with open(path, "rb") as f:
            uid = f.read()
    comm = strata.init(rank, size, uid)
    assert (comm.rank, comm.size) == (rank, size)
    x = np.array([rank], np.int32)
    g = comm.all_gather(x)
    assert g.reshape(-1).tolist() == list(range(size)), g
    comm.destroy()
    return 0


# ---- asynchronous work, groups, split, threads and failures -------------------------------------------


def async_work():
    comm = strata.init()
    n, r = comm.size, comm.rank
    # Several asynchronous collectives in flight at once, completed in issue order.
    a = np.full(1000, r + 1, np.float32)
    b = np.arange(n * 4, dtype=np.int64)
    works = [comm.all_reduce(a, async_op=True), comm.reduce_scatter(b, async_op=True),
             comm.all_gather(np.array([r], np.int32), async_op=True), comm.barrier(async_op=True)]
    assert isinstance(works[0], strata.Work)
    assert works[0].result() is a
    assert np.all(a == n * (n + 1) / 2), a[:4]
    assert np.array_equal(works[1].result(), np.arange(r * 4, r * 4 + 4) * n), works[1].result()
    assert works[2].result().reshape(-1).tolist() == list(range(n))
    assert works[3].wait() and works[3].is_completed() and works[3].result() is None
    # A dropped handle still completes, and its arrays stay alive until it does.
    comm.all_reduce(np.ones(100000, np.float32), async_op=True)
    comm.barrier()
    # An asynchronous group: many collectives in one Work.
    xs = [np.full(10, k, np.float64) for k in range(5)]
    with strata.group(async_op=True) as g:
        for x in xs:
            comm.all_reduce(x, "max")
    assert g.work.wait(timeout=120)
    assert all(np.all(x == k) for k, x in enumerate(xs))

    # wait(timeout) reports False while a peer has not joined: rank 1 joins only after rank 0 has seen the
    # work unfinished, and says so over a second communicator (the first is busy with the work).
    side = comm.split(0)
    go = np.zeros(1, np.int32)
    if n >= 2:
        if r == 0:
            w = comm.all_reduce(np.ones(4, np.float32), async_op=True)
            assert w.wait(timeout=0.05) is False
            assert not w.is_completed()
            # Two threads wait on the same Work.
            other = []
            t = threading.Thread(target=lambda: other.append(w.wait(timeout=120)))
            t.start()
            side.send(np.ones(1, np.int32), 1)
            assert w.wait(timeout=None)
            t.join()
            assert other == [True] and w.is_completed()
        else:
            if r == 1:
                side.recv(go, 0)
            comm.all_reduce(np.ones(4, np.float32))
    side.destroy()
    comm.destroy()
    print(f"rank {r}: async ok")
    return 0


def gil_released():
    """A blocking collective must release the GIL: rank 0's main thread blocks in a receive that rank 1
    answers only after rank 0's second thread has sent it a message. With the switch interval at 60 s, the
    second thread runs only if the blocked call released the GIL."""
    comm = strata.init()
    side = comm.split(0)
    r = comm.rank
    if r == 0:
        started = threading.Event()

        def helper():
            started.wait()
            side.send(np.ones(1, np.int32), 1)

        t = threading.Thread(target=helper)
        t.start()
        sys.setswitchinterval(60)
        started.set()
        got = comm.recv(np.zeros(4, np.float32), 1)
        sys.setswitchinterval(0.005)
        t.join()
        assert np.all(got == 7), got
        # The same for a Work.wait.
        started.clear()
        t = threading.Thread(target=helper)
        t.start()
        w = comm.recv(np.zeros(4, np.float32), 1, async_op=True)
        sys.setswitchinterval(60)
        started.set()
        w.wait()
        sys.setswitchinterval(0.005)
        t.join()
    elif r == 1:
        for _ in range(2):
            side.recv(np.zeros(1, np.int32), 0)
            comm.send(np.full(4, 7, np.float32), 0)
    side.destroy()
    comm.destroy()
    print(f"rank {r}: gil ok")
    return 0


def split_and_abort():
    comm = strata.init()
    n, r = comm.size, comm.rank
    # Even and odd ranks, each ordered by descending rank.
    sub = comm.split(r % 2, key=-r)
    members = [k for k in range(n) if k % 2 == r % 2]
    assert sub.size == len(members), (sub.size, members)
    assert sub.rank == sorted(members, reverse=True).index(r)
    g = sub.all_gather(np.array([r], np.int64)).reshape(-1).tolist()
    assert g == sorted(members, reverse=True), g
    none = comm.split(None)
    assert none is None
    sub.destroy()
    with __import__("pytest").raises(strata.InvalidUsageError, match="destroyed"):
        sub.all_reduce(np.ones(2))
    # abort: frees the communicator without waiting for peers; later calls raise.
    other = comm.split(0)
    other.abort()
    try:
        other.barrier()
        raise AssertionError("barrier on an aborted communicator did not raise")
    except strata.InvalidUsageError as e:
        assert "aborted" in str(e)
    comm.barrier()
    comm.destroy()
    print(f"rank {r}: split/abort ok")
    return 0


def peer_dies():
    """Rank 1 exits (status 0, so the launcher lets it go) while rank 0 waits for it: rank 0's blocking
    call and its async Work raise RemoteError naming rank 1."""
    comm = strata.init()
    comm.barrier()
    if comm.rank == 1:
        os._exit(0)
    try:
        comm.all_reduce(np.ones(1 << 16, np.float32))
        raise AssertionError("all_reduce with a dead peer returned")
    except strata.RemoteError as e:
        msg = str(e)
        assert "rank 1" in msg and "strataRemoteError" in msg, msg
        assert e.code_name == "strataRemoteError"
        print(f"rank 0: got {msg}")
    return 0


def shrink_after_death():
    """Rank 2 of 3 exits without destroying its communicator (a death, to the others): the survivors' call raises
    RemoteError naming it, they shrink the communicator to exclude it and go on; revoke then stops the new one."""
    comm = strata.init()
    comm.barrier()
    if comm.rank == 2:
        os._exit(0)
    try:
        comm.all_reduce(np.ones(1 << 16, np.float32))
        raise AssertionError("all_reduce with a dead peer returned")
    except strata.RemoteError as e:
        assert "rank 2" in str(e), str(e)
    rank = comm.rank
    new = comm.shrink([2])
    comm.abort()
    assert (new.size, new.rank) == (2, rank), (new.size, new.rank)
    x = np.full(1000, rank + 1, np.int64)
    new.all_reduce(x)
    assert (x == 3).all(), x[:4]
    new.barrier()
    new.revoke()
    try:
        new.barrier()
        raise AssertionError("barrier on a revoked communicator did not raise")
    except strata.StrataError as e:
        assert "revoked" in str(e), str(e)
    new.destroy()
    print(f"rank {rank}: shrink ok")
    return 0


# ---- torch -----------------------------------------------------------------------------------------------


def torch_backend():
    """The "strata" torch.distributed backend: every collective against its definition."""
    import torch
    import torch.distributed as dist

    import strata.torch  # noqa: F401

    dist.init_process_group("strata")
    r, n = dist.get_rank(), dist.get_world_size()
    fails = []

    def check(name, got, want):
        if not torch.equal(got, want):
            fails.append(f"{name}: got {got.tolist()} want {want.tolist()}")

    base = [torch.arange(6, dtype=torch.float32) + 10 * k for k in range(n)]
    t = base[r].clone()
    dist.all_reduce(t)
    check("all_reduce sum", t, sum(base))
    t = base[r].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("all_reduce max", t, base[n - 1])
    t = base[r].to(torch.bfloat16)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check("all_reduce avg bf16", t, (sum(base) / n).to(torch.bfloat16))
    w = dist.all_reduce(t := base[r].clone(), async_op=True)
    w.wait()
    check("all_reduce async", t, sum(base))
    fut = dist.all_reduce(t := base[r].clone(), async_op=True).get_future()
    check("all_reduce future", fut.wait()[0], sum(base))
    tb = torch.tensor([r == 0, False, True])
    dist.all_reduce(tb)
    check("all_reduce bool (or)", tb, torch.tensor([True, False, True]))
    nc = base[r].clone().reshape(2, 3).t()  # non-contiguous
    dist.all_reduce(nc)
    check("all_reduce non-contiguous", nc, sum(base).reshape(2, 3).t())

    out = torch.empty(n * 6)
    dist.all_gather_into_tensor(out, base[r])
    check("all_gather_into_tensor", out, torch.cat(base))
    outs = [torch.empty(6) for _ in range(n)]
    dist.all_gather(outs, base[r])
    check("all_gather list", torch.cat(outs), torch.cat(base))
    ints = [torch.empty(2, dtype=torch.int16) for _ in range(n)]  # not a Strata dtype: travels as bytes
    dist.all_gather(ints, torch.tensor([r, -r], dtype=torch.int16))
    check("all_gather int16", torch.stack(ints), torch.tensor([[k, -k] for k in range(n)], dtype=torch.int16))

    rs_in = torch.arange(n * 3, dtype=torch.float32) + r
    rs_out = torch.empty(3)
    dist.reduce_scatter_tensor(rs_out, rs_in)
    full = sum(torch.arange(n * 3, dtype=torch.float32) + k for k in range(n))
    check("reduce_scatter_tensor", rs_out, full[r * 3:(r + 1) * 3])
    rs_list_out = torch.empty(3)
    dist.reduce_scatter(rs_list_out, list(rs_in.chunk(n)))
    check("reduce_scatter list", rs_list_out, full[r * 3:(r + 1) * 3])

    b = base[r].clone()
    dist.broadcast(b, src=n - 1)
    check("broadcast", b, base[n - 1])
    red = base[r].clone()
    dist.reduce(red, dst=0)
    check("reduce", red, sum(base) if r == 0 else base[r])

    a_in = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    a_out = torch.empty(n * 2)
    dist.all_to_all_single(a_out, a_in)
    check("all_to_all_single", a_out, torch.cat([torch.arange(r * 2, r * 2 + 2, dtype=torch.float32) + 100 * k
                                                 for k in range(n)]))
    # Uneven splits: rank k sends k + 1 + j elements to rank j.
    in_splits = [r + 1 + j for j in range(n)]
    out_splits = [k + 1 + r for k in range(n)]
    u_in = torch.cat([torch.full((s,), float(100 * r + j)) for j, s in enumerate(in_splits)])
    u_out = torch.empty(sum(out_splits))
    dist.all_to_all_single(u_out, u_in, out_splits, in_splits)
    check("all_to_all_single uneven", u_out, torch.cat([torch.full((s,), float(100 * k + r))
                                                        for k, s in enumerate(out_splits)]))
    l_out = [torch.empty(2) for _ in range(n)]
    dist.all_to_all(l_out, [torch.full((2,), float(10 * r + j)) for j in range(n)])
    check("all_to_all list", torch.stack(l_out), torch.stack([torch.full((2,), float(10 * k + r)) for k in range(n)]))

    g_out = [torch.empty(2) for _ in range(n)] if r == 0 else None
    dist.gather(torch.full((2,), float(r)), g_out, dst=0)
    if r == 0:
        check("gather", torch.stack(g_out), torch.stack([torch.full((2,), float(k)) for k in range(n)]))
    s_out = torch.empty(2)
    dist.scatter(s_out, [torch.full((2,), float(k)) for k in range(n)] if r == 0 else None, src=0)
    check("scatter", s_out, torch.full((2,), float(r)))

    if n >= 2:
        if r == 0:
            dist.send(torch.arange(4, dtype=torch.int32), 1)
        elif r == 1:
            got = torch.zeros(4, dtype=torch.int32)
            dist.recv(got, 0)
            check("send/recv", got, torch.arange(4, dtype=torch.int32))
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((3,), float(r)), (r + 1) % n),
                                       dist.P2POp(dist.irecv, ring := torch.empty(3), (r - 1) % n)])
        for q in reqs:
            q.wait()
        check("batch_isend_irecv ring", ring, torch.full((3,), float((r - 1) % n)))

    ts = [base[r].clone(), base[r][:2].clone()]
    dist.all_reduce_coalesced(ts) if hasattr(dist, "all_reduce_coalesced") else [dist.all_reduce(x) for x in ts]
    check("all_reduce_coalesced", torch.cat(ts), torch.cat([sum(base), sum(base)[:2]]))
    with dist._coalescing_manager(async_ops=True) as cm:
        c1, c2 = base[r].clone(), base[r].clone() * 2
        dist.all_reduce(c1)
        dist.all_reduce(c2)
    cm.wait()
    check("coalescing manager", torch.cat([c1, c2]), torch.cat([sum(base), sum(base) * 2]))

    dist.barrier()
    # A subgroup: its own Strata communicator.
    if n >= 3:
        sub = dist.new_group([0, 2])
        if r in (0, 2):
            s = torch.tensor([float(r)])
            dist.all_reduce(s, group=sub)
            check("subgroup all_reduce", s, torch.tensor([2.0]))
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
        fails.append("BAND did not raise")
    except Exception as e:
        if "BAND" not in str(e):
            fails.append(f"BAND raised without naming it: {e}")
    # The last rank leaves (status 0, so the launcher lets it go): the others' collective fails through the
    # Work's Future with Strata's message naming it, instead of hanging.
    dist.barrier()
    if r == n - 1 and n >= 2:
        print(f"rank {r}: torch backend ok (leaving)", flush=True)
        os._exit(0)
    if n >= 2:
        try:
            dist.all_reduce(torch.ones(1 << 16))
            fails.append("all_reduce with a dead peer returned")
        except Exception as e:
            if f"rank {n - 1}" not in str(e) or "died" not in str(e):
                fails.append(f"dead peer error does not name rank {n - 1}: {e}")
            else:
                print(f"rank {r}: dead peer: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    else:
        dist.destroy_process_group()
    if fails:
        print(f"rank {r}: {len(fails)} torch backend checks failed:\n  " + "\n  ".join(fails), file=sys.stderr)
        return 1
    print(f"rank {r}: torch backend ok")
    return 0


def torch_loaded_plan():
    """The torch backend on loaded MSCCL files (STRATA_PLANS and STRATA_ALGO set by the test): all_reduce in place
    and all_gather_into_tensor out of place, every size exact."""
    import torch
    import torch.distributed as dist

    import strata.torch  # noqa: F401

    dist.init_process_group("strata")
    r, n = dist.get_rank(), dist.get_world_size()
    fails = []
    for count in (1, 7, 1000, 70001):
        t = torch.arange(count, dtype=torch.float32) + r
        dist.all_reduce(t)
        want = torch.arange(count, dtype=torch.float32) * n + n * (n - 1) / 2
        if not torch.equal(t, want):
            fails.append(f"all_reduce {count}")
        out = torch.empty(count * n, dtype=torch.float64)
        dist.all_gather_into_tensor(out, torch.full((count,), float(r), dtype=torch.float64))
        if not torch.equal(out, torch.arange(n, dtype=torch.float64).repeat_interleave(count)):
            fails.append(f"all_gather_into_tensor {count}")
    dist.destroy_process_group()
    if fails:
        print(f"rank {r}: loaded plans wrong: {fails}", file=sys.stderr)
        return 1
    print(f"rank {r}: loaded plans ok")
    return 0


def torch_native():
    """What the C++ backend (ProcessGroupStrata) adds to the Python one: its type, Works that complete on
    their own, coalescing (batch_isend_irecv as one group), all_gather_coalesced, split_group, sequence numbers,
    monitored_barrier, a group's timeout, and clear refusals."""
    import datetime
    import time

    import torch
    import torch.distributed as dist

    import strata.torch

    dist.init_process_group("strata")
    r, n = dist.get_rank(), dist.get_world_size()
    fails = []

    def expect(name, ok, detail=""):
        if not ok:
            fails.append(f"{name} {detail}")

    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    expect("backend type", type(backend).__name__ == "ProcessGroupStrata", type(backend).__name__)
    expect("supports coalescing/splitting", backend.supports_coalescing and backend.supports_splitting)

    t = torch.ones(1 << 18)
    w = dist.all_reduce(t, async_op=True)
    deadline = time.time() + 60
    while not w.is_completed() and time.time() < deadline:
        time.sleep(0.001)
    expect("is_completed without wait", w.is_completed())
    expect("async all_reduce result", bool((t == n).all()))

    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((3,), float(r)), (r + 1) % n),
                                   dist.P2POp(dist.irecv, ring := torch.empty(3), (r - 1) % n)])
    expect("batch_isend_irecv is one group", len(reqs) == 1, f"{len(reqs)} works")
    for q in reqs:
        q.wait()
    expect("batch_isend_irecv ring", torch.equal(ring, torch.full((3,), float((r - 1) % n))), ring.tolist())

    outs = [[torch.empty(2), torch.empty(3)] for _ in range(n)]
    dist.all_gather_coalesced(outs, [torch.full((2,), float(r)), torch.full((3,), float(-r))])
    expect("all_gather_coalesced", all(torch.equal(outs[k][0], torch.full((2,), float(k))) and
                                       torch.equal(outs[k][1], torch.full((3,), float(-k)))
                                       for k in range(n)), outs)

    # Sparse all_reduce (SUM), as gloo serves it: rank k holds ones at rows 0..k.
    sp = torch.sparse_coo_tensor(torch.arange(r + 1).reshape(1, -1), torch.ones(r + 1, 2), (n, 2))
    dist.all_reduce(sp)
    want_sp = sum(torch.sparse_coo_tensor(torch.arange(k + 1).reshape(1, -1), torch.ones(k + 1, 2), (n, 2))
                  .to_dense() for k in range(n))
    expect("sparse all_reduce", sp.is_sparse and torch.equal(sp.to_dense(), want_sp), sp)

    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    seq = pg._get_sequence_number_for_group()
    dist.all_gather(seqs, torch.tensor([seq]))
    expect("sequence numbers agree", len({int(x) for x in seqs}) == 1 and seq > 0, [int(x) for x in seqs])

    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    # recv without src (from any source): every other rank sends rank 0 its rank twice; rank 0 takes them with a
    # blocking recv and an irecv (whose Work names the sender), and names every sender twice with its data.
    if r == 0:
        senders = []
        for k in range(2 * (n - 1)):
            t = torch.full((5,), -1.0)
            if k % 2 == 0:
                src = dist.recv(t)
            else:
                w = dist.irecv(t)
                w.wait()
                src = w._source_rank()
            senders.append(src)
            expect("recv any source data", bool((t == src).all()), (src, t.tolist()))
        expect("recv any source names each sender", sorted(senders) == sorted(list(range(1, n)) * 2), senders)
    else:
        for _ in range(2):
            dist.send(torch.full((5,), float(r)), 0)

    # Bad input is refused before anything runs, with what was wrong (and the group still works after).
    for name, call, words in (
            ("short all_gather output", lambda: dist.all_gather_into_tensor(torch.empty(n * 2 - 1), torch.ones(2)),
             "group size"),
            ("int16 reduction", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)), "cannot reduce dtype"),
            ("bitwise op", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BXOR), "BXOR")):
        try:
            call()
            fails.append(f"{name} was not refused")
        except Exception as e:
            expect(f"{name} refused naming it", words in str(e), str(e)[:200])
    t = torch.ones(3)
    dist.all_reduce(t)
    expect("a call after refusals", bool((t == n).all()), t)

    sub = dist.split_group(split_ranks=[list(range(n - 1)), [n - 1]])
    expect("split_group membership", sub is not None)
    s = torch.tensor([float(r + 1)])
    dist.all_reduce(s, group=sub)
    want = float(sum(range(1, n))) if r < n - 1 else float(n)
    expect("split_group all_reduce", s.item() == want, f"{s.item()} != {want}")

    # A rank missing from monitored_barrier is named; a group's timeout is Strata's deadline, said as torch says it.
    if r != n - 1:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=2), wait_all_ranks=True)
            fails.append("monitored_barrier without the last rank passed")
        except Exception as e:
            if r == 0:
                expect("monitored_barrier names the missing rank", f"Rank {n - 1} failed to pass" in str(e), str(e))
    short = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=2))
    if r != 0:
        try:
            dist.barrier(group=short)
            fails.append("barrier without rank 0 passed")
        except Exception as e:
            expect("timeout says Timed out", " Timed out" in str(e) and "rank 0" in str(e), str(e)[:300])
        dist.distributed_c10d._get_default_store().set(f"timed_out_{r}", "1")
    else:
        # Rank 0 hosts the groups' bootstrap roots: it stays until the others have seen their timeouts.
        dist.distributed_c10d._get_default_store().wait([f"timed_out_{k}" for k in range(1, n)])
    if fails:
        print(f"rank {r}: {len(fails)} checks failed:\n  " + "\n  ".join(map(str, fails)), file=sys.stderr)
        return 1
    print(f"rank {r}: torch native ok")
    os._exit(0)  # the short group's barrier is still open on rank 0's side: leave without a teardown


def recv_any_source():
    """dist.recv without src over gloo and over "strata": every other rank sends rank 0 two tensors holding its
    rank; rank 0 takes them with recv and with irecv + _source_rank() and names each sender twice with its data.
    Prints what rank 0 saw on each backend; both must agree."""
    import torch
    import torch.distributed as dist

    import strata.torch  # noqa: F401

    def run(backend):
        dist.init_process_group(backend)
        r, n = dist.get_rank(), dist.get_world_size()
        seen = []
        if r == 0:
            for k in range(2 * (n - 1)):
                t = torch.full((10,), -1.0)
                if k % 2 == 0:
                    src = dist.recv(t)
                else:
                    w = dist.irecv(t)
                    w.wait()
                    src = w._source_rank()
                seen.append((src, bool((t == src).all())))
        else:
            dist.send(torch.full((10,), float(r)), 0)
            dist.send(torch.full((10,), float(r)), 0)
        dist.barrier()
        want = sorted((s, True) for s in list(range(1, n)) * 2) if r == 0 else []
        dist.destroy_process_group()
        return sorted(seen), want

    (gloo, want), (strata_seen, _) = run("gloo"), run("strata")
    same = gloo == strata_seen == want
    print(f"recv any source: gloo {gloo} strata {strata_seen} same: {same}")
    return 0 if same else 1


def fsdp2_compare():
    """FSDP2 (fully_shard, per layer and the whole model) on CPU from one seed, over gloo and over "strata":
    the same loss at every step (FSDP2's all_gather_into_tensor and reduce_scatter_tensor)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import strata.torch  # noqa: F401

    def train(backend):
        dist.init_process_group(backend)
        r, n = dist.get_rank(), dist.get_world_size()
        mesh = init_device_mesh("cpu", (n,))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + r)
        losses = []
        for _ in range(10):
            loss = model(torch.randn(8, 16, generator=gen)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / n)
        dist.destroy_process_group()
        return losses

    gloo, strata_losses = train("gloo"), train("strata")
    same = all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(gloo, strata_losses))
    print(f"FSDP2 losses gloo {gloo[-1]:.9f} strata {strata_losses[-1]:.9f} equal at every step: {same}")
    return 0 if same and gloo[-1] < gloo[0] else 1


def torch_reinit(backend, rounds="3"):
    """Elastic re-creation: one store outlives the group, as torchrun's agent store does (torch 2.15 reuses it across
    restarts without a prefix per attempt), and the group is made, used and destroyed `rounds` times on it, under
    the same keys each time. Rank 0 re-creates it 2 s after the others, so they reach the store first and must not
    take the last generation's unique id (whose root is gone) for this one's."""
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import strata.torch  # noqa: F401

    r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, r == 0,
                          timeout=timedelta(seconds=60))
    start = time.monotonic()
    for k in range(int(rounds)):
        if r == 0 and k > 0:
            time.sleep(2)
        dist.init_process_group(backend, store=store, rank=r, world_size=n, timeout=timedelta(seconds=60))
        t = torch.full((4,), float(r + k))
        dist.all_reduce(t)
        want = float(sum(range(n)) + n * k)
        if not torch.equal(t, torch.full((4,), want)):
            print(f"rank {r}: round {k}: got {t.tolist()}, want {want}")
            return 1
        dist.destroy_process_group()
    print(f"rank {r}: {backend} re-created {rounds} times in {time.monotonic() - start:.1f} s")
    return 0


def _load_example():
    import importlib.util

    src = os.environ.get("STRATA_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
    spec = importlib.util.spec_from_file_location("ddp_train", os.path.join(src, "examples", "ddp_train.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ddp_compare(store_dir):
    """DDP from the same seed over gloo, over "strata", and over gloo with Strata's comm hook: the same
    parameters after 20 steps."""
    import torch
    import torch.distributed as dist

    import strata.torch

    example = _load_example()
    r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    results = {}
    for k, (backend, hook) in enumerate([("gloo", False), ("strata", False), ("gloo", True)]):
        dist.init_process_group(backend, init_method=f"file://{store_dir}/store{k}", rank=r, world_size=n)
        state = strata.torch.StrataHookState() if hook else None
        losses, params = example.train(steps=20, comm_hook=state)
        results[(backend, hook)] = (losses, params)
        dist.destroy_process_group()
    ref_losses, ref = results[("gloo", False)]
    if r == 0:
        torch.save(ref, os.path.join(store_dir, "gloo.pt"))  # the reference of the torchrun test
    rc = 0
    for key in [("strata", False), ("gloo", True)]:
        losses, params = results[key]
        diff = max(float((a - b).abs().max()) for a, b in zip(params, ref))
        rel = max(float(((a - b).abs() / b.abs().clamp_min(1e-12)).max()) for a, b in zip(params, ref))
        ok = all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(params, ref))
        label = "strata backend" if key[0] == "strata" else "gloo + strata comm hook"
        print(f"rank {r}: {label} vs gloo: max |diff| {diff:.3g}, max rel diff {rel:.3g}, "
              f"loss {losses[0]:.6f} -> {losses[-1]:.6f} (gloo {ref_losses[0]:.6f} -> {ref_losses[-1]:.6f}), "
              f"allclose(rtol=1e-5) {ok}")
        if not ok:
            rc = 1
    return rc


def main():
    name, args = sys.argv[1], sys.argv[2:]
    try:
        rc = globals()[name](*args)
    except Exception:
        traceback.print_exc()
        rc = 1
    if rc == 0:
        # What interpreter teardown would have done: destroy the communicators a worker left open, so the
        # bootstrap root (in rank 0's process) hears goodbyes, not a crash, when this process ends below.
        strata._comm._destroy_live_communicators()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # skip interpreter teardown: a failed rank must not wait on peers at exit


if __name__ == "__main__":
    main()
