"""Every collective x dtype x op x count, in place and out of place, on communicators of 1 to 4 ranks.

Each test starts 4 real rank processes; they split the world into communicators of 1, 2, 3 and 4 ranks
and check every case against the result computed from all ranks' inputs (workers.py)."""
import pytest

from conftest import launch, needs_torch


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "reduce", "all_gather", "broadcast",
                                  "all_to_all", "send_recv", "barrier"])
def test_numpy_collective(coll):
    out = launch(4, "collectives", coll, "numpy")
    assert out.count("checks passed") == 1 + 2 + 3 + 4 + 4, out


@needs_torch
def test_torch_tensors_every_collective():
    """torch tensors through the DLPack path: bfloat16, float8 (e4m3fn, e5m2), float32 and int64."""
    out = launch(4, "collectives", "all", "torch")
    assert out.count("checks passed") == 1 + 2 + 3 + 4 + 4, out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_init_from_environment(n):
    out = launch(n, "smoke", n)
    assert out.count(f"all_reduce over {n} ranks") == n, out


def test_init_with_unique_id(tmp_path):
    launch(3, "init_with_unique_id", tmp_path / "uid")
