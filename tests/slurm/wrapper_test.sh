#!/usr/bin/env bash
# wrapper_test.sh [--no-cluster] BUILD_DIR
#
# Tests slurm/brisk-launch and slurm/brisk.sbatch.
#  1. --dry-run output for launches outside and inside a Slurm allocation (the
#     allocation is faked with SLURM_* variables) and the error messages for bad
#     options. Needs nothing but bash.
#  2. Unless --no-cluster: starts the local Slurm cluster (tests/slurm/local_cluster.sh:
#     nodes n1, n2) and runs BUILD_DIR/tests/brisk_run_program on 2 nodes x 2 ranks
#     through `sbatch --wait` with the template (srun inside the job, then mpirun
#     inside the job) and through the wrapper's srun. Every step runs under `timeout`.
#     The cluster is stopped again if this script started it.
#
# Exit codes: 0 passed; 1 failed; 2 bad usage; 77 the dry-run checks passed but the
# cluster part was skipped (not root, or the Slurm packages cannot be installed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LAUNCH=$ROOT/slurm/brisk-launch
SBATCH_TEMPLATE=$ROOT/slurm/brisk.sbatch
readonly HERE ROOT LAUNCH SBATCH_TEMPLATE
readonly EXPECTED="sum of squares 328350"
# Worst case: setup + 3 x (step + cancel) stays under 3 minutes. sbatch --wait polls
# the job 2 s after submission, then 8 s later, then 32 s later: a job of the few
# seconds these take returns after 2 or 10 s.
readonly SETUP_TIMEOUT=60 JOB_TIMEOUT=25 CANCEL_TIMEOUT=10

failures=0
checks=0
started_cluster=0
work=""
job_tag="brisk-wrapper-test-$$"

readonly TEST_NAME=wrapper_test.sh
# The program's flags. 4 ranks of 2 CPUs each share the 2 cores with whatever else
# runs: a rank can be starved of CPU for seconds, which the default 2 s failure
# timeout would take for a hung rank. This test checks the launch, not the detector.
readonly PROG_ARGS=(--brisk-idle=sleep --brisk-failure-timeout-ms=20000)
# log, fail, elapsed, cancel_jobs, cluster_running, start_cluster
# shellcheck source=tests/slurm/test_lib.sh
source "$HERE/test_lib.sh"

usage_error() {
  printf 'wrapper_test.sh: %s\nusage: wrapper_test.sh [--no-cluster] BUILD_DIR\n' "$*" >&2
  exit 2
}

# The SLURM_*/SRUN_* variables of the calling environment (when this runs inside a
# job), and the variables the wrapper reads, are removed for every dry-run case.
scrubbed_env() {
  local -a unset_args=()
  local name
  while IFS= read -r name; do
    unset_args+=(-u "$name")
  done < <(compgen -e | grep -E '^(SLURM_|SRUN_|BRISK_LAUNCH_|BRISK_TRANSPORT$|OMPI_MCA_mpi_yield_when_idle$)' || true)
  ((${#unset_args[@]} == 0)) || printf '%s\0' "${unset_args[@]}"
}

# expect_line NAME EXPECTED [VAR=VALUE...] -- brisk-launch ARGS...
# Runs brisk-launch --dry-run with the given environment; it must exit 0 and its one
# line on stdout must equal EXPECTED (warnings on stderr are not compared).
expect_line() {
  local name=$1 expected=$2
  shift 2
  local -a vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  local out rc=0
  local -a scrub
  mapfile -d '' -t scrub < <(scrubbed_env)
  checks=$((checks + 1))
  out=$(env "${scrub[@]}" "${vars[@]}" "$LAUNCH" --dry-run "$@" 2>/dev/null) || rc=$?
  if ((rc != 0)); then
    fail "$name: exit code $rc, wanted 0; output: $out"
  elif [[ $out != "$expected" ]]; then
    fail "$name:"$'\n'"  got:    $out"$'\n'"  wanted: $expected"
  fi
}

# expect_error NAME RC MESSAGE [VAR=VALUE...] -- COMMAND...
# COMMAND must exit with RC and print MESSAGE (a fixed string) on stderr.
expect_error() {
  local name=$1 want_rc=$2 message=$3
  shift 3
  local -a vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  local out rc=0
  local -a scrub
  mapfile -d '' -t scrub < <(scrubbed_env)
  checks=$((checks + 1))
  out=$(env "${scrub[@]}" "${vars[@]}" "$@" 2>&1 >/dev/null) || rc=$?
  if ((rc != want_rc)); then
    fail "$name: exit code $rc, wanted $want_rc; stderr: $out"
  elif [[ $out != *"$message"* ]]; then
    fail "$name: stderr does not contain '$message'; stderr: $out"
  fi
}

dry_run_checks() {
  local t0=$SECONDS root="" yield=OMPI_MCA_mpi_yield_when_idle=1
  ((EUID == 0)) && root="--allow-run-as-root "
  local out2=BRISK_LAUNCH_CORES_PER_NODE=2 out4=BRISK_LAUNCH_CORES_PER_NODE=4
  local alloc=(SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS_PER_NODE=2 SLURM_TASKS_PER_NODE='2(x2)' SLURM_CPUS_ON_NODE=4)

  # Outside an allocation: mpirun on this machine, binding always explicit.
  expect_line "default: one rank, all cores" "mpirun ${root}-np 1 --bind-to none ./app" $out2 -- ./app
  expect_line "two ranks are never left to Open MPI's one-core binding" \
    "mpirun ${root}-np 2 --bind-to none ./app a b" $out2 -- --np=2 ./app a b
  expect_line "cores per rank that fit: PE binding" \
    "mpirun ${root}-np 1 --map-by slot:PE=2 --bind-to core ./app" $out2 -- --np=1 --cores-per-rank=2 ./app
  expect_line "cores per rank that do not fit: no binding" \
    "mpirun ${root}-np 2 --bind-to none ./app" $out2 -- --np=2 --cores-per-rank=2 ./app
  expect_line "two ranks of two cores on four cores" \
    "mpirun ${root}-np 2 --map-by slot:PE=2 --bind-to core ./app" $out4 -- --np=2 --cores-per-rank=2 ./app
  expect_line "ranks per node with cores per rank" \
    "mpirun ${root}-np 2 --map-by ppr:2:node:PE=2 --bind-to core ./app" $out4 -- --ranks-per-node=2 --cores-per-rank=2 ./app
  expect_line "option values as separate words" \
    "mpirun ${root}-np 2 --map-by ppr:2:node:PE=2 --bind-to core ./app" $out4 -- --ranks-per-node 2 --cores-per-rank 2 ./app
  expect_line "oversubscribed: yield when idle and --oversubscribe" \
    "env $yield mpirun ${root}-np 4 --bind-to none --oversubscribe ./app" $out2 -- --np=4 ./app
  expect_line "oversubscribed, the user's yield setting kept" \
    "mpirun ${root}-np 4 --bind-to none --oversubscribe ./app" $out2 OMPI_MCA_mpi_yield_when_idle=0 -- --np=4 ./app
  expect_line "transport ucx" "mpirun ${root}-np 1 --bind-to none ./app --brisk-transport=ucx x" $out2 -- --transport=ucx ./app x
  expect_line "transport mpi" "mpirun ${root}-np 1 --bind-to none ./app --brisk-transport=mpi" $out2 -- --transport mpi ./app
  # --keep-going: the ranks report their exit status into a directory made at launch.
  local status_tmp="env BRISK_STATUS_DIR=${TMPDIR:-/tmp}/brisk-status.XXXXXX"
  local status_here="env BRISK_STATUS_DIR=$PWD/brisk-status.XXXXXX"
  local recovery="--enable-recovery --mca orte_abort_on_non_zero_status 0 -x BRISK_STATUS_DIR"
  expect_line "keep going with mpirun" \
    "$status_tmp mpirun ${root}-np 2 --bind-to none $recovery ./app" $out2 -- --keep-going --np=2 ./app
  expect_line "keep going, the status directory where asked" \
    "env BRISK_STATUS_DIR=/scratch/x/brisk-status.XXXXXX mpirun ${root}-np 2 --bind-to none $recovery ./app" \
    $out2 BRISK_LAUNCH_STATUS_DIR=/scratch/x -- --keep-going --np=2 ./app
  expect_line "program arguments after --, quoted" \
    "mpirun ${root}-np 1 --bind-to none ./app --np=3 a\\ b" $out2 -- -- ./app --np=3 'a b'
  expect_line "srun outside an allocation" "srun --mpi=pmix -n 4 --ntasks-per-node=2 ./app" -- --launcher=srun --np=4 --ranks-per-node=2 ./app
  expect_line "this machine's cores when not told" "mpirun ${root}-np 1 --bind-to none ./app" -- ./app

  # Inside an allocation: srun --mpi=pmix.
  expect_line "allocation: srun with the allocation's layout" "srun --mpi=pmix ./app" "${alloc[@]}" -- ./app
  expect_line "allocation: -c passed on (srun 22.05 ignores SLURM_CPUS_PER_TASK)" \
    "srun --mpi=pmix -c 2 --cpu-bind=cores ./app" "${alloc[@]}" SLURM_CPUS_PER_TASK=2 -- ./app
  expect_line "allocation: SRUN_CPUS_PER_TASK already set" \
    "srun --mpi=pmix ./app" "${alloc[@]}" SLURM_CPUS_PER_TASK=2 SRUN_CPUS_PER_TASK=2 -- ./app
  # Keeping going in an allocation: mpirun (srun's PMIx plugin kills the step when a
  # task dies), or srun when asked for, with a warning on stderr.
  expect_line "allocation: explicit layout, keep going" \
    "$status_here mpirun ${root}-np 4 --map-by ppr:2:node:PE=1 --bind-to core $recovery ./app --brisk-transport=ucx" \
    "${alloc[@]}" $out2 -- --np=4 --ranks-per-node=2 --cores-per-rank=1 --keep-going --transport=ucx ./app
  expect_line "allocation: keep going with srun when asked" \
    "$status_here srun --mpi=pmix -n 4 --ntasks-per-node=2 -c 1 --cpu-bind=cores --kill-on-bad-exit=0 --no-kill ./app" \
    "${alloc[@]}" -- --launcher=srun --np=4 --ranks-per-node=2 --cores-per-rank=1 --keep-going ./app
  expect_error "allocation: keep going with srun warns" 0 "srun's PMIx plugin kills the step" \
    "${alloc[@]}" -- "$LAUNCH" --dry-run --launcher=srun --keep-going ./app
  expect_line "allocation: ranks per node on every node" \
    "srun --mpi=pmix -n 6 --ntasks-per-node=2 ./app" "${alloc[@]}" SLURM_JOB_NUM_NODES=3 -- --ranks-per-node=2 ./app
  expect_line "allocation: more ranks than CPUs on the node" \
    "env $yield srun --mpi=pmix ./app" "${alloc[@]}" SLURM_CPUS_ON_NODE=1 -- ./app
  expect_line "allocation: mpirun with PE binding" \
    "mpirun ${root}--map-by slot:PE=2 --bind-to core ./app" "${alloc[@]}" SLURM_CPUS_PER_TASK=2 $out4 -- --launcher=mpirun ./app
  expect_line "allocation: mpirun, cores per rank do not fit" \
    "mpirun ${root}--bind-to none ./app" "${alloc[@]}" SLURM_CPUS_PER_TASK=2 $out2 -- --launcher=mpirun ./app
  expect_line "allocation: keep going" \
    "$status_here mpirun ${root}--bind-to none $recovery ./app" "${alloc[@]}" -- --keep-going ./app

  # Errors name what was wrong.
  local empty
  empty=$(mktemp -d)
  expect_error "bad --np" 2 "invalid value '0' for --np: expected a positive integer" -- "$LAUNCH" --np=0 ./app
  expect_error "bad --launcher" 2 "invalid value 'pbs' for --launcher: expected one of auto, srun, mpirun" -- "$LAUNCH" --launcher=pbs ./app
  expect_error "bad --transport" 2 "invalid value 'tcp' for --transport: expected one of ucx, mpi" -- "$LAUNCH" --transport=tcp ./app
  expect_error "bad --cores-per-rank" 2 "invalid value 'two' for --cores-per-rank" -- "$LAUNCH" --cores-per-rank=two ./app
  expect_error "unknown option" 2 "unknown option '--frobnicate'" -- "$LAUNCH" --frobnicate ./app
  expect_error "missing value" 2 "option --ranks-per-node needs a value" -- "$LAUNCH" --ranks-per-node
  expect_error "empty value" 2 "option --np needs a value" -- "$LAUNCH" --np= ./app
  expect_error "flag with a value" 2 "option --dry-run takes no value" -- "$LAUNCH" --dry-run=yes ./app
  expect_error "no program" 2 "no program given" -- "$LAUNCH" --np=2
  expect_error "bad BRISK_LAUNCH_CORES_PER_NODE" 2 "invalid value 'lots' for BRISK_LAUNCH_CORES_PER_NODE" \
    BRISK_LAUNCH_CORES_PER_NODE=lots -- "$LAUNCH" --dry-run ./app
  expect_error "missing program" 1 "program './no/such/program' is not an executable file" -- "$LAUNCH" ./no/such/program
  expect_error "missing launcher" 1 "srun not found on PATH" PATH="$empty" -- /bin/bash "$LAUNCH" --launcher=srun /bin/true
  expect_error "template without a program" 2 "brisk.sbatch: no program given" -- /bin/bash "$SBATCH_TEMPLATE"
  expect_error "template with a bad BRISK_HOME" 2 "BRISK_HOME=$empty holds neither" BRISK_HOME="$empty" -- /bin/bash "$SBATCH_TEMPLATE" ./app
  rmdir "$empty"

  # --help, and the template finding the wrapper from the submit directory.
  checks=$((checks + 1))
  "$LAUNCH" --help | grep -q '^usage: brisk-launch' || fail "--help does not print the usage"
  checks=$((checks + 1))
  local out scrub
  mapfile -d '' -t scrub < <(scrubbed_env)
  out=$(env "${scrub[@]}" SLURM_SUBMIT_DIR="$ROOT" SLURM_JOB_ID=42 SLURM_JOB_NODELIST='n[1-2]' /bin/bash "$SBATCH_TEMPLATE" --dry-run ./app 2>&1) ||
    fail "template --dry-run failed: $out"
  [[ $out == *"brisk.sbatch: job 42 on n[1-2]"*"srun --mpi=pmix ./app"* ]] || fail "template --dry-run output: $out"
  log "dry-run checks: $checks run, $failures failed ($(elapsed "$t0") s)"
}

# Cancels the jobs named $1 and waits until they are gone: job processes outlive a
# stopped slurmd, and a job left running would block the next step.
cleanup() {
  local name
  if [[ -n $work ]]; then
    for name in sbatch-srun sbatch-mpirun srun; do cancel_jobs "$job_tag-$name"; done
  fi
  if ((started_cluster)); then
    "$HERE/stop_cluster.sh" >/dev/null 2>&1 || log "stop_cluster.sh failed"
  fi
  [[ -n $work && -d $work ]] && rm -rf "$work"
  return 0
}

# check_output NAME FILE RC: the run exited 0 and printed the result exactly once.
check_output() {
  local name=$1 file=$2 rc=$3 count
  checks=$((checks + 1))
  count=$(grep -c "$EXPECTED" "$file" 2>/dev/null || true)
  if ((rc != 0)) || [[ $count != 1 ]]; then
    fail "$name: exit code $rc (wanted 0), '$EXPECTED' printed ${count:-0} times (wanted 1); output:"
    sed 's/^/  | /' "$file" 2>/dev/null || true
    return 1
  fi
}

# check_nodes NAME JOB_NAME: the job ran on n1 and n2 (from the job completion log).
check_nodes() {
  local name=$1 job_name=$2 line="" i
  checks=$((checks + 1))
  for ((i = 0; i < 50; i++)); do
    line=$(grep "Name=$job_name " /tmp/slurm-local/log/jobcomp.log 2>/dev/null | tail -n 1 || true)
    [[ -n $line ]] && break
    sleep 0.1
  done
  [[ $line == *"JobState=COMPLETED"* && $line == *"NodeList=n[1-2]"* ]] ||
    fail "$name: job '$job_name' did not complete on n[1-2]; jobcomp.log: ${line:-<no entry>}"
}

# sbatch_run NAME WANTED_COMMAND [brisk-launch options]: one job through the template,
# 2 nodes x 2 ranks x 2 CPUs; the job's log must show brisk-launch running WANTED_COMMAND.
sbatch_run() {
  local name=$1 want_cmd=$2 t0=$SECONDS rc=0
  shift 2
  local job_name=$job_tag-$name out=$work/$name.out
  timeout "$JOB_TIMEOUT" sbatch --wait --quiet --job-name="$job_name" --nodes=2 --ntasks-per-node=2 \
    --cpus-per-task=2 --time=2 --chdir="$work" --output="$out" --export=ALL,BRISK_HOME="$ROOT" \
    "$SBATCH_TEMPLATE" "$@" -- "$PROG" "${PROG_ARGS[@]}" >"$work/$name.sbatch" 2>&1 || rc=$?
  if ((rc == 124)); then
    fail "$name: sbatch --wait did not return within $JOB_TIMEOUT s"
    cancel_jobs "$job_name"
  fi
  cat "$work/$name.sbatch" >>"$out" 2>/dev/null || true
  if check_output "$name" "$out" "$rc"; then
    checks=$((checks + 1))
    grep -qF "brisk-launch: $want_cmd" "$out" || fail "$name: the job did not run '$want_cmd ...'; output: $(cat "$out")"
    check_nodes "$name" "$job_name"
  fi
  log "$name: exit code $rc ($(elapsed "$t0") s)"
}

srun_run() {
  local name=srun t0=$SECONDS rc=0
  local job_name=$job_tag-$name out=$work/$name.out
  local -a scrub
  mapfile -d '' -t scrub < <(scrubbed_env)
  # The wrapper starts its own allocation: 4 ranks, 2 per node.
  timeout "$JOB_TIMEOUT" env "${scrub[@]}" SLURM_JOB_NAME="$job_name" \
    "$LAUNCH" --verbose --launcher=srun --np=4 --ranks-per-node=2 -- "$PROG" "${PROG_ARGS[@]}" >"$out" 2>&1 || rc=$?
  if ((rc == 124)); then
    fail "$name: srun did not return within $JOB_TIMEOUT s"
    cancel_jobs "$job_name"
  fi
  if check_output "$name" "$out" "$rc"; then
    check_nodes "$name" "$job_name"
  fi
  log "$name: exit code $rc ($(elapsed "$t0") s)"
}

cluster_checks() {
  local rc=0
  start_cluster || rc=$?
  ((rc == 77)) && return 77
  work=$(mktemp -d /tmp/brisk-wrapper-test.XXXXXX)
  chmod 755 "$work"
  sbatch_run sbatch-srun "srun --mpi=pmix -c 2 --cpu-bind=cores $PROG"
  local root=""
  ((EUID == 0)) && root="--allow-run-as-root "
  sbatch_run sbatch-mpirun "mpirun ${root}--bind-to none $PROG" --launcher=mpirun
  srun_run
}

main() {
  local cluster=1 build_dir=""
  while (($#)); do
    case $1 in
      --no-cluster) cluster=0 ;;
      -*) usage_error "unknown option '$1'" ;;
      *) [[ -z $build_dir ]] || usage_error "more than one BUILD_DIR given ('$build_dir', '$1')"; build_dir=$1 ;;
    esac
    shift
  done
  local t0=$SECONDS
  dry_run_checks
  if ((failures)); then
    log "FAILED: $failures of $checks checks"
    exit 1
  fi
  ((cluster)) || { log "PASSED ($checks checks, cluster part not requested)"; exit 0; }

  [[ -n $build_dir ]] || usage_error "BUILD_DIR missing (needed for the cluster part)"
  PROG=$(cd "$build_dir" 2>/dev/null && pwd)/tests/brisk_run_program
  [[ -x $PROG ]] || { log "FAIL: $build_dir/tests/brisk_run_program is not built"; exit 1; }
  readonly PROG
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local rc=0
  cluster_checks || rc=$?
  if ((rc == 77)); then
    log "SKIP: the dry-run checks passed, but no local Slurm cluster could be started (see above)"
    exit 77
  fi
  if ((failures)); then
    log "FAILED: $failures of $checks checks ($(elapsed "$t0") s)"
    exit 1
  fi
  log "PASSED: $checks checks ($(elapsed "$t0") s)"
}

main "$@"
