#!/usr/bin/env bash
# Installs brisk from BUILD_DIR into a scratch prefix, builds examples/hello against
# it with find_package(brisk), and runs it under mpirun.
#   install_test.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR MPIEXEC
set -euo pipefail
src=$1; build=$2; scratch=$3; mpiexec=$4
rm -rf "$scratch"; mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
cmake -S "$src/examples/hello" -B "$scratch/hello" -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_BUILD_TYPE=Release > "$scratch/configure.log"
cmake --build "$scratch/hello" > "$scratch/build.log"
LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}" "$mpiexec" -n 1 --bind-to none "$scratch/hello/hello"
