#!/usr/bin/env bash
# A stranger floods the bootstrap root of a running job with 10,000 TCP connections (silent, or sending garbage;
# up to 1,500 open at once), from before the ranks start until it is done, while the job's processes may open
# only 1,024 files each (ulimit -n 1024). The job (fault_test --until: checked all-reduces and a new split
# communicator every fourth iteration, so new shared-memory segments and sockets throughout) must finish with every
# result right. It died with "Too many open files" when the root kept each stranger for STRATA_TIMEOUT_MS.
# usage: test_flood.sh FAULT_TEST_BINARY FLOOD_PY [NRANKS] [TRANSPORT] [CONNECTIONS]
set -u
bin=$1
flood=$2
n=${3:-2}
transport=${4:-shm}
count=${5:-10000}
dir=$(mktemp -d)
pids=()
trap 'kill -9 ${pids[*]} ${fpid:-} 2>/dev/null; rm -rf "$dir"' EXIT
port=$(python3 "$(dirname "$0")/free_port.py")
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The stranger itself may hold more than the job may open: 1,500 connections at once.
(ulimit -n 4096 2>/dev/null; exec python3 "$flood" 127.0.0.1 "$port" --count "$count" --hold 1500 --deadline 240) \
  >"$dir/flood.out" 2>&1 &
fpid=$!
sleep 0.3
for ((r = 0; r < n; r++)); do
  (ulimit -n 1024 && RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    STRATA_SECRET=$secret STRATA_TRANSPORT=$transport STRATA_TIMEOUT_MS=120000 exec "$bin" --until "$dir/stop") \
    >"$dir/out.$r" 2>"$dir/err.$r" &
  pids+=($!)
done
# Until the flood is done, or a rank gave up (then the flood is stopped: the test has failed already).
while kill -0 "$fpid" 2>/dev/null; do
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || kill "$fpid" 2>/dev/null; done
  sleep 0.1
done
wait "$fpid"
frc=$?
touch "$dir/stop"
status=0
cat "$dir/flood.out"
if [[ $frc -ne 0 ]]; then echo "FAIL: the flood did not make its $count connections"; status=1; fi
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: rank $r exited with $rc:"; cat "$dir/err.$r"; status=1
  else
    cat "$dir/out.$r"
  fi
done
[[ $status -eq 0 ]] && echo "PASS: the job survived $count hostile connections to its root at ulimit -n 1024"
exit $status
