#!/usr/bin/env python3
"""Summarises perf/multihost_bench.sh's output: OUTDIR/<H>x<R>_<algo>.json (strata-perf --json).

Prints two markdown tables:
  (a) hierarchical vs ring at one size (default 64 MiB), per topology: time, busbw, the speed-up over
      ring, and the wire bound. An all-reduce of S bytes across H hosts must send 2(H-1)/H x S bytes out
      of each host, so with one link of rate L per host it takes at least 2(H-1)/H x S / L; the table
      shows time / bound (100% = the link is the only cost).
  (b) automatic selection vs the best forced algorithm, at every size, per topology.
Times are strata-perf's out-of-place times. Anything missing (an algorithm not run, a size absent, a
file that does not parse) prints as n/a, so the tables work with whatever algorithms exist today.

usage: perf/multihost_summary.py OUTDIR [--size BYTES] [--link-rate MB_PER_S]
"""
import argparse
import glob
import json
import os
import re
import sys

# Algorithms table (a) always shows, in this order, even when they were not run (n/a).
HEADLINE = ["ring", "hier"]


def load(outdir):
    """{(hosts, ranks): {algo: {size: (time_us, busbw_gbps)}}} from every <H>x<R>_<algo>.json."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(outdir, "*.json"))):
        m = re.fullmatch(r"(\d+)x(\d+)_(.+)\.json", os.path.basename(path))
        if not m:
            continue
        topo, algo = (int(m.group(1)), int(m.group(2))), m.group(3)
        try:
            with open(path) as f:
                doc = json.load(f)
            rows = {}
            for r in doc.get("results", []):
                oop = r.get("out_of_place") or {}
                t, bw = oop.get("time_us"), oop.get("busbw_gbps")
                pred = r.get("predicted_us")
                if isinstance(r.get("size"), int) and isinstance(t, (int, float)) and t > 0:
                    rows[r["size"]] = (float(t), float(bw) if isinstance(bw, (int, float)) else None,
                                       float(pred) if isinstance(pred, (int, float)) else None, r.get("algorithm"))
        except (OSError, ValueError, AttributeError) as e:
            print(f"multihost_summary: skipping {path}: {e}", file=sys.stderr)
            continue
        runs.setdefault(topo, {})[algo] = rows
    return runs


def fmt(v, spec, suffix=""):
    return "n/a" if v is None else format(v, spec) + suffix


def size_name(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def table_hier_vs_ring(runs, size, link_bytes_per_s):
    lines = [
        f"### (a) Hierarchical vs ring, all-reduce of {size_name(size)} (float32 sum)",
        "",
        f"Wire bound: 2(H-1)/H x S / link rate, link rate {link_bytes_per_s / 1e6:g} MB/s per host.",
        "",
        "| hosts x ranks | algorithm | time (ms) | busbw (GB/s) | speed-up vs ring | wire bound (ms) | time / bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for (hosts, ranks) in sorted(runs):
        algos = runs[(hosts, ranks)]
        bound_s = 2 * (hosts - 1) / hosts * size / link_bytes_per_s if hosts > 1 else None
        ring = algos.get("ring", {}).get(size)
        names = HEADLINE + sorted(a for a in algos if a not in HEADLINE and a != "auto")
        if "auto" in algos:
            names.append("auto")
        for name in names:
            row = algos.get(name, {}).get(size)
            t_us, bw = row[:2] if row else (None, None)
            speedup = ring[0] / t_us if ring and t_us else None
            pct = (t_us / 1e6) / bound_s * 100 if t_us and bound_s else None
            lines.append(
                f"| {hosts} x {ranks} | {name} | {fmt(t_us and t_us / 1e3, '.1f')} | {fmt(bw, '.3f')} | "
                f"{fmt(speedup, '.2f', 'x')} | {fmt(bound_s and bound_s * 1e3, '.1f')} | {fmt(pct, '.0f', '%')} |"
            )
    return lines


def table_auto_vs_best(runs):
    lines = [
        "### (b) Automatic selection vs the best forced algorithm (out-of-place time)",
        "",
        "| hosts x ranks | size | auto (us) | auto chose | best forced | best (us) | auto / best |",
        "|---|---|---|---|---|---|---|",
    ]
    for (hosts, ranks) in sorted(runs):
        algos = runs[(hosts, ranks)]
        auto = algos.get("auto", {})
        forced = {a: rows for a, rows in algos.items() if a != "auto"}
        sizes = sorted(set(auto).union(*[set(r) for r in forced.values()]) if forced or auto else [])
        for size in sizes:
            a = auto.get(size)
            cands = [(rows[size][0], name) for name, rows in forced.items() if size in rows]
            best = min(cands) if cands else None
            ratio = a[0] / best[0] if a and best else None
            lines.append(
                f"| {hosts} x {ranks} | {size_name(size)} | {fmt(a and a[0], '.1f')} | {(a and a[3]) or 'n/a'} | "
                f"{best[1] if best else 'n/a'} | {fmt(best and best[0], '.1f')} | {fmt(ratio, '.2f')} |"
            )
    return lines


def table_model_error(runs):
    """The cost model's predicted time against the measured one, every row of every run."""
    lines = [
        "### (c) Cost model: predicted vs measured time (out-of-place)",
        "",
        "| hosts x ranks | rows | median abs error | median predicted / measured | rows >= 1 MiB: median abs error |",
        "|---|---|---|---|---|",
    ]
    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if v else None
    for (hosts, ranks) in sorted(runs):
        ratios, big = [], []
        for algo, rows in runs[(hosts, ranks)].items():
            for size, (t, _bw, pred, _chosen) in rows.items():
                if pred and t > 0:
                    ratios.append(pred / t)
                    if size >= 1 << 20:
                        big.append(abs(pred / t - 1))
        errs = [abs(r - 1) for r in ratios]
        lines.append(f"| {hosts} x {ranks} | {len(ratios)} | {fmt(median(errs) and median(errs) * 100, '.0f', '%')} | "
                     f"{fmt(median(ratios), '.2f')} | {fmt(median(big) and median(big) * 100, '.0f', '%')} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir")
    p.add_argument("--size", type=int, default=64 << 20, help="bytes for table (a) (default 64 MiB)")
    p.add_argument("--link-rate", type=float, default=125.0,
                   help="per-host link rate in MB/s (10^6 bytes/s) for the wire bound (default 125 = 1 Gbit/s)")
    args = p.parse_args()
    runs = load(args.outdir)
    if not runs:
        print(f"multihost_summary: no <H>x<R>_<algo>.json in {args.outdir}", file=sys.stderr)
        return 1
    print("\n".join(table_hier_vs_ring(runs, args.size, args.link_rate * 1e6)))
    print()
    print("\n".join(table_auto_vs_best(runs)))
    print()
    print("\n".join(table_model_error(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
