#!/usr/bin/env bash
# physbam_restart.sh PROGRAM SCRATCH MPIEXEC [transport]
# physbam_brisk checkpoints its data objects (the blocks and every partition ever
# written) after each frame; a run restarted from a checkpoint, on the same or on
# another number of ranks, with templates on or off, prints the same frames as an
# uninterrupted run; a truncated newest checkpoint is skipped for the one before.
# With ucx, a rank SIGKILLed mid-run (BRISK_FAULT_INJECT) ends the job at once with
# a message naming the last checkpoint, and the restart from it ends like the
# uninterrupted run.
set -uo pipefail
prog=$1 scratch=$2 mpiexec=$3 transport=${4:-mpi}
args=(--grid=20 --blocks=2 --frame-dt=0.08 --quiet --brisk-transport="$transport")
run() {  # run RANKS ARGS...
  local n=$1; shift
  timeout 120 "$mpiexec" --oversubscribe --bind-to none -n "$n" "$prog" "${args[@]}" "$@" 2>&1
}
fail() { echo "physbam restart test FAILED: $*"; exit 1; }
rm -rf "$scratch" && mkdir -p "$scratch"

run 2 --frames=3 | grep '^frame ' > "$scratch/whole" || fail "the uninterrupted run printed no frames"
[ "$(wc -l < "$scratch/whole")" -eq 3 ] || fail "expected 3 frames: $(cat "$scratch/whole")"

run 2 --frames=2 --checkpoint-frames=1 --brisk-checkpoint-dir="$scratch/ck" > "$scratch/first.log"
grep -q "checkpoint 2 after frame 2" "$scratch/first.log" || fail "no checkpoint after frame 2: $(cat "$scratch/first.log")"

check() {  # check NAME RANKS ARGS...: frame 3 of a restarted run equals the whole run's
  local name=$1 n=$2; shift 2
  local out
  out=$(run "$n" --frames=3 --brisk-checkpoint-dir="$scratch/ck" --brisk-restore=latest "$@")
  echo "$out" | grep -q "resuming at frame 3" || fail "$name: no resume at frame 3: $out"
  [ "$(echo "$out" | grep '^frame ')" = "$(sed -n 3p "$scratch/whole")" ] || fail "$name: $(echo "$out" | grep '^frame '), expected $(sed -n 3p "$scratch/whole")"
  echo "$name: frame 3 as in the uninterrupted run"
}
check "same ranks" 2
check "3 ranks, no templates" 3 --brisk-templates=off
check "1 rank" 1

truncate -s 2000 "$scratch/ck/ckpt-000002.h5"
out=$(run 2 --frames=3 --brisk-checkpoint-dir="$scratch/ck" --brisk-restore=latest)
echo "$out" | grep -q "skipped checkpoint .*ckpt-000002.h5" || fail "the truncated checkpoint was not reported: $out"
echo "$out" | grep -q "resuming at frame 2" || fail "no resume at frame 2: $out"
[ "$(echo "$out" | grep '^frame ')" = "$(sed -n 2,3p "$scratch/whole")" ] || fail "from checkpoint 1: $(echo "$out" | grep '^frame ')"
echo "truncated newest checkpoint skipped, frames 2 and 3 as in the uninterrupted run"

if [ "$transport" = ucx ]; then
  run 2 --frames=30 | grep '^frame ' | tail -1 > "$scratch/whole30"
  out=$(BRISK_FAULT_INJECT=kill:2:1200-1800:3 timeout 120 "$mpiexec" --oversubscribe --bind-to none --enable-recovery \
        --mca orte_abort_on_non_zero_status 0 -n 3 "$prog" "${args[@]}" --frames=30 --checkpoint-frames=1 \
        --brisk-checkpoint-dir="$scratch/ck30" 2>&1)
  echo "$out" | grep -q "rank 2 was lost while the job used data objects.*the last checkpoint is .*ckpt-" ||
    fail "no fail-fast message naming the last checkpoint: $(echo "$out" | tail -5)"
  echo "$out" | grep -q '^frame 30 ' && fail "the kill came after the last frame"
  out=$(run 2 --frames=30 --brisk-checkpoint-dir="$scratch/ck30" --brisk-restore=latest)
  [ "$(echo "$out" | grep '^frame ' | tail -1)" = "$(cat "$scratch/whole30")" ] ||
    fail "after the kill and the restart: $(echo "$out" | grep '^frame ' | tail -1), expected $(cat "$scratch/whole30")"
  echo "killed rank: the job ended at once; the restart from its last checkpoint ends as the uninterrupted run"
fi
echo "physbam restart test OK"
