#!/usr/bin/env bash
# A/B of two builds on the training trio (all-reduce, reduce-scatter, all-gather; float32 sum, 8 B to 128 MiB,
# factor 4) at 2 and 4 ranks: ROUNDS rounds, each launching both builds' strata-perf back to back (the order
# alternates between rounds), so slow spells of a shared machine fall on both sides. Writes every launch's JSON
# to OUT_DIR and prints, per collective and rank count, NEW / BASE over the sizes: of the medians of the launches
# and of their best (the best is what oversubscribed ranks, 4 on 2 cores, measure most steadily).
# usage: perf/ab_trio.sh BASE_BUILD NEW_BUILD OUT_DIR [ROUNDS]
set -euo pipefail
base=${1:?usage: perf/ab_trio.sh BASE_BUILD NEW_BUILD OUT_DIR [ROUNDS]}
new=${2:?usage: perf/ab_trio.sh BASE_BUILD NEW_BUILD OUT_DIR [ROUNDS]}
out=${3:?usage: perf/ab_trio.sh BASE_BUILD NEW_BUILD OUT_DIR [ROUNDS]}
rounds=${4:-5}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for ((round = 1; round <= rounds; ++round)); do
  order="base new"
  ((round % 2 == 0)) && order="new base"
  for n in 2 4; do
    for coll in allreduce reducescatter allgather; do
      for side in $order; do
        dir=$base
        [[ $side == new ]] && dir=$new
        mpirun -n "$n" --oversubscribe --bind-to none "$dir/bin/strata-perf" "$coll" -d float -o sum -b 8 -e 128M \
          -f 4 -n 20 -w 5 -c 1 -T 300 --json "$out/${coll}_n${n}_${side}_r${round}.json" >/dev/null 2>&1
      done
    done
  done
done
python3 - "$out" <<'PY'
import collections, glob, json, os, re, statistics, sys
times = collections.defaultdict(lambda: collections.defaultdict(list))  # (coll, n, size, place) -> side -> [us]
for path in glob.glob(os.path.join(sys.argv[1], "*_n*_*_r*.json")):
    coll, n, side = re.match(r"(\w+)_n(\d+)_(base|new)_r\d+\.json", os.path.basename(path)).groups()
    for res in json.load(open(path))["results"]:
        for place in ("out_of_place", "in_place"):
            times[(coll, int(n), res["size"], place)][side].append(res[place]["time_us"])
for label, pick in (("medians of the launches", statistics.median), ("best of the launches", min)):
    print(f"\nNEW / BASE time, {label}: median over sizes (min-max), and the median from 2 MiB up")
    print("| collective | ranks | all sizes | from 2 MiB |")
    print("|---|---|---|---|")
    rows, big = collections.defaultdict(list), collections.defaultdict(list)
    for (coll, n, size, place), sides in sorted(times.items()):
        ratio = pick(sides["new"]) / pick(sides["base"])
        rows[(coll, n)].append(ratio)
        if size >= 2 << 20:
            big[(coll, n)].append(ratio)
    for key in sorted(rows):
        v = rows[key]
        print(f"| {key[0]} | {key[1]} | {statistics.median(v):.3f} ({min(v):.2f}-{max(v):.2f}) | "
              f"{statistics.median(big[key]):.3f} |")
PY
