#!/usr/bin/env bash
# Installs what is missing, builds brisk, and runs the RL demo (apps/rl) on 2 local ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# --bind-to none: Open MPI would pin each of 2 ranks to one core; brisk's workers
# use every core of the cpuset they are given.
exec mpirun -np 2 --oversubscribe --bind-to none build/apps/rl/brisk_rl "$@"
