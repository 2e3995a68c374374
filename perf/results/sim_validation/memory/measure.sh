#!/usr/bin/env bash
# The host memory's rate against the working set (clusters/this-machine-shm.json host.intra.memoryCurve):
# strata-perf --membound times memcpy(recv, send, S) on every rank at once (after a barrier; the slowest
# rank's median), memcpy_aggregate_gbps = N x 2 S / t (bytes read plus written per second, all ranks).
# The working set of a row is N x 2 S (every rank's send and receive buffer), as strata-sim counts it.
# Launches 1 to 5 per rank count, round-robin (SV_LAUNCHES, SV_RANKS); run with the CPUs otherwise idle.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
out=perf/results/sim_validation/memory
for l in ${SV_LAUNCHES:-1 2 3 4 5}; do
  for n in ${SV_RANKS:-2 4}; do
    cmd=(build/bin/strata-run -n "$n" -- build/bin/strata-perf allreduce -b 64K -e 256M -f 2 -d float -o sum
         -n 5 -w 1 -c 0 --algo ring --membound --json "$out/membound_n${n}_l${l}.json")
    { echo "\$ ${cmd[*]}"; "${cmd[@]}"; } >"$out/membound_n${n}_l${l}.txt" 2>&1
    echo "n=$n launch $l done"
  done
done
