#!/usr/bin/env bash
# Loaded plans against the built-ins on this machine: MSCCL files written by tests/plans/gen_msccl.py (an all-pairs
# all-reduce and an all-pairs all-gather: a thread block per peer) timed by strata-perf in the same launch as the
# built-ins (--algo 'ring;...;FILE'), at 4 and 8 ranks on shared memory, every result checked. LAUNCHES launches
# each (default 3); the table gives each algorithm's median busbw in the placement the file serves (the all-reduce
# file in place, the all-gather file out of place: in the other, STRATA_ALGO's file leaves the call to a built-in)
# and the file's ratio to ring's in the same launch (median of the launches' ratios).
# usage: perf/loaded_plans.sh [BUILD] [LAUNCHES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
launches=${2:-3}
bin=$build/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in 4 8; do
  python3 "$root/tests/plans/gen_msccl.py" "$work/n$n" "$n"
  for coll in allreduce allgather; do
    if [[ $coll == allreduce ]]; then algos="ring;twoshot;rhd;msccl_allpairs_$n"; else
      algos="ring;rhd;msccl_allpairs_allgather_$n"
    fi
    for ((l = 1; l <= launches; ++l)); do
      STRATA_PLANS=$work/n$n "$bin/strata-run" -n "$n" --timeout 600 -- "$bin/strata-perf" "$coll" -b 4K -e 16M -f 4 \
        -n 20 -w 5 --algo "$algos" >"$work/$coll.n$n.$l.log" 2>&1 || { tail -20 "$work/$coll.n$n.$l.log"; exit 1; }
      grep -q "# Out of bounds values : 0 OK" "$work/$coll.n$n.$l.log" || { echo "wrong results"; exit 1; }
    done
  done
done
python3 - "$work" "$launches" <<'PY'
import glob, os, re, statistics, sys
work, launches = sys.argv[1], int(sys.argv[2])
for n in (4, 8):
    for coll in ("allreduce", "allgather"):
        runs = []  # per launch: {algo: {size: busbw}}
        for l in range(1, launches + 1):
            tables, algo = {}, None
            for line in open(os.path.join(work, f"{coll}.n{n}.{l}.log")):
                m = re.match(r"# Strata algorithm: \w+:(\S+)", line)
                if m:
                    algo = m.group(1)
                    tables[algo] = {}
                    continue
                f = line.split()
                if algo and len(f) >= 13 and f[0].isdigit():
                    # The all-reduce file serves in-place calls (busbw in column 12), the all-gather file
                    # out-of-place ones (column 8).
                    tables[algo][int(f[0])] = float(f[11] if coll == "allreduce" else f[7])
            runs.append(tables)
        algos = list(runs[0])
        sizes = sorted(runs[0][algos[0]])
        file = algos[-1]
        place = "in-place" if coll == "allreduce" else "out-of-place"
        print(f"\n{coll}, {n} ranks (shared memory), {place} busbw GB/s, median of {launches} launches:\n")
        print("| size | " + " | ".join(algos) + f" | {file} / ring |")
        print("|---:|" + "---:|" * (len(algos) + 1))
        for s in sizes:
            med = [statistics.median(r[a][s] for r in runs) for a in algos]
            ratio = statistics.median(r[file][s] / r["ring"][s] for r in runs if r["ring"][s] > 0)
            label = f"{s // 1024} KiB" if s < 1 << 20 else f"{s >> 20} MiB"
            print(f"| {label} | " + " | ".join(f"{v:.2f}" for v in med) + f" | {ratio:.2f} |")
PY
