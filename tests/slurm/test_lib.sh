# shellcheck shell=bash disable=SC2034
# test_lib.sh — helpers shared by the Slurm tests (sourced after the script sets
# TEST_NAME, HERE, SETUP_TIMEOUT and CANCEL_TIMEOUT, and the counters `failures` and
# `started_cluster`).

# alive_as PID COMM
# shellcheck source=tests/slurm/processes.sh
source "$HERE/processes.sh"

log() { printf '%s: %s\n' "$TEST_NAME" "$*"; }
fail() { log "FAIL: $*"; failures=$((failures + 1)); }
elapsed() { echo $((SECONDS - $1)); }

squeue_ids() { timeout 5 squeue -h -n "$1" -o %A 2>/dev/null || true; }

# cancel_jobs NAME: cancels the jobs named NAME and waits until they are gone (job
# processes outlive slurmd).
cancel_jobs() {
  local name=$1 i
  [[ -n $(squeue_ids "$name") ]] || return 0
  timeout 5 scancel --name="$name" 2>/dev/null || true
  for ((i = 0; i < CANCEL_TIMEOUT * 5; i++)); do
    [[ -z $(squeue_ids "$name") ]] && return 0
    sleep 0.2
  done
  log "jobs named $name still listed $CANCEL_TIMEOUT s after scancel"
}

cluster_running() {
  [[ -r /tmp/slurm-local/slurmctld.pid ]] && alive_as "$(</tmp/slurm-local/slurmctld.pid)" slurmctld
}

# Starts the local cluster (tests/slurm/local_cluster.sh) unless it runs; returns 77
# when it cannot (not root, no packages), exits 1 when it fails.
start_cluster() {
  local t0=$SECONDS rc=0
  cluster_running || started_cluster=1
  timeout "$SETUP_TIMEOUT" "$HERE/local_cluster.sh" || rc=$?
  case $rc in
    0) log "cluster ready ($(elapsed "$t0") s)" ;;
    77) started_cluster=0; return 77 ;;
    *) log "FAIL: local_cluster.sh exited with $rc (124: not done within $SETUP_TIMEOUT s)"; exit 1 ;;
  esac
}
