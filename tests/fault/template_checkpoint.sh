#!/usr/bin/env bash
# template_checkpoint.sh PROGRAM SCRATCH MPIEXEC [transport]
# Checkpoints taken by the runtime every 3 template instantiations; a run killed
# after iteration 7 restarts from the checkpoint taken before iteration 5 and ends
# with the uninterrupted run's checksum, with templates on and off. On ucx, a rank
# killed mid-run rolls the job back onto the survivors, and the recorded block is
# edited to run there.
set -uo pipefail
prog=$1 scratch=$2 mpiexec=$3 transport=${4:-mpi}
launch=$(cd "$(dirname "$0")/../.." && pwd)/slurm/brisk-launch
run() {  # run ARGS...
  timeout 120 "$mpiexec" --oversubscribe --bind-to none -n 2 "$prog" --iterations=12 --brisk-transport="$transport" "$@" 2>&1
}
fail() { echo "template checkpoint test FAILED: $*"; exit 1; }
# killed_status, killed_run LOG ARGS...
# shellcheck source=tests/fault/restart_lib.sh
source "$(dirname "$0")/restart_lib.sh"
rm -rf "$scratch" && mkdir -p "$scratch"

out=$(run) || fail "the uninterrupted run exited with $?: $out"
whole=$(grep '^checksum' <<<"$out") || fail "the uninterrupted run printed no checksum: $out"
# (grep -q reads a captured output: under pipefail, a writer cut off by grep's early
# exit would fail the pipeline.)
out=$(run --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir="$scratch/all") ||
  fail "the checkpointed run exited with $?: $out"
grep -q "^$whole" <<<"$out" || fail "checkpoints changed the result"
[ "$(ls "$scratch/all" | grep -c '^ckpt-[0-9]*\.h5$')" -eq 3 ] || fail "expected the last 3 of 4 checkpoints: $(ls "$scratch/all")"

for templates in on off; do
  dir="$scratch/killed-$templates"
  killed_run "$scratch/killed.log" --die-after=7 --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir="$dir" \
             --brisk-templates=$templates
  grep -q '^checksum' "$scratch/killed.log" && fail "the killed run finished"
  out=$(run --brisk-checkpoint-dir="$dir" --brisk-restore=latest --brisk-templates=$templates) ||
    fail "templates $templates: the restarted run exited with $?: $out"
  grep -q "resuming at iteration 5" <<<"$out" || fail "templates $templates: no resume at iteration 5: $out"
  grep -q "differs from the one in checkpoint" <<<"$out" && fail "templates $templates: the same block was reported different: $out"
  grep -q "^$whole" <<<"$out" || fail "templates $templates: $(echo "$out" | grep '^checksum'), expected $whole"
  echo "templates $templates: killed after iteration 7 (exit $killed_status), resumed at 5 (exit 0), $whole"
done
# SIGUSR1 (as Slurm sends before a time limit) with --brisk-checkpoint-instantiations:
# a checkpoint before the next instantiation, whatever the count.
dir="$scratch/signalled"
killed_run "$scratch/killed.log" --die-after=7 --signal-at=4 --brisk-checkpoint-instantiations=1000 --brisk-checkpoint-dir="$dir"
[ "$(ls "$dir" | grep -c '^ckpt-[0-9]*\.h5$')" -eq 1 ] || fail "expected one checkpoint after the signal: $(ls "$dir")"
out=$(run --brisk-checkpoint-dir="$dir" --brisk-restore=latest) || fail "signalled: the restarted run exited with $?: $out"
grep -q "resuming at iteration 4" <<<"$out" || fail "signalled: no resume at iteration 4: $out"
grep -q "^$whole" <<<"$out" || fail "signalled: $(echo "$out" | grep '^checksum'), expected $whole"
echo "SIGUSR1 before iteration 4: checkpointed there, resumed there, $whole"
# A restart that records another block than the run that wrote the checkpoint (the
# template definitions are in it) is told so.
out=$(run --brisk-checkpoint-dir="$scratch/killed-on" --brisk-restore=latest --neighbour=2) ||
  fail "the restart with another block exited with $?: $out"
grep -q "template 'step' differs from the one in checkpoint .*task 0 ('step') declares other partitions" <<<"$out" ||
  fail "a different block at the restart was not reported: $out"
echo "another block at the restart: reported"
if [ "$transport" = ucx ]; then
  # Rank 2 of 3 SIGKILLed at its 15th data task (iteration 6): the job rolls back to
  # the last checkpoint on the 2 survivors, and the driver, run again, places its data
  # sets over those 2 (brisk::data_ranks()).
  # Launched as a job that runs through a rank's death is: brisk-launch --keep-going
  # (mpirun with recovery, whose own status is 0 whatever happened), which exits with
  # the job's status from every surviving rank's report.
  killed() {  # killed INJECTION ARGS...: 3 ranks, rank 2 killed; sets out
    local inject=$1 rc=0; shift
    out=$(BRISK_FAULT_INJECT=$inject timeout 120 "$launch" --keep-going --np=3 -- "$prog" --iterations=12 \
          --brisk-transport=ucx "$@" 2>&1 </dev/null) || rc=$?
    [ "$rc" -eq 0 ] || fail "$inject: the job ended with $rc: $out"
    grep -q "^brisk-launch: exit status 0: rank 0: the driver returned 0; no report from (lost): rank 2$" <<<"$out" ||
      fail "$inject: not every rank but the killed one reported 0: $out"
    grep -q "rank 2: BRISK_FAULT_INJECT kills this rank now" <<<"$out" || fail "$inject: rank 2 was not killed: $out"
    [ "$(grep -c "was lost while the job used data objects" <<<"$out")" -eq 1 ] ||
      fail "$inject: expected exactly one rollback: $out"
    grep -q "the data plane now has 2 ranks, processes 0, 1)" <<<"$out" || fail "$inject: no rollback onto the 2 survivors: $out"
    grep -q "^data ranks 2 of 3$" <<<"$out" || fail "$inject: the driver did not place its data over the survivors: $out"
    grep -q "^$whole" <<<"$out" || fail "$inject: $(grep '^checksum' <<<"$out"), expected $whole"
  }
  killed kill-at-task:2:15-15 --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir="$scratch/shrink"
  grep -q "the driver runs again from .*ckpt-" <<<"$out" || fail "not rolled back to a checkpoint: $out"
  grep -q "resuming at iteration [1-9]" <<<"$out" || fail "the rerun did not resume from the checkpoint: $out"
  # The block's 6 tasks ran on ranks 0 0 1 1 2 2; over the survivors its partitions
  # live on 0 0 0 1 1 1: the template is kept and edited, moving 3 tasks.
  grep -q "template 'step' taken over from before the rollback by an edit: 3 of 6 tasks moved" <<<"$out" ||
    fail "the template was not taken over by an edit: $out"
  echo "rank 2 of 3 killed at a data task: rolled back onto the 2 survivors, $whole"
  # Lost before the first data set (killed at the start, the driver pausing 1 s): the
  # first DataSet starts the rollback, and the rerun places everything over 2 ranks.
  killed kill:2:0-0 --pause-ms=1000
  grep -q "the driver runs again from the beginning" <<<"$out" || fail "not run again from the beginning: $out"
  echo "rank 2 of 3 killed before the first data set: the driver ran again over the 2 survivors, $whole"
  # Rank 1's main thread stops for good in its part of checkpoint 2 (a hung file
  # system): rank 0 gives that checkpoint up after --brisk-checkpoint-timeout (its
  # shards deleted, checkpoint 1 still the last), the driver's checkpoint throws,
  # and the job ends with exit code 79 (a stuck rank given up on) instead of
  # waiting for ever.
  rc=0
  out=$(BRISK_FAULT_INJECT=stall-in-checkpoint:1:2-2 timeout 120 "$mpiexec" --oversubscribe --bind-to none -n 2 "$prog" \
        --iterations=12 --brisk-transport=ucx --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir="$scratch/stalled" \
        --brisk-checkpoint-timeout=2 2>&1) || rc=$?
  [ "$rc" -eq 79 ] || fail "stalled part: the job ended with $rc (wanted 79): $out"
  grep -q "checkpoint 2 failed: rank 1 did not report its part within 2 s (--brisk-checkpoint-timeout); the attempt's shards are deleted, and .*ckpt-000001.h5 stays the last checkpoint" <<<"$out" ||
    fail "stalled part: no message naming the late rank and the last checkpoint: $out"
  ls "$scratch/stalled" | grep -q '^ckpt-000002' && fail "stalled part: checkpoint 2 left files: $(ls "$scratch/stalled")"
  echo "rank 1's part of checkpoint 2 stalled: checkpoint given up after 2 s, the job ended with $rc"
fi
echo "template checkpoint test OK"
