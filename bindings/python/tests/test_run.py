"""python -m strata.run: the launcher front end."""
import os
import subprocess
import sys


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "strata.run", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_runs_a_script_on_n_ranks(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys, numpy as np, strata\n"
        "c = strata.init()\n"
        "x = np.array([c.rank], np.int64)\n"
        "c.all_reduce(x)\n"
        "print('rank', c.rank, 'of', c.size, 'local', os.environ['LOCAL_RANK'], os.environ['LOCAL_WORLD_SIZE'],"
        " 'sum', int(x[0]), 'args', sys.argv[1:], 'secret', len(os.environ['STRATA_SECRET']))\n")
    p = _run("-n", "3", "--prefix", str(script), "a", "--b")
    assert p.returncode == 0, p.stdout
    for r in range(3):
        assert f"[{r}] rank {r} of 3 local {r} 3 sum 3 args ['a', '--b'] secret 32" in p.stdout, p.stdout


def test_failing_rank_sets_exit_status(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '1': sys.exit(3)\n"
                      "time.sleep(60)\n")
    p = _run("-n", "2", str(script))
    assert p.returncode == 3, p.stdout
    assert "rank 1 exited with status 3" in p.stdout, p.stdout


def test_module_and_program_targets():
    p = _run("-n", "2", "-m", "strata.run", "--help")
    assert p.returncode == 0 and p.stdout.count("usage: python -m strata.run") == 2, p.stdout
    p = _run("-n", "2", "--no-python", "/bin/sh", "-c", "echo rank=$RANK")
    assert p.returncode == 0 and "rank=0" in p.stdout and "rank=1" in p.stdout, p.stdout


def test_usage_errors():
    p = _run("-n", "0", "x.py")
    assert p.returncode == 2 and "-n must be at least 1" in p.stdout, p.stdout
    p = _run("x.py")
    assert p.returncode == 2 and "required: -n" in p.stdout, p.stdout
