#!/usr/bin/env bash
# Installs what is missing, builds brisk, and runs the whole test suite
# (unit tests, multi-rank tests under mpirun, the installed-package example).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j 2 --timeout 600 "$@"
