#!/usr/bin/env bash
# Writes the checkpoints of the corruption test (two ranks, collective and sharded),
# then damages copies of them TRIALS times (docs/fuzzing.md):
#   checkpoint_corruption.sh PROGRAM BRISK_CKPT MPIEXEC SCRATCH TRIALS SEED
set -eu
program=$1 tool=$2 mpiexec=$3 scratch=$4 trials=$5 seed=$6
rm -rf "$scratch"
mkdir -p "$scratch"
"$mpiexec" --oversubscribe --bind-to none -n 2 "$program" write "$scratch"
"$program" trials "$scratch" "$trials" "$seed" "$tool"
rm -rf "$scratch"
