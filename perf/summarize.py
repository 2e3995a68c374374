#!/usr/bin/env python3
"""Checks strata-perf JSON results (from perf/run_baselines.sh) against the issues' targets and prints markdown
tables: busbw ratios against Open MPI, Gloo and oneCCL from 1 MiB up, and small all-reduce latency (from the
latency_n*.json runs when given, which take many more iterations than the sweeps).

A baseline absent from every file is left out of the tables; absent from some rows, it shows n/a there.

usage: perf/summarize.py perf/results/*.json
"""
import json
import statistics
import sys

MIB = 1 << 20
# Baselines in column order, with the busbw ratio each is held to.
TARGETS = {"mpi": 1.5, "gloo": 3.0, "oneccl": 1.5}
NAMES = {"mpi": "MPI", "gloo": "Gloo", "oneccl": "oneCCL"}


def load(path):
    with open(path) as f:
        return json.load(f)


def main(paths):
    docs = [(p, load(p)) for p in sorted(paths)]
    present = [b for b in TARGETS
               if any(r.get("baselines", {}).get(b) for _, d in docs for r in d["results"])]
    dedicated = any(p.split("/")[-1].startswith("latency_") for p in paths)
    rows, latency = [], []
    for path, d in docs:
        env = d["environment"]
        coll, n = env["collective"], env["nranks"]
        isLatency = path.split("/")[-1].startswith("latency_")
        big = [] if isLatency else [r for r in d["results"] if r["size"] >= MIB and r.get("baselines")]
        if big:
            cells, misses = [], []
            for b in present:
                got = [(r["size"], r["baselines"][b]["strata_ratio"]) for r in big if r["baselines"].get(b)]
                cells.append(f"{min(x for _, x in got):.2f}" if got else "n/a")
                misses += [f"{s // MIB}M ({b} {x:.2f})" for s, x in got if x < TARGETS[b]]
            sizes = f"{big[0]['size'] // MIB}M-{big[-1]['size'] // MIB}M"
            rows.append(f"| {coll} | {n} | {sizes} | {' | '.join(cells)} | {', '.join(misses) if misses else 'none: met'} |")
        if coll == "allreduce" and isLatency == dedicated:
            for r in d["results"]:
                if 8 <= r["size"] <= 4096 and r.get("baselines"):
                    base = {b: r["baselines"][b]["time_us"] for b in present if r["baselines"].get(b)}
                    # A baseline-only launch (few iterations, e.g. oneCCL at 4 ranks) adds no Strata time.
                    strata = r["out_of_place"]["time_us"] if "mpi" in base else None
                    latency.append((n, r["size"], strata, base))
    if rows:
        heads = " | ".join(f"min vs {NAMES[b]} (target {TARGETS[b]:g})" for b in present)
        print(f"| collective | ranks | sizes | {heads} | sizes below target |")
        print("|---|---|---|" + "---|" * len(present) + "---|")
        print("\n".join(rows))
    if latency:
        # Several launches of the same sizes (latency_n*_r*.json): the median per (ranks, size).
        groups = {}
        for n, size, t, base in latency:
            g = groups.setdefault((n, size), {"strata": [], **{b: [] for b in present}})
            if t is not None:
                g["strata"].append(t)
            for b, v in base.items():
                g[b].append(v)
        lat = [b for b in present if b != "gloo"]
        print()
        print("| all-reduce | ranks | Strata (us) | " + " | ".join(f"{NAMES[b]} (us) | Strata / {NAMES[b]}" for b in lat)
              + " | met (<= every baseline) | launches |")
        print("|---|---|---|" + "---|---|" * len(lat) + "---|---|")
        for (n, size), g in sorted(groups.items()):
            t = statistics.median(g["strata"]) if g["strata"] else None
            cells, met = [], t is not None
            for b in lat:
                if g[b] and t is not None:
                    m = statistics.median(g[b])
                    cells.append(f"{m:.2f} | {t / m:.2f}")
                    met &= t <= m
                else:
                    cells.append("n/a | n/a")
            launches = "/".join(str(len(g[b])) for b in ["strata"] + lat)
            print(f"| {size} B | {n} | {'n/a' if t is None else f'{t:.2f}'} | {' | '.join(cells)} | "
                  f"{'yes' if met else 'no'} | {launches} |")


if __name__ == "__main__":
    main(sys.argv[1:])
