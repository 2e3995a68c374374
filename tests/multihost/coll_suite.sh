#!/usr/bin/env bash
# The multi-host correctness suite of one topology, as ctest runs it:
#   coll_suite.sh COLL_TEST -H HOSTS -R RANKS [run_hosts options...] --counts LIST --algos "a:x;b:y"
# 1. every collective x dtype x op x count with the selector's choices;
# 2. every forced algorithm of the list (entries as STRATA_ALGO takes them: "allreduce:ring", or
#    "allreduce:hier,allgather:hier"), each over the collectives its entry names only: the others would
#    run the selector's choices again, which step 1 has already checked.
# Each step is its own run_hosts.sh job (fresh namespaces, fresh ranks), so a failure says which step.
# Exit status: the first failing step's, or 77 if run_hosts.sh skipped (not root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
coll_test=$1
shift
run_opts=()
counts='0,1,7,1023,70001'
algos=''
while (($#)); do
  case $1 in
    --counts) counts=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    *) run_opts+=("$1"); shift ;;
  esac
done

# The collectives an algorithm list names, comma-separated and without repeats, in order of appearance.
colls_of() {
  local entry item coll out=''
  local -A seen=()
  IFS=';' read -ra entries <<<"$1"
  for entry in "${entries[@]}"; do
    IFS=',' read -ra items <<<"$entry"
    for item in "${items[@]}"; do
      coll=${item%%:*}
      [[ -n $coll && -z ${seen[$coll]:-} ]] || continue
      seen[$coll]=1
      out+=${out:+,}$coll
    done
  done
  echo "$out"
}

start=$SECONDS
echo "== step 1: every collective, selector's algorithms, counts $counts"
"$here/run_hosts.sh" "${run_opts[@]}" -- "$coll_test" --counts "$counts"
echo "== step 1 passed in $((SECONDS - start))s"

if [[ -n $algos ]]; then
  colls=$(colls_of "$algos")
  t=$SECONDS
  echo "== step 2: forced algorithms '$algos' over $colls, counts $counts"
  "$here/run_hosts.sh" "${run_opts[@]}" -- "$coll_test" --counts "$counts" --colls "$colls" --algos "$algos"
  echo "== step 2 passed in $((SECONDS - t))s"
fi
echo "== all steps passed in $((SECONDS - start))s"
