#!/usr/bin/env bash
# A Slurm cluster on the test hosts (scripts/test-hosts.sh): Debian's slurmctld on the first host and
# one slurmd per host (each in its host's network namespace with its own hostname), munge for
# authentication, a configuration this script writes. Root only.
#
#   scripts/test-slurm.sh up N [--prefix P]     the hosts (made if missing) and the daemons
#   scripts/test-slurm.sh down [--prefix P]     stops the daemons (the hosts stay: test-hosts.sh down)
#   scripts/test-slurm.sh env [--prefix P]      prints the SLURM_CONF=... line srun needs
#
# Jobs then start on the first host: `scripts/test-hosts.sh exec 10.77.0.10 "SLURM_CONF=... srun -N2
# --ntasks-per-node=2 ..."`. The nodes are named P0, P1, ... as their namespaces; state, logs and
# the configuration live in /tmp/motley-slurm-P.
set -euo pipefail
cd "$(dirname "$0")"
action=${1:-}; shift || true
count=0
if [ "$action" = up ]; then count=${1:?up needs the number of hosts}; shift; fi
prefix=mh
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?}; shift 2 ;;
    *) echo "test-slurm: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
dir=/tmp/motley-slurm-$prefix
conf=$dir/slurm.conf

stop() {
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 0.5
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case "$action" in
  up)
    for tool in slurmctld slurmd srun sinfo munged unshare; do
      command -v "$tool" >/dev/null || { echo "test-slurm: $tool is missing: scripts/setup.sh installs slurm-wlm and munge" >&2; exit 3; }
    done
    stop
    ./test-hosts.sh status --prefix "$prefix" | grep -q "^${prefix}$((count - 1)) " || ./test-hosts.sh up "$count" --prefix "$prefix" >/dev/null
    if ! pgrep -x munged >/dev/null; then
      mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
      [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
      su -s /bin/sh munge -c "/usr/sbin/munged" 2>/dev/null || /usr/sbin/munged --force
    fi
    rm -rf "$dir" && mkdir -p "$dir/state"
    {
      echo "ClusterName=motleytest"
      echo "SlurmctldHost=${prefix}0(10.77.0.10)"
      echo "SlurmUser=root"
      echo "SlurmdUser=root"
      echo "AuthType=auth/munge"
      echo "StateSaveLocation=$dir/state"
      echo "SlurmdSpoolDir=$dir/spool-%n"
      echo "SlurmctldPidFile=$dir/slurmctld.pid"
      echo "SlurmdPidFile=$dir/slurmd-%n.pid"
      echo "SlurmctldLogFile=$dir/slurmctld.log"
      echo "SlurmdLogFile=$dir/slurmd-%n.log"
      echo "ProctrackType=proctrack/linuxproc"
      echo "TaskPlugin=task/none"
      echo "MpiDefault=none"
      echo "SchedulerType=sched/builtin"
      echo "SelectType=select/linear"
      echo "SlurmdParameters=config_overrides"
      echo "JobAcctGatherType=jobacct_gather/none"
      echo "AccountingStorageType=accounting_storage/none"
      echo "ReturnToService=2"
      echo "SlurmdTimeout=30"
      echo "InactiveLimit=0"
      echo "KillWait=2"
      for ((i = 0; i < count; i++)); do
        echo "NodeName=${prefix}${i} NodeAddr=10.77.0.$((10 + i)) CPUs=4 State=UNKNOWN"
      done
      nodes=$(for ((i = 0; i < count; i++)); do printf '%s%s,' "$prefix" "$i"; done)
      echo "PartitionName=test Nodes=${nodes%,} Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP"
    } > "$conf"
    # slurmd initialises its cgroup plugin even with process tracking by /proc; `ip netns exec`
    # remounts /sys without the cgroup hierarchies, so each slurmd mounts them in its own mount
    # namespace (cgroup v1, as this machine's kernel offers them).
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\n' > "$dir/cgroup.conf"
    cgroups='mount -t tmpfs none /sys/fs/cgroup && for c in freezer cpuset memory devices cpuacct; do mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c; done'
    ip netns exec "${prefix}0" unshare --uts sh -c "hostname ${prefix}0 && exec slurmctld -f $conf"
    for ((i = 0; i < count; i++)); do
      mkdir -p "$dir/spool-${prefix}$i"
      ip netns exec "${prefix}$i" unshare --uts sh -c "hostname ${prefix}$i && $cgroups && exec slurmd -f $conf -N ${prefix}$i"
    done
    # Ready when every node is idle.
    for _ in $(seq 1 60); do
      idle=$(ip netns exec "${prefix}0" env SLURM_CONF="$conf" sinfo -h -o '%T %D' 2>/dev/null | awk '$1=="idle"{print $2}')
      [ "${idle:-0}" = "$count" ] && { echo "test-slurm: $count nodes idle (SLURM_CONF=$conf)"; exit 0; }
      sleep 0.5
    done
    echo "test-slurm: the nodes did not come up; logs in $dir" >&2
    tail -5 "$dir"/*.log >&2 || true
    exit 1 ;;
  down) stop; echo "test-slurm: daemons of prefix $prefix stopped" ;;
  env) echo "SLURM_CONF=$conf" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
