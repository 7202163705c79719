#!/usr/bin/env bash
# Installs the Debian 12 packages brisk builds and tests with (root or sudo).
# Skips apt entirely when everything is present already.
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin libucx-dev
  libhwloc-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libcereal-dev
  libpng-dev
  # apps/rl draws its charts with gnuplot (pngcairo terminal, no X11).
  gnuplot-nox
  libhdf5-openmpi-dev hdf5-tools
  python3
  # The fuzzers (tests/fuzz) are built with clang and its libFuzzer runtime, which
  # clang does not pull in without its recommends.
  clang libclang-rt-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
