#!/usr/bin/env bash
# Installs what is missing, builds brisk, and runs the whole test suite
# (unit tests, multi-rank tests under mpirun, the installed-package example).
# At the end it names every test that did not run (skipped: exit code 77, as the
# Slurm tests give without root or Slurm; disabled: not configured here, as the GPU
# tests without a GPU) and every GoogleTest case skipped inside a test that passed:
# none of these counts as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
mkdir -p Testing
rc=0
ctest --output-on-failure -j 2 --timeout 600 "$@" 2>&1 | tee Testing/test.sh.log || rc=$?

# ctest's result lines: "  12/140 Test  #45: NAME ....***Skipped   0.01 sec".
not_run=$(sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) \.*\*\*\*(Skipped|Not Run.*[^ ]) +[0-9.]+ sec$/  \1 (\2)/p' \
          Testing/test.sh.log | sort -u)
# GoogleTest's "[  SKIPPED ] Suite.Case (N ms)" in the output of the test that ran it
# (in colour where mpirun gave the ranks a terminal).
skipped_cases=$(sed 's/\x1b\[[0-9;]*m//g' Testing/Temporary/LastTest.log 2>/dev/null | awk '
  /^[0-9]+\/[0-9]+ Test: / { test = $3 }
  /^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)/ { print "  " test ": " $4 }' | sort -u)
echo
if [ -n "$not_run" ]; then
  echo "Tests that did not run ($(wc -l <<<"$not_run")), not counted as passed:"
  echo "$not_run"
else
  echo "Every test ran (none skipped or disabled)."
fi
if [ -n "$skipped_cases" ]; then
  echo "GoogleTest cases skipped inside tests that ran ($(wc -l <<<"$skipped_cases")), as not applying to that"
  echo "test's ranks, transport or options (the output in build/Testing/Temporary/LastTest.log says why):"
  echo "$skipped_cases"
fi
exit "$rc"
