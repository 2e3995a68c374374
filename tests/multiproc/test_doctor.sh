#!/usr/bin/env bash
# The flight recorder and strata-doctor on three failures of a 3-rank job (fault_test --doctor MODE): a stopped
# rank, a killed rank, and a rank calling another collective. Every rank that can write its dump does (into
# STRATA_FLIGHT_RECORDER_DIR), and strata-doctor's paragraph must name what happened.
# usage: test_doctor.sh FAULT_TEST_BINARY STRATA_DOCTOR
set -u
bin=$1
doctor=$2
here=$(dirname "$0")
status=0
run() {  # MODE EXPECTED-REGEX...
  local mode=$1
  shift
  local dir
  dir=$(mktemp -d)
  local port secret pids=()
  port=$(python3 "$here/free_port.py")
  secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STRATA_SECRET=$secret STRATA_TIMEOUT_MS=3000 \
      STRATA_FLIGHT_RECORDER_DIR=$dir "$bin" --doctor "$mode" >"$dir/out.$r" 2>"$dir/err.$r" &
    pids+=($!)
  done
  if [[ $mode == stop ]]; then
    # Ranks 0 and 1 time out and dump; then rank 2 goes on, hears of the failure, dumps, and fails too.
    for _ in $(seq 1 300); do
      ls "$dir"/strata-flight-*-rank0.json "$dir"/strata-flight-*-rank1.json >/dev/null 2>&1 && break
      sleep 0.1
    done
    sleep 0.5
    kill -CONT "${pids[2]}" 2>/dev/null
  fi
  for p in "${pids[@]}"; do
    timeout 60 tail --pid="$p" -f /dev/null || { echo "FAIL $mode: a rank hung"; kill -9 "${pids[@]}"; }
  done
  local text
  text=$(python3 "$doctor" "$dir")
  echo "--- $mode: $text"
  for want in "$@"; do
    if ! grep -Eq "$want" <<<"$text"; then
      echo "FAIL $mode: strata-doctor did not say /$want/"
      ls -l "$dir"; cat "$dir"/out.* "$dir"/err.*
      status=1
    fi
  done
  rm -rf "$dir"
}
run stop "rank 2 (never reached allreduce #11|(started|reached) allreduce #11 .* [0-9.]+ s after ranks 0,1)" "ranks 0,1 failed in allreduce #11" "rank 2 .* is not waiting in Strata"
run kill "rank 1 left no dump" "rank 1 died first"
run desync "disagree at collective #11: ranks 0,2 called allreduce #11 .*; rank 1 called allgather #11"
exit $status
