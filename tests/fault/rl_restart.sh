#!/usr/bin/env bash
# rl_restart.sh PROGRAM SCRATCH MPIEXEC TRANSPORT
# brisk_rl's bsp way, checkpointed every 10 rounds (the agent and the simulator
# actors' states), with rank 0 SIGKILLed after round 25: the run restored from the
# last checkpoint resumes bsp at step 80 and ends with the single-threaded run's
# rewards and parameters, bit for bit.
set -uo pipefail
prog=$1 scratch=$2 mpiexec=$3 transport=$4
fail() { echo "rl restart test FAILED: $*"; exit 1; }
rm -rf "$scratch" && mkdir -p "$scratch"
args=(--brisk-transport="$transport" --envs=4 --steps=400 --update-every=64 --step-ms=0.05 --ways=bsp,single
      --learn-steps=0 --checkpoint-rounds=10 --brisk-checkpoint-dir="$scratch")
run() { timeout 120 "$mpiexec" --oversubscribe --bind-to none -n 2 "$prog" "${args[@]}" "$@" 2>&1; }

# killed_status, killed_run LOG ARGS...
# shellcheck source=tests/fault/restart_lib.sh
source "$(dirname "$0")/restart_lib.sh"
# Rank 0 SIGKILLs itself.
killed_run "$scratch/killed.log" --die-after-rounds=25
out=$(cat "$scratch/killed.log")
grep -q "bsp: killed after round 25" <<<"$out" || fail "rank 0 was not killed: $out"
grep -q "rewards and parameters" <<<"$out" && fail "the killed run finished: $out"
out=$(run --brisk-restore=latest) || fail "the restart failed: $out"
grep -q "bsp resumes at step 80 of 400 from checkpoint 2" <<<"$out" || fail "no resume at step 80: $out"
grep -q "bsp vs single-threaded, same seeds: rewards and parameters identical" <<<"$out" ||
  fail "the resumed bsp differs from the single-threaded run: $out"
echo "rl restart test OK"
