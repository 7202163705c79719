#!/usr/bin/env bash
# physbam_restart.sh PROGRAM SCRATCH MPIEXEC [transport [BRISK_CKPT]]
# physbam_brisk checkpoints its data objects (the blocks and every partition ever
# written) after each frame; a run restarted from a checkpoint, on the same or on
# another number of ranks, with templates on or off, prints the same frames as an
# uninterrupted run; a truncated newest checkpoint is skipped for the one before.
# With ucx, a rank SIGKILLed mid-run (BRISK_FAULT_INJECT) does not end the job: its
# data move to a surviving rank, the driver runs again from the last checkpoint, and
# the job ends like the uninterrupted run; so too when it dies while a checkpoint is
# being written.
set -uo pipefail
# Outputs are captured and searched with grep -q <<<"$out": under pipefail, `echo "$out" |
# grep -q` fails when grep exits early and echo is cut off (SIGPIPE) on long outputs.
prog=$1 scratch=$2 mpiexec=$3 transport=${4:-mpi} ckpt_tool=${5:-brisk-ckpt}
launch=$(cd "$(dirname "$0")/../.." && pwd)/slurm/brisk-launch
args=(--grid=20 --blocks=2 --frame-dt=0.08 --quiet --brisk-transport="$transport")
run() {  # run RANKS ARGS...
  local n=$1; shift
  timeout 120 "$mpiexec" --oversubscribe --bind-to none -n "$n" "$prog" "${args[@]}" "$@" 2>&1
}
fail() { echo "physbam restart test FAILED: $*"; exit 1; }
rm -rf "$scratch" && mkdir -p "$scratch"

# frames_of TEXT: its "frame ..." lines (none: empty).
frames_of() { grep '^frame ' <<<"$1" || true; }
# same_frames NAME GOT WANT: the frame lines GOT are WANT's, and there are some.
same_frames() {
  local name=$1 got=$2 want=$3
  [ -n "$want" ] || fail "$name: no frames to compare with"
  [ "$(wc -l <<<"$got")" -eq "$(wc -l <<<"$want")" ] && [ "$got" = "$want" ] ||
    fail "$name: frames differ: got [$got], expected [$want]"
}

out=$(run 2 --frames=3) || fail "the uninterrupted run exited with $?: $out"
frames_of "$out" > "$scratch/whole"
[ "$(wc -l < "$scratch/whole")" -eq 3 ] || fail "expected 3 frames from the uninterrupted run: $out"

out=$(run 2 --frames=2 --checkpoint-frames=1 --brisk-checkpoint-dir="$scratch/ck") ||
  fail "the checkpointing run exited with $?: $out"
grep -q "checkpoint 2 after frame 2" <<<"$out" || fail "no checkpoint after frame 2: $out"
same_frames "the checkpointing run" "$(frames_of "$out")" "$(sed -n 1,2p "$scratch/whole")"

check() {  # check NAME RANKS ARGS...: frame 3 of a restarted run equals the whole run's
  local name=$1 n=$2; shift 2
  local out
  out=$(run "$n" --frames=3 --brisk-checkpoint-dir="$scratch/ck" --brisk-restore=latest "$@") ||
    fail "$name: the restarted run exited with $?: $out"
  grep -q "resuming at frame 3" <<<"$out" || fail "$name: no resume at frame 3: $out"
  same_frames "$name" "$(frames_of "$out")" "$(sed -n 3p "$scratch/whole")"
  echo "$name: frame 3 as in the uninterrupted run"
}
check "same ranks" 2
check "3 ranks, no templates" 3 --brisk-templates=off
check "1 rank" 1

truncate -s 2000 "$scratch/ck/ckpt-000002.h5"
out=$(run 2 --frames=3 --brisk-checkpoint-dir="$scratch/ck" --brisk-restore=latest) ||
  fail "the run restarted past a truncated checkpoint exited with $?: $out"
grep -q "skipped checkpoint .*ckpt-000002.h5" <<<"$out" || fail "the truncated checkpoint was not reported: $out"
grep -q "resuming at frame 2" <<<"$out" || fail "no resume at frame 2: $out"
same_frames "from checkpoint 1" "$(frames_of "$out")" "$(sed -n 2,3p "$scratch/whole")"
echo "truncated newest checkpoint skipped, frames 2 and 3 as in the uninterrupted run"

if [ "$transport" = ucx ]; then
  # A rank SIGKILLed at a seeded data task: the job runs through it (rolled back to the
  # last checkpoint, or to the start before the first one) and ends as the
  # uninterrupted run, templates on and off.
  out=$(run 2 --frames=30) || fail "the uninterrupted 30-frame run exited with $?: $out"
  frames_of "$out" | tail -1 > "$scratch/whole30"
  grep -q '^frame 30 ' "$scratch/whole30" || fail "the uninterrupted 30-frame run did not print frame 30: $out"
  # Launched as a job that runs through a rank's death is: brisk-launch --keep-going
  # (mpirun with recovery, whose own status is 0 whatever happened), which exits with
  # the job's status from every surviving rank's report.
  killed() {  # killed NAME RANKS INJECTION ARGS...
    local name=$1 n=$2 inject=$3 rc=0; shift 3
    rm -rf "$scratch/ck30"
    out=$(BRISK_FAULT_INJECT=$inject timeout 120 "$launch" --keep-going --np="$n" -- "$prog" "${args[@]}" --frames=30 \
          --brisk-checkpoint-dir="$scratch/ck30" "$@" 2>&1 </dev/null) || rc=$?
    echo "$out" > "$scratch/killed-${n}ranks.log"  # kept for a look after a failure
    [ "$rc" -eq 0 ] || fail "$name: the job ended with $rc: $(echo "$out" | grep -v '^frame' | tail -15)"
    # The ranks that reported nothing: the injection's victims ("kill-at-task:2:...,kill-at-task:3:...").
    local victims
    victims=$(tr ',' '\n' <<<"$inject" | cut -d: -f2 | sort -n | paste -sd, - | sed 's/,/, /g')
    grep -qxF "brisk-launch: exit status 0: rank 0: the driver returned 0; no report from (lost): rank $victims" <<<"$out" ||
      fail "$name: not every rank but the killed ones ($victims) reported 0: $(echo "$out" | grep -v '^frame' | tail -15)"
    grep -q "rank 2: BRISK_FAULT_INJECT kills this rank now" <<<"$out" ||
      fail "$name: rank 2 was not killed by the injection: $(echo "$out" | grep -v '^frame' | tail -15)"
    grep -q "rank 2 was lost while the job used data objects; the job goes on without it" <<<"$out" ||
      fail "$name: no rollback: $(echo "$out" | grep -v '^frame' | tail -15)"
    grep -q "ranks $n (data on $((n - 1))), frames" <<<"$out" ||
      fail "$name: the driver did not run again with its data on the $((n - 1)) survivors: $(grep 'physbam_brisk: grid' <<<"$out")"
    same_frames "$name: the last frame" "$(frames_of "$out" | tail -1)" "$(cat "$scratch/whole30")"
    # Blocks whose tasks do not depend on the rank count (the frame's end) are kept
    # and edited; those with per-rank reductions are recorded again.
    if [[ " $* " != *" --brisk-templates=off "* ]]; then
      grep -q "template 'finish' taken over from before the rollback by an edit" <<<"$out" ||
        fail "$name: the frame-end template was not taken over by an edit: $(echo "$out" | grep -v '^frame' | tail -15)"
    fi
    echo "$name: the job ran through the killed rank to the uninterrupted run's last frame"
  }
  killed "killed after a checkpoint" 3 kill-at-task:2:12000-15000:3 --checkpoint-frames=5
  grep -q "the driver runs again from .*ckpt-00000[0-9].h5" <<<"$out" || fail "not rolled back to a checkpoint: $out"
  grep -q "resuming at frame [1-9][0-9]*" <<<"$out" || fail "the driver did not resume from the checkpoint: $out"
  grep -q "checkpoint [0-9]* after frame 30" <<<"$out" || fail "no checkpoint after the last frame: $out"
  verified=$("$ckpt_tool" verify --all "$scratch/ck30" 2>&1) ||
    fail "the checkpoints written after the loss do not all verify: $verified"
  # Killed while a checkpoint is written: its shard on disk, its report not sent. Rank
  # 0 drops that checkpoint and rolls back to the one before.
  killed "killed while writing its part of checkpoint 2" 3 kill-in-checkpoint:2:2-2 --checkpoint-frames=5
  grep -q "checkpoint 2 is abandoned (its shards deleted): rank 2 died before it wrote its part" <<<"$out" ||
    fail "checkpoint 2 was not abandoned: $out"
  grep -q "the driver runs again from .*ckpt-000001.h5" <<<"$out" || fail "not rolled back to checkpoint 1: $out"
  # (At the end: the next commit's prune would drop what the abandonment left.)
  left=$(ls "$scratch/ck30")
  grep -q '^ckpt-000002\.[0-9a-z]*\.r' <<<"$left" && fail "shards of the abandoned checkpoint are left: $left"
  killed "killed before any checkpoint, no templates" 3 kill-at-task:2:2000-4000:3 --checkpoint-frames=5 --brisk-templates=off
  grep -q "the driver runs again from the beginning" <<<"$out" || fail "not rolled back to the start: $out"
  # Two ranks killed one after the other: the second loss rolls back to a checkpoint
  # written after the first (the survivors write the moved ranks' shards).
  killed "two ranks killed in turn" 4 kill-at-task:2:8000-8000,kill-at-task:3:30000-30000 --checkpoint-frames=5
  grep -q "rank 3 was lost while the job used data objects.*the data plane now has [0-9]* ranks" <<<"$out" ||
    fail "no rollback after the second loss: $out"
  grep -q "rank 3 was lost.*the driver runs again from .*ckpt-00000[2-9].h5" <<<"$out" ||
    fail "the second loss did not roll back to a checkpoint written after the first: $out"
fi
echo "physbam restart test OK"
