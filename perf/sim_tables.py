#!/usr/bin/env python3
"""strata-sim's tables for perf/RESULTS.md ("strata-sim"), each printed as markdown on stdout.

usage: perf/sim_tables.py published|growth|symmetry [--build DIR]

  published  Strata's predicted busbw on the shipped DGX cluster files beside published NCCL figures, each with its
             source and the error against the published range (0 inside it, else the distance to its nearer end).
  growth     the cost of growth: 1 GiB all-reduce on the DGX H200 fat tree (clusters/fattree-h200.json) from 8 to
             16,384 GPUs, ring, hierarchical and tree, with the simulator's own run time per row.
  symmetry   the error of simulating only ranks 0..s-1 (symmetry) against simulating every rank, where both run.

Every figure comes from build/bin/strata-sim --json; nothing here models anything itself.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sim(build, cluster, coll, size, algo, hosts=None, extra=()):
    """strata-sim's JSON for one size and algorithm, plus the wall time of the whole process."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [os.path.join(build, "bin", "strata-sim"), "--cluster", os.path.join(ROOT, "clusters", cluster + ".json"),
               coll, "-b", str(size), "-e", str(size), "--algo", algo, "--json", out.name, *extra]
        if hosts:
            cmd[3:3] = ["--hosts", str(hosts)]
        start = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - start
        with open(out.name) as f:
            data = json.load(f)
    return data, wall


GiB = 1 << 30

# (cluster, hosts, collective, algorithm, size, published low, high, what was published, source)
PUBLISHED = [
    ("dgx-h100", 1, "allreduce", "ring", 8 * GiB, 370, 370, "8 x H100, NCCL ring all-reduce",
     "S. Jeaugey (NVIDIA), NVIDIA/nccl-tests issue 212 (the calibration point of host.intra.efficiency)"),
    ("dgx-h200", 1, "allreduce", "ring", 8 * GiB, 370, 370, "8 x H200, NCCL ring all-reduce (same NVLink 4)",
     "NVIDIA/nccl-tests issue 212, as the issue states it"),
    ("dgx-h200", 1, "reducescatter", "ring", 8 * GiB, 370, 370, "8 x H100/H200, NCCL ring reduce-scatter",
     "NVIDIA/nccl-tests issue 212 (~370 GB/s on the non-all-reduce collectives)"),
    ("dgx-h200", 1, "allgather", "ring", 8 * GiB, 370, 370, "8 x H100/H200, NCCL ring all-gather",
     "NVIDIA/nccl-tests issue 212 (~370 GB/s on the non-all-reduce collectives)"),
    ("dgx-h100", 1, "allreduce", "auto", 8 * GiB, 460, 480, "8 x H100 SXM5, NCCL default (NVLS)",
     "docs.alayanew.com, 'NCCL-tests in practice' (2026-05-06); Strata has no NVLS"),
    ("dgx-a100", 1, "allreduce", "ring", 8 * GiB, 230, 250, "8 x A100 SXM4, NCCL",
     "docs.alayanew.com, 'NCCL-tests in practice' (2026-05-06)"),
    ("dgx-h100", 2, "allreduce", "auto", 8 * GiB, 400, 450, "H100 SXM, NVLink + NDR IB, multi-node, 8 GB+",
     "saturncloud.io/blog/crusoe-nccl-cluster-validation (node count not stated; 2 assumed)"),
    ("dgx-h200", 2, "allreduce", "auto", 8 * GiB, 400, 450, "H200 SXM, NVLink + NDR IB, multi-node, 8 GB+",
     "saturncloud.io/blog/crusoe-nccl-cluster-validation (node count not stated; 2 assumed)"),
    ("dgx-a100", 2, "allreduce", "auto", 8 * GiB, 250, 300, "A100 SXM, NVLink + HDR IB, multi-node, 8 GB+",
     "saturncloud.io/blog/crusoe-nccl-cluster-validation (node count not stated; 2 assumed)"),
    ("dgx-h200", 4, "allreduce", "auto", 8 * GiB, 400, 450, "the same figure against 4 nodes",
     "saturncloud.io/blog/crusoe-nccl-cluster-validation"),
]


def published(build):
    print("| cluster (hosts) | collective | Strata's algorithm | size | predicted busbw (GB/s) | published (GB/s) |"
          " error | what was published | source |")
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for cluster, hosts, coll, algo, size, low, high, what, source in PUBLISHED:
        data, _ = sim(build, cluster, coll, size, algo, hosts)
        row = data["rows"][0]
        bus = row["busBw"]
        err = 0.0 if low <= bus <= high else min(abs(bus - low) / low, abs(bus - high) / high)
        errors.append(err)
        pub = f"{low}" if low == high else f"{low}-{high}"
        print(f"| {cluster} ({hosts}) | {coll} | {row['algorithm']} | {size // GiB} GiB | {bus:.1f} | {pub} |"
              f" {100 * err:.1f}% | {what} | {source} |")
    print(f"\nwithin 15%: {sum(e <= 0.15 for e in errors)} of {len(errors)}; median error {100 * statistics.median(errors):.1f}%")


def growth(build):
    print("| GPUs (hosts) | ring: time (ms) | busbw (GB/s) | sim (s) | hier: time (ms) | busbw | sim (s) |"
          " tree: time (ms) | busbw | sim (s) | ranks simulated (ring / hier / tree) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    hosts = 1
    while hosts <= 2048:
        cells, simulated = [], []
        for algo in ("ring", "hier", "tree"):
            if algo == "hier" and hosts == 1:
                cells += ["-", "-", "-"]
                simulated.append("-")
                continue
            data, wall = sim(build, "fattree-h200", "allreduce", GiB, algo, hosts)
            r = data["rows"][0]
            a = r["algorithms"][algo]
            cells += [f"{r['timeUs'] / 1e3:.2f}", f"{r['busBw']:.1f}", f"{wall:.2f}"]
            simulated.append(str(a["simulatedRanks"]))
        print(f"| {8 * hosts} ({hosts}) | " + " | ".join(cells) + " | " + " / ".join(simulated) + " |")
        sys.stdout.flush()
        hosts *= 2


def symmetry(build):
    print("| cluster | hosts | algorithm | size | symmetric (us) | ranks simulated | full (us) | error |")
    print("|---|---|---|---|---|---|---|---|")
    errors = []
    for cluster, hosts in (("fattree-h200", 8), ("fattree-h200", 32), ("dgx-h200", 64), ("netns-1g", 4)):
        for algo in ("ring", "hier"):
            for size in (1 << 20, 64 << 20, GiB):
                sym, _ = sim(build, cluster, "allreduce", size, algo, hosts)
                full, _ = sim(build, cluster, "allreduce", size, algo, hosts, ("--no-symmetry",))
                s, f = sym["rows"][0], full["rows"][0]
                err = abs(s["timeUs"] - f["timeUs"]) / f["timeUs"]
                errors.append(err)
                print(f"| {cluster} | {hosts} | {algo} | {size >> 20} MiB | {s['timeUs']:.1f} |"
                      f" {s['algorithms'][algo]['simulatedRanks']} of {sym['nranks']} | {f['timeUs']:.1f} |"
                      f" {100 * err:.2f}% |")
    print(f"\nlargest error {100 * max(errors):.2f}%, median {100 * statistics.median(errors):.2f}%")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("table", choices=["published", "growth", "symmetry"])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = p.parse_args()
    {"published": published, "growth": growth, "symmetry": symmetry}[args.table](args.build)


if __name__ == "__main__":
    main()
