#!/usr/bin/env bash
# The layer check can fail: on a copy of the tree it passes, then each injected violation of DESIGN.md's rules
# (an include across a forbidden arrow, a circle of files) must make it fail and name the file.
# usage: test_layer_check.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
copy() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree"
  (cd "$src" && tar cf - --exclude='build*' --exclude=.git src tools perf trainer bindings examples scripts 2>/dev/null) |
    tar xf - -C "$tmp/tree"
}
check() { python3 "$src/scripts/check_layers.py" --root "$tmp/tree"; }
copy
check >/dev/null || { echo "FAIL: the unmodified tree does not pass"; check; exit 1; }
fails=0
expect_violation() {  # NAME FILE LINE EXPECTED_TEXT
  local name=$1 file=$2 line=$3 want=$4
  copy
  mkdir -p "$(dirname "$tmp/tree/$file")"
  printf '%s\n' "$line" >> "$tmp/tree/$file"
  local out rc=0
  out=$(check 2>&1) || rc=$?
  if [[ $rc -ne 1 || $out != *"$want"* ]]; then
    echo "FAIL: $name: rc=$rc, expected a violation naming '$want'; output:"
    echo "$out"
    fails=$((fails + 1))
  else
    echo "ok: $name: $(grep -m1 -F "$want" <<<"$out")"
  fi
}
expect_violation "collectives -> core" src/collectives/ring.cc '#include "core/plan_runner.h"' \
  'src/collectives/ring.cc'
expect_violation "collectives -> transport" src/collectives/tree.cc '#include "transport/transport.h"' \
  'src/collectives/tree.cc'
expect_violation "kernels -> collectives" src/kernels/reduce.cc '#include "collectives/plan.h"' \
  'src/kernels/reduce.cc'
expect_violation "util -> topology" src/util/log.cc '#include "topology/topology.h"' 'src/util/log.cc'
expect_violation "overlap -> core" src/overlap/overlap.cc '#include "core/communicator.h"' \
  'src/overlap/overlap.cc'
expect_violation "tool -> util" tools/strata-run/main.cc '#include "util/config.h"' 'tools/strata-run/main.cc'
expect_violation "trainer -> kernels" trainer/model.cc '#include "kernels/reduce.h"' 'trainer/model.cc'
expect_violation "a folder that is no layer" src/nolayer/x.cc '#include "util/error.h"' 'src/nolayer is not a layer'
# A circle of two modules inside one layer: progress.h includes collective_exec.h, which includes progress.h.
expect_violation "circle of files" src/core/progress.h '#include "core/collective_exec.h"' \
  'circle of files in src/'
if ((fails)); then
  echo "$fails injected violation(s) not caught"
  exit 1
fi
echo "every injected violation was caught"
