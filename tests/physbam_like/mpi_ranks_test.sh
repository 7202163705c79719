#!/usr/bin/env bash
# mpi_ranks_test.sh MPIEXEC PHYSBAM_MPI SCRATCH
# physbam_mpi on 1, 2 and 4 (oversubscribed) ranks, and on 3 ranks with uneven
# blocks, must print the same per-frame summaries, bit for bit.
set -euo pipefail
mpiexec=$1; exe=$2; scratch=$3
mkdir -p "$scratch"
# run, same
# shellcheck source=tests/physbam_like/frames.sh
source "$(dirname "$0")/frames.sh"
args=(--grid=24 --blocks=2 --frames=3 --frame-dt=0.12)
run np1 1 "$exe" "${args[@]}"
run np2 2 "$exe" "${args[@]}"
run np4 4 "$exe" "${args[@]}"
same np1 np2
same np1 np4
uneven=(--grid=20,16,24 --blocks=3,2,4 --frames=2 --frame-dt=0.05 --tol=1e-8)
run uneven_np1 1 "$exe" "${uneven[@]}"
run uneven_np3 3 "$exe" "${uneven[@]}"
same uneven_np1 uneven_np3
cat "$scratch/np4.frames"
echo "physbam mpi ranks test OK"
