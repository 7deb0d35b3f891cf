#!/usr/bin/env bash
# Test hosts that are real to the kernel: Linux network namespaces on one bridge, each with its
# own address, and each host's link shaped by tc's token bucket (tbf) to a rate. Root only.
#
#   scripts/test-hosts.sh up N [--bandwidth RATE] [--rate HOST=RATE ...] [--prefix P]
#   scripts/test-hosts.sh down [--prefix P]
#   scripts/test-hosts.sh status [--prefix P]
#   scripts/test-hosts.sh exec [--prefix P] HOST COMMAND...
#
# `up 3` makes hosts P0, P1, P2 (default prefix "mh") at 10.77.0.10, .11, .12 on bridge Pbr,
# with every host's link (both directions) limited to RATE (tc units: 1gbit, 100mbit; default
# unshaped); `--rate P1=100mbit` shapes one host's link differently. A rank runs on a host with
# `ip netns exec P1 COMMAND`, or `exec 10.77.0.11 'COMMAND LINE'` (the host by its address or
# name, the line run by sh), which is what `motley launch --hosts 10.77.0.10:2,10.77.0.11:2
# --remote "scripts/test-hosts.sh exec {host}" -- ...` does. `up` first takes down what a crashed run left
# (idempotent); `down` removes only the namespaces, links and bridge of this prefix. Traffic goes
# only between the hosts' own addresses: the bridge has no address of its own, so nothing routes
# from them to this machine or beyond.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
action=$1; shift
if [ "$action" = exec ]; then
  # exec [--prefix P] HOST LINE: the line, by sh, on the host (its namespace) — exec all the way
  # down, so that the caller's process is the rank (signals and the parent-death signal reach it).
  prefix=mh
  if [ "${1:-}" = --prefix ]; then prefix=${2:?--prefix needs a name}; shift 2; fi
  # As ssh: HOST, then the command's words, joined by spaces into one line for sh (so that this
  # also serves as Open MPI's remote agent, plm_rsh_agent).
  [ $# -ge 2 ] || { echo "test-hosts: exec needs HOST and a command line" >&2; exit 2; }
  host=$1
  shift
  line="$*"
  ns=$host
  case "$host" in
    10.77.0.*) ns="${prefix}$(( ${host##*.} - 10 ))" ;;
  esac
  if ! ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
    echo "test-hosts: no test host '$host' (namespace $ns); make them with: scripts/test-hosts.sh up N" >&2
    exit 3
  fi
  exec ip netns exec "$ns" sh -c "$line"
fi
count=0
if [ "$action" = up ]; then
  [ $# -ge 1 ] || usage
  count=$1; shift
  case "$count" in ''|*[!0-9]*) echo "test-hosts: N must be a number of hosts (1-50), not '$count'" >&2; exit 2;; esac
  if [ "$count" -lt 1 ] || [ "$count" -gt 50 ]; then echo "test-hosts: N must be 1-50, not $count" >&2; exit 2; fi
fi
prefix=mh
bandwidth=""
declare -A rates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bandwidth) bandwidth=${2:?--bandwidth needs a rate, e.g. 1gbit}; shift 2 ;;
    --rate) r=${2:?--rate needs HOST=RATE}; rates[${r%%=*}]=${r#*=}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a name}; shift 2 ;;
    *) echo "test-hosts: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$prefix" in *[!a-z0-9]*|'') echo "test-hosts: --prefix must be lowercase letters and digits" >&2; exit 2;; esac
bridge="${prefix}br"
subnet=10.77.0

need_root() {
  if [ "$(id -u)" -ne 0 ]; then echo "test-hosts: needs root (network namespaces and tc)" >&2; exit 3; fi
  command -v ip >/dev/null || { echo "test-hosts: needs iproute2 (ip, tc)" >&2; exit 3; }
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${prefix}[0-9]+v$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

shape() {  # DEV RATE: a token bucket on DEV's egress
  local dev=$1 rate=$2 ns=${3:-}
  [ -n "$rate" ] || return 0
  # burst: at least one MTU, and about 1 ms of the rate so that the rate holds for bulk transfers.
  ${ns:+ip netns exec "$ns"} tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kbit latency 100ms
}

up() {
  down
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  for ((i = 0; i < count; i++)); do
    local ns="${prefix}${i}" veth="${prefix}${i}v" addr="$subnet.$((10 + i))"
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$bridge" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$addr/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    local rate=${rates[$ns]:-$bandwidth}
    shape "$veth" "$rate"        # into the host
    shape eth0 "$rate" "$ns"     # out of the host
    echo "test-hosts: $ns at $addr${rate:+, link $rate}"
  done
}

status() {
  local any=0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" | sort -V || true); do
    any=1
    addr=$(ip netns exec "$ns" ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
    qdisc=$(ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | grep -o 'rate [^ ]*' || true)
    echo "$ns ${addr:-?} ${qdisc:-unshaped}"
  done
  [ $any -eq 1 ] || echo "test-hosts: no hosts with prefix $prefix"
}

need_root
case "$action" in
  up) up ;;
  down) down; echo "test-hosts: hosts of prefix $prefix removed" ;;
  status) status ;;
  *) usage ;;
esac
