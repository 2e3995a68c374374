"""Asynchronous Work, groups, split/abort, the GIL, and a peer that dies."""
from conftest import launch


def test_async_work_and_groups():
    out = launch(3, "async_work")
    assert out.count("async ok") == 3, out


def test_blocking_calls_release_the_gil():
    launch(2, "gil_released", timeout=120)


def test_split_and_abort():
    out = launch(4, "split_and_abort")
    assert out.count("split/abort ok") == 4, out


def test_dead_peer_raises_remote_error():
    out = launch(2, "peer_dies", timeout=120)
    assert "RemoteError" in out or "strataRemoteError" in out, out


def test_shrink_after_a_death_and_revoke():
    out = launch(3, "shrink_after_death", timeout=120)
    assert out.count("shrink ok") == 2, out
