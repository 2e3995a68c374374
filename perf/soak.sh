#!/usr/bin/env bash
# Soak test: random collectives for minutes or hours (all-reduce, reduce-scatter, all-gather, broadcast, reduce,
# all-to-all, send/recv rings, barriers; every dtype and operator, counts 0 to 1 Mi, roots, in place or not,
# blocking, grouped and asynchronous; splits into random colors, shrinks, nested splits, aborts, revokes and
# re-created worlds), every result checked exactly, while each rank samples its RSS, malloc's bytes in use, open
# descriptors, threads and /dev/shm mappings, and rank 0 the /dev/shm/strata-* names (perf/soak/; strata_soak
# --help). It fails on a wrong result, a failed call, a hang (a hard timeout of the duration plus a margin), or when
# the steady state (the largest sample of the last 20% of the run; for the heap the least) exceeds the baseline (the
# same of the first 20%, after the first split and re-create) by more than the slack: 32 MiB of RSS, 8 MiB of heap,
# 4 descriptors, 2 threads, 2 strata-* names, 4 shm mappings.
#
# usage: perf/soak.sh [--minutes M] [-n RANKS] [--seed S] [--out DIR] [-- strata_soak options...]
#   --minutes M  how long (default 5; CI runs 3; a long run is --minutes 180)
#   -n RANKS     ranks, all on this host (default 4)
#   --seed S     the seed all ranks draw the same operations from (default: a random one, printed, so that every
#                run explores new sequences and a failing one can be repeated)
#   --out DIR    logs (default build/soak in the repository): soak.out (everything printed), rank<R>.jsonl
#                (each rank's samples and summary), flight/ (on a failure, the flight recorders of the communicators
#                then alive; the script prints strata-doctor's reading of them)
# Builds nothing: strata-run and strata_soak come from the repository's build/bin, or $STRATA_BUILD/bin.
# STRATA_TIMEOUT_MS (default here 60000) bounds every wait, so a stuck collective fails naming what it waited on
# before the hard timeout ends the job. Exit status: 0 on success, else strata_soak's (1: a failure it found) or
# 124 (the hard timeout).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minutes=5
ranks=4
seed=$(( (RANDOM << 15 | RANDOM) ))
out=$root/build/soak
extra=()
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift ;;
    -n) ranks=$2; shift ;;
    --seed) seed=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
bin=${STRATA_BUILD:-$root/build}/bin
for p in strata-run strata_soak; do
  [[ -x $bin/$p ]] || { echo "soak.sh: $bin/$p not found: build first (make build), or set STRATA_BUILD" >&2; exit 2; }
done
seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60 + 0.5); print (s > 0 ? s : 1) }')
# The margin covers start-up, the last iteration and teardown; 2 minutes plus 5% of the run.
limit=$(( seconds + 120 + seconds / 20 ))
mkdir -p "$out"
rm -rf "$out/flight" "$out/soak.out" "$out"/rank*.jsonl
mkdir -p "$out/flight"
echo "soak: $ranks ranks for $minutes min (seed $seed), hard timeout $limit s, logs in $out"
status=0
# strata-run's own timeout stops the ranks cleanly; the outer one is the backstop if strata-run itself hangs.
timeout -k 10 $(( limit + 30 )) "$bin/strata-run" -n "$ranks" --timeout "$limit" \
  --env "STRATA_TIMEOUT_MS=${STRATA_TIMEOUT_MS:-60000}" -- "$bin/strata_soak" --seconds "$seconds" --seed "$seed" \
  --log "$out/rank%r.jsonl" --flight-dir "$out/flight" "${extra[@]}" \
  2>&1 | tee "$out/soak.out" || status=${PIPESTATUS[0]}
if ((status == 0)); then
  echo "soak: PASS ($ranks ranks, $minutes min, seed $seed)"
  exit 0
fi
if ((status == 124)); then
  echo "soak: FAIL: still running after the hard timeout of $limit s"
else
  echo "soak: FAIL (status $status)"
fi
if compgen -G "$out/flight/*.json" >/dev/null && [[ -x $bin/strata-doctor ]]; then
  "$bin/strata-doctor" "$out/flight" || true
fi
echo "soak: repeat with: perf/soak.sh --minutes $minutes -n $ranks --seed $seed${extra[*]:+ -- ${extra[*]}}"
exit "$status"
