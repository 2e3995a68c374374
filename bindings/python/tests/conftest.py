"""Helpers for the Python tests: start N ranks of tests/workers.py as real processes with strata-run."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers.py")
SOURCE_DIR = os.environ.get("STRATA_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def launch(n, worker, *args, timeout=180, env=None, expect_rc=0):
    """Runs workers.py <worker> <args> on n ranks under strata-run; fails the test with every rank's
    output unless the job exits with expect_rc. Returns the combined output."""
    from strata.run import launcher_path

    cmd = [launcher_path(), "-n", str(n), "--prefix", "--timeout", str(timeout), "--",
           sys.executable, WORKERS, worker, *map(str, args)]
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.update(env or {})
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                       timeout=timeout + 30)
    if p.returncode != expect_rc:
        pytest.fail(f"{worker} on {n} ranks exited {p.returncode} (expected {expect_rc}):\n{p.stdout[-6000:]}",
                    pytrace=False)
    return p.stdout


def have_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


needs_torch = pytest.mark.skipif(not have_torch(), reason="torch is not installed")
