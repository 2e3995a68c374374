#!/usr/bin/env bash
# run_hosts.sh must leave no process and no namespace behind, on every exit path:
#   1. one rank fails while the others would run for minutes  -> the failing rank's status, quickly
#   2. the timeout passes                                      -> 124
#   3. a rank ignores SIGTERM                                  -> still killed (SIGKILL), 124
#   4. run_hosts.sh itself gets SIGTERM, then SIGINT           -> 143, 130
#   5. run_hosts.sh is SIGKILLed (no cleanup can run)          -> the next run removes the leftovers
# After each case: no namespace of the case's prefix exists and no process carries the case's marker.
# Exit 77 (skip) if this machine cannot make namespaces.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/netns_hosts.sh"
if ! mh_check; then
  echo "skipped: needs root and ip netns"
  exit 77
fi

run_hosts=$here/run_hosts.sh
# Every case's namespaces are smhtd<pid of its run_hosts.sh>-*: a fixed name, so that if this test is
# killed, the next run of it removes what it left (mh_reap finds names of dead owners).
name=smhtd
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# The processes whose environment holds MH_TEST_MARKER=$1: run_hosts.sh passes its environment on to
# every rank, and ranks to whatever they start, so this finds run_hosts.sh, its timers, the ranks and
# their children. It only finds them; nothing here kills by name.
marked() {
  grep -lsaz -- "^MH_TEST_MARKER=$1\$" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
}
# How many of those are rank processes (they, and only they, have STRATA_HOSTID).
marked_ranks() {
  local pid n=0
  for pid in $(marked "$1"); do grep -qsaz '^STRATA_HOSTID=' "/proc/$pid/environ" && n=$((n + 1)); done
  echo "$n"
}
# Waits (sleeping, up to 10 s) until case $1's 4 ranks each run bash and its sleep: 8 processes.
wait_ranks_started() {
  local i
  for ((i = 0; i < 100; ++i)); do
    (($(marked_ranks "$1") >= 8)) && return 0
    sleep 0.1
  done
  return 1
}

# Checks that no namespace of run_hosts.sh pid $3 and no process marked $2 survived case $1.
check_clean() {
  local what=$1 marker=$2 owner=$3 left
  left=$(ip netns list | awk '{print $1}' | grep "^$name$owner-" || true)
  [[ -z $left ]] || fail "$what: namespaces left: ${left//$'\n'/ }"
  left=$(marked "$marker")
  [[ -z $left ]] || fail "$what: processes left: ${left//$'\n'/ }"
}

# Runs run_hosts.sh with the arguments given; prints and returns its status and duration.
run_case() {
  local st=0 t=$SECONDS
  MH_TEST_MARKER=$marker "$run_hosts" --prefix "$name" "$@" >"$tmp/out" 2>&1 &
  owner=$!
  wait "$owner" || st=$?
  echo "   status $st after $((SECONDS - t))s"
  last_status=$st
  last_time=$((SECONDS - t))
}

tmp=$(mktemp -d)
# Whatever happens to this test, its own leftovers go: mh_reap finds namespaces of dead owners.
trap 'rm -rf "$tmp"; mh_reap "$name"' EXIT

# Rank 3 exits with 3 at once; the others sleep for 300 s, in a child of bash (killing bash alone
# would leave it).
echo "-- case 1: rank 3 fails, the other ranks would sleep 300 s"
marker="mh-marker-1-$$"
run_case -H 2 -R 2 --timeout 120 --grace 2 -- bash -c '[ "$RANK" = 3 ] && exit 3; sleep 300 & wait'
((last_status == 3)) || fail "case 1: status $last_status, expected 3"
((last_time < 30)) || fail "case 1: took ${last_time}s, expected the grace period (2 s) plus teardown"
grep -q 'rank 3 (host 1) exited with status 3' "$tmp/out" || fail "case 1: no report of rank 3's failure"
check_clean "case 1" "$marker" "$owner"

echo "-- case 2: timeout 3 s, every rank would sleep 300 s"
marker="mh-marker-2-$$"
run_case -H 3 -R 2 --timeout 3 -- bash -c 'sleep 300 & wait'
((last_status == 124)) || fail "case 2: status $last_status, expected 124"
((last_time < 30)) || fail "case 2: took ${last_time}s"
check_clean "case 2" "$marker" "$owner"

echo "-- case 3: timeout 2 s, ranks ignore SIGTERM"
marker="mh-marker-3-$$"
run_case -H 2 -R 1 --timeout 2 -- bash -c 'trap "" TERM; while :; do sleep 1; done'
((last_status == 124)) || fail "case 3: status $last_status, expected 124"
grep -q 'ignored SIGTERM' "$tmp/out" || fail "case 3: no SIGKILL escalation reported"
check_clean "case 3" "$marker" "$owner"

# Starts run_hosts.sh in the background, waits (sleeping) until its ranks are running, then sends
# signal $1 and checks the status against $2. env restores SIGINT, which bash ignores in background
# children (and a shell cannot trap a signal ignored when it started).
signal_case() {
  local sig=$1 want=$2 marker=$3 pid st=0
  MH_TEST_MARKER=$marker env --default-signal=INT "$run_hosts" --prefix "$name" -H 2 -R 2 --timeout 120 -- \
    bash -c 'sleep 300 & wait' >"$tmp/out" 2>&1 &
  pid=$!
  wait_ranks_started "$marker" || fail "SIG$sig case: the ranks did not start"
  kill "-$sig" "$pid"
  wait "$pid" || st=$?
  echo "   status $st"
  ((st == want)) || fail "SIG$sig case: status $st, expected $want"
  check_clean "SIG$sig case" "$marker" "$pid"
}
echo "-- case 4a: run_hosts.sh gets SIGTERM"
signal_case TERM 143 "mh-marker-4a-$$"
echo "-- case 4b: run_hosts.sh gets SIGINT"
signal_case INT 130 "mh-marker-4b-$$"

echo "-- case 5: run_hosts.sh is SIGKILLed; the next run removes what it left"
marker="mh-marker-5-$$"
MH_TEST_MARKER=$marker "$run_hosts" --prefix "$name" -H 2 -R 2 --timeout 120 -- bash -c 'sleep 300 & wait' \
  >"$tmp/out" 2>&1 &
pid=$!
wait_ranks_started "$marker" || fail "case 5: the ranks did not start"
kill -KILL "$pid"
{ wait "$pid"; } 2>/dev/null || true  # bash would report "Killed"
left=$(ip netns list | awk '{print $1}' | grep -c "^$name$pid-" || true)
((left == 3)) || fail "case 5: expected the 3 namespaces of the killed run to be left, found $left"
(($(marked_ranks "$marker") == 8)) || fail "case 5: expected the killed run's 4 ranks (8 processes) to be left"
old_marker=$marker
old_owner=$pid
marker="mh-marker-5b-$$"
run_case -H 1 -R 1 --timeout 60 -- true
((last_status == 0)) || fail "case 5: the next run failed with $last_status"
grep -q 'removing leftovers of a dead run' "$tmp/out" || fail "case 5: the next run did not report removing leftovers"
check_clean "case 5 (killed run)" "$old_marker" "$old_owner"
check_clean "case 5 (next run)" "$marker" "$owner"

echo "-- case 6: success"
marker="mh-marker-6-$$"
run_case -H 2 -R 2 --timeout 60 -- bash -c 'echo "rank $RANK of $WORLD_SIZE on $STRATA_HOSTID"'
((last_status == 0)) || fail "case 6: status $last_status"
grep -q '\[r0 h0\] rank 0 of 4 on host0' "$tmp/out" || fail "case 6: rank 0's output missing"
check_clean "case 6" "$marker" "$owner"

if ((failures)); then
  echo "test_teardown: $failures failure(s)"
  exit 1
fi
echo "test_teardown: every exit path cleaned up"
