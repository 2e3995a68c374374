"""python -m strata.run -n N [options] script.py [args...]: starts N local ranks of a Python script.

A front end to the strata-run launcher shipped in this package (bin/strata-run): every rank gets the
variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT) plus STRATA_SECRET, so strata.init() and dist.init_process_group("strata") work unchanged.
When a rank fails the others are stopped, and the exit status is the failed rank's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys


def launcher_path() -> str:
    """The strata-run binary: this package's copy, then $STRATA_RUN, then strata-run on PATH."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "strata-run")
    for candidate in (here, os.environ.get("STRATA_RUN")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("strata-run")
    if found:
        return found
    raise FileNotFoundError(f"strata.run: no strata-run launcher: looked for {here}, $STRATA_RUN and PATH")


def build_command(argv: list[str]) -> list[str]:
    parser = argparse.ArgumentParser(
        prog="python -m strata.run",
        description="Start N local ranks of a Python script (or, with --no-python, of any program).")
    parser.add_argument("-n", "--np", "--nproc-per-node", dest="n", type=int, required=True,
                        help="number of ranks")
    parser.add_argument("-p", "--prefix", action="store_true", help='prefix output lines with "[rank] "')
    parser.add_argument("--timeout", type=float, help="stop every rank after this many seconds (exit 124)")
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="add K=V to the environment")
    parser.add_argument("-m", dest="module", action="store_true", help="run the target as a module (python -m)")
    parser.add_argument("--no-python", action="store_true", help="run the target as a program, not with Python")
    parser.add_argument("target", help="script.py, module name (-m) or program (--no-python)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the target")
    a = parser.parse_args(argv)
    if a.n < 1:
        parser.error(f"-n must be at least 1, got {a.n}")
    cmd = [launcher_path(), "-n", str(a.n)]
    if a.prefix:
        cmd.append("--prefix")
    if a.timeout is not None:
        cmd += ["--timeout", str(a.timeout)]
    for kv in a.env:
        cmd += ["--env", kv]
    cmd.append("--")
    if a.no_python:
        cmd.append(a.target)
    elif a.module:
        cmd += [sys.executable, "-m", a.target]
    else:
        cmd += [sys.executable, a.target]
    return cmd + a.args


def main(argv: list[str] | None = None) -> int:
    cmd = build_command(sys.argv[1:] if argv is None else argv)
    # exec: the launcher takes this process's place, so signals and the exit status pass straight through.
    os.execv(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
