#!/usr/bin/env bash
# requeue_test.sh BUILD_DIR
#
# Tests slurm/brisk-requeue.sbatch.
#  1. Its usage errors, and what it does on a requeued run (with and without a
#     checkpoint), with --dry-run in a job faked with SLURM_* variables.
#  2. On the local Slurm cluster (tests/slurm/local_cluster.sh: nodes n1, n2), with
#     BUILD_DIR/tests/checkpoint_restart_test --on-request on 2 nodes x 1 rank:
#     * a run that is not signalled completes without a requeue; its "final sum" is
#       the reference;
#     * for srun and for mpirun inside the job (with --hold: the run waits before its
#       last step until a checkpoint is requested): once both ranks catch SIGUSR1,
#       `scancel --signal=USR1 --batch` (what --signal=B:USR1@T sends before the time
#       limit) makes the job checkpoint, requeue itself once, resume ("resuming at
#       step S", 0 < S < steps) and print the reference sum;
#     * a program that fails (exit 3) fails the job with exit code 3, no requeue;
#     * a program that dies of the forwarded SIGUSR1 without a checkpoint fails the
#       job, no requeue.
#     Every step runs under `timeout`. The cluster is stopped again if this script
#     started it.
#
# Exit codes: 0 passed; 1 failed; 2 bad usage; 77 part 1 passed and part 2 was skipped
# (not root, or the Slurm packages cannot be installed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TEMPLATE=$ROOT/slurm/brisk-requeue.sbatch
readonly HERE ROOT TEMPLATE
# About 2 s of work for 2 ranks on 2 cores; a signalled run holds before its last step
# (--hold), so the signal finds it running however fast the machine is.
readonly STEPS=4000
# A requeued job starts again ~12 s later on this cluster (cred_expire=10).
readonly SETUP_TIMEOUT=60 START_TIMEOUT=20 JOB_TIMEOUT=60 CANCEL_TIMEOUT=10

failures=0
checks=0
started_cluster=0
work=""
job_tag="brisk-requeue-test-$$"
PROG=""
reference=""

readonly TEST_NAME=requeue_test.sh
# log, fail, elapsed, cancel_jobs, cluster_running, start_cluster
# shellcheck source=tests/slurm/test_lib.sh
source "$HERE/test_lib.sh"

# expect NAME RC TEXT COMMAND...: COMMAND exits with RC and prints TEXT (fixed string).
expect() {
  local name=$1 want_rc=$2 text=$3 out rc=0
  shift 3
  checks=$((checks + 1))
  out=$("$@" 2>&1) || rc=$?
  if ((rc != want_rc)); then
    fail "$name: exit code $rc, wanted $want_rc; output: $out"
  elif [[ $out != *"$text"* ]]; then
    fail "$name: output does not contain '$text'; output: $out"
  fi
}

usage_checks() {
  local t0=$SECONDS dir
  dir=$(mktemp -d)
  local fake_job=(env -u SLURM_RESTART_COUNT -u BRISK_RESTORE SLURM_JOB_ID=42 BRISK_HOME="$ROOT" BRISK_CHECKPOINT_DIR="$dir")
  expect "no program" 2 "brisk-requeue.sbatch: no program given" "${fake_job[@]}" bash "$TEMPLATE"
  expect "outside a job" 2 "not in a Slurm job (SLURM_JOB_ID is unset)" env -u SLURM_JOB_ID bash "$TEMPLATE" ./app
  expect "--brisk-restore given" 2 "'--brisk-restore=latest': this script sets" "${fake_job[@]}" bash "$TEMPLATE" ./app --brisk-restore=latest
  expect "--brisk-checkpoint-dir given" 2 "use BRISK_CHECKPOINT_DIR" "${fake_job[@]}" bash "$TEMPLATE" ./app --brisk-checkpoint-dir "$dir"
  expect "bad BRISK_HOME" 2 "BRISK_HOME=$dir holds no slurm/brisk.sbatch" "${fake_job[@]}" BRISK_HOME="$dir" bash "$TEMPLATE" ./app
  expect "first run: brisk.sbatch runs the launch" 0 "srun --mpi=pmix ./app a" "${fake_job[@]}" bash "$TEMPLATE" --dry-run ./app a
  expect "restart without a checkpoint" 0 "restart 1: no checkpoint in $dir: starting from the beginning" \
    "${fake_job[@]}" SLURM_RESTART_COUNT=1 bash "$TEMPLATE" --dry-run ./app
  touch "$dir/ckpt-000007.h5" "$dir/ckpt-000012.h5.tmp-1"
  expect "restart with a checkpoint" 0 "restart 2: resuming from the newest checkpoint in $dir (number 7; BRISK_RESTORE=latest)" \
    "${fake_job[@]}" SLURM_RESTART_COUNT=2 bash "$TEMPLATE" --dry-run ./app
  rm -rf "$dir"
  log "usage checks: $checks run, $failures failed ($(elapsed "$t0") s)"
}

cleanup() {
  [[ -n $work ]] && cancel_jobs "$job_tag"
  if ((started_cluster)); then "$HERE/stop_cluster.sh" >/dev/null 2>&1 || log "stop_cluster.sh failed"; fi
  [[ -n $work && -d $work ]] && rm -rf "$work"
  return 0
}

# job_field JOB FIELD: FIELD of `scontrol show job` (JobState, Restarts, ExitCode).
job_field() {
  timeout 5 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# submit NAME [brisk-launch options] [--] program [args]: prints the job id.
submit() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  timeout 10 sbatch --parsable --job-name="$job_tag" --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=3 \
    --chdir="$work" --output="$work/$name.out" --export="ALL,BRISK_HOME=$ROOT,BRISK_CHECKPOINT_DIR=$work/$name" \
    "$TEMPLATE" "$@"
}

# wait_done NAME JOB: waits until the job has ended (a requeued job is PENDING
# meanwhile); prints its state.
wait_done() {
  local name=$1 job=$2 state="" i
  for ((i = 0; i < JOB_TIMEOUT * 5; i++)); do
    state=$(job_field "$job" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) break ;;
    esac
    sleep 0.2
  done
  echo "${state:-<no job $job>}"
}

# wait_ranks NAME EXE COUNT: waits until COUNT processes of EXE with this run's
# checkpoint directory run; "usr1" as $4: until they also catch SIGUSR1 (brisk has
# installed its handler: SigCgt bit 9 set).
wait_ranks() {
  local name=$1 exe=$2 count=$3 handler=${4:-} i pid n mask
  for ((i = 0; i < START_TIMEOUT * 5; i++)); do
    n=0
    for pid in $(pgrep -f -- "${exe##*/}" 2>/dev/null || true); do
      [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$exe" ]] || continue
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "BRISK_CHECKPOINT_DIR=$work/$name" || continue
      if [[ -n $handler ]]; then
        mask=$(sed -n 's/^SigCgt:\s*//p' "/proc/$pid/status" 2>/dev/null)
        (((16#${mask:-0} >> 9) & 1)) || continue
      fi
      n=$((n + 1))
    done
    ((n >= count)) && return 0
    sleep 0.2
  done
  return 1
}

# expect_job NAME JOB STATE EXIT RESTARTS: the job ended so (EXIT may be a glob).
expect_job() {
  local name=$1 job=$2 want="$3 $4 restarts $5" got
  checks=$((checks + 1))
  got="$(wait_done "$name" "$job") $(job_field "$job" ExitCode) restarts $(job_field "$job" Restarts)"
  # shellcheck disable=SC2053 # want is a glob
  if [[ $got != $want ]]; then
    fail "$name: job $job ended '$got', wanted '$want'; output:"
    sed 's/^/  | /' "$work/$name.out" 2>/dev/null || true
    return 1
  fi
}

# expect_log NAME TEXT...: the run's output holds each TEXT (fixed strings).
expect_log() {
  local name=$1 text
  shift
  for text in "$@"; do
    checks=$((checks + 1))
    grep -qF -- "$text" "$work/$name.out" || fail "$name: the output lacks '$text'"
  done
}

reference_run() {
  local name=reference t0=$SECONDS job
  job=$(submit "$name" -- "$PROG" --on-request --steps="$STEPS" --brisk-idle=sleep) || { fail "$name: sbatch failed"; return; }
  expect_job "$name" "$job" COMPLETED 0:0 0 || return 0
  reference=$(grep '^final sum ' "$work/$name.out" || true)
  checks=$((checks + 1))
  [[ $reference == "final sum "* && $(wc -l <<<"$reference") == 1 ]] || fail "$name: no single 'final sum' line: $reference"
  checks=$((checks + 1))
  ! grep -q "requeueing" "$work/$name.out" || fail "$name: a run that was not signalled was requeued"
  log "$name: $reference ($(elapsed "$t0") s)"
}

# requeue_run LAUNCHER: checkpoint, requeue and resume through srun or mpirun.
requeue_run() {
  local launcher=$1 name=requeue-$1 t0=$SECONDS job step
  job=$(submit "$name" --launcher="$launcher" -- "$PROG" --on-request --hold --steps="$STEPS" --brisk-idle=sleep) ||
    { fail "$name: sbatch failed"; return; }
  if ! wait_ranks "$name" "$PROG" 2 usr1; then
    fail "$name: the 2 ranks did not start within $START_TIMEOUT s"
    return
  fi
  timeout 5 scancel --signal=USR1 --batch "$job" || fail "$name: scancel --signal=USR1 --batch $job failed"
  expect_job "$name" "$job" COMPLETED 0:0 1 || return 0
  expect_log "$name" "SIGUSR1 forwarded to $launcher" "requeueing job $job" "restart 1: resuming from the newest checkpoint" \
    "brisk: restored from $work/$name/ckpt-" "$reference"
  checks=$((checks + 2))
  step=$(sed -n 's/^resuming at step //p' "$work/$name.out")
  [[ $step =~ ^[0-9]+$ ]] || step=0
  ((step > 0 && step < STEPS)) || fail "$name: 'resuming at step S' with 0 < S < $STEPS expected, got '$step'"
  [[ $(grep -c '^final sum' "$work/$name.out") == 1 ]] || fail "$name: 'final sum' printed more than once"
  log "$name: checkpointed, requeued, resumed at step $step, same sum ($(elapsed "$t0") s)"
}

failing_runs() {
  local t0=$SECONDS job
  job=$(submit exit3 -- /bin/sh -c 'exit 3') || { fail "exit3: sbatch failed"; return; }
  expect_job exit3 "$job" FAILED 3:0 0 || true
  # sleep dies of the forwarded SIGUSR1: no checkpoint, so no requeue.
  local sleep_exe
  sleep_exe=$(readlink -f "$(command -v sleep)")
  job=$(submit no-checkpoint -- "$sleep_exe" 60) || { fail "no-checkpoint: sbatch failed"; return; }
  if wait_ranks no-checkpoint "$sleep_exe" 2; then
    timeout 5 scancel --signal=USR1 --batch "$job" || fail "no-checkpoint: scancel failed"
    expect_job no-checkpoint "$job" FAILED "[1-9]*:0" 0 &&
      expect_log no-checkpoint "SIGUSR1 forwarded to srun" ": no requeue"
  else
    fail "no-checkpoint: the 2 sleep tasks did not start within $START_TIMEOUT s"
  fi
  log "failing programs: not requeued ($(elapsed "$t0") s)"
}

main() {
  (($# == 1)) || { printf 'usage: requeue_test.sh BUILD_DIR\n' >&2; exit 2; }
  local t0=$SECONDS rc=0
  usage_checks
  ((failures == 0)) || { log "FAILED: $failures of $checks checks"; exit 1; }
  PROG=$(cd "$1" 2>/dev/null && pwd)/tests/checkpoint_restart_test || { log "FAIL: no build directory '$1'"; exit 1; }
  [[ -x $PROG ]] || { log "FAIL: $1/tests/checkpoint_restart_test is not built"; exit 1; }
  readonly PROG
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start_cluster || rc=$?
  ((rc == 77)) && { log "SKIP: no local Slurm cluster (usage checks passed)"; exit 77; }
  work=$(mktemp -d /tmp/brisk-requeue-test.XXXXXX)
  chmod 755 "$work"
  reference_run
  if [[ -n $reference ]]; then
    requeue_run srun
    requeue_run mpirun
  fi
  failing_runs
  if ((failures)); then
    log "FAILED: $failures of $checks checks ($(elapsed "$t0") s)"
    exit 1
  fi
  log "PASSED: $checks checks ($(elapsed "$t0") s)"
}

main "$@"
