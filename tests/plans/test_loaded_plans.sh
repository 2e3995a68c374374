#!/usr/bin/env bash
# Loaded plans on real ranks (STRATA_PLANS): MSCCL files written by gen_msccl.py for N ranks (a 2-channel ring
# all-reduce out of place, an all-pairs all-reduce in place with nops, a 2-channel ring all-gather in place) are
# forced with STRATA_ALGO and run by strata_coll_test (every dtype and op, counts 0, 1, 7, 1023, 70001: loops and
# tails) over shm and tcp at several N: exact results, the selector's INFO lines show each file served its calls
# and the built-ins the calls it does not serve (the other placement). Then what must be refused at init: a file
# that fails its proof, and ranks that loaded different files.
# Last, strata-perf times built-ins and a loaded file in one launch (--algo 'ring;NAME'), checking every result.
# usage: test_loaded_plans.sh STRATA_RUN COLL_TEST STRATA_PERF [N...]
set -euo pipefail
run=$1 coll=$2 perf=$3
shift 3
sizes=("$@")
((${#sizes[@]})) || sizes=(2 3 4 8)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for n in "${sizes[@]}"; do
  dir=$work/n$n
  python3 "$here/gen_msccl.py" "$dir" "$n"
  algos="allreduce:msccl_ring_$n,allgather:msccl_ring_allgather_$n"
  ((n > 2)) && algos+=";allreduce:msccl_allpairs_$n"
  for transport in shm tcp; do
    log=$work/log_${n}_$transport
    if ! STRATA_PLANS=$dir STRATA_TRANSPORT=$transport STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNING \
        "$run" -n "$n" --timeout 600 -- "$coll" --colls allreduce,allgather --counts 0,1,7,1023,70001 \
        --algos "$algos" >"$log" 2>&1; then
      tail -30 "$log"
      fail "n=$n over $transport"
    fi
    grep -q "0 wrong" "$log" || fail "n=$n over $transport: no result line"
    for name in msccl_ring_$n msccl_ring_allgather_$n $( ((n > 2)) && echo msccl_allpairs_$n); do
      grep -Eq "of [0-9]{6,} bytes[a-z ]*: $name, forced \(STRATA_ALGO\), from $dir" "$log" ||
        fail "n=$n over $transport: $name never ran a call of 100 KB or more"
    done
    grep -q "STRATA_ALGO's msccl_ring_$n (.*) does not serve it: it serves out-of-place calls only; a built-in does" \
      "$log" || fail "n=$n over $transport: no INFO line for the in-place calls the ring file does not serve"
    echo "n=$n $transport: $(grep -c 'forced (STRATA_ALGO), from' "$log") calls on loaded plans, $(grep -o '[0-9]* checks, 0 wrong' "$log")"
  done
done
# A file that fails its proof fails every rank's init, naming the file and the reason.
bad=$work/bad
python3 "$here/gen_msccl.py" "$bad" 3
sed -i '0,/type="rrs" srcbuf="i" srcoff="\([0-9]*\)"/s//type="rrs" srcbuf="i" srcoff="0"/' "$bad/ring_allreduce.xml"
if STRATA_PLANS=$bad "$run" -n 3 --timeout 120 -- "$coll" --colls allreduce --counts 7 >"$work/bad.log" 2>&1; then
  fail "a wrong file was accepted"
fi
grep -q "STRATA_PLANS: $bad/ring_allreduce.xml: .*wrong result: rank" "$work/bad.log" ||
  { tail -20 "$work/bad.log"; fail "no message naming the wrong file"; }
echo "refused: $(grep -o "STRATA_PLANS: $bad/ring_allreduce.xml: [^:]*: wrong result[^;]*" "$work/bad.log" | head -1)"
# Ranks that loaded different files are refused at init.
cat >"$work/per_rank.sh" <<EOS
#!/usr/bin/env bash
if [[ \$RANK == 1 ]]; then export STRATA_PLANS=$work/n3/ring_allreduce.xml; else export STRATA_PLANS=$work/n3; fi
exec "$coll" --colls allreduce --counts 7
EOS
chmod +x "$work/per_rank.sh"
python3 "$here/gen_msccl.py" "$work/n3" 3
if "$run" -n 3 --timeout 120 -- "$work/per_rank.sh" >"$work/mixed.log" 2>&1; then fail "ranks with different files ran"; fi
grep -q "STRATA_PLANS differs between ranks" "$work/mixed.log" || { tail -20 "$work/mixed.log"; fail "no message"; }
echo "refused: $(grep -o 'STRATA_PLANS differs between ranks[^(]*' "$work/mixed.log" | head -1)"
# strata-perf: a built-in and a loaded file in one launch, a checked table each.
STRATA_PLANS=$work/n3 "$run" -n 3 --timeout 300 -- "$perf" allreduce -b 1K -e 1M -f 32 -n 3 -w 1 \
  --algo "ring;msccl_allpairs_3" >"$work/perf.log" 2>&1 || { tail -20 "$work/perf.log"; fail "strata-perf"; }
[[ $(grep -c "# Strata algorithm: allreduce:" "$work/perf.log") == 2 ]] || fail "strata-perf: not two tables"
[[ $(grep -c "# Out of bounds values : 0 OK" "$work/perf.log") == 2 ]] || fail "strata-perf: a wrong result"
echo "strata-perf: ring and msccl_allpairs_3 in one launch, every result checked"
echo PASS
