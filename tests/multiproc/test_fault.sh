#!/usr/bin/env bash
# Kills one rank in the middle of large all-reduces; every survivor must exit with an error that names
# the dead rank within 10 seconds. Ranks are started the way torchrun starts them (no strata-run, which
# would itself stop the others when one dies).
# usage: test_fault.sh FAULT_TEST_BINARY [NRANKS] [VICTIM] [TRANSPORT]
set -u
bin=$1
n=${2:-4}
victim=${3:-2}
transport=${4:-shm}
dir=$(mktemp -d)
trap 'kill -9 ${pids[*]} 2>/dev/null; rm -rf "$dir"' EXIT
port=$(python3 "$(dirname "$0")/free_port.py")
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    STRATA_SECRET=$secret STRATA_TRANSPORT=$transport "$bin" >"$dir/out.$r" 2>"$dir/err.$r" &
  pids+=($!)
done
# Wait until the collectives are running (rank 0 printed two iterations), then kill the victim.
for _ in $(seq 1 600); do
  grep -q "iteration 2" "$dir/out.0" 2>/dev/null && break
  sleep 0.1
done
if ! grep -q "iteration 2" "$dir/out.0"; then
  echo "FAIL: collectives never started"; cat "$dir"/err.*; exit 1
fi
kill -9 "${pids[$victim]}"
start=$(date +%s.%N)
status=0
for ((r = 0; r < n; r++)); do
  [[ $r -eq $victim ]] && continue
  # Each survivor gets what is left of the 10-second budget.
  while kill -0 "${pids[$r]}" 2>/dev/null; do
    now=$(date +%s.%N)
    if (( $(echo "$now - $start > 10" | bc -l) )); then
      echo "FAIL: rank $r still running 10 s after rank $victim was killed"; status=1; break
    fi
    sleep 0.05
  done
  wait "${pids[$r]}"; rc=$?
  if [[ $rc -eq 0 ]]; then echo "FAIL: rank $r exited 0"; status=1; fi
  if ! grep -q "rank $victim" "$dir/err.$r"; then
    echo "FAIL: rank $r's error does not name rank $victim:"; cat "$dir/err.$r"; status=1
  else
    echo "rank $r: $(grep FAULT "$dir/err.$r" | head -1)"
  fi
done
elapsed=$(echo "$(date +%s.%N) - $start" | bc -l)
printf "survivors finished %.2f s after the kill\n" "$elapsed"
[[ $status -eq 0 ]] && echo "PASS"
exit $status
