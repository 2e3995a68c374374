#!/usr/bin/env bash
# A/B of two builds on the 2-rank small all-reduce (the latency-bound path, where a per-message cost shows most):
# LAUNCHES alternating launches of each build's strata-perf under its own strata-run, sizes 8 B to 64 B, in-place
# and out-of-place, ITERS iterations each. Prints each build's median time per size and the ratio NEW / BASE, with
# the range of the per-launch ratios (a launch of BASE and the NEW launch right after it form a pair).
# usage: perf/ab_small_allreduce.sh BASE_BUILD NEW_BUILD [LAUNCHES] [ITERS] [NRANKS]
# BASE_ENV / NEW_ENV (optional): VAR=value settings for one side only, to compare one build with a feature off
# and on (for example BASE_ENV=STRATA_FLIGHT_RECORDER_ENTRIES=0 perf/ab_small_allreduce.sh build build).
set -euo pipefail
base=${1:?usage: perf/ab_small_allreduce.sh BASE_BUILD NEW_BUILD [LAUNCHES] [ITERS] [NRANKS]}
new=${2:?usage: perf/ab_small_allreduce.sh BASE_BUILD NEW_BUILD [LAUNCHES] [ITERS] [NRANKS]}
launches=${3:-10}
iters=${4:-200000}
nranks=${5:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 0; i < launches; ++i)); do
  for side in base new; do
    dir=$base
    settings=${BASE_ENV:-}
    [[ $side == new ]] && dir=$new && settings=${NEW_ENV:-}
    # shellcheck disable=SC2086
    env $settings "$dir/bin/strata-run" -n "$nranks" --timeout 300 "$dir/bin/strata-perf" allreduce -b 8 -e 64 -f 2 \
      -n "$iters" -w 1000 -c 1 --json "$out/$side.$i.json" >/dev/null
  done
done
python3 - "$out" "$launches" <<'EOF'
import json, statistics, sys
out, launches = sys.argv[1], int(sys.argv[2])
def times(path):  # size -> (out-of-place, in-place) time in us, from strata-perf's JSON (ns resolution)
    return {r["size"]: (r["out_of_place"]["time_us"], r["in_place"]["time_us"]) for r in json.load(open(path))["results"]}
runs = {s: [times("%s/%s.%d.json" % (out, s, i)) for i in range(launches)] for s in ("base", "new")}
print("| size | placement | base us (median) | new us (median) | new/base | per-launch ratio range |")
print("|---|---|---|---|---|---|")
for size in sorted(runs["base"][0]):
    for k, name in ((0, "out-of-place"), (1, "in-place")):
        b = [r[size][k] for r in runs["base"]]
        n = [r[size][k] for r in runs["new"]]
        pairs = [y / x for x, y in zip(b, n)]
        print("| %d B | %s | %.3f | %.3f | %.3f | %.2f-%.2f |" % (size, name, statistics.median(b), statistics.median(n),
              statistics.median(n) / statistics.median(b), min(pairs), max(pairs)))
EOF
