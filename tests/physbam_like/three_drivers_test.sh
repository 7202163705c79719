#!/usr/bin/env bash
# three_drivers_test.sh MPIEXEC PHYSBAM_MPI PHYSBAM_BRISK SCRATCH [BRISK OPTIONS...]
# The three implementations of the same numerics (hand-written MPI, brisk with
# templates, brisk without) print the same per-frame summaries, bit for bit, and so
# the same CG iteration counts, on 1, 2 and 3 (uneven blocks) ranks.
set -euo pipefail
mpiexec=$1; mpi=$2; brisk=$3; scratch=$4; shift 4
extra=("$@")
mkdir -p "$scratch"
# run, same
# shellcheck source=tests/physbam_like/frames.sh
source "$(dirname "$0")/frames.sh"
args=(--grid=20 --blocks=2 --frames=2 --frame-dt=0.08)
run mpi_np2 2 "$mpi" "${args[@]}"
run templates_np1 1 "$brisk" "${args[@]}" "${extra[@]}"
run templates_np2 2 "$brisk" "${args[@]}" "${extra[@]}"
run no_templates_np2 2 "$brisk" "${args[@]}" --brisk-templates=off "${extra[@]}"
same mpi_np2 templates_np1
same mpi_np2 templates_np2
same mpi_np2 no_templates_np2
uneven=(--grid=20,16,24 --blocks=3,2,2 --frames=1 --frame-dt=0.05)
run uneven_mpi 3 "$mpi" "${uneven[@]}"
run uneven_templates 3 "$brisk" "${uneven[@]}" "${extra[@]}"
same uneven_mpi uneven_templates
cat "$scratch/templates_np2.frames"
echo "physbam three drivers test OK"
