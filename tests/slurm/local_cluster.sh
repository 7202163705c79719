#!/usr/bin/env bash
# local_cluster.sh — installs, configures and starts a real Slurm cluster on this
# machine, for tests: munged, slurmctld and two slurmd (logical nodes n1 and n2,
# both on 127.0.0.1, 4 CPUs advertised each), partition "debug", MpiDefault=pmix.
#
# Idempotent: installs only missing packages, rewrites the configuration only when
# it differs (and then restarts the daemons), starts only daemons that are not
# running, and ends with a smoke `srun -N2`. Needs root on Debian 12 with the Debian
# archive; no systemd needed (daemons are started directly and tracked by pid file).
#
# Exit codes: 0 the cluster is up; 77 skipped (not root, no apt-get, or the packages
# cannot be installed); 1 a daemon did not come up (the log tail is printed).
# Everything lives under /tmp/slurm-local (logs in log/) plus /etc/slurm/slurm.conf.
# tests/slurm/stop_cluster.sh stops it.
set -euo pipefail

readonly BASE=/tmp/slurm-local
readonly CONF=/etc/slurm/slurm.conf
readonly NODES=(n1 n2)
readonly PACKAGES=(slurmctld slurmd slurm-client munge)
readonly MUNGE_PID=/run/munge/munged.pid

log() { printf 'local_cluster.sh: %s\n' "$*" >&2; }
skip() { log "SKIP: $*"; exit 77; }
die() { log "ERROR: $*"; exit 1; }

# alive_as PID COMM (tests/slurm/processes.sh)
# shellcheck source=processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/processes.sh"

# Prints the pid in pid file $1 when that process is alive and its command name is $2.
running_pid() {
  local file=$1 comm=$2 pid
  [[ -r $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] && alive_as "$pid" "$comm" || return 1
  printf '%s\n' "$pid"
}

check_prerequisites() {
  [[ $EUID -eq 0 ]] || skip "needs root (installs packages and starts slurmctld/slurmd as root)"
  command -v apt-get >/dev/null || skip "apt-get not found: needs a Debian-based system"
  [[ -d /proc/self ]] || skip "/proc is not mounted"
}

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == "install ok installed" ]] || printf '%s\n' "$p"
  done
}

install_packages() {
  local missing created_policy=0 apt_opts=(-y -q -o DPkg::Lock::Timeout=600)
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  # Without an init system the postinst scripts cannot start services; policy-rc.d
  # returning 101 makes them skip that step instead of failing.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  local rc=0
  if ! DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" --no-install-recommends "${missing[@]}" >"$BASE/apt.log" 2>&1; then
    log "apt-get install failed; updating the package lists and retrying"
    DEBIAN_FRONTEND=noninteractive apt-get update -q -o DPkg::Lock::Timeout=600 >>"$BASE/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" --no-install-recommends "${missing[@]}" >>"$BASE/apt.log" 2>&1 || rc=$?
  fi
  ((created_policy)) && rm -f /usr/sbin/policy-rc.d
  if ((rc != 0)); then
    tail -n 5 "$BASE/apt.log" >&2
    skip "apt-get could not install ${missing[*]} (exit $rc; full log in $BASE/apt.log)"
  fi
}

write_slurm_conf() {
  cat <<EOF
# Written by tests/slurm/local_cluster.sh: a 2-node test cluster on one machine.
ClusterName=local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
SlurmctldPort=6817
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
# Per-node TmpFS: mpi/pmix creates its client directories there, and the two logical
# nodes would collide in a shared /tmp.
TmpFS=$BASE/tmp/%n
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$BASE/taskprolog.sh
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=n[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[6821-6822] CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

# Both logical nodes share the hostname, so Open MPI's shared-memory segments
# (/dev/shm/vader_segment.<host>.<job>.<rank>) would collide: each node gets its own
# directory. Job steps only: in the batch step mpirun would forward n1's value to n2.
write_task_prolog() {
  cat <<'EOF'
#!/bin/sh
# Written by tests/slurm/local_cluster.sh.
[ -n "${SLURM_STEP_ID:-}" ] || exit 0
[ "${SLURM_STEP_ID}" = batch ] && exit 0
dir=/dev/shm/slurm-${SLURMD_NODENAME:-unknown}
mkdir -p "$dir" && chmod 1777 "$dir"
echo "export OMPI_MCA_btl_vader_backing_directory=$dir"
EOF
}

# Installs $2's output as file $1 (mode $3) when it differs; returns 0 when it changed.
install_if_changed() {
  local target=$1 generator=$2 mode=$3 tmp
  tmp=$(mktemp)
  "$generator" >"$tmp"
  if [[ -f $target ]] && cmp -s "$tmp" "$target"; then
    rm -f "$tmp"
    return 1
  fi
  install -m "$mode" "$tmp" "$target"
  rm -f "$tmp"
  return 0
}

configure() {
  local n changed=1
  mkdir -p "$BASE"/{state,log} /etc/slurm
  for n in "${NODES[@]}"; do mkdir -p "$BASE/spool/$n" "$BASE/tmp/$n"; done
  install_if_changed "$CONF" write_slurm_conf 644 && changed=0
  install_if_changed "$BASE/taskprolog.sh" write_task_prolog 755 && changed=0
  return "$changed"
}

start_munge() {
  running_pid "$MUNGE_PID" munged >/dev/null && return 0
  [[ -s /etc/munge/munge.key ]] || {
    log "creating /etc/munge/munge.key"
    mungekey --create --keyfile=/etc/munge/munge.key >/dev/null
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  }
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
  local i
  for ((i = 0; i < 50; i++)); do
    running_pid "$MUNGE_PID" munged >/dev/null && return 0
    sleep 0.1
  done
  die "munged did not write $MUNGE_PID (see /var/log/munge/munged.log)"
}

# Starts a Slurm daemon unless its pid file names a live one: $1 pid file, $2 name, $3 log.
start_daemon() {
  local pidfile=$1 comm=$2 logfile=$3 i
  shift 3
  running_pid "$pidfile" "$comm" >/dev/null && return 0
  "$@" || { tail -n 20 "$logfile" >&2 2>/dev/null; die "'$*' failed (log: $logfile)"; }
  for ((i = 0; i < 50; i++)); do
    running_pid "$pidfile" "$comm" >/dev/null && return 0
    sleep 0.1
  done
  tail -n 20 "$logfile" >&2 2>/dev/null || true
  die "'$*' did not stay up (log: $logfile)"
}

start_slurm() {
  local n
  # -c: start without the jobs of an earlier instance. A job recovered from the state
  # files (one left running or pending when the cluster stopped) holds the nodes until
  # its time limit, and the smoke test and the tests' jobs would wait for it.
  start_daemon "$BASE/slurmctld.pid" slurmctld "$BASE/log/slurmctld.log" slurmctld -c
  for n in "${NODES[@]}"; do
    start_daemon "$BASE/slurmd-$n.pid" slurmd "$BASE/log/slurmd-$n.log" slurmd -N "$n"
  done
}

# Waits until both nodes accept work; resumes nodes that an earlier test drained.
wait_for_nodes() {
  local i states
  for ((i = 0; i < 150; i++)); do
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true)
    if [[ $(grep -cE '^n[12] (idle|mix|alloc)$' <<<"$states") -eq 2 ]]; then return 0; fi
    if grep -qE '^n[12] drain' <<<"$states"; then
      scontrol update nodename=n[1-2] state=resume 2>/dev/null || true
    fi
    sleep 0.2
  done
  log "node states: ${states:-<sinfo gave nothing>}"
  tail -n 20 "$BASE/log/slurmctld.log" >&2 2>/dev/null || true
  die "nodes n1 and n2 did not become idle within 30 s"
}

smoke_test() {
  local out
  out=$(timeout 30 srun -N2 -n2 hostname 2>&1) || {
    printf '%s\n' "$out" >&2
    die "smoke test 'srun -N2 -n2 hostname' failed"
  }
}

main() {
  check_prerequisites
  mkdir -p "$BASE"
  install_packages
  if configure && running_pid "$BASE/slurmctld.pid" slurmctld >/dev/null; then
    log "configuration changed: restarting the daemons"
    "$(dirname "$0")/stop_cluster.sh" --keep-munge
  fi
  start_munge
  start_slurm
  wait_for_nodes
  smoke_test
  log "cluster up: slurmctld + slurmd n1, n2 (logs in $BASE/log)"
}

main "$@"
