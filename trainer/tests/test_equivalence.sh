#!/usr/bin/env bash
# strata-train: a dp x tp run (plain, sequence parallel, ZeRO-1) and a dp=1,tp=1 run with the same global batch
# and seed agree on the loss of every step (relative difference < 1e-5) and on the parameters at the end.
# usage: test_equivalence.sh STRATA_RUN STRATA_TRAIN [STEPS]
set -euo pipefail
RUN=$1
TRAIN=$2
STEPS=${3:-5}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
COMMON=(--steps "$STEPS" --batch 8 --seq 32 --dim 32 --heads 4 --layers 2 --seed 7 --log-every 100)

"$RUN" -n 1 --timeout 300 -- "$TRAIN" --dp 1 --tp 1 "${COMMON[@]}" --loss-log "$TMP/ref.loss" --save "$TMP/ref.ckpt" >/dev/null

compare() {  # name n args...
  local name=$1 n=$2
  shift 2
  "$RUN" -n "$n" --timeout 300 -- "$TRAIN" "$@" "${COMMON[@]}" --loss-log "$TMP/$name.loss" --save "$TMP/$name.ckpt" >/dev/null
  python3 - "$TMP/ref.loss" "$TMP/$name.loss" "$name" <<'PY'
import sys
ref = [float(l.split()[1]) for l in open(sys.argv[1])]
got = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(ref) == len(got), (len(ref), len(got))
worst = max(abs(a - b) / abs(a) for a, b in zip(ref, got))
print(f"{sys.argv[3]:28s} losses {' '.join(f'{x:.6f}' for x in got)}  max rel diff {worst:.2e}")
sys.exit(0 if worst < 1e-5 else 1)
PY
  local out
  out=$("$TRAIN" --compare "$TMP/$name.ckpt" "$TMP/ref.ckpt")
  echo "$(printf '%-28s' "$name") params: $out"
  python3 -c "import sys; v=float('$out'.split()[3].rstrip(',')); sys.exit(0 if v < 1e-4 else 1)"
}

compare "dp2 tp2" 4 --dp 2 --tp 2
compare "dp2 tp2 overlap off" 4 --dp 2 --tp 2 --overlap off
compare "dp2 tp2 sequence-parallel" 4 --dp 2 --tp 2 --sequence-parallel
compare "dp2 tp2 zero-1" 4 --dp 2 --tp 2 --zero 1
compare "dp1 tp4" 4 --dp 1 --tp 4
compare "dp4 tp1 zero-1" 4 --dp 4 --tp 1 --zero 1
# Resume: 3 steps at dp1 tp1, save, then load into dp2 tp2 (sequence parallel, ZeRO-1) for the last steps.
R=$((STEPS - 2))
"$RUN" -n 1 --timeout 300 -- "$TRAIN" --dp 1 --tp 1 "${COMMON[@]}" --steps "$R" --save "$TMP/part.ckpt" >/dev/null
"$RUN" -n 4 --timeout 300 -- "$TRAIN" --dp 2 --tp 2 --sequence-parallel --zero 1 "${COMMON[@]}" --steps 2 \
  --load "$TMP/part.ckpt" --loss-log "$TMP/resume.loss" --save "$TMP/resume.ckpt" >/dev/null
python3 - "$TMP/ref.loss" "$TMP/resume.loss" <<'PY'
import sys
ref = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[1])}
got = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[2])}
assert got and all(k in ref for k in got), (ref, got)
worst = max(abs(ref[k] - v) / abs(ref[k]) for k, v in got.items())
print(f"{'resume (save/load)':28s} steps {sorted(got)} max rel diff {worst:.2e}")
sys.exit(0 if worst < 1e-5 else 1)
PY
out=$("$TRAIN" --compare "$TMP/resume.ckpt" "$TMP/ref.ckpt")
echo "$(printf '%-28s' 'resume (save/load)') params: $out"
python3 -c "import sys; v=float('$out'.split()[3].rstrip(',')); sys.exit(0 if v < 1e-4 else 1)"
echo "all equivalent"
