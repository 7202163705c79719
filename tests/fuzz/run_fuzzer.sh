#!/usr/bin/env bash
# Runs a fuzzer from its committed seeds (CTest's fuzz_<name>):
#   run_fuzzer.sh FUZZER SCRATCH CORPUS [libFuzzer flags...]
# libFuzzer writes the inputs it finds into its first folder: that is SCRATCH, emptied
# first, so the committed CORPUS is only read and every run starts from the same seeds.
# A crash leaves its input in the working directory (crash-<sha1>); keep it in the
# corpus once fixed (docs/fuzzing.md).
set -eu
fuzzer=$1 scratch=$2 corpus=$3
shift 3
rm -rf "$scratch"
mkdir -p "$scratch"
[ -d "$corpus" ] || { echo "run_fuzzer.sh: no seed corpus at $corpus"; exit 1; }
exec "$fuzzer" "$@" "$scratch" "$corpus"
