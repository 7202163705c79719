#!/usr/bin/env bash
# Configures and builds brisk in ./build (RelWithDebInfo). Extra arguments go to cmake.
# The fuzzers are required (BRISK_FUZZERS=ON: the configure fails without clang and
# libFuzzer, so that CI never fuzzes nothing); -DBRISK_FUZZERS=AUTO builds without them.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRISK_FUZZERS=ON "$@" > build.configure.log || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)"
