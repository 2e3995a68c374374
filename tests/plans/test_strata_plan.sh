#!/usr/bin/env bash
# strata-plan's commands: built-ins dumped and checked (proven); generated MSCCL files proven, shown, drawn and
# simulated; a file with one wrong step and an unreadable one refused (exit 1), the files after them still checked.
# usage: test_strata_plan.sh STRATA_PLAN
set -euo pipefail
plan=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for algo in ring rhd tree oneshot twoshot; do
  "$plan" dump "$algo" -n 4 allreduce -o "$work/$algo.json"
  "$plan" check "$work/$algo.json" | grep -q "proven: allreduce $algo on 4 ranks" || fail "$algo not proven"
done
"$plan" dump ring -n 5 allgather -o "$work/ag.json"
"$plan" check "$work/ag.json" | grep -q "proven: allgather ring on 5 ranks" || fail "allgather ring not proven"
python3 "$here/gen_msccl.py" "$work/bad" 3
sed -i '0,/type="rrs" srcbuf="i" srcoff="\([0-9]*\)"/s//type="rrs" srcbuf="i" srcoff="0"/' "$work/bad/ring_allreduce.xml"
set +e
out=$("$plan" check "$work/bad/ring_allreduce.xml" "$work/ring.json")
rc=$?
set -e
((rc == 1)) || fail "check of a refused file exited $rc"
grep -q "ring_allreduce.xml: refused: .*wrong result: rank" <<<"$out" || fail "the wrong file was not refused: $out"
grep -q "ring.json: proven" <<<"$out" || fail "the second file was not checked"
python3 "$here/gen_msccl.py" "$work/x" 4
files=("$work"/x/*.xml)
[[ $("$plan" check "${files[@]}" | grep -c ": proven: ") == "${#files[@]}" ]] || fail "generated MSCCL files not proven"
"$plan" show "$work/x/ring_allreduce.xml" | grep -q "critical path: 7 step(s)" || fail "show"
"$plan" svg "$work/x/ring_allreduce.xml" -o "$work/ring.svg" | grep -q "56 steps on 7 levels" || fail "svg"
python3 -c "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); sys.exit(len(d.getElementsByTagName('line')) != 48)" \
  "$work/ring.svg" || fail "the picture has not one arrow per message"
clusters=$here/../../clusters
"$plan" sim "$work/x/allpairs_allreduce.xml" --cluster "$clusters/mi300x.json" -b 1M -e 1M >"$work/sim.txt" ||
  fail "sim: $(cat "$work/sim.txt")"
grep -q "proven: allreduce msccl_allpairs_4" "$work/sim.txt" || fail "sim did not prove the file first"
grep -Eq "^#.* ring .*msccl_allpairs_4" "$work/sim.txt" || fail "sim has no column for the file: $(cat "$work/sim.txt")"
set +e
"$plan" check "$work/missing.xml" >/dev/null
rc=$?
set -e
((rc == 1)) || fail "a missing file exited $rc"
echo PASS
