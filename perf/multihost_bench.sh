#!/usr/bin/env bash
# All-reduce across simulated hosts with 1 Gbit/s links (tests/multihost/run_hosts.sh --rate 1gbit):
# 2 hosts x 2 ranks and 2 hosts x 4 ranks, float32 sum, 16 B to 64 MiB (factor 4), once per forced
# algorithm of ALGOS and once with the selector's choice ("auto").
#
#   perf/multihost_bench.sh OUTDIR [BUILD_DIR]
#
# Writes OUTDIR/<H>x<R>_<algo>.txt (first line: the command; then strata-perf's table) and
# OUTDIR/<H>x<R>_<algo>.json beside it, then prints perf/multihost_summary.py's tables and writes them
# to OUTDIR/summary.md. Needs root (network namespaces).
#
# Environment: MH_BENCH_ALGOS (forced algorithms, space-separated; default "ring": add hier, tree, rhd,
# twoshot as they land), MH_BENCH_TOPOS (default "2x2 2x4"), MH_BENCH_ITERS (timed runs per size,
# default 5), MH_BENCH_WARMUP (untimed runs per size, default 1), MH_BENCH_RATE (default 1gbit),
# MH_BENCH_BEGIN (smallest size, default 16; 64M times the 64 MiB row alone).
#
# -b 16 rather than 8: with factor 4, sizes from 8 B stop at 32 MiB; from 16 B they end at 64 MiB.
# Time: at 1 Gbit/s one 64 MiB all-reduce takes ~0.5-1 s, and strata-perf times out-of-place and
# in-place, so a run is ~15 s per (topology, algorithm) at the 64 MiB row; the whole bench takes
# a few minutes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:?usage: perf/multihost_bench.sh OUTDIR [BUILD_DIR]}
build=${2:-$root/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)      # rank 0 writes the JSON from inside a namespace: give it an absolute path
build=$(cd "$build" && pwd)

read -ra algos <<<"${MH_BENCH_ALGOS:-ring}"
read -ra topos <<<"${MH_BENCH_TOPOS:-2x2 2x4}"
iters=${MH_BENCH_ITERS:-5}
warmup=${MH_BENCH_WARMUP:-1}
rate=${MH_BENCH_RATE:-1gbit}
begin=${MH_BENCH_BEGIN:-16}
perf_bin=$build/bin/strata-perf
[[ -x $perf_bin ]] || { echo "multihost_bench: $perf_bin not found (build first)" >&2; exit 1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Runs one strata-perf job: bench_one HOSTS RANKS NAME [strata-perf options...]. The table is rank 0's
# output, kept by run_hosts.sh --logdir.
bench_one() {
  local hosts=$1 ranks=$2 name=$3
  shift 3
  local base="$out/${hosts}x${ranks}_${name}"
  local cmd=("$root/tests/multihost/run_hosts.sh" -H "$hosts" -R "$ranks" --rate "$rate" --timeout 600
             --logdir "$logs/$name" -- "$perf_bin" allreduce -b "$begin" -e 64M -f 4 -d float -o sum
             -n "$iters" -w "$warmup" -c 1 -T 300 --json "$base.json" "$@")
  echo "== ${hosts}x${ranks} $name" >&2
  local t=$SECONDS st=0
  "${cmd[@]}" >/dev/null || st=$?
  if ((st == 77)); then
    echo "multihost_bench: skipped: needs root and ip netns" >&2
    exit 77
  fi
  { echo "\$ ${cmd[*]}" | sed "s|$root/||g; s|$out/||g; s| --logdir [^ ]*||"; cat "$logs/$name/rank0.log"; } >"$base.txt"
  rm -rf "${logs:?}/$name"
  echo "   status $st in $((SECONDS - t))s -> $base.txt" >&2
  return "$st"
}

failed=0
for topo in "${topos[@]}"; do
  hosts=${topo%x*}
  ranks=${topo#*x}
  for algo in "${algos[@]}"; do
    bench_one "$hosts" "$ranks" "$algo" --algo "$algo" || failed=1
  done
  bench_one "$hosts" "$ranks" auto || failed=1
done

python3 "$here/multihost_summary.py" "$out" | tee "$out/summary.md"
exit "$failed"
