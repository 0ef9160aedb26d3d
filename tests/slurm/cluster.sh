#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests/test_slurm_real.py (needs root and
# Debian's slurm-wlm + munge; `install` fetches them from the Debian mirror).
#   bash tests/slurm/cluster.sh install        # apt-get install slurm-wlm munge (~1.5 min)
#   bash tests/slurm/cluster.sh start DIR      # munged, slurmctld, slurmd; state, logs and PIDs in DIR
#   bash tests/slurm/cluster.sh stop DIR       # stops exactly the daemons DIR's PID files name
# slurmdbd is not started: no accounting, so the profile's squeue status command is what
# Snakemake's SLURM plugin can use (profiles/slurm).
set -eu
cmd=${1:?install, start DIR or stop DIR}
case $cmd in
install)
  command -v slurmctld > /dev/null && command -v munged > /dev/null && exit 0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge > /dev/null
  ;;
start)
  dir=$(realpath -m "${2:?state folder}"); mkdir -p "$dir"/{state,spool,log,munge}
  host=$(hostname -s); cpus=$(nproc); mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
  conf=/etc/slurm/slurm.conf
  if [ -f "$conf" ]; then [ -f "$dir/slurm.conf.saved" ] || cp "$conf" "$dir/slurm.conf.saved"; else touch "$dir/slurm.conf.created"; fi
  mkdir -p /etc/slurm
  cat > "$conf" <<CONF
ClusterName=psrnn-test
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=300
KillWait=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  [ -f /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2> /dev/null; }
  chown -R munge:munge /etc/munge "$dir/munge" 2> /dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge 2> /dev/null || true
  if ! munge -n > /dev/null 2>&1; then
    runuser -u munge -- munged --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" 2> /dev/null \
      || munged --force --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log"
    cp "$dir/munge/munged.pid" "$dir/munged.pid"
  fi
  slurmctld -f "$conf"
  slurmd -f "$conf"
  for i in $(seq 60); do
    sinfo -h -o %T 2> /dev/null | grep -qE '^idle' && { echo "cluster up: $host, $cpus CPUs, $mem MB"; exit 0; }
    sleep 1
  done
  echo "cluster did not come up: $(sinfo -h 2>&1 | head -3)" >&2; exit 1
  ;;
stop)
  dir=$(realpath -m "${2:?state folder}")
  for d in slurmd slurmctld munged; do
    pid=$(cat "$dir/$d.pid" 2> /dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2> /dev/null || true
  done
  sleep 1
  if [ -f "$dir/slurm.conf.saved" ]; then cp "$dir/slurm.conf.saved" /etc/slurm/slurm.conf; fi
  if [ -f "$dir/slurm.conf.created" ]; then rm -f /etc/slurm/slurm.conf; fi
  ;;
esac
