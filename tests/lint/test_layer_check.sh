#!/usr/bin/env bash
# The layer check can fail: on a copy of the tree it passes, then each injected violation of DESIGN.md's rules
# (an include across a forbidden arrow, a circle of files, a source file over 600 lines, a public declaration
# without a /// comment of its own, an algorithm's name compared with a literal outside the algorithm table) must
# make it fail and name the file; a file of exactly 600 lines, long files
# where the length rule does not look (tests, build folders) and private members must not be named.
# usage: test_layer_check.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A copy of what the check reads, the source files (not the data of perf/results, which would slow every copy).
copy() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree"
  (cd "$src" && find src tools perf trainer bindings examples scripts include \
    -type d \( -name 'build*' -o -name .git \) -prune -o -type f \( -name '*.[ch]' -o -name '*.cc' -o -name '*.cpp' \
    -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.sh' \) -print |
    tar cf - -T - 2>/dev/null) | tar xf - -C "$tmp/tree"
}
check() { python3 "$src/scripts/check_layers.py" --root "$tmp/tree"; }
copy
check >/dev/null || { echo "FAIL: the unmodified tree does not pass"; check; exit 1; }
fails=0
expect_caught() {  # NAME EXPECTED_TEXT EDIT...: EDIT (a command) changes a fresh copy; the check must name it
  local name=$1 want=$2
  shift 2
  copy
  "$@"
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
expect_not_named() {  # NAME TEXT EDIT...: after EDIT on a fresh copy, no line of the check's output names TEXT
  local name=$1 text=$2
  shift 2
  copy
  "$@"
  local out
  out=$(check 2>&1) || true
  if [[ $out == *"$text"* ]]; then
    echo "FAIL: $name: the check named '$text':"
    grep -F "$text" <<<"$out"
    fails=$((fails + 1))
  else
    echo "ok: $name: not named"
  fi
}
append_line() {  # FILE LINE
  mkdir -p "$(dirname "$tmp/tree/$1")"
  printf '%s\n' "$2" >>"$tmp/tree/$1"
}
write_lines() {  # FILE N: a file of N comment lines
  mkdir -p "$(dirname "$tmp/tree/$1")"
  seq -f '// line %g' "$2" >"$tmp/tree/$1"
}
# FILE MODE PATTERN [TEXT]: inserts TEXT before or after the first line matching PATTERN, or (undoc) turns the
# /// block just above that line into plain // lines.
edit_header() {
  python3 - "$tmp/tree/$1" "$2" "$3" "${4:-}" <<'EOF'
import re
import sys

path, mode, pattern, text = sys.argv[1:5]
with open(path) as f:
    lines = f.read().split("\n")
hits = [k for k, line in enumerate(lines) if re.search(pattern, line)]
if not hits:
    sys.exit("edit_header: no line of %s matches %s" % (path, pattern))
i = hits[0]
if mode == "before":
    lines.insert(i, text)
elif mode == "after":
    lines.insert(i + 1, text)
else:
    k = i - 1
    while k >= 0 and lines[k].lstrip().startswith("///"):
        lines[k] = lines[k].replace("///", "//", 1)
        k -= 1
with open(path, "w") as f:
    f.write("\n".join(lines))
EOF
}
expect_violation() {  # NAME FILE LINE EXPECTED_TEXT: LINE appended to FILE
  expect_caught "$1" "$4" append_line "$2" "$3"
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

# Source files of more than 600 lines, in folders the rule covers and of kinds it covers; and where it does not look.
expect_caught "a 601-line .cc in src/" 'src/util/too_long.cc: 601 lines, more than 600' \
  write_lines src/util/too_long.cc 601
expect_caught "a 601-line .py in tools/" 'tools/too_long.py: 601 lines' write_lines tools/too_long.py 601
expect_caught "a 601-line .sh in perf/" 'perf/too_long.sh: 601 lines' write_lines perf/too_long.sh 601
expect_caught "a 601-line .h in bindings/" 'bindings/python/src/too_long.h: 601 lines' \
  write_lines bindings/python/src/too_long.h 601
expect_not_named "a 600-line source file" 'just_fits' write_lines src/util/just_fits.cc 600
expect_not_named "a 601-line file in a tests folder" 'long_test' write_lines trainer/tests/long_test.py 601
expect_not_named "a 601-line file in a build folder" 'generated' write_lines src/build-x/generated.cc 601

# Public declarations without a /// comment of their own, of each kind; and a private member, which needs none.
h=include/strata/strata.h
hpp=include/strata/strata.hpp
ov=include/strata/overlap.hpp
expect_caught "a function's /// turned into //" 'function strataAllReduce has no /// comment of its own' \
  edit_header $h undoc '^strataResult_t strataAllReduce\('
expect_caught "a blank line between comment and function" 'function strataCommCount has no /// comment' \
  edit_header $h before '^strataResult_t strataCommCount\(' ''
expect_caught "a macro taking a function's comment" 'function strataCommAbort has no /// comment' \
  edit_header $h before '^strataResult_t strataCommAbort\(' '#define STRATA_SHARED_COMMENT 1'
expect_caught "an undocumented macro" 'macro STRATA_UNDOCUMENTED has no' \
  edit_header $h after '^#define STRATA_REVOKE_DEFAULT' '#define STRATA_UNDOCUMENTED 1'
expect_caught "an undocumented typedef" 'typedef strataUndocumented_t has no' \
  append_line $h 'typedef int strataUndocumented_t;'
expect_caught "an undocumented enumerator" 'enumerator strataUndocumentedOp has no' \
  edit_header $h after '^  strataMin = 3,' '  strataUndocumentedOp = 6,'
expect_caught "an undocumented function with an attribute, in extern C" 'function strataUndocumentedCall has no' \
  edit_header $h before '^/// Opens a group' 'STRATA_API strataResult_t strataUndocumentedCall(int x);'
expect_caught "an undocumented multi-line function with a default argument" 'function undocumentedHelper has no' \
  edit_header $hpp before '^}  // namespace strata' \
  $'inline int undocumentedHelper(int a,\n                              int b = 0) { return a + b; }'
expect_caught "an undocumented template" 'function undocumentedTemplate has no' \
  edit_header $hpp before '^}  // namespace strata' $'template <typename T>\nT undocumentedTemplate(T v) { return v; }'
expect_caught "an undocumented member function" 'member function Communicator::undocumentedMember has no' \
  edit_header $hpp after '^  void barrier\(\)' '  int undocumentedMember() const { return 0; }'
expect_caught "an undocumented field" 'field OverlapOptions::undocumentedField has no' \
  edit_header $ov after '^  bool ownCommunicator = true;' '  int undocumentedField = 0;'
expect_caught "an undocumented struct" 'struct UndocumentedOptions has no' \
  edit_header $ov before '^}  // namespace strata' $'struct UndocumentedOptions {\n  int x = 0;  ///< documented\n};'
expect_caught "an undocumented using alias" 'alias UndocumentedAlias has no' \
  edit_header $ov before '^}  // namespace strata' 'using UndocumentedAlias = int;'
expect_caught "a public header missing" "$ov: missing" rm "$tmp/tree/$ov"
expect_not_named "a private member without ///" 'undocumentedPrivate' \
  edit_header $ov after '^  Impl\* impl_;' '  int undocumentedPrivate_ = 0;'

# An algorithm's name compared with a literal outside the algorithm table: caught in src/ and tools/, in each form;
# not named inside the table (a family file), in other libraries' baselines, or in a comment.
expect_caught "an algorithm name compared in src/" 'src/core/picks.cc:1: compares algorithm name "hier"' \
  append_line src/core/picks.cc 'bool picksHier(const std::string& a) { return a == "hier"; }'
expect_caught "an algorithm name compared the other way round in tools/" 'compares algorithm name "ring"' \
  append_line tools/strata-sim/picks.cc 'bool picksRing(const std::string& a) { return "ring" != a; }'
expect_caught "an algorithm name compared by strcmp" 'compares algorithm name "tree"' \
  append_line src/device/picks.cc 'bool picksTree(const char* a) { return std::strcmp(a, "tree") == 0; }'
expect_not_named "an algorithm name compared inside the table" 'src/collectives/ring.cc' \
  append_line src/collectives/ring.cc 'static bool isRing(const char* a) { return std::string(a) == "ring"; }'
expect_not_named "another library's algorithm in a baseline" 'baseline_gloo' \
  append_line tools/strata-perf/baseline_gloo.cc 'static bool gloo(const std::string& a) { return a == "ring"; }'
expect_not_named "a comparison in a comment" 'src/core/comment.cc' \
  append_line src/core/comment.cc '// the selector used to ask: algorithm == "hier"'

if ((fails)); then
  echo "$fails injected violation(s) not caught"
  exit 1
fi
echo "every injected violation was caught"
