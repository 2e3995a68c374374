#!/usr/bin/env bash
# Tests of the strata-run launcher on /bin/sh snippets (no Strata library involved).
# usage: test_strata_run.sh path/to/strata-run
# The snippets are single-quoted on purpose: the ranks expand $RANK & co, not this script.
# shellcheck disable=SC2016,SC2015
set -u

RUN=${1:?usage: $0 path/to/strata-run}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

# Runs strata-run under an outer timeout so a broken launcher cannot hang the test; sets RC, and
# ELAPSED in whole seconds.
run() {
  local start=$SECONDS
  timeout -k 5 60 "$RUN" "$@" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  ELAPSED=$((SECONDS - start))
}

# --- environment of every rank -------------------------------------------------------------------
N=4
run -n $N --env EXTRA=hello sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $STRATA_SECRET $EXTRA"'
if [ "$RC" -ne 0 ]; then fail "env: exit status $RC"; cat "$TMP/err" >&2; fi
lines=$(wc -l <"$TMP/out")
[ "$lines" -eq $N ] || fail "env: expected $N lines, got $lines"
ranks=$(awk '{print $1}' "$TMP/out" | sort -n | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 " ] || fail "env: ranks are '$ranks', expected '0 1 2 3 '"
awk -v n=$N '$2 != n || $1 != $3 || $4 != n || $5 != 0 || $6 != "127.0.0.1" || $9 != "hello" { bad = 1 }
             END { exit bad }' "$TMP/out" || fail "env: wrong WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/GROUP_RANK/MASTER_ADDR/--env: $(cat "$TMP/out")"
ports=$(awk '{print $7}' "$TMP/out" | sort -u)
[ "$(echo "$ports" | wc -l)" -eq 1 ] || fail "env: MASTER_PORT differs across ranks: $ports"
# Below the ephemeral range (32768-60999), where another process's outgoing connection could take the port first.
[[ "$ports" =~ ^[0-9]+$ ]] && [ "$ports" -ge 20000 ] && [ "$ports" -le 32767 ] ||
  fail "env: MASTER_PORT '$ports' is not in [20000, 32767]"
secrets=$(awk '{print $8}' "$TMP/out" | sort -u)
[ "$(echo "$secrets" | wc -l)" -eq 1 ] || fail "env: STRATA_SECRET differs across ranks"
[[ "$secrets" =~ ^[0-9a-f]{32}$ ]] || fail "env: STRATA_SECRET '$secrets' is not 32 hex digits"
pass "environment of $N ranks"

# Arguments after the program belong to the program, even when they look like options.
run -n 1 sh -c 'echo "$1 $2"' sh --prefix -n
[ "$RC" -eq 0 ] && [ "$(cat "$TMP/out")" = "--prefix -n" ] || fail "args: got '$(cat "$TMP/out")'"
run -n 1 -- sh -c 'echo "$1"' sh --timeout
[ "$(cat "$TMP/out")" = "--timeout" ] || fail "args after --: got '$(cat "$TMP/out")'"
pass "program arguments passed through"

# Two runs get different secrets.
first=$secrets
run -n 1 sh -c 'echo $STRATA_SECRET'
[ "$(cat "$TMP/out")" != "$first" ] || fail "env: two runs got the same STRATA_SECRET"
pass "fresh secret per run"

# --- --prefix --------------------------------------------------------------------------------------
run -n 3 --prefix sh -c 'echo "out $RANK"; echo "err $RANK" >&2; printf "partial $RANK"'
[ "$RC" -eq 0 ] || fail "prefix: exit status $RC"
for r in 0 1 2; do
  grep -qx "\[$r\] out $r" "$TMP/out" || fail "prefix: no '[$r] out $r' on stdout"
  grep -qx "\[$r\] partial $r" "$TMP/out" || fail "prefix: no '[$r] partial $r' (unterminated line) on stdout"
  grep -qx "\[$r\] err $r" "$TMP/err" || fail "prefix: no '[$r] err $r' on stderr"
done
grep -q "err" "$TMP/out" && fail "prefix: stderr leaked into stdout"
[ "$(wc -l <"$TMP/out")" -eq 6 ] || fail "prefix: expected 6 stdout lines, got: $(cat "$TMP/out")"
pass "--prefix"

# Without --prefix the ranks write straight to the inherited stdout/stderr.
run -n 2 sh -c 'echo "plain $RANK"'
[ "$(sort "$TMP/out" | tr '\n' ' ')" = "plain 0 plain 1 " ] || fail "no prefix: got $(cat "$TMP/out")"
pass "inherited output"

# --- one failing rank takes the others down ----------------------------------------------------------
run -n 4 sh -c 'if [ "$RANK" = 2 ]; then sleep 0.3; exit 3; fi; sleep 100'
[ "$RC" -eq 3 ] || fail "failure: exit status $RC, expected 3"
[ "$ELAPSED" -lt 20 ] || fail "failure: run took ${ELAPSED}s; the sleeping ranks were not terminated"
grep -q "rank 2 exited with status 3; terminating the other 3 ranks" "$TMP/err" ||
  fail "failure: message missing: $(cat "$TMP/err")"
pass "failing rank ends the run (${ELAPSED}s, status $RC)"

# A grandchild (a process the rank started) dies with the job.
# Rank 1 fails once both ranks have started their child (so the test does not race the launcher).
run -n 2 sh -c 'sleep 100 & echo $! > "'"$TMP"'/grandchild.$RANK"
  if [ "$RANK" = 1 ]; then until [ -s "'"$TMP"'/grandchild.0" ]; do sleep 0.05; done; exit 5; fi; wait'
[ "$RC" -eq 5 ] || fail "grandchild: exit status $RC, expected 5"
# Alive = exists and is not a zombie waiting for init to reap it.
alive() { [ -n "$1" ] && ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; }
for r in 0 1; do
  gc=$(cat "$TMP/grandchild.$r" 2>/dev/null)
  [ -n "$gc" ] || fail "grandchild: rank $r did not record its child"
  for _ in 1 2 3 4 5 6 7 8 9 10; do alive "$gc" || break; sleep 0.2; done
  if alive "$gc"; then
    fail "grandchild: rank $r's child $gc is still alive"
    kill -9 "$gc" 2>/dev/null
  fi
done
pass "grandchildren terminated"

# A rank killed by a signal: exit status 128 + signal.
run -n 3 sh -c 'if [ "$RANK" = 0 ]; then kill -KILL $$; fi; sleep 100'
[ "$RC" -eq 137 ] || fail "signal: exit status $RC, expected 137"
[ "$ELAPSED" -lt 20 ] || fail "signal: run took ${ELAPSED}s"
grep -q "rank 0 was killed by signal 9" "$TMP/err" || fail "signal: message missing: $(cat "$TMP/err")"
pass "rank killed by a signal (status $RC)"

# A rank that ignores SIGTERM gets SIGKILL after the grace period.
run -n 2 sh -c 'if [ "$RANK" = 1 ]; then sleep 0.3; exit 1; fi; trap "" TERM; sleep 100'
[ "$RC" -eq 1 ] || fail "sigkill: exit status $RC, expected 1"
[ "$ELAPSED" -lt 20 ] || fail "sigkill: run took ${ELAPSED}s"
pass "SIGKILL after grace (${ELAPSED}s)"

# --- exec failure, timeout, usage ------------------------------------------------------------------------
run -n 2 /nonexistent/strata-no-such-program arg
[ "$RC" -eq 127 ] || fail "exec: exit status $RC, expected 127"
grep -q "cannot execute '/nonexistent/strata-no-such-program': No such file or directory" "$TMP/err" ||
  fail "exec: message missing: $(cat "$TMP/err")"
run -n 2 strata-no-such-program-in-path
[ "$RC" -eq 127 ] || fail "exec (PATH): exit status $RC, expected 127"
pass "exec failure"

run -n 2 --timeout 1 sleep 100
[ "$RC" -eq 124 ] || fail "timeout: exit status $RC, expected 124"
[ "$ELAPSED" -lt 20 ] || fail "timeout: run took ${ELAPSED}s"
pass "--timeout (${ELAPSED}s)"

run -n 2 --timeout 30 true
[ "$RC" -eq 0 ] || fail "timeout not reached: exit status $RC"

for args in "" "-n" "-n 0" "-n -1" "-n x true" "-n 2" "--bogus -n 1 true" "--timeout 0 -n 1 true" "--env NOEQ -n 1 true"; do
  # shellcheck disable=SC2086
  run $args
  if [ "$RC" -eq 0 ] || [ "$RC" -ge 124 ]; then fail "usage '$args': exit status $RC"; fi
  grep -q "usage: strata-run" "$TMP/err" || fail "usage '$args': no usage text"
done
run --help
[ "$RC" -eq 0 ] && grep -q "usage: strata-run" "$TMP/out" || fail "--help"
pass "usage errors"

# --- signals are forwarded ----------------------------------------------------------------------------
"$RUN" -n 2 sh -c 'trap "echo got-term-$RANK; exit 0" TERM; touch "'"$TMP"'/ready.$RANK"; sleep 100 & wait' \
  >"$TMP/out" 2>"$TMP/err" &
launcher=$!
# Signal only once both ranks have their handler in place.
for _ in $(seq 200); do [ -e "$TMP/ready.0" ] && [ -e "$TMP/ready.1" ] && break; sleep 0.1; done
kill -TERM $launcher
start=$SECONDS
wait $launcher
RC=$?
[ $((SECONDS - start)) -lt 20 ] || fail "forward: took too long"
[ "$(grep -c got-term "$TMP/out")" -eq 2 ] || fail "forward: ranks did not see SIGTERM: $(cat "$TMP/out")"
[ "$RC" -eq 0 ] || fail "forward: exit status $RC, expected 0 (ranks exited 0)"
pass "SIGTERM forwarded"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "all strata-run tests passed"
