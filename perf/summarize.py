#!/usr/bin/env python3
"""Checks strata-perf JSON results (from perf/run_baselines.sh) against the issue's targets and prints a
markdown table: busbw ratios against Open MPI and Gloo from 1 MiB up, and small all-reduce latency (from
the latency_n*.json runs when given, which take many more iterations than the sweeps).

usage: perf/summarize.py perf/results/*.json
"""
import json
import statistics
import sys

MIB = 1 << 20


def load(path):
    with open(path) as f:
        return json.load(f)


def main(paths):
    print("| collective | ranks | sizes | min busbw ratio vs MPI (target 1.5) | min vs Gloo (target 3) | "
          "sizes below target |")
    print("|---|---|---|---|---|---|")
    latency = []
    dedicated = any(p.split("/")[-1].startswith("latency_") for p in paths)
    for path in sorted(paths):
        d = load(path)
        env = d["environment"]
        coll, n = env["collective"], env["nranks"]
        isLatency = path.split("/")[-1].startswith("latency_")
        big = [] if isLatency else [r for r in d["results"] if r["size"] >= MIB and r.get("baselines")]
        if big:
            mpi = [(r["size"], r["baselines"]["mpi"]["strata_ratio"]) for r in big if r["baselines"].get("mpi")]
            gloo = [(r["size"], r["baselines"]["gloo"]["strata_ratio"]) for r in big if r["baselines"].get("gloo")]
            misses = [f"{s // MIB}M (mpi {x:.2f})" for s, x in mpi if x < 1.5]
            misses += [f"{s // MIB}M (gloo {x:.2f})" for s, x in gloo if x < 3.0]
            sizes = f"{big[0]['size'] // MIB}M-{big[-1]['size'] // MIB}M"
            print(f"| {coll} | {n} | {sizes} | {min(x for _, x in mpi):.2f} | {min(x for _, x in gloo):.2f} | "
                  f"{', '.join(misses) if misses else 'none: met'} |")
        if coll == "allreduce" and isLatency == dedicated:
            for r in d["results"]:
                if 8 <= r["size"] <= 4096 and r.get("baselines", {}).get("mpi"):
                    latency.append((n, r["size"], r["out_of_place"]["time_us"], r["baselines"]["mpi"]["time_us"]))
    if latency:
        # Several launches of the same sizes (latency_n*_r*.json): the median per (ranks, size).
        groups = {}
        for n, size, t, m in latency:
            groups.setdefault((n, size), []).append((t, m))
        print()
        print("| all-reduce | ranks | Strata (us) | Open MPI (us) | Strata / MPI | met (<= MPI) | launches |")
        print("|---|---|---|---|---|---|---|")
        for (n, size), runs in sorted(groups.items()):
            t = statistics.median(r[0] for r in runs)
            m = statistics.median(r[1] for r in runs)
            print(f"| {size} B | {n} | {t:.2f} | {m:.2f} | {t / m:.2f} | {'yes' if t <= m else 'no'} | {len(runs)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
