#!/usr/bin/env bash
# Strata against Open MPI, Gloo and oneCCL (when strata-perf was built with it: scripts/install_deps.sh installs it)
# on this machine, measured in the same launch on the same buffers: all-reduce, reduce-scatter and all-gather,
# float32 sum, 8 B to 128 MiB (factor 4), for 2 and 4 ranks.
# Writes perf/results/<coll>_n<N>.{txt,json} and perf/results/busbw_n<N>.png.
#
# Gloo 0.0~git20220518 (Debian's) hangs in gloo::allreduce at 32 MiB with 4 ranks on 2 cores (its ring
# waits forever in UnboundBuffer::waitSend), so with 4 ranks Gloo is measured up to 8 MiB and the larger
# sizes run against Open MPI alone; the two JSON files are merged.
# usage: perf/run_baselines.sh [BUILD_DIR] [OUT_DIR]
# RB_PARTS (default "busbw latency membound") picks the parts to run, e.g. RB_PARTS=latency.
set -euo pipefail
parts=" ${RB_PARTS:-busbw latency membound} "
want() { [[ $parts == *" $1 "* ]]; }
build=${1:-build}
out=${2:-perf/results}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
oneccl=""
# (no grep -q: under pipefail its early exit makes ldd fail with SIGPIPE)
if ldd "$build/bin/strata-perf" | grep libccl >/dev/null; then oneccl=",oneccl"; fi
perf() {  # perf N COLL TXT JSON ARGS...
  local n=$1 coll=$2 txt=$3 json=$4
  shift 4
  local cmd=(mpirun -n "$n" --oversubscribe --bind-to none "$build/bin/strata-perf" "$coll" -d float -o sum
             -n 20 -w 5 -c 1 -T 300 --json "$json" "$@")
  echo "\$ ${cmd[*]}" | sed "s|$build/bin/||" >> "$txt"
  "${cmd[@]}" >> "$txt"
}
for n in 2 4; do
  want busbw || break
  jsons=()
  for coll in allreduce reducescatter allgather; do
    txt="$out/${coll}_n${n}.txt"
    json="$out/${coll}_n${n}.json"
    : > "$txt"
    if [[ $n -le 2 ]]; then
      perf "$n" "$coll" "$txt" "$json" -b 8 -e 128M -f 4 --baseline "mpi,gloo$oneccl"
    else
      perf "$n" "$coll" "$txt" "$json.small" -b 8 -e 8M -f 4 --baseline "mpi,gloo$oneccl"
      perf "$n" "$coll" "$txt" "$json.large" -b 32M -e 128M -f 4 --baseline "mpi$oneccl"
      python3 - "$json.small" "$json.large" "$json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
a["results"] += b["results"]
a["environment"]["note"] = "gloo measured up to 8 MiB: it hangs at 32 MiB with 4 ranks on 2 cores"
json.dump(a, open(sys.argv[3], "w"), indent=1)
PY
      rm -f "$json.small" "$json.large"
    fi
    jsons+=("$json")
    grep -v "^#  Rank" "$txt"
  done
  python3 perf/plot.py "${jsons[@]}" -o "$out/busbw_n${n}.png"
done
# Small all-reduce latency: the sweeps above take 20 iterations per size, too few for sub-microsecond
# medians, so 8 B to 4 KiB get their own runs with many iterations (mpirun's default binding), three
# launches each; summarize.py reports the median of the three per size, for Strata and MPI alike.
for n in 2 4; do
  want latency || break
  txt="$out/latency_n${n}.txt"
  : > "$txt"
  # oneCCL with 4 ranks on 2 cores takes ~14 ms per call: 20000 iterations would take an hour, so at 4 ranks it
  # gets one launch of its own with few iterations (latency_n4_oneccl.json).
  base="mpi$oneccl"
  if [[ $n -gt 2 ]]; then base=mpi; fi
  for rep in 1 2 3; do
    cmd=(mpirun -n "$n" --oversubscribe "$build/bin/strata-perf" allreduce -b 8 -e 4K -f 4 -d float -o sum
         -n 20000 -w 1000 -c 1 --baseline "$base" --json "$out/latency_n${n}_r${rep}.json")
    echo "\$ ${cmd[*]}" | sed "s|$build/bin/||" >> "$txt"
    "${cmd[@]}" >> "$txt"
  done
  if [[ $n -gt 2 && -n $oneccl ]]; then
    cmd=(mpirun -n "$n" --oversubscribe "$build/bin/strata-perf" allreduce -b 8 -e 4K -f 4 -d float -o sum
         -n 50 -w 5 -c 1 --baseline oneccl --json "$out/latency_n${n}_oneccl.json")
    echo "\$ ${cmd[*]}" | sed "s|$build/bin/||" >> "$txt"
    "${cmd[@]}" >> "$txt"
  fi
  grep -v "^#  Rank" "$txt"
done
# The memory-bandwidth bound of 2-rank all-reduce, from memcpy timed on every rank at once in the same run.
if want membound; then
txt="$out/membound_n2.txt"
cmd=("$build/bin/strata-run" -n 2 -- "$build/bin/strata-perf" allreduce -b 1M -e 256M -f 4 -d float -o sum
     -n 20 -w 5 -c 1 --membound --json "$out/membound_n2.json")
echo "\$ ${cmd[*]}" | sed "s|$build/bin/||g" > "$txt"
"${cmd[@]}" >> "$txt"
grep -v "^#  Rank" "$txt"
fi
shopt -s nullglob
python3 perf/summarize.py "$out"/{allreduce,reducescatter,allgather}_n*.json "$out"/latency_n*_r*.json \
  "$out"/latency_n*_oneccl.json | tee "$out/summary.md"
