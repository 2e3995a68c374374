#!/usr/bin/env python3
"""Runs strata-perf with --baseline B1,B2,... and checks what it wrote, then plots it.

    check_perf_baselines.py [--baselines mpi,gloo] --json F --plot perf/plot.py --png P -- mpirun ... strata-perf ...

Passes when the command exits 0, every row of F has Strata's results and every baseline's (a bus bandwidth,
a ratio, and 0 wrong elements everywhere), and perf/plot.py turns F into the image P.
"""

import argparse
import json
import math
import os
import subprocess
import sys

BASELINES = ["mpi", "gloo"]


def fail(message):
    print(f"check_perf_baselines: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_results(path, partial):
    with open(path) as f:
        data = json.load(f)
    env = data.get("environment", {})
    versions = {b.get("name"): b.get("version") for b in env.get("baselines", [])}
    for name in BASELINES:
        if not versions.get(name):
            fail(f"{path}: environment.baselines has no version for {name}: {env.get('baselines')}")
    rows = data.get("results", [])
    if not rows:
        fail(f"{path}: no results")
    measured = {}
    for row in rows:
        where = f"{path}: size {row.get('size')}"
        for mode in ("out_of_place", "in_place"):
            if row.get(mode, {}).get("wrong") != 0:
                fail(f"{where}: Strata {mode} has {row.get(mode, {}).get('wrong')} wrong elements (want 0)")
        for name in BASELINES:
            b = (row.get("baselines") or {}).get(name)
            if b is None and partial:
                continue  # a type or op the library lacks (n/a)
            if b is None:
                fail(f"{where}: no {name} measurement (n/a for float sum allreduce?)")
            measured[name] = measured.get(name, 0) + 1
            if not is_number(b.get("busbw_gbps")) or b["busbw_gbps"] <= 0:
                fail(f"{where}: {name} busbw_gbps is {b.get('busbw_gbps')!r}")
            if not is_number(b.get("strata_ratio")):
                fail(f"{where}: {name} strata_ratio is {b.get('strata_ratio')!r}")
            if b.get("wrong") != 0:
                fail(f"{where}: {name} ({b.get('algorithm')}) has {b.get('wrong')} wrong elements (want 0)")
    for name in BASELINES:
        if not measured.get(name):
            fail(f"{path}: {name} measured no row")
    counts = ", ".join(f"{name} {measured[name]}" for name in BASELINES)
    print(f"check_perf_baselines: {len(rows)} rows, Strata correct in all, baselines correct where measured ({counts})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baselines", default=",".join(BASELINES), help="the baselines every row must have")
    parser.add_argument("--partial", action="store_true",
                        help="rows may lack a baseline (a type or op it does not have); each must measure some")
    parser.add_argument("--json", required=True, help="the file the command writes (its --json)")
    parser.add_argument("--plot", required=True, help="perf/plot.py")
    parser.add_argument("--png", required=True, help="image plot.py writes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the strata-perf command line")
    args = parser.parse_args()
    BASELINES[:] = [b for b in args.baselines.split(",") if b]
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        fail("no command given")

    for path in (args.json, args.png):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if os.path.exists(path):
            os.remove(path)
    print("check_perf_baselines: running", " ".join(command), flush=True)
    rc = subprocess.run(command, timeout=240).returncode
    if rc != 0:
        fail(f"strata-perf exited with status {rc}")
    check_results(args.json, args.partial)

    env = dict(os.environ, MPLBACKEND="Agg")
    rc = subprocess.run([sys.executable, args.plot, args.json, "-o", args.png], env=env, timeout=120).returncode
    if rc != 0 or not os.path.exists(args.png) or os.path.getsize(args.png) == 0:
        fail(f"{args.plot} exited with status {rc} and did not write {args.png}")
    print(f"check_perf_baselines: PASS ({args.png})")


if __name__ == "__main__":
    main()
