#!/usr/bin/env bash
# Elastic recovery with strataCommShrink on 4 processes (fault_test --shrink VICTIM): rank VICTIM is killed at step
# 10 of a training loop; the 3 survivors must fail that step naming it, shrink without a new rendezvous, and
# finish 31 more steps with exact results. With VICTIM 0 (the process hosting the bootstrap root, which a shrink
# needs) the survivors' shrink must fail promptly, saying the root is gone.
# usage: test_shrink.sh FAULT_TEST_BINARY VICTIM [TRANSPORT]
set -u
bin=$1
victim=$2
transport=${3:-shm}
here=$(dirname "$0")
n=4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(python3 "$here/free_port.py")
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for r in $(seq 0 $((n - 1))); do
  RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STRATA_SECRET=$secret STRATA_TIMEOUT_MS=20000 \
    STRATA_TRANSPORT=$transport "$bin" --shrink "$victim" >"$dir/out.$r" 2>"$dir/err.$r" &
  pids+=($!)
done
status=0
for r in $(seq 0 $((n - 1))); do
  # Bounded: a hang is a failure, not a stuck CI.
  timeout 90 tail --pid="${pids[$r]}" -f /dev/null || { echo "FAIL rank $r hung"; kill -9 "${pids[@]}" 2>/dev/null; status=1; }
  wait "${pids[$r]}"
  rc[$r]=$?
done
for r in $(seq 0 $((n - 1))); do
  echo "--- rank $r (exit ${rc[$r]}):"
  cat "$dir/out.$r" "$dir/err.$r"
done
for r in $(seq 0 $((n - 1))); do
  out=$(cat "$dir/out.$r" "$dir/err.$r")
  if [[ $r == "$victim" ]]; then
    [[ ${rc[$r]} == 137 ]] || { echo "FAIL rank $r (the victim): exit ${rc[$r]}, expected 137 (SIGKILL)"; status=1; }
    continue
  fi
  grep -Eq "step (9|10) failed as expected: .*rank $victim" <<<"$out" ||
    { echo "FAIL rank $r: its step 9 or 10 did not fail naming rank $victim"; status=1; }
  if [[ $victim == 0 ]]; then
    [[ ${rc[$r]} == 3 ]] || { echo "FAIL rank $r: exit ${rc[$r]}, expected 3 (the shrink fails)"; status=1; }
    grep -q "shrink failed: .*bootstrap root" <<<"$out" ||
      { echo "FAIL rank $r: the failed shrink does not say the bootstrap root is gone"; status=1; }
  else
    [[ ${rc[$r]} == 0 ]] || { echo "FAIL rank $r: exit ${rc[$r]}, expected 0"; status=1; }
    grep -Eq "shrunk in .* ms to rank .* of 3; steps (9|10)-40 correct" <<<"$out" ||
      { echo "FAIL rank $r: no correct steps after the shrink"; status=1; }
  fi
done
[[ $status == 0 ]] && echo "PASS shrink after killing rank $victim ($transport)"
exit $status
