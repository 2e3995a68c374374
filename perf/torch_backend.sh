#!/usr/bin/env bash
# The torch backend against gloo in the same run, 2 ranks on this machine (strata-run), LAUNCHES alternating
# launches of each: blocking dist.all_reduce of 8 B (us per call; also on one rank, where it is torch's and the
# backend's per-call cost alone), the C API's 8 B all-reduce (strata-perf, the same launcher), and DDP step time for examples/ddp_train.py's model and a 25 M-parameter MLP (ms).
# Prints every launch's figure, then the medians and ratios.
#   bash perf/torch_backend.sh [BUILD_DIR] [LAUNCHES]     (defaults: build 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
launches=${2:-3}
export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1
run="$build/bin/strata-run -n 2 --timeout 600 --"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
trap 'echo "perf/torch_backend.sh: launch $i failed: $BASH_COMMAND" >&2' ERR

for ((i = 1; i <= launches; ++i)); do
  for backend in gloo strata; do
    $run python3 perf/torch_backend.py latency $backend 2000 | grep RESULT >>"$results"
    $run python3 perf/torch_backend.py ddp $backend example 200 | sed 's/RESULT ddp/RESULT ddp-example/' | grep RESULT >>"$results"
    $run python3 perf/torch_backend.py ddp $backend mlp25m 10 | sed 's/RESULT ddp/RESULT ddp-mlp25m/' | grep RESULT >>"$results"
  done
  # One rank: no peer to wait for, so the time is the per-call cost of torch's dispatch and the backend itself.
  for backend in gloo strata fake; do
    "$build/bin/strata-run" -n 1 --timeout 600 -- python3 perf/torch_backend.py latency $backend 5000 |
      sed 's/RESULT latency/RESULT latency-1rank/' | grep RESULT >>"$results"
  done
  # strata-perf's row for 8 B: the out-of-place time column (us) is the 6th field.
  $run "$build/bin/strata-perf" allreduce -b 8 -e 8 -n 2000 -w 200 -c 0 |
    awk '$1 == 8 { print "RESULT latency c-api " $6 }' >>"$results"
  tail -n 10 "$results" | sed "s/^RESULT/launch $i:/"
done

python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, what, who, fig = line.split()
    rows.setdefault((what, who), []).append(float(fig))
med = {k: statistics.median(v) for k, v in rows.items()}
print("\n| measure | gloo | strata (C++ backend) | strata / gloo | C API |")
print("|---|---|---|---|---|")
for what, unit in (("latency", "us"), ("latency-1rank", "us"), ("ddp-example", "ms/step"),
                   ("ddp-mlp25m", "ms/step")):
    g, s = med[(what, "gloo")], med[(what, "strata")]
    c = med.get((what, "c-api"))
    extra = f"{c:.2f} us (strata / C API {s / c:.2f})" if c else ""
    print(f"| {what} ({unit}) | {g:.2f} | {s:.2f} | {s / g:.2f} | {extra} |")
floor, capi = med[("latency-1rank", "fake")], med[("latency", "c-api")]
print(f"\ntorch's floor (FakeProcessGroup, calls that do nothing, 1 process): {floor:.2f} us per dist.all_reduce; "
      f"2x the C API is {2 * capi:.2f} us")
PY
