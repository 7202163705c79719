#!/usr/bin/env bash
# Restart from a checkpoint gives the uninterrupted result, and a truncated newest
# checkpoint is skipped with a message.
#   checkpoint_restart.sh PROGRAM SCRATCH MPIEXEC [transport]
set -uo pipefail
prog=$1 scratch=$2 mpiexec=$3 transport=${4:-mpi}
run() { timeout 60 "$mpiexec" --oversubscribe --bind-to none -n 2 "$prog" --brisk-transport="$transport" "$@" 2>&1; }
fail() { echo "checkpoint restart test FAILED: $*"; exit 1; }
# killed_status, killed_run LOG ARGS...
# shellcheck source=tests/fault/restart_lib.sh
source "$(dirname "$0")/restart_lib.sh"
rm -rf "$scratch" && mkdir -p "$scratch"

out=$(run --brisk-checkpoint-dir="$scratch/whole") || fail "the uninterrupted run exited with $?: $out"
whole=$(grep "final sum" <<<"$out") || fail "the uninterrupted run printed no sum: $out"
echo "uninterrupted: $whole"

killed_run "$scratch/a.log" --brisk-checkpoint-dir="$scratch/a" --die-at=4
grep -q "dying after checkpoint 4" "$scratch/a.log" || fail "the first run did not die after checkpoint 4"
grep -q "final sum" "$scratch/a.log" && fail "the first run finished"
out=$(run --brisk-checkpoint-dir="$scratch/a" --brisk-restore=latest) || fail "the restarted run exited with $?: $out"
grep -q "resuming at step 4" <<<"$out" || fail "no resume at step 4: $out"
[ "$(echo "$out" | grep "final sum")" = "$whole" ] || fail "restarted: $(echo "$out" | grep "final sum"), expected $whole"
echo "killed (exit $killed_status) after checkpoint 4, restarted (exit 0): same sum"

killed_run "$scratch/b.log" --brisk-checkpoint-dir="$scratch/b" --die-at=6
newest="$scratch/b/ckpt-000006.h5"
[ -f "$newest" ] || fail "no $newest"
truncate -s 1000 "$newest"
out=$(run --brisk-checkpoint-dir="$scratch/b" --brisk-restore=latest) || fail "the run restarted past a truncated checkpoint exited with $?: $out"
grep -q "skipped checkpoint .*ckpt-000006.h5" <<<"$out" || fail "the truncated checkpoint was not reported: $out"
grep -q "resuming at step 5" <<<"$out" || fail "no resume at step 5: $out"
[ "$(echo "$out" | grep "final sum")" = "$whole" ] || fail "after the skip: $(echo "$out" | grep "final sum"), expected $whole"
echo "truncated newest checkpoint skipped, restarted from 5: same sum"

out=$(run --brisk-checkpoint-dir="$scratch/c" --on-request --signal-at=3 --steps=6) || fail "the signalled run exited with $?: $out"
grep -q "checkpoint 1 at step 3" <<<"$out" || fail "SIGUSR1 did not request a checkpoint at step 3: $out"
[ "$(ls "$scratch/c" | grep -c '^ckpt-[0-9]*\.h5$')" = 1 ] || fail "expected one checkpoint in $scratch/c: $(ls "$scratch/c")"
echo "SIGUSR1 requested one checkpoint"

# With --brisk-checkpoint-exit the signalled checkpoint ends the job (exit 75, for a
# requeue) and the rerun finishes with the uninterrupted sum.
rc=0
out=$(run --brisk-checkpoint-dir="$scratch/d" --on-request --signal-at=3 --brisk-checkpoint-exit=on) || rc=$?
[ "$rc" -eq 75 ] || fail "the signalled checkpoint ended the job with $rc, wanted 75: $out"
grep -q "final sum" <<<"$out" && fail "the job went on after the signalled checkpoint: $out"
out=$(run --brisk-checkpoint-dir="$scratch/d" --on-request --brisk-checkpoint-exit=on --brisk-restore=latest) ||
  fail "the rerun after the checkpoint exit exited with $?: $out"
grep -q "resuming at step 3" <<<"$out" || fail "no resume at step 3 after the checkpoint exit: $out"
[ "$(echo "$out" | grep "final sum")" = "$whole" ] || fail "after the checkpoint exit: $(echo "$out" | grep "final sum"), expected $whole"
echo "signalled checkpoint ended the job with 75; the rerun finished with the same sum"

rc=0
out=$(run --brisk-checkpoint-dir="$scratch/none" --brisk-restore=latest) || rc=$?
[ "$rc" -eq 2 ] || fail "restoring from an empty directory exited with $rc, wanted 2: $out"
grep -q "brisk: cannot restore" <<<"$out" || fail "restoring from an empty directory did not fail clearly: $out"
echo "checkpoint restart test OK"
