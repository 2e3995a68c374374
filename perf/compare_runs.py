#!/usr/bin/env python3
"""Compare two perf/run_baselines.sh output folders, size by size, as time ratios (second / first).

Each sweep measures Strata and its baselines in the same launch, so the first run's baseline times show how
much the machine itself moved between the runs. The table gives, per collective and rank count, the median,
minimum and maximum over the sweep's sizes of Strata's out-of-place time ratio and of Open MPI's, and the
median over the sizes from 2 MiB up.

usage: perf/compare_runs.py BEFORE_DIR AFTER_DIR
"""
import json
import statistics
import sys


def load(folder, coll, n):
    with open(f"{folder}/{coll}_n{n}.json") as f:
        return json.load(f)["results"]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    before, after = sys.argv[1:]
    print("| collective | ranks | Strata after/before: median (min-max) | from 2 MiB: median |"
          " Open MPI after/before: median (min-max) |")
    print("|---|---|---|---|---|")
    for coll in ("allreduce", "reducescatter", "allgather"):
        for n in (2, 4):
            a, b = load(before, coll, n), load(after, coll, n)
            if [x["size"] for x in a] != [y["size"] for y in b]:
                sys.exit(f"{coll} n={n}: the two runs swept different sizes")
            strata = [y["out_of_place"]["time_us"] / x["out_of_place"]["time_us"] for x, y in zip(a, b)]
            mpi = [y["baselines"]["mpi"]["time_us"] / x["baselines"]["mpi"]["time_us"] for x, y in zip(a, b)]
            large = [r for x, r in zip(a, strata) if x["size"] >= 2 << 20]
            print(f"| {coll} | {n} | {statistics.median(strata):.3f} ({min(strata):.2f}-{max(strata):.2f}) "
                  f"| {statistics.median(large):.3f} "
                  f"| {statistics.median(mpi):.3f} ({min(mpi):.2f}-{max(mpi):.2f}) |")


if __name__ == "__main__":
    main()
