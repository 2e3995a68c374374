"""Runs PyTorch's own distributed test suite (DistributedTest._DistTestBase, shipped in the torch wheel as
torch/testing/_internal/distributed/distributed_test.py) for the "strata" backend and for gloo, and records
pass / fail / skip / error per test.

    PYTHONPATH=build/python python3 tests/torch/run_torch_suite.py --backend strata,gloo --world-size 2 \
        --select ci --table [--out results.json] [-k PATTERN] [--known-differences tests/torch/known_differences.txt]
    PYTHONPATH=build/python python3 tests/torch/run_torch_suite.py --select full --world-size 2,3 \
        --out tests/torch/results-full-ws2.json --table

Needs torch and expecttest (torch's test helpers import it); PYTHONPATH must reach the built strata package.
--select ci is a bounded subset (26 tests: about 2.5 minutes per backend at 2 ranks on a 2-core VM, 6 minutes
for test_torch_suite.sh); --select full is every collective, group, p2p, monitored-barrier and CPU DDP test
(129 tests, suite_selection.py says which; about 11 minutes per backend at 2 ranks).

Each (backend, world size) runs as one suite_worker.py subprocess in its own process group: a test whose ranks
hang is killed after --timeout seconds (and recorded as an error), and a run that exceeds --run-timeout is
killed whole, its unfinished tests recorded as errors. The workers' output goes to --log-dir.

Outcomes: pass; fail (a rank raised); error (timeout, crash, unexpected exit status); skip (the reason says
why; "gated by name" marks the strata skips of tests whose decorator admits only gloo by name, listed in
suite_selection.GATED_BY_NAME). Such tests then run again on strata with torch's test module seeing "gloo" and
every group it makes redirected to strata (suite_worker.AS_GLOO): their outcome replaces the skip, marked
"(as gloo)" in the table (--no-as-gloo leaves them skipped). With --known-differences FILE (one test name a line, '#' starts a comment)
the exit status is 1 when strata does not pass a test that gloo passes at the same world size, unless the
test is gated or listed in FILE.
"""
from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "suite_worker.py"
DEFAULT_RUN_TIMEOUT = {"ci": 900, "full": 3600}


def _csv(values: list[str]) -> list[str]:
    return [v for value in values for v in value.split(",") if v]


def run_one(backend: str, world_size: int, args, log_dir: Path, as_gloo: list[str] | None = None
            ) -> tuple[list[dict], dict]:
    """Runs the worker for one (backend, world size); returns its per-test records and a summary of the run.
    as_gloo: strata only, exactly these tests, with torch's test module seeing "gloo" (suite_worker.AS_GLOO)."""
    tag = f"{backend}{'-as-gloo' if as_gloo else ''}-ws{world_size}"
    results_path = log_dir / f"{tag}.jsonl"
    log_path = log_dir / f"{tag}.log"
    cmd = [sys.executable, str(WORKER), "--select", args.select, "--results", str(results_path),
           "--timeout", str(args.timeout)]
    cmd += ["--tests", ",".join(as_gloo)] if as_gloo else [a for p in args.patterns for a in ("-k", p)]
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world_size))
    if as_gloo:
        env["STRATA_SUITE_AS_GLOO"] = "1"
    run_timeout = args.run_timeout or DEFAULT_RUN_TIMEOUT[args.select]
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = proc.wait(timeout=run_timeout)
            unfinished = "worker exited before running it"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and the ranks it spawned
            status = proc.wait()
            unfinished = f"not finished: the run was killed after {run_timeout} s"
    seconds = round(time.monotonic() - start, 1)

    plan, kind, records = [], None, []
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            item = json.loads(line)
            if "plan" in item:
                plan, kind = item["plan"], item["backend_kind"]
            else:
                records.append(item)
    done = {r["test"] for r in records}
    records += [{"test": name, "outcome": "error", "reason": unfinished, "gated": False, "seconds": 0.0}
                for name in plan if name not in done]
    if not plan:  # the worker died before choosing its tests (an import error, say): its log says why
        tail = log_path.read_text().strip().splitlines()[-1:] or [f"exit status {status}"]
        records.append({"test": "<worker>", "outcome": "error", "reason": tail[0], "gated": False, "seconds": 0.0})
    for r in records:
        r.update(backend=backend, world_size=world_size)
    counts = collections.Counter(r["outcome"] for r in records)
    summary = {"backend": backend, "backend_kind": kind, "world_size": world_size, "seconds": seconds,
               "exit_status": status, "log": str(log_path),
               **{k: counts.get(k, 0) for k in ("pass", "fail", "skip", "error")},
               "gated": sum(r["gated"] for r in records)}
    return records, summary


def differences(records: list[dict]) -> list[dict]:
    """The strata records of tests that gloo passes at the same world size and strata does not."""
    by_key = {(r["backend"], r["world_size"], r["test"]): r for r in records}
    return [r for r in records
            if r["backend"] == "strata" and r["outcome"] != "pass"
            and by_key.get(("gloo", r["world_size"], r["test"]), {}).get("outcome") == "pass"]


def read_allow_list(path: Path) -> dict[str, str]:
    allowed = {}
    for line in path.read_text().splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            allowed[name.strip()] = reason.strip()
    return allowed


def markdown_table(records: list[dict], runs: list[tuple[str, int]]) -> str:
    cell = {(r["backend"], r["world_size"], r["test"]): r for r in records}
    tests = sorted({r["test"] for r in records})
    lines = ["| test | " + " | ".join(f"{b} ws{w}" for b, w in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for test in tests:
        row = []
        for b, w in runs:
            r = cell.get((b, w, test))
            row.append("" if r is None else "skip (gated)" if r["gated"] else
                       f"{r['outcome']} (as gloo)" if r.get("as_gloo") else r["outcome"])
        lines.append(f"| {test} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--backend", action="append", default=[], help="strata, gloo or both (comma list or "
                        "repeated; default strata,gloo)")
    parser.add_argument("--world-size", action="append", default=[], help="comma list or repeated (default 2)")
    parser.add_argument("--select", choices=("ci", "full"), default="ci")
    parser.add_argument("-k", dest="patterns", metavar="PATTERN", action="append", default=[],
                        help="only tests whose name contains PATTERN (or matches it, with * ? [); repeatable")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--table", action="store_true", help="print a markdown table of the outcomes per test")
    parser.add_argument("--known-differences", type=Path, metavar="FILE",
                        help="exit 1 if strata fails a test gloo passes that FILE does not list")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test (default 120)")
    parser.add_argument("--run-timeout", type=int,
                        help="seconds per (backend, world size) run (default 900 for ci, 3600 for full)")
    parser.add_argument("--log-dir", type=Path, help="worker logs and raw results (default: a new temp dir)")
    parser.add_argument("--no-as-gloo", action="store_true",
                        help="leave the tests gated on gloo's name skipped for strata instead of running them with "
                             "the gate seeing gloo")
    args = parser.parse_args()

    backends = _csv(args.backend) or ["strata", "gloo"]
    if unknown := set(backends) - {"strata", "gloo"}:
        parser.error(f"unknown backend(s) {sorted(unknown)}: strata or gloo")
    world_sizes = [int(w) for w in _csv(args.world_size)] or [2]
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="torch-suite-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    runs = [(b, w) for w in world_sizes for b in backends]
    records, summaries = [], []
    for backend, world_size in runs:
        print(f"== {backend}, world size {world_size}, --select {args.select} ...", flush=True)
        run_records, summary = run_one(backend, world_size, args, log_dir)
        gated = [r["test"] for r in run_records if r["gated"]]
        if gated and not args.no_as_gloo:
            # The tests gated on gloo's name run again on strata with the gate seeing "gloo"; their outcomes
            # replace the gated skips (the reason says so).
            print(f"   {len(gated)} tests gated by name: running them with torch's module seeing gloo ...", flush=True)
            again, again_summary = run_one(backend, world_size, args, log_dir, as_gloo=gated)
            by_name = {r["test"]: r for r in again}
            for r in run_records:
                if r["gated"] and r["test"] in by_name:
                    r.update(outcome=by_name[r["test"]]["outcome"], gated=False, as_gloo=True,
                             reason=f"run as gloo (gated by name): {by_name[r['test']]['reason']}".rstrip(": "))
            counts = collections.Counter(r["outcome"] for r in run_records)
            summary.update({k: counts.get(k, 0) for k in ("pass", "fail", "skip", "error")},
                           gated=sum(r["gated"] for r in run_records), as_gloo=len(by_name),
                           seconds=round(summary["seconds"] + again_summary["seconds"], 1))
        records += run_records
        summaries.append(summary)
        print(f"   {summary['backend_kind']}, {summary['seconds']} s: {summary['pass']} pass, {summary['fail']} fail, "
              f"{summary['skip']} skip ({summary['gated']} gated), {summary['error']} error; log {summary['log']}",
              flush=True)

    diffs = differences(records)
    if args.out:
        args.out.write_text(json.dumps({"torch": importlib.metadata.version("torch"), "select": args.select,
                                        "patterns": args.patterns, "runs": summaries, "results": records},
                                       indent=1) + "\n")
        print(f"results: {args.out}")
    if args.table:
        print("\n" + markdown_table(records, runs) + "\n")

    allowed = read_allow_list(args.known_differences) if args.known_differences else {}
    if diffs:
        print("Tests gloo passes and strata does not:")
        for r in diffs:
            # (a gated test's reason starts "gated by name")
            note = ("" if r["gated"] else "known difference" if r["test"] in allowed
                    else "NEW" if args.known_differences else "")
            print(f"  ws{r['world_size']} {r['test']}: {r['outcome']}{f' [{note}]' if note else ''}: {r['reason']}")
    if not args.known_differences:
        return 0
    new = [r for r in diffs if not r["gated"] and r["test"] not in allowed]
    diff_names = {r["test"] for r in diffs}
    ran = {r["test"] for r in records if r["backend"] == "strata"}
    for name in sorted(n for n in allowed if n in ran and n not in diff_names):
        print(f"note: {name} is in {args.known_differences} but no longer differs; remove it")
    if new:
        print(f"FAILED: {len(new)} test(s) gloo passes and strata does not, not in {args.known_differences}")
        return 1
    print(f"OK: every difference from gloo is gated or listed in {args.known_differences}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
