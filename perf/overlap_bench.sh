#!/usr/bin/env bash
# Compute/communication overlap where communication waits on a wire: two "hosts" (network namespaces,
# tests/multihost/run_hosts.sh) joined by a 1 Gbit/s tbf-shaped link, one rank each, strata-train --dp 2
# with a model whose gradient all-reduce is about a third of a step when not overlapped. Runs
# --overlap off, then on, writes each log and the Perfetto trace of the "on" run to OUTDIR, renders the
# trace (perf/plot_trace.py) and prints the on/off table. Needs root.
#
#   perf/overlap_bench.sh OUTDIR [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:?usage: perf/overlap_bench.sh OUTDIR [BUILD_DIR]}
build=${2:-$root/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$(cd "$build" && pwd)
steps=${OVERLAP_BENCH_STEPS:-40}
# One BLAS thread per rank: the scheduler's worker thread needs the other core.
export OPENBLAS_NUM_THREADS=1
model=(--dp 2 --dim 256 --layers 4 --heads 8 --batch 16 --steps "$steps" --log-every 1 --bucket-mb 1)
for ov in off on; do
  cmd=("$build/bin/strata-train" "${model[@]}" --overlap "$ov" --trace "$out/trace_$ov.json")
  echo "# OPENBLAS_NUM_THREADS=1 tests/multihost/run_hosts.sh -H 2 -R 1 --rate 1gbit -- ${cmd[*]}" >"$out/overlap_$ov.txt"
  bash "$root/tests/multihost/run_hosts.sh" -H 2 -R 1 --rate 1gbit --timeout 600 -- "${cmd[@]}" >>"$out/overlap_$ov.txt" 2>&1
done
python3 "$here/plot_trace.py" "$out/trace_on.json" -o "$out/trace_on.png" --steps 3
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
rows = {}
for ov in ("off", "on"):
    text = open(f"{out}/overlap_{ov}.txt").read()
    m = re.search(r"mean of steps (\d+)-(\d+) \| step ([\d.]+) ms \| comm ([\d.]+) ms \| exposed ([\d.]+) ms \| hidden (\d+)%", text)
    rows[ov] = tuple(float(x) for x in m.groups()[2:])
lines = ["| overlap | step (ms) | comm (ms) | exposed comm (ms) | hidden | comm share of step | speed-up |",
         "|---|---|---|---|---|---|---|"]
for ov in ("off", "on"):
    step, comm, exposed, hidden = rows[ov]
    lines.append(f"| {ov} | {step:.1f} | {comm:.1f} | {exposed:.1f} | {hidden:.0f}% | {100 * comm / step:.0f}% | "
                 f"{rows['off'][0] / step:.2f}x |")
# Cross-check from the trace of the "on" run: rank 0's comm lane (union of bucket spans) against its
# exposed waits, over the same steps the means cover (all but the first three).
import json
ev = [e for e in json.load(open(f"{out}/trace_on.json")) if e.get("ph") == "X" and e["pid"] == 0]
starts = sorted(e["ts"] for e in ev if e["name"].startswith("backward"))
t0 = starts[3] if len(starts) > 3 else 0
comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == 1 and e["ts"] >= t0)
union, end = 0.0, -1.0
for a, b in comm:
    if a > end:
        union += b - a
        end = b
    elif b > end:
        union += b - end
        end = b
exposed = sum(e["dur"] for e in ev if e["name"].startswith("finish") and e["ts"] >= t0)
lines += ["", f"Trace cross-check (rank 0, steps 3+): comm {union / 1000:.1f} ms in all, exposed {exposed / 1000:.1f} ms, "
          f"hidden {100 * (union - exposed) / union:.0f}%"]
print("\n".join(lines))
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
PY
