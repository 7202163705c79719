#!/usr/bin/env bash
# exit_status_test.sh [--no-cluster] BUILD_DIR MPIEXEC
#
# The exit status of a brisk job tells the truth in every launch mode: one case per
# way a job ends, each run under plain mpirun, slurm/brisk-launch and
# slurm/brisk-launch --keep-going (the launchers that run through a rank's death
# report success whatever happened; the wrapper then reads each rank's report).
#  1. On this machine (mpirun): the driver returns 3; throws; a task fails and get
#     rethrows; a bad option; the driver's rank SIGKILLed (ucx); a worker rank
#     SIGKILLed on mpi; a worker rank SIGKILLed on ucx that the job runs through; a
#     rank stuck in its part of a checkpoint, given up on. The wanted codes are
#     brisk's (brisk/core/run.hpp, exit_code): 1 threw, 2 bad input, 69 a rank lost
#     that the job could not run through, 79 a stuck rank given up on; 137 is
#     mpirun's for a rank killed by SIGKILL, which ends the job without --keep-going.
#     With --keep-going, every rank that did not die must have reported the job's
#     code (BRISK_STATUS_DIR, kept for the check with BRISK_LAUNCH_STATUS_DIR).
#  2. Unless --no-cluster: on the local Slurm cluster (tests/slurm/local_cluster.sh),
#     batch jobs through slurm/brisk.sbatch, with and without --keep-going; the job
#     completion record (`sacct -c`: the local cluster keeps no accounting database)
#     shows FAILED with the right exit code for each failure and COMPLETED for the
#     job that ran through a rank's loss (--keep-going runs mpirun inside the
#     allocation); and under brisk-launch --launcher=srun --keep-going, where srun's
#     PMIx plugin kills the step when a task dies, a worker's death fails the job.
#
# Exit codes: 0 passed; 1 failed; 2 bad usage; 77 part 1 passed and part 2 was
# skipped (not root, or the Slurm packages cannot be installed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LAUNCH=$ROOT/slurm/brisk-launch
SBATCH_TEMPLATE=$ROOT/slurm/brisk.sbatch
readonly HERE ROOT LAUNCH SBATCH_TEMPLATE
readonly SETUP_TIMEOUT=60 RUN_TIMEOUT=60 JOB_TIMEOUT=120 CANCEL_TIMEOUT=10
readonly TEST_NAME=exit_status_test.sh

failures=0
checks=0
started_cluster=0
work=""
job_tag="brisk-exit-status-test-$$"
# log, fail, elapsed, cancel_jobs, cluster_running, start_cluster
# shellcheck source=tests/slurm/test_lib.sh
source "$HERE/test_lib.sh"

usage_error() {
  printf '%s: %s\nusage: %s [--no-cluster] BUILD_DIR MPIEXEC\n' "$TEST_NAME" "$*" "$TEST_NAME" >&2
  exit 2
}

# Ranks share two cores with other tests: sleeping idle threads, and a failure
# timeout that a starved rank does not reach.
readonly COMMON=(--brisk-idle=sleep)
RUN=""  # BUILD_DIR/tests/brisk_run_program
DAG=""  # BUILD_DIR/tests/dag_failure_test
TPL=""  # BUILD_DIR/tests/template_checkpoint_test

# The cases: NAME|RANKS|ENV|WANT_MPIRUN|WANT_KEEP_GOING|LOST|OUTPUT|PROGRAM ARGS...
# WANT_MPIRUN is the status under plain mpirun and brisk-launch (which execs it).
# LOST: the ranks that report nothing under --keep-going, as a regular expression
# matched against the whole list ("" for none). OUTPUT must appear in the output of
# every run ("" for nothing). ENV is VAR=VALUE or "".
cases() {
  local stall_dir=$work/stalled
  cat <<EOF
returns_3|2||3|3||sum of squares 328350|$RUN --exit=3 ${COMMON[*]}
throws|2||1|1||the driver on rank 0 threw: driver failure on purpose (exit code 1)|$RUN --throw ${COMMON[*]}
task_fails|2||1|1||a task fails on purpose (exit code 1)|$RUN --fail-task ${COMMON[*]}
bad_option|2||2|2||unknown option --brisk-wrkers|$RUN --brisk-wrkers=2 ${COMMON[*]}
driver_killed_ucx|3|BRISK_FAULT_INJECT=kill:0:300-300|137|69|0||$DAG --injected --brisk-transport=ucx ${COMMON[*]}
worker_killed_mpi|3|BRISK_FAULT_INJECT=kill:2:300-300|137|69|(1, )?2||$DAG --injected --brisk-transport=mpi --brisk-failure-timeout-ms=400 ${COMMON[*]}
worker_killed_ucx_survived|3|BRISK_FAULT_INJECT=kill:2:300-300|137|0|2|dag failure test OK|$DAG --injected --brisk-transport=ucx --brisk-failure-timeout-ms=1000 ${COMMON[*]}
stuck_in_checkpoint|2|BRISK_FAULT_INJECT=stall-in-checkpoint:1:2-2|79|79||did not report its part within 2 s|$TPL --iterations=12 --brisk-transport=ucx --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir=$stall_dir --brisk-checkpoint-timeout=2 ${COMMON[*]}
EOF
}

# run_case NAME MODE RANKS ENV WANT LOST OUTPUT ARGS...: one run, checked.
run_case() {
  local name=$1 mode=$2 ranks=$3 env_var=$4 want=$5 lost=$6 output=$7
  shift 7
  local -a env_args=(env)
  [[ -n $env_var ]] && env_args+=("$env_var")
  local -a launch
  case $mode in
    mpirun) launch=("$MPIEXEC" --oversubscribe --bind-to none -n "$ranks") ;;
    launch) launch=("$LAUNCH" --np="$ranks") ;;
    keep-going) launch=("$LAUNCH" --keep-going --np="$ranks") ;;
  esac
  # --keep-going makes the ranks' status directory in here (and removes it).
  local status_dir=$work/status-$name-$mode out rc=0 t0=$SECONDS
  mkdir -p "$status_dir"
  checks=$((checks + 1))
  out=$(timeout "$RUN_TIMEOUT" "${env_args[@]}" BRISK_LAUNCH_STATUS_DIR="$status_dir" "${launch[@]}" "$@" 2>&1 </dev/null) || rc=$?
  if ((rc != want)); then
    fail "$name ($mode): exit code $rc, wanted $want; output:"
    printf '%s\n' "$out" | tail -n 25 | sed 's/^/  | /'
  elif [[ -n $output && $out != *"$output"* ]]; then
    fail "$name ($mode): the output does not contain '$output'; output:"
    printf '%s\n' "$out" | tail -n 25 | sed 's/^/  | /'
  elif [[ $mode == keep-going ]] && ! check_reports "$name" "$out" "$want" "$lost"; then
    :
  else
    log "$name ($mode): exit code $rc as wanted ($(elapsed "$t0") s)"
  fi
}

# check_reports NAME OUTPUT CODE LOST: the wrapper's summary line names CODE and the
# ranks that reported nothing, which must match LOST: the killed rank (on mpi, also
# ranks that MPI_Abort took down). Every other rank reported, and a rank that
# reported another non-zero code would have made the wrapper's code its own.
check_reports() {
  local name=$1 out=$2 code=$3 want_lost=$4 line
  line=$(grep -E '^brisk-launch: exit status [0-9]+: ' <<<"$out" | tail -n 1 || true)
  if [[ $line != "brisk-launch: exit status $code: "* ]]; then
    fail "$name (keep-going): no wrapper line 'brisk-launch: exit status $code: ...'; got '${line:-nothing}'"
    return 1
  fi
  local lost=""
  [[ $line =~ no\ report\ from\ \(lost\):\ rank\ ([0-9,\ ]+)$ ]] && lost=${BASH_REMATCH[1]}
  if [[ ! $lost =~ ^${want_lost}$ ]]; then
    fail "$name (keep-going): the ranks that reported nothing are '${lost:-none}', wanted /^${want_lost}$/: $line"
    return 1
  fi
}

local_checks() {
  local name ranks env_var want_mpirun want_keep lost output cmd mode
  while IFS='|' read -r name ranks env_var want_mpirun want_keep lost output cmd; do
    local -a args
    read -r -a args <<<"$cmd"
    for mode in mpirun launch; do
      run_case "$name" "$mode" "$ranks" "$env_var" "$want_mpirun" "$lost" "$output" "${args[@]}"
    done
    run_case "$name" keep-going "$ranks" "$env_var" "$want_keep" "$lost" "$output" "${args[@]}"
  done < <(cases)
}

# --- part 2: the local Slurm cluster ---

# The job completion record of the job named $1: "STATE EXITCODE" (sacct -c), once
# it is there.
job_record() {
  local name=$1 i line=""
  for ((i = 0; i < 100; i++)); do
    # (sacct -c ignores --name: filter here.)
    line=$(timeout 10 sacct -c -n -P --format=JobName,State,ExitCode 2>/dev/null | grep -F "$name|" | tail -n 1 || true)
    [[ -n $line ]] && break
    sleep 0.2
  done
  line=${line#*|}
  printf '%s\n' "${line/|/ }"
}

# sbatch_case NAME RANKS ENV WANT_STATE WANT_CODE OUTPUT [brisk-launch options] -- PROGRAM ARGS...
# Submits one job (one node); returns at once. check_sbatch_case checks it.
declare -A submitted=()
sbatch_case() {
  local name=$1 ranks=$2 env_var=$3 want_state=$4 want_code=$5 output=$6
  shift 6
  local job_name=$job_tag-$name export=ALL,BRISK_HOME=$ROOT
  [[ -n $env_var ]] && export+=",$env_var"
  sbatch --quiet --job-name="$job_name" --nodes=1 --ntasks-per-node="$ranks" --cpus-per-task=1 --time=3 \
    --chdir="$work" --output="$work/$name.out" --export="$export" "$SBATCH_TEMPLATE" "$@" >/dev/null ||
    { fail "$name: sbatch failed"; return 0; }
  submitted[$name]="$want_state $want_code|$output"
}

check_sbatch_cases() {
  local name want output job_name record i t0=$SECONDS
  for name in "${!submitted[@]}"; do
    want=${submitted[$name]%%|*}
    output=${submitted[$name]#*|}
    job_name=$job_tag-$name
    for ((i = 0; i < JOB_TIMEOUT * 2; i++)); do
      [[ -z $(squeue_ids "$job_name") ]] && break
      sleep 0.5
    done
    if [[ -n $(squeue_ids "$job_name") ]]; then
      fail "$name (sbatch): the job did not end within $JOB_TIMEOUT s"
      cancel_jobs "$job_name"
      continue
    fi
    checks=$((checks + 1))
    record=$(job_record "$job_name")
    if [[ $record != "$want:0" ]]; then
      fail "$name (sbatch): sacct -c says '${record:-nothing}', wanted '$want:0'; the job's output:"
      tail -n 25 "$work/$name.out" 2>/dev/null | sed 's/^/  | /'
    elif [[ -n $output ]] && ! grep -qF -- "$output" "$work/$name.out"; then
      fail "$name (sbatch): the job's output does not contain '$output':"
      tail -n 25 "$work/$name.out" 2>/dev/null | sed 's/^/  | /'
    else
      log "$name (sbatch): $record as wanted"
    fi
  done
  log "batch jobs checked ($(elapsed "$t0") s)"
}

# srun's PMIx plugin kills the step when a task dies: under --launcher=srun a worker
# rank's death ends the job, --keep-going or not (the wrapper warns at the start).
# The kill comes up to seconds after the death, so a short job may finish first: the
# status must then be 0 with every survivor's report of it, and a failure otherwise.
srun_keep_going_case() {
  local name=srun_worker_killed job_name=$job_tag-srun out rc=0 t0=$SECONDS
  checks=$((checks + 1))
  out=$(timeout "$JOB_TIMEOUT" env -u SLURM_JOB_ID SLURM_JOB_NAME="$job_name" BRISK_FAULT_INJECT=kill:2:300-300 \
        BRISK_LAUNCH_STATUS_DIR="$work" "$LAUNCH" --launcher=srun --keep-going --np=3 --ranks-per-node=3 \
        -- "$DAG" --injected --brisk-transport=ucx --brisk-failure-timeout-ms=1000 "${COMMON[@]}" 2>&1 </dev/null) || rc=$?
  local line
  line=$(grep -E '^brisk-launch: exit status [0-9]+: ' <<<"$out" | tail -n 1 || true)
  if ((rc == 124)) || [[ $out != *"srun's PMIx plugin kills the step"* ]]; then
    fail "$name: exit code $rc (wanted no timeout, and the wrapper's warning); output:"
    printf '%s\n' "$out" | tail -n 25 | sed 's/^/  | /'
    cancel_jobs "$job_name"
  elif ((rc == 0)) && [[ $out != *"dag failure test OK"* ||
         $line != "brisk-launch: exit status 0: rank 0: the driver returned 0; no report from (lost): rank 2" ]]; then
    fail "$name: exit code 0 without the job's success (the result and every survivor's report); output:"
    printf '%s\n' "$out" | tail -n 25 | sed 's/^/  | /'
  elif ((rc != 0)) && [[ $line != "brisk-launch: exit status $rc: "* ]]; then
    fail "$name: exit code $rc without the wrapper's line for it; got '${line:-nothing}'"
  elif ((rc == 0)); then
    log "$name: exit code 0: the job finished before srun ended the step ($(elapsed "$t0") s)"
  else
    log "$name: exit code $rc: srun ended the step ($(elapsed "$t0") s)"
  fi
}

cleanup() {
  local name
  if [[ -n $work ]]; then
    for name in "${!submitted[@]}"; do cancel_jobs "$job_tag-$name"; done
    cancel_jobs "$job_tag-srun"
  fi
  if ((started_cluster)); then
    "$HERE/stop_cluster.sh" >/dev/null 2>&1 || log "stop_cluster.sh failed"
  fi
  [[ -n $work && -d $work ]] && rm -rf "$work"
  return 0
}

cluster_checks() {
  local rc=0
  start_cluster || rc=$?
  ((rc == 77)) && return 77
  local kill2=BRISK_FAULT_INJECT=kill:2:300-300 kill0=BRISK_FAULT_INJECT=kill:0:300-300
  local ucx=(--brisk-transport=ucx --brisk-failure-timeout-ms=1000 "${COMMON[@]}")
  sbatch_case returns_3 2 "" FAILED 3 "sum of squares 328350" -- "$RUN" --exit=3 "${COMMON[@]}"
  sbatch_case throws_keep_going 2 "" FAILED 1 "driver failure on purpose" --keep-going -- "$RUN" --throw "${COMMON[@]}"
  sbatch_case worker_killed_survived 3 "$kill2" COMPLETED 0 "dag failure test OK" \
    --keep-going -- "$DAG" --injected "${ucx[@]}"
  sbatch_case driver_killed 3 "$kill0" FAILED 69 "brisk-launch: exit status 69" \
    --keep-going -- "$DAG" --injected "${ucx[@]}"
  sbatch_case succeeds 2 "" COMPLETED 0 "sum of squares 328350" --keep-going -- "$RUN" "${COMMON[@]}"
  check_sbatch_cases
  srun_keep_going_case
}

main() {
  local cluster=1 build_dir="" mpiexec=""
  while (($#)); do
    case $1 in
      --no-cluster) cluster=0 ;;
      -*) usage_error "unknown option '$1'" ;;
      *)
        if [[ -z $build_dir ]]; then build_dir=$1
        elif [[ -z $mpiexec ]]; then mpiexec=$1
        else usage_error "unexpected argument '$1'"
        fi ;;
    esac
    shift
  done
  [[ -n $build_dir && -n $mpiexec ]] || usage_error "BUILD_DIR and MPIEXEC are required"
  build_dir=$(cd "$build_dir" && pwd)
  RUN=$build_dir/tests/brisk_run_program
  DAG=$build_dir/tests/dag_failure_test
  TPL=$build_dir/tests/template_checkpoint_test
  MPIEXEC=$mpiexec
  local p
  for p in "$RUN" "$DAG" "$TPL"; do [[ -x $p ]] || { log "FAIL: $p is not built"; exit 1; }; done
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  work=$(mktemp -d /tmp/brisk-exit-status-test.XXXXXX)
  chmod 755 "$work"
  local t0=$SECONDS
  if ((cluster)); then
    local rc=0
    cluster_checks || rc=$?
    if ((rc == 77)); then
      log "SKIP: no local Slurm cluster could be started (see above)"
      exit 77
    fi
  else
    local_checks
  fi
  if ((failures)); then
    log "FAILED: $failures of $checks checks ($(elapsed "$t0") s)"
    exit 1
  fi
  log "PASSED: $checks checks ($(elapsed "$t0") s)"
}

main "$@"
