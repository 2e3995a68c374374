#!/usr/bin/env bash
# Runs one job across simulated hosts (network namespaces, see netns_hosts.sh): H hosts x R ranks.
#
#   run_hosts.sh -H HOSTS -R RANKS_PER_HOST [--rate RATE] [--net tcp|ucx] [--timeout SEC] [--grace SEC]
#                [--port PORT] [--prefix NAME] [--logdir DIR] [--all-output] -- command args...
#
# Each rank is started the way torchrun starts one, inside its host's namespace: RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the host's index), ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR
# (host 0's address), MASTER_PORT, TORCHELASTIC_RUN_ID; plus STRATA_HOSTID=host<i> (ranks of one
# host use shm), STRATA_NET (the transport between hosts) and a random STRATA_SECRET shared by the job.
# STRATA_SOCKET_IFNAME is not set: each rank must find the address that routes to MASTER_ADDR itself.
#
# Exit status: 0 if every rank exited 0; else the first failing rank's status; 124 if --timeout passed
# (every rank is then killed); 77 (ctest's skip code) if this machine cannot make namespaces (not root).
# If a rank fails, the others get --grace seconds (default 10) to exit by themselves (Strata ranks
# report the failure and stop), then are killed. Each rank's output goes to a log; on success rank 0's
# log is printed, on failure every rank's, each line prefixed with "[r<rank> h<host>]".
# Every exit path (success, failure, timeout, SIGINT/SIGTERM, an error in this script) kills every rank
# and removes every namespace; a SIGKILLed run's leftovers are removed by the next run (mh_reap).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=netns_hosts.sh
source "$here/netns_hosts.sh"

usage() {
  sed -n '4,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
log() { echo "run_hosts: $*" >&2; }

hosts='' per_host='' rate='' net=tcp timeout=600 grace=10 port=29500 name=smh logdir='' all_output=0
while (($#)); do
  case $1 in
    -H) hosts=$2; shift 2 ;;
    -R) per_host=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --grace) grace=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --prefix) name=$2; shift 2 ;;
    --logdir) logdir=$2; shift 2 ;;
    --all-output) all_output=1; shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) log "unknown option '$1'"; usage ;;
  esac
done
(($#)) || { log "no command after --"; usage; }
[[ $hosts =~ ^[1-9][0-9]*$ && $per_host =~ ^[1-9][0-9]*$ ]] || { log "-H and -R must be positive integers"; usage; }
[[ $net == tcp || $net == ucx ]] || { log "--net must be tcp or ucx, got '$net'"; usage; }
[[ $timeout =~ ^[0-9]+$ && $grace =~ ^[0-9]+$ ]] || { log "--timeout and --grace are whole seconds"; usage; }
cmd=("$@")

if ! mh_check; then
  echo "skipped: needs root and ip netns"
  exit 77
fi

nranks=$((hosts * per_host))
keep_logs=1
if [[ -z $logdir ]]; then
  logdir=$(mktemp -d "${TMPDIR:-/tmp}/run_hosts.XXXXXX")
  keep_logs=0
fi
mkdir -p "$logdir"

# Rank pid (= its process group: each rank runs in its own session, so one kill reaches everything it
# started) -> rank number, for the ranks not yet reaped.
declare -A live=()
# Background sleepers (the timeout and the grace period); killed on exit so none outlives the run.
timers=()

# Starts a sleeper of $1 seconds in the background; its pid is $!. It runs inside the bridge namespace:
# every process this script starts then lives in one of its namespaces, so even if this script is
# SIGKILLed, removing its namespaces (the next run's mh_reap) removes every process it left.
start_timer() {
  ip netns exec "$MH_BRIDGE_NS" sleep "$1" &
}

# Sends signal $1 to the process group of every live rank.
signal_ranks() {
  local pid
  for pid in "${!live[@]}"; do kill "-$1" -- "-$pid" 2>/dev/null || true; done
}

# Waits until one of the children given has exited; sets ev_pid and ev_status. Children that bash has
# already reaped are checked first: bash moves finished jobs out of its job table whenever it starts
# another job, after which `wait -n` no longer sees them, but `wait PID` still returns their status.
# A child that is running or not yet reaped is left to `wait -n`, which sleeps until one exits.
wait_event() {
  local pid
  for (( ; ; )); do
    for pid in "$@"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        ev_pid=$pid
        ev_status=0
        wait "$pid" 2>/dev/null || ev_status=$?
        return 0
      fi
    done
    ev_pid=''
    ev_status=0
    wait -n -p ev_pid "$@" 2>/dev/null || ev_status=$?
    [[ -n $ev_pid ]] && return 0
    sleep 0.1  # nothing to wait for: a child was reaped between the scan and `wait -n`; scan again
  done
}

# Stops every live rank: SIGTERM to its group, up to 5 s to exit, then SIGKILL; reaps them all. A
# sleeper bounds the wait, as in the main loop, so nothing polls.
kill_ranks() {
  ((${#live[@]})) || return 0
  signal_ranks TERM
  start_timer 5
  local t=$! pid
  while ((${#live[@]})); do
    wait_event "${!live[@]}" "$t"
    [[ $ev_pid == "$t" ]] && break
    kill -KILL -- "-$ev_pid" 2>/dev/null || true  # whatever the rank left behind in its group
    unset "live[$ev_pid]"
  done
  kill "$t" 2>/dev/null || true
  wait "$t" 2>/dev/null || true
  ((${#live[@]})) || return 0
  log "SIGKILL to ${#live[@]} rank(s) that ignored SIGTERM"
  signal_ranks KILL
  for pid in "${!live[@]}"; do wait "$pid" 2>/dev/null || true; done
  live=()
}

# The one cleanup, run on every exit (the EXIT trap fires after errors, `exit`, and INT/TERM below).
cleanup() {
  local st=$?
  set +e
  trap - EXIT INT TERM
  kill_ranks
  local t
  for t in "${timers[@]}"; do kill "$t" 2>/dev/null; wait "$t" 2>/dev/null; done
  mh_down "${MH_PREFIX:-}"  # also kills anything a rank left behind inside the namespaces
  ((keep_logs)) || rm -rf "$logdir"
  exit "$st"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

mh_up "$hosts" "$rate" "$name" $$

secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
log "$hosts hosts x $per_host ranks (${nranks} ranks), net $net${rate:+, rate $rate per host}, master ${MH_ADDR[0]}:$port," \
  "namespaces ${MH_PREFIX}*"

# Starts every rank. setsid makes each rank the leader of a new session and process group (it execs
# directly, since a background child of a non-interactive shell is not a group leader, so $! is the
# rank's pid and its group id); `ip netns exec` then execs the command inside the host's namespace.
# env restores SIGINT and SIGQUIT, which bash ignores in background children, as torchrun's would be.
for ((h = 0; h < hosts; ++h)); do
  for ((l = 0; l < per_host; ++l)); do
    r=$((h * per_host + l))
    setsid ip netns exec "${MH_NS[h]}" env --default-signal=INT,QUIT \
      RANK=$r WORLD_SIZE=$nranks LOCAL_RANK=$l LOCAL_WORLD_SIZE="$per_host" GROUP_RANK=$h \
      ROLE_RANK=$r ROLE_WORLD_SIZE=$nranks MASTER_ADDR="${MH_ADDR[0]}" MASTER_PORT="$port" \
      TORCHELASTIC_RUN_ID="run_hosts-$$" STRATA_HOSTID="host$h" STRATA_SECRET="$secret" STRATA_NET="$net" \
      "${cmd[@]}" </dev/null >"$logdir/rank$r.log" 2>&1 &
    live[$!]=$r
  done
done

# Waits for the ranks. A sleeper stands for the deadline, so `wait -n` wakes on whichever comes first:
# a rank exiting or the deadline passing. After the first failure, a second sleeper bounds the grace.
start=$SECONDS
start_timer "$timeout"
deadline=$!
timers+=("$deadline")
grace_timer=''
status=0
failed_rank=''
timed_out=0
while ((${#live[@]})); do
  wait_event "${!live[@]}" "${timers[@]}"
  if [[ $ev_pid == "$deadline" ]]; then
    log "timeout: ${timeout}s passed with ${#live[@]} rank(s) running; killing them"
    timed_out=1
    break
  fi
  if [[ $ev_pid == "$grace_timer" ]]; then
    log "${#live[@]} rank(s) still running ${grace}s after rank $failed_rank failed; killing them"
    break
  fi
  r=${live[$ev_pid]}
  unset "live[$ev_pid]"
  if ((ev_status != 0)) && [[ -z $failed_rank ]]; then
    failed_rank=$r
    status=$ev_status
    log "rank $r (host $((r / per_host))) exited with status $ev_status"
    if ((${#live[@]})); then
      start_timer "$grace"
      grace_timer=$!
      timers+=("$grace_timer")
    fi
  fi
done
kill_ranks
((timed_out)) && status=124
elapsed=$((SECONDS - start))

# Prints rank $1's log with every line prefixed by the rank and its host.
print_log() {
  local r=$1
  sed "s/^/[r$r h$((r / per_host))] /" "$logdir/rank$r.log"
}
if ((status != 0 || all_output)); then
  for ((r = 0; r < nranks; ++r)); do print_log "$r"; done
else
  print_log 0
fi
if ((status == 0)); then
  log "all $nranks ranks succeeded in ${elapsed}s"
else
  log "FAILED (status $status) after ${elapsed}s"
fi
exit "$status"
