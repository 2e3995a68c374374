#!/usr/bin/env bash
# Validates strata-sim against measurements on this machine (issue 17): measures all-reduce with strata-perf
# and predicts it with strata-sim on the two cluster files that describe this machine, then compares them
# (perf/sim_compare.py).
#
#   perf/sim_validate.sh OUTDIR [BUILD_DIR]
#
# Measured (float32 sum, strata-perf's out-of-place time is what gets compared):
#   shm:  strata-run -n N strata-perf allreduce, N = 2 and 4 ranks on this machine's shared memory, every
#         all-reduce algorithm (ring oneshot twoshot rhd tree, forced with --algo), 64 KiB to 256 MiB (-f 4),
#         -n 10 -w 2 -c 0 (-c 0: no check runs; correctness is the tests' business), 3 launches of each
#         (SV_SHM_LAUNCHES), round-robin: two launches of one configuration differ by up to 2x at 64 MiB and
#         beyond (memory placement), more than the timed runs inside one launch; the comparison takes the median.
#   net:  tests/multihost/run_hosts.sh --rate 1gbit: network-namespace hosts with one 1 Gbit/s link each,
#         layouts 2x2, 2x4 and 3x2 (hosts x ranks per host), every algorithm (ring oneshot twoshot rhd tree
#         hier). Two strata-perf runs per (layout, algorithm): 64 KiB to 4 MiB with -n 10 -w 2, and 16 MiB to
#         256 MiB with -n 3 -w 0 (the median of 3 timed calls, the first of them cold: at 1 Gbit/s a 256 MiB
#         ring takes ~4 s, and strata-perf times out-of-place and in-place, so each size costs 6 calls).
#         CAP: oneshot stops at 16 MiB (each rank sends its whole buffer to every other rank: at 2x4 a host
#         sends 16x the buffer, ~35 s per 256 MiB call).
# Predicted: strata-sim --algo all --json over the same sizes, clusters/this-machine-shm.json with
#   --ranks-per-host N, and clusters/netns-1g.json with --hosts H --ranks-per-host R. Predictions take well
#   under a second; SV_PARTS=sim re-runs only them (after a cluster file changed) and the comparison.
#   To hold other measurements against them: perf/sim_compare.py MEASDIR... --pred-dir OUTDIR (e.g. the
#   development runs a cluster file was fitted to; perf/results/sim_validation/calibration.md).
#
# Writes to OUTDIR:
#   meas_shm_n<N>_<algo>_l<launch>.json / .txt  strata-perf's JSON and table (first line: the command)
#   meas_net_<H>x<R>_<algo>_{small,large}.json / .txt
#   pred_shm_n<N>.json, pred_net_<H>x<R>.json   strata-sim's JSON (the cluster file's figures included), .txt its table
#   log.txt                                     every job with its status and seconds
#   summary.md                                  perf/sim_compare.py's tables
# Needs root (network namespaces) for the net part; it is skipped with a note otherwise.
#
# Time on the 2-core VM: ~3 min for shm, ~16 min for net, under a second for the predictions: ~20 min.
#
# Before every measurement the script waits for idle CPUs (wait_idle; SV_IDLE_BUSY, SV_IDLE_MAX): the time
# waited is not part of the figures above.
#
# Environment: SV_PARTS (default "shm net sim"), SV_SHM_RANKS (default "2 4"), SV_SHM_LAUNCHES (default 3),
# SV_NET_TOPOS (default "2x2 2x4 3x2"), SV_SHM_ALGOS, SV_NET_ALGOS (default: every algorithm above), SV_RATE
# (default 1gbit), SV_IDLE_BUSY, SV_IDLE_MAX.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:?usage: perf/sim_validate.sh OUTDIR [BUILD_DIR]}
build=${2:-$root/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # rank 0 writes the JSON from inside a namespace: give it an absolute path
build=$(cd "$build" && pwd)

read -ra parts <<<"${SV_PARTS:-shm net sim}"
read -ra shm_ranks <<<"${SV_SHM_RANKS:-2 4}"
read -ra net_topos <<<"${SV_NET_TOPOS:-2x2 2x4 3x2}"
read -ra shm_algos <<<"${SV_SHM_ALGOS:-ring oneshot twoshot rhd tree}"
read -ra net_algos <<<"${SV_NET_ALGOS:-ring oneshot twoshot rhd tree hier}"
rate=${SV_RATE:-1gbit}
shm_launches=${SV_SHM_LAUNCHES:-3}
perf_bin=$build/bin/strata-perf
run_bin=$build/bin/strata-run
sim_bin=$build/bin/strata-sim
shm_cluster=clusters/this-machine-shm.json  # relative to the repository: strata-sim records the path
net_cluster=clusters/netns-1g.json
for b in "$perf_bin" "$run_bin" "$sim_bin"; do
  [[ -x $b ]] || { echo "sim_validate: $b not found (build first)" >&2; exit 1; }
done

has_part() {
  local p
  for p in "${parts[@]}"; do [[ $p == "$1" ]] && return 0; done
  return 1
}

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
t_start=$SECONDS
failed=0

# Waits until this machine's CPUs are idle (< SV_IDLE_BUSY percent busy over 2 s, default 20), at most
# SV_IDLE_MAX seconds (default 1200): on 2 cores, a build or another benchmark running beside a measurement
# changes it by 2x. Logs how long it waited.
wait_idle() {
  local limit=${SV_IDLE_MAX:-1200} busy_max=${SV_IDLE_BUSY:-20} t0=$SECONDS a b busy
  while :; do
    read -ra a < <(head -1 /proc/stat)
    sleep 2
    read -ra b < <(head -1 /proc/stat)
    local total=0 idle i
    for ((i = 1; i < ${#b[@]}; ++i)); do total=$((total + b[i] - a[i])); done
    idle=$((b[4] - a[4] + b[5] - a[5]))
    busy=$((total > 0 ? 100 * (total - idle) / total : 0))
    ((busy < busy_max)) && break
    if ((SECONDS - t0 >= limit)); then
      note "wait_idle: still ${busy}% busy after ${limit}s; measuring anyway"
      return 0
    fi
  done
  ((SECONDS - t0 > 3)) && note "wait_idle: waited $((SECONDS - t0))s for idle CPUs"
  return 0
}

# Appends a line to OUTDIR/log.txt and stderr.
note() { echo "$*" | tee -a "$out/log.txt" >&2; }

# Writes BASE.txt: the command (paths relative to the repository) and strata-perf's table from LOG.
keep_table() {
  local base=$1 logfile=$2
  shift 2
  { echo "\$ $*" | sed "s|$root/||g; s|$out/||g; s| --logdir [^ ]*||"; cat "$logfile"; } >"$base.txt"
}

# shm_one N ALGO LAUNCH: N ranks on this machine.
shm_one() {
  local n=$1 algo=$2 base="$out/meas_shm_n$1_$2_l$3"
  local cmd=("$run_bin" -n "$n" --timeout 900 -- "$perf_bin" allreduce -b 64K -e 256M -f 4 -d float -o sum
             -n 10 -w 2 -c 0 -T 300 --algo "$algo" --json "$base.json")
  wait_idle
  local t=$SECONDS st=0
  "${cmd[@]}" >"$logs/shm.log" 2>&1 || st=$?
  keep_table "$base" "$logs/shm.log" "${cmd[@]}"
  note "shm n=$n $algo launch $3: status $st in $((SECONDS - t))s"
  ((st == 0)) || failed=1
}

# net_one H R ALGO PART MIN MAX ITERS WARMUP: one strata-perf run across H namespace hosts of R ranks.
net_one() {
  local h=$1 r=$2 algo=$3 part=$4 min=$5 max=$6 iters=$7 warmup=$8
  local base="$out/meas_net_${h}x${r}_${algo}_${part}"
  local cmd=("$root/tests/multihost/run_hosts.sh" -H "$h" -R "$r" --rate "$rate" --timeout 900
             --logdir "$logs/net" -- "$perf_bin" allreduce -b "$min" -e "$max" -f 4 -d float -o sum
             -n "$iters" -w "$warmup" -c 0 -T 300 --algo "$algo" --json "$base.json")
  wait_idle
  local t=$SECONDS st=0
  "${cmd[@]}" >/dev/null 2>"$logs/net.err" || st=$?
  if ((st == 77)); then
    note "net: skipped (needs root and ip netns)"
    return 77
  fi
  if [[ -f $logs/net/rank0.log ]]; then
    keep_table "$base" "$logs/net/rank0.log" "${cmd[@]}"
  else
    keep_table "$base" "$logs/net.err" "${cmd[@]}"
  fi
  ((st == 0)) || cat "$logs/net.err" >>"$base.txt"
  rm -rf "${logs:?}/net"
  note "net ${h}x${r} $algo $part ($min..$max, -n $iters -w $warmup): status $st in $((SECONDS - t))s"
  ((st == 0)) || failed=1
}

: >>"$out/log.txt"
note "== sim_validate $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

if has_part shm; then
  t=$SECONDS
  for ((l = 1; l <= shm_launches; ++l)); do
    for n in "${shm_ranks[@]}"; do
      for algo in "${shm_algos[@]}"; do shm_one "$n" "$algo" "$l"; done
    done
  done
  note "shm part: $((SECONDS - t))s"
fi

if has_part net; then
  t=$SECONDS
  skip=0
  for topo in "${net_topos[@]}"; do
    h=${topo%x*} r=${topo#*x}
    for algo in "${net_algos[@]}"; do
      st=0
      net_one "$h" "$r" "$algo" small 64K 4M 10 2 || st=$?
      ((st == 77)) && { skip=1; break 2; }
      large_max=256M
      [[ $algo == oneshot ]] && large_max=16M
      net_one "$h" "$r" "$algo" large 16M "$large_max" 3 0 || true
    done
  done
  ((skip)) || note "net part: $((SECONDS - t))s"
fi

if has_part sim; then
  for n in "${shm_ranks[@]}"; do
    (cd "$root" && "$sim_bin" --cluster "$shm_cluster" --ranks-per-host "$n" allreduce -b 64K -e 256M \
      -f 4 --algo all --json "$out/pred_shm_n$n.json" >"$out/pred_shm_n$n.txt") || failed=1
  done
  for topo in "${net_topos[@]}"; do
    h=${topo%x*} r=${topo#*x}
    (cd "$root" && "$sim_bin" --cluster "$net_cluster" --hosts "$h" --ranks-per-host "$r" allreduce -b 64K -e 256M \
      -f 4 --algo all --json "$out/pred_net_${h}x${r}.json" >"$out/pred_net_${h}x${r}.txt") || failed=1
  done
  note "predictions written (strata-sim, $(basename "$shm_cluster"), $(basename "$net_cluster"))"
fi

note "sim_validate: $((SECONDS - t_start))s in all, status $failed"
python3 "$here/sim_compare.py" "$out" | tee "$out/summary.md"
exit "$failed"
