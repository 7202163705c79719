#!/usr/bin/env bash
# Configures and builds brisk in ./build (RelWithDebInfo). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > build.configure.log || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)"
