#!/usr/bin/env bash
# The NCCL drop-in's cost per call over strata.h (issue 13: no more than 20 ns): LAUNCHES alternating launches of
# strata_nccl_overhead_nccl (ncclAllReduce through build/strata-nccl/libnccl.so.2) and
# strata_nccl_overhead_strata (strataAllReduce through libstrata.so), ITERS blocking 1-rank all-reduces of 8 B
# each (perf/nccl_overhead.c). Prints each side's median ns/call, the difference of the medians, and the range of
# the per-launch differences (a strata launch and the nccl launch right after it form a pair). Then the
# instructions per call of each under callgrind, counted inside ncclAllReduce (with its pncclAllReduce alias) and
# strataAllReduce: the difference of a run of C2 calls and one of C1 calls over C2 - C1, so the first call's
# one-time work is left out. Builds nothing: run `ninja` in BUILD first.
# usage: perf/nccl_overhead.sh [BUILD_DIR] [LAUNCHES] [ITERS] [C1] [C2]   (defaults: build 16 200000 1000 11000)
set -euo pipefail
build=${1:-build}
launches=${2:-16}
iters=${3:-200000}
c1=${4:-1000}
c2=${5:-11000}
nccl=$build/bin/strata_nccl_overhead_nccl
strata=$build/bin/strata_nccl_overhead_strata
for b in "$nccl" "$strata"; do
  [[ -x $b ]] || { echo "nccl_overhead: $b not built (ninja -C $build strata_nccl_overhead_nccl" \
    "strata_nccl_overhead_strata; needs the drop-in, target strata_nccl)" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "# $launches alternating launches of $iters calls each ($(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ))"
for ((i = 0; i < launches; ++i)); do
  "$strata" "$iters" | awk '{print $(NF-1)}' >> "$out/strata"
  "$nccl" "$iters" | awk '{print $(NF-1)}' >> "$out/nccl"
done
python3 - "$out/strata" "$out/nccl" <<'EOF'
import statistics, sys
strata = [float(x) for x in open(sys.argv[1])]
nccl = [float(x) for x in open(sys.argv[2])]
diffs = [n - s for s, n in zip(strata, nccl)]
ms, mn = statistics.median(strata), statistics.median(nccl)
print("strataAllReduce (libstrata.so):      median %.1f ns/call (launches %.1f-%.1f)" % (ms, min(strata), max(strata)))
print("ncclAllReduce (the drop-in):         median %.1f ns/call (launches %.1f-%.1f)" % (mn, min(nccl), max(nccl)))
print("drop-in - strata.h: %+.1f ns/call (medians); per-launch pairs %+.1f to %+.1f ns; target <= 20 ns: %s"
      % (mn - ms, min(diffs), max(diffs), "met" if mn - ms <= 20 else "NOT met"))
EOF

if ! command -v valgrind >/dev/null; then
  echo "valgrind not found (scripts/install_deps.sh installs it): instruction counts skipped"
  exit 0
fi
count() {  # binary, toggle pattern, calls -> instructions inside the toggled function over `calls` calls
  valgrind --tool=callgrind --toggle-collect="$2" --callgrind-out-file="$out/cg" "$1" "$3" 0 >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out/cg"
}
declare -A per_call
for side in strata nccl; do
  bin=$strata pattern=strataAllReduce
  [[ $side == nccl ]] && bin=$nccl pattern='*ncclAllReduce'
  a=$(count "$bin" "$pattern" "$c1")
  b=$(count "$bin" "$pattern" "$c2")
  per_call[$side]=$(((b - a) / (c2 - c1)))
  echo "instructions per call, $side: ${per_call[$side]} (($b - $a) / ($c2 - $c1) calls, callgrind, toggled on $pattern)"
done
echo "drop-in - strata.h: $((per_call[nccl] - per_call[strata])) instructions per call"
