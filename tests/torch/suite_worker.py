"""Runs a selection of PyTorch's distributed test suite for one backend and one world size.

run_torch_suite.py starts one of these per (backend, world size); by hand:

    BACKEND=strata WORLD_SIZE=2 PYTHONPATH=build/python \
        python3 tests/torch/suite_worker.py --select ci --results /tmp/r.jsonl [-k PATTERN] [--timeout 120]
    BACKEND=strata WORLD_SIZE=2 PYTHONPATH=build/python python3 tests/torch/suite_worker.py --select full --list

It does what torch's test/distributed/test_distributed_spawn.py does (that file is not in the wheel): a
unittest class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase) whose every test
spawns WORLD_SIZE rank processes ("spawn" start method). Each rank imports this file again (as __mp_main__),
so the module-level code below runs in the ranks too, before torch's distributed_test module is imported:
- with BACKEND=strata it imports strata.torch, which registers the "strata" torch.distributed backend;
- it adds BACKEND to every DistTestCases.backend_feature set gloo is in (and to "plugin"), because the test
  class's skip decorators read those sets when the class is built. Gates that compare BACKEND with a
  literal name cannot be opened that way; suite_selection.GATED_BY_NAME lists them.
Nothing under site-packages is changed: only these in-memory sets and, in the parent, the per-test timeout.

--results gets one JSON line first, {"plan": [test names], "backend_kind": "c++" or "python" for strata (which
strata backend served; STRATA_TORCH_BACKEND=python picks the Python one), else the backend}, then one line
per finished test:
{"test", "outcome" (pass, fail, skip, error), "reason" (first line of the failure or skip reason), "gated",
"seconds"}. "fail": a rank raised (an assertion or any exception in the test); "error": a rank timed out,
crashed or exited with an unexpected status, or the harness failed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest

# STRATA_SUITE_AS_GLOO=1 (the runner sets it for strata only): the tests whose decorators admit only gloo by name
# run with torch's test module believing the backend is gloo, while every process group it makes is strata's
# (_as_gloo). The ranks inherit BACKEND=gloo from this process, so the variable, not BACKEND, says strata.
AS_GLOO = os.environ.get("STRATA_SUITE_AS_GLOO") == "1"
BACKEND = "strata" if AS_GLOO else os.environ["BACKEND"]
# As in torch's CI with file init: decorators read INIT_METHOD at import; TestDistBackend.setUp then points it
# at a fresh file per test (the ranks inherit that).
os.environ.setdefault("INIT_METHOD", "file://")
if BACKEND == "strata":
    import strata.torch  # registers the backend

    # "c++" (ProcessGroupStrata) or "python" (the fallback, also chosen by STRATA_TORCH_BACKEND=python).
    BACKEND_KIND = strata.torch.backend_kind()
else:
    BACKEND_KIND = BACKEND



def _as_gloo() -> None:
    """torch's test module reads BACKEND when it is imported and builds its skip gates from it: it sees "gloo".
    The groups it creates by that name (init_process_group, new_group) become strata's."""
    import torch.distributed as dist

    os.environ["BACKEND"] = "gloo"

    def redirect(fn):
        def call(*args, backend=None, **kwargs):
            return fn(*args, backend="strata" if backend in (None, "gloo") else backend, **kwargs)

        return call

    dist.init_process_group = redirect(dist.init_process_group)
    dist.new_group = redirect(dist.new_group)


if AS_GLOO:
    _as_gloo()

from torch.testing._internal import common_distributed  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND != "gloo" and not AS_GLOO:
    for _backends in DistTestCases.backend_feature.values():
        if "gloo" in _backends:
            _backends.add(BACKEND)
    DistTestCases.backend_feature["plugin"].add(BACKEND)

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

import suite_selection  # noqa: E402 (beside this file, which is on sys.path as the script's folder)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _rank_exception(message: str) -> str:
    """'rank N: <exception line>' from MultiProcessTestCase's "Process N exited with error code 10 and
    exception:\\n<traceback>" (the exception line is the traceback's last unindented line after its frames)."""
    head, _, tb = message.partition("\n")
    rank = head.split()[1] if head.startswith("Process ") else "?"
    tb_lines = tb.splitlines()
    start = max((i for i, line in enumerate(tb_lines) if line.startswith("Traceback")), default=0)
    for line in tb_lines[start + 1:]:
        if line.strip() and not line[0].isspace():
            return f"rank {rank}: {line.strip()}"
    return _first_line(message)


def _classify(exc_type, exc: BaseException) -> tuple[str, str]:
    message = str(exc)
    if "exited with error code" in message:
        return "fail", _rank_exception(message)
    if "terminated or timed out" in message or "Expected exit code" in message:
        return "error", _first_line(message)
    outcome = "fail" if issubclass(exc_type, AssertionError) else "error"
    return outcome, f"{exc_type.__name__}: {_first_line(message)}"


class _JsonLinesResult(unittest.TextTestResult):
    """Writes each test's outcome to the results file as soon as it finishes."""

    def __init__(self, stream, descriptions, verbosity, *, results):
        super().__init__(stream, descriptions, verbosity)
        self._results = results
        self._start = 0.0
        self._outcome: tuple[str, str] | None = None

    def startTest(self, test):  # noqa: N802 (unittest's name)
        super().startTest(test)
        self._start = time.monotonic()
        self._outcome = ("pass", "")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._outcome = _classify(err[0], err[1])

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._outcome = _classify(err[0], err[1])

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._outcome = ("skip", _first_line(str(reason)))

    def stopTest(self, test):  # noqa: N802
        super().stopTest(test)
        name = test.id().split(".")[-1]
        outcome, reason = self._outcome
        gated = BACKEND != "gloo" and not AS_GLOO and outcome == "skip" and name in suite_selection.GATED_BY_NAME
        if gated:
            reason = f"gated by name: {suite_selection.GATED_BY_NAME[name]}"
        self._results.write(json.dumps({"test": name, "outcome": outcome, "reason": reason, "gated": gated,
                                        "seconds": round(time.monotonic() - self._start, 2)}) + "\n")
        self._results.flush()


def _decorator_skip(name: str) -> str | None:
    fn = getattr(TestDistBackendWithSpawn, name)
    return fn.__unittest_skip_why__ if getattr(fn, "__unittest_skip__", False) else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--select", default="ci", choices=("ci", "full"))
    parser.add_argument("-k", dest="patterns", metavar="PATTERN", action="append", default=[],
                        help="only tests whose name contains PATTERN (or matches it, with * ? [); repeatable")
    parser.add_argument("--tests", help="exactly these tests (comma list), instead of --select and -k")
    parser.add_argument("--results", help="JSON-lines results file")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test before its ranks are killed")
    parser.add_argument("--list", action="store_true",
                        help="print the selected tests and the skip their decorators apply here, then exit")
    args = parser.parse_args()

    if args.tests:
        names = [n for n in args.tests.split(",") if hasattr(TestDistBackendWithSpawn, n)]
    else:
        names = suite_selection.select(TestDistBackendWithSpawn, args.select, args.patterns)
    if args.list:
        print(json.dumps({n: _decorator_skip(n) for n in names}, indent=1))
        return 0
    if not args.results:
        parser.error("--results is required unless --list")

    # One bound for every test (torch's defaults are 300 s, and 400-500 s for two DDP tests).
    common_distributed.TIMEOUT_DEFAULT = args.timeout
    common_distributed.TIMEOUT_OVERRIDE.clear()

    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    with open(args.results, "w") as results:
        results.write(json.dumps({"plan": names, "backend_kind": BACKEND_KIND}) + "\n")
        results.flush()
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2,
                                         resultclass=lambda *a: _JsonLinesResult(*a, results=results))
        runner.run(suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
