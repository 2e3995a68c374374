#!/usr/bin/env bash
# Simulated hosts on one machine: H network namespaces ("hosts") joined by veth pairs to one bridge.
#
#   netns_hosts.sh up H [--rate RATE] [--prefix NAME] [--owner PID]   build them; prints one line per host
#   netns_hosts.sh down FULLPREFIX                                     remove them (and any process inside)
#   netns_hosts.sh reap [NAME]                                         remove leftovers of dead owners
#   netns_hosts.sh check                                               exit 0 if this machine can do it
#
# or, sourced as a library (run_hosts.sh does): mh_check, mh_up, mh_down, mh_reap; after mh_up,
# MH_PREFIX, MH_BRIDGE_NS, MH_NS[i] and MH_ADDR[i] describe what was built.
#
# Layout, for full prefix P = NAME<owner pid>- (NAME defaults to "smh"):
#   namespace P"br"  : lo, bridge br0, and one port h<i> per host (the bridge side of host i's veth)
#   namespace P"h<i>": lo and eth0 (the host side of the veth), address 10.<X>.0.<i+1>/24
# Nothing is created in the root namespace: every interface lives inside a namespace of ours, so the
# machine's own interfaces, routes and addresses are never touched, and deleting our namespaces deletes
# every interface we made (a veth pair dies with either end's namespace).
#
# Why the owner pid is part of the name: runs in parallel never collide, and a run that was killed
# without a chance to clean up (SIGKILL, a ctest timeout) leaves namespaces whose owner is gone; the
# next mh_up with the same NAME finds them by name and removes them (mh_reap), processes included.
#
# Rate limit (--rate, e.g. 1gbit): a tbf qdisc on BOTH ends of each host's veth. The host-side end's
# egress is what leaves the host; the bridge-side end's egress is what enters it. So each host has a
# full-duplex "NIC" of that rate, whichever peers it talks to, like a real host with one link to a switch.
# tbf parameters (see mh_tbf): burst 256 KiB and latency 50 ms.
#   - burst must exceed the largest packet (veth hands tbf 64 KiB GSO super-packets) and the bytes the
#     rate accrues between two timer wake-ups (with high-resolution timers, well under 1 ms = 125 KB at
#     1 Gbit/s); 256 KiB (~2 ms at 1 Gbit/s) lets the shaper reach its rate without letting a long
#     line-rate burst through.
#   - latency bounds the queue (limit = rate x latency + burst, ~6.5 MB at 1 Gbit/s). A shallow queue
#     drops packets from our several TCP streams per peer, and the retransmissions would measure TCP's
#     loss recovery instead of the link; 50 ms is a deep but bounded switch buffer.
set -euo pipefail

MH_TBF_BURST=${MH_TBF_BURST:-256kb}
MH_TBF_LATENCY=${MH_TBF_LATENCY:-50ms}

# Prints a message on stderr, prefixed so interleaved output from several scripts stays readable.
mh_log() { echo "netns_hosts: $*" >&2; }

# Returns 0 if namespaces can be made here (root, and `ip netns add` works); otherwise prints why.
# Tests call it first so that a machine without the privilege skips instead of failing.
mh_check() {
  if [[ ${EUID:-$(id -u)} -ne 0 ]]; then
    mh_log "not root"
    return 1
  fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null || ! command -v setsid >/dev/null; then
    mh_log "ip, tc or setsid missing"
    return 1
  fi
  local probe="smhprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    mh_log "ip netns add failed"
    return 1
  fi
  ip netns del "$probe" 2>/dev/null || true
  return 0
}

# Lists our namespaces whose name starts with the full prefix $1 (exactly P"br" or P"h<digits>").
mh_list() {
  local p=$1 ns
  # `ip netns list` prints "name" or "name (id: N)"; the first field is the name.
  ip netns list 2>/dev/null | while read -r ns _; do
    [[ $ns == "$p"* ]] || continue
    local rest=${ns#"$p"}
    [[ $rest == br || $rest =~ ^h[0-9]+$ ]] && echo "$ns"
  done
  return 0
}

# Kills every process inside the namespaces given as arguments: TERM, up to 2 s to go, then KILL.
# A process left inside would keep the namespace (and its veth, and a port) alive after the name is
# deleted, where nothing could find it any more.
mh_kill_inside() {
  local ns pids=() i p
  for ns in "$@"; do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null || true)
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 20; ++i)); do
    local alive=()
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    ((${#alive[@]})) || return 0
    pids=("${alive[@]}")
    sleep 0.1
  done
  mh_log "killing ${#pids[@]} process(es) that ignored SIGTERM: ${pids[*]}"
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# Removes every namespace of full prefix $1 and every process inside them. Safe to call twice, on a
# half-built set, or when nothing exists: it is the one cleanup every exit path runs.
mh_down() {
  local p=${1:-${MH_PREFIX:-}}
  [[ -n $p ]] || return 0
  local nss
  mapfile -t nss < <(mh_list "$p")
  ((${#nss[@]})) || return 0
  mh_kill_inside "${nss[@]}"
  local ns
  for ns in "${nss[@]}"; do
    ip netns del "$ns" 2>/dev/null || mh_log "could not delete namespace $ns"
  done
  return 0
}

# Removes leftovers of runs that died without cleaning up: namespaces NAME<pid>-... whose owner pid no
# longer exists. Namespaces of live owners (runs in parallel) are left alone.
mh_reap() {
  local name=${1:-smh} ns pid p
  local -A dead=()
  while read -r ns _; do
    [[ $ns =~ ^${name}([0-9]+)-(br|h[0-9]+)$ ]] || continue
    pid=${BASH_REMATCH[1]}
    kill -0 "$pid" 2>/dev/null || dead["${name}${pid}-"]=1
  done < <(ip netns list 2>/dev/null || true)
  for p in "${!dead[@]}"; do
    mh_log "removing leftovers of a dead run: ${p}*"
    mh_down "$p"
  done
  return 0
}

# Adds the rate limit to interface $2 of namespace $1 (see the header for the parameters' reasons).
mh_tbf() {
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$3" burst "$MH_TBF_BURST" latency "$MH_TBF_LATENCY"
}

# Waits until eth0 of namespace $1 reports carrier (a veth is up once both ends are), up to 5 s.
mh_wait_up() {
  local i state
  for ((i = 0; i < 50; ++i)); do
    # -br prints "eth0@ifN  UP  ..." : the second field is the operational state.
    state=$(ip -n "$1" -br link show dev eth0 2>/dev/null | awk '{print $2}' || true)
    [[ $state == UP ]] && return 0
    sleep 0.1
  done
  mh_log "eth0 of $1 did not come up (operstate '$state')"
  return 1
}

# Builds H hosts: mh_up H RATE NAME OWNER (RATE empty: no limit). Sets MH_PREFIX first, so a caller's
# EXIT trap (mh_down) removes a half-built set if any step fails. Fails if anything is missing at the end.
mh_up() {
  local nhosts=$1 rate=${2:-} name=${3:-smh} owner=${4:-$$}
  if ! [[ $nhosts =~ ^[0-9]+$ ]] || ((nhosts < 1 || nhosts > 250)); then
    mh_log "host count must be in 1..250, got '$nhosts'"
    return 1
  fi
  if ! [[ $name =~ ^[A-Za-z][A-Za-z0-9_]*$ ]]; then
    mh_log "prefix must be letters, digits and _, starting with a letter; got '$name'"
    return 1
  fi
  MH_PREFIX="${name}${owner}-"
  MH_BRIDGE_NS="${MH_PREFIX}br"
  MH_NS=()
  MH_ADDR=()
  mh_reap "$name"
  mh_down "$MH_PREFIX"  # same name and owner as ours: a leftover of an earlier run under a reused pid
  # A subnet per owner: harmless if two runs share one (each bridge is its own L2 domain in its own
  # namespace), but it keeps addresses in logs of parallel runs apart.
  local net="10.$((100 + owner % 150))"
  ip netns add "$MH_BRIDGE_NS"
  ip -n "$MH_BRIDGE_NS" link set lo up
  ip -n "$MH_BRIDGE_NS" link add name br0 type bridge
  ip -n "$MH_BRIDGE_NS" link set br0 up
  local i ns
  for ((i = 0; i < nhosts; ++i)); do
    ns="${MH_PREFIX}h$i"
    ip netns add "$ns"
    MH_NS[i]=$ns
    MH_ADDR[i]="$net.0.$((i + 1))"
    ip -n "$ns" link set lo up
    # Created inside the bridge namespace with its peer put straight into the host namespace: the
    # root namespace never sees either end, so no name there can collide.
    ip -n "$MH_BRIDGE_NS" link add name "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$MH_BRIDGE_NS" link set "h$i" master br0
    ip -n "$MH_BRIDGE_NS" link set "h$i" up
    ip -n "$ns" addr add "${MH_ADDR[i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [[ -n $rate ]]; then
      mh_tbf "$ns" eth0 "$rate"           # leaving host i
      mh_tbf "$MH_BRIDGE_NS" "h$i" "$rate"  # entering host i
    fi
  done
  for ((i = 0; i < nhosts; ++i)); do mh_wait_up "${MH_NS[i]}"; done
  # Everything there? (Callers in a conditional context run without set -e; this check still fails.)
  local have
  have=$(mh_list "$MH_PREFIX" | wc -l)
  if ((have != nhosts + 1)); then
    mh_log "expected $((nhosts + 1)) namespaces, found $have"
    return 1
  fi
  return 0
}

# Command-line front end. `up` leaves the hosts in place on success (that is its purpose) and removes
# them on any failure or signal; the owner defaults to the calling process, so the hosts count as
# leftovers (for mh_reap) once the caller is gone.
mh_main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    check)
      mh_check
      ;;
    up)
      local nhosts=${1:-} rate='' name=smh owner=$PPID
      shift || true
      while (($#)); do
        case $1 in
          --rate) rate=$2; shift 2 ;;
          --prefix) name=$2; shift 2 ;;
          --owner) owner=$2; shift 2 ;;
          *) mh_log "unknown option '$1'"; return 2 ;;
        esac
      done
      mh_check || return 77
      trap 'mh_down "${MH_PREFIX:-}"' EXIT
      trap 'exit 130' INT
      trap 'exit 143' TERM
      mh_up "$nhosts" "$rate" "$name" "$owner"
      trap - EXIT INT TERM
      local i
      echo "prefix $MH_PREFIX bridge $MH_BRIDGE_NS"
      for i in "${!MH_NS[@]}"; do echo "host $i ${MH_NS[i]} ${MH_ADDR[i]}"; done
      ;;
    down)
      [[ -n ${1:-} ]] || { mh_log "down needs the full prefix that up printed"; return 2; }
      mh_down "$1"
      ;;
    reap)
      mh_reap "${1:-smh}"
      ;;
    *)
      sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
      return 2
      ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  mh_main "$@"
fi
