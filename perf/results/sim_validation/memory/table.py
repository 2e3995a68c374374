#!/usr/bin/env python3
"""Prints the membound_n<N>_l<L>.json rows: per size S, the working set N x 2 S and memcpy_aggregate_gbps of every
launch, their median, and the ring all-reduce's out-of-place time of every launch."""
import glob, json, re, statistics, sys, os
here = os.path.dirname(os.path.abspath(__file__))
for n in (2, 4):
    rows = {}
    for p in sorted(glob.glob(f"{here}/membound_n{n}_l*.json")):
        for r in json.load(open(p))["results"]:
            g = (r.get("membound") or {}).get("memcpy_aggregate_gbps")
            rows.setdefault(r["size"], []).append((g, r["out_of_place"]["time_us"]))
    print(f"## {n} ranks: S, working set (MiB), memcpy GB/s per launch | median | ring us per launch")
    for s, v in sorted(rows.items()):
        gs = [g for g, _ in v]
        print(f"{s >> 10:7d} KiB {2 * n * s / 2**20:7.1f}  " + " ".join(f"{g:6.1f}" for g in gs) +
              f" | {statistics.median(gs):6.1f} | " + " ".join(f"{t:8.0f}" for _, t in v))
