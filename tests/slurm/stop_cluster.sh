#!/usr/bin/env bash
# stop_cluster.sh [--keep-munge] — stops the cluster that local_cluster.sh started:
# cancels every job on it (their processes would outlive slurmd), then stops slurmd n1
# and n2, slurmctld, and munged (unless --keep-munge). Only the pids in the
# pid files are signalled, and only after /proc/<pid>/stat confirms what they are.
# Waits up to 10 s for each to exit, then sends SIGKILL. Safe to run when nothing runs.
set -euo pipefail

readonly BASE=/tmp/slurm-local
readonly MUNGE_PID=/run/munge/munged.pid

log() { printf 'stop_cluster.sh: %s\n' "$*" >&2; }

# alive_as PID COMM (tests/slurm/processes.sh)
# shellcheck source=processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/processes.sh"

# Stops the process in pid file $1 if its command name is $2.
stop_pidfile() {
  local file=$1 comm=$2 pid i
  [[ -r $file ]] || return 0
  pid=$(<"$file")
  if [[ ! $pid =~ ^[0-9]+$ ]] || ! alive_as "$pid" "$comm"; then
    rm -f "$file"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive_as "$pid" "$comm" || break
    sleep 0.1
  done
  if alive_as "$pid" "$comm"; then
    log "$comm (pid $pid) ignored SIGTERM for 10 s: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
  log "stopped $comm (pid $pid)"
}

# Cancels all jobs of this test cluster and waits up to 15 s for them to end.
cancel_all_jobs() {
  local jobs i
  alive_as "$(cat "$BASE/slurmctld.pid" 2>/dev/null || echo 0)" slurmctld || return 0
  jobs=$(timeout 5 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
  [[ -n ${jobs// /} ]] || return 0
  log "cancelling jobs $jobs"
  # shellcheck disable=SC2086
  timeout 5 scancel $jobs 2>/dev/null || true
  for ((i = 0; i < 75; i++)); do
    [[ -z $(timeout 5 squeue -h -o %A 2>/dev/null) ]] && return 0
    sleep 0.2
  done
  log "jobs still listed 15 s after scancel: $(timeout 5 squeue -h -o '%A %T' 2>/dev/null | tr '\n' ' ')"
}

main() {
  local keep_munge=0
  case "${1:-}" in
    "") ;;
    --keep-munge) keep_munge=1 ;;
    *) log "unknown argument '$1' (expected --keep-munge or nothing)"; exit 2 ;;
  esac
  if [[ $EUID -ne 0 ]]; then
    log "SKIP: needs root (the daemons run as root)"
    exit 77
  fi
  cancel_all_jobs
  stop_pidfile "$BASE/slurmd-n1.pid" slurmd
  stop_pidfile "$BASE/slurmd-n2.pid" slurmd
  stop_pidfile "$BASE/slurmctld.pid" slurmctld
  ((keep_munge)) || stop_pidfile "$MUNGE_PID" munged
}

main "$@"
