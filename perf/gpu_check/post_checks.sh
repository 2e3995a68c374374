# shellcheck shell=bash
# What the GPU check reads from a step's output beyond its exit status: the one-line note of each step, the
# DDP comparison with gloo's loss, and the targets evaluated from the JSON files the steps write.
# Sourced by perf/gpu_check.sh, whose globals (OUT) it uses; run_step (run_step.sh) sets STATUS and REASON first.

# What a step's output says, beyond its exit status: NOTE, one line, printed and put in summary.json. It may turn
# STATUS from PASS into FAIL, with REASON (ddp_dropin_nccl: a loss different from gloo's).
NOTE="" STATUS="" REASON="" LEFTOVER=""
post_check() {  # name
  local name=$1 log="$OUT/$1.log"
  NOTE=""
  case $name in
    coll_n2)  # which paths ran: stream memory operations or the polling kernel, CUDA IPC on or off and why
      NOTE=$(grep -hE "STRATA (INFO|WARN) .*(CUDA: |CUDA IPC)" "$log" | head -3 | sed -E 's/^.*STRATA (INFO|WARN) *//' | tr '\n' ';')
      ;;
    graph_capture)
      NOTE=$(grep -h "graph capture:" "$log" | head -1)
      [[ -n $NOTE ]] || NOTE=$(grep -h "captured collective" "$log" | head -1)
      ;;
    async_*) NOTE=$(grep -h "^no-sync:" "$log" | head -1) ;;
    abort_stopped_peer) NOTE=$(grep -h "abort-stopped-peer:" "$log" | head -2 | tr '\n' ' ') ;;
    kernels) NOTE=$(grep -hE "PASSED|FAILED|SKIPPED" "$log" | tail -2 | tr '\n' ' ') ;;
    perf_proto_crossover) NOTE=$(crossover_note) ;;
    perf_* | reduce_bw) NOTE=$(targets_note "$name") ;;
    ddp_dropin_nccl)
      local verdict
      verdict=$(ddp_compare)
      NOTE=${verdict#*|}
      # Only a result that differs, or none at all, fails: without a gloo run there is nothing to compare.
      if [[ $STATUS == PASS && ${verdict%%|*} != same && ${verdict%%|*} != nogloo ]]; then
        STATUS=FAIL REASON="not gloo's result"
      fi
      ;;
    ddp_strata_cuda | ddp_gloo) NOTE=$(grep -h "^DDP " "$log" | head -1) ;;
  esac
  [[ -n $NOTE ]] || NOTE=$(grep -v '^#' "$log" 2>/dev/null | grep . | tail -1 | head -c 300)
  return 0
}

# The fastest forced protocol at each size of the crossover sweep, and what auto chose there (its time).
crossover_note() {
  timeout 5 python3 - "$OUT" <<'PY' 2>/dev/null
import json, os, sys
out = sys.argv[1]
times = {}
for pr in ("ll", "ll128", "simple", "auto"):
    p = os.path.join(out, "perf_proto_%s.json" % pr)
    try:
        for r in json.load(open(p))["results"]:
            times.setdefault(r["size"], {})[pr] = r["out_of_place"].get("time_us")
    except (OSError, ValueError, KeyError):
        pass
parts = []
for size in sorted(times):
    t = {k: v for k, v in times[size].items() if v is not None and k != "auto"}
    if t:
        best = min(t, key=t.get)
        parts.append("%d B: %s %.1f us (auto %s us)" % (size, best, t[best], times[size].get("auto")))
print("; ".join(parts) if parts else "no crossover data")
PY
}

final_loss() { sed -n 's/^FINAL_LOSS //p' "$OUT/$1.log" 2>/dev/null | head -1; }
ddp_compare() {  # "same|TEXT", "different|TEXT", "missing|TEXT" or "nogloo|TEXT"
  local a b eq loaded
  a=$(final_loss ddp_dropin_nccl)
  b=$(final_loss ddp_gloo)
  eq=$(sed -n 's/^PARAMS_EQUAL //p' "$OUT/ddp_dropin_nccl.log" 2>/dev/null | head -1)
  loaded=no
  grep -q "implementing the NCCL" "$OUT/ddp_dropin_nccl.log" 2>/dev/null && loaded=yes
  if [[ -z $a ]]; then
    echo "missing|no final loss from the drop-in run"
  elif [[ -z $b ]]; then
    echo "nogloo|drop-in final loss $a; no gloo loss to compare it with (run --step ddp_gloo)"
  elif awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); if (m < 1) m = 1
      exit !(d <= 1e-5 * m) }' &&
    [[ $eq == True && $loaded == yes ]]; then
    echo "same|the same final loss: drop-in $a, gloo $b; parameters equal on every rank; drop-in loaded"
  else
    echo "different|NOT gloo's: final loss drop-in $a, gloo $b; parameters equal: ${eq:-?}; drop-in loaded: $loaded"
  fi
}

# The targets, from the JSON files (python3 reads them; without it they are not evaluated).
targets_note() {
  timeout 5 python3 - "$OUT" "$1" <<'PY' 2>/dev/null
import json, os, sys
out, which = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
if which == "reduce_bw":
    j = load("reduce_bw.json")
    if j:
        shares = {r["dtype"]: r["share_of_memcpy"] for r in j["reduce"]}
        print("memcpy D2D %s GB/s; share of it: %s (target >= 0.90)" % (j["memcpy_d2d"]["gbs_moved"],
              ", ".join("%s %.2f" % kv for kv in sorted(shares.items()))))
elif which == "perf_n1_nccl":
    j = load("perf_n1_nccl.json")
    rows = [r for r in j["results"] if r["size"] == 8] if j else []
    if rows:
        s = rows[0]["out_of_place"]["time_us"]
        n = ((rows[0].get("baselines") or {}).get("nccl") or {}).get("time_us")
        print("8 B all-reduce, 1 rank: Strata %s us, NCCL %s us (target: Strata below NCCL)" % (s, n))
else:  # the first and last sizes of a sweep: time out of place, and bus bandwidth
    j = load(which + ".json")
    rows = j["results"] if j else []
    def row(r):
        m = r["out_of_place"]
        return "%d B %s us %s GB/s" % (r["size"], m.get("time_us"), m.get("busbw_gbps"))
    if rows:
        print("; ".join(row(r) for r in (rows[:1] + rows[-1:] if len(rows) > 1 else rows)))
PY
}

targets_json() {
  timeout 5 python3 - "$OUT" <<'PY' 2>/dev/null || echo '{"evaluated": false}'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    try:
        return json.load(open(p)) if os.path.exists(p) else None
    except ValueError:
        return None
t = {"evaluated": True}
j = load("reduce_bw.json")
if j:
    shares = {r["dtype"]: r["share_of_memcpy"] for r in j["reduce"]}
    t["reduce_ge_90pct_of_memcpy"] = {"shares": shares, "memcpy_d2d_gbs": j["memcpy_d2d"]["gbs_moved"],
                                      "met": all(shares.get(d, 0) >= 0.9 for d in ("bf16", "f32"))}
j = load("perf_n1_nccl.json")
if j:
    rows = [r for r in j["results"] if r["size"] == 8]
    if rows:
        s = rows[0]["out_of_place"]["time_us"]
        n = ((rows[0].get("baselines") or {}).get("nccl") or {}).get("time_us")
        t["allreduce_8B_1rank_below_nccl"] = {"strata_us": s, "nccl_us": n,
                                              "met": s is not None and n is not None and s < n}
        for k in (2, 8):
            e = load("perf_exec_small_n%d.json" % k)
            er = [r for r in e["results"] if r["size"] == 8] if e else []
            if er and n:
                x = er[0]["out_of_place"]["time_us"]
                t["executor_8B_n%d_within_1p5x_nccl_1rank" % k] = {"strata_us": x, "nccl_1rank_us": n,
                                                                    "met": x is not None and x <= 1.5 * n}
print(json.dumps(t))
PY
}
