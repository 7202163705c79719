#!/usr/bin/env bash
# Every multi-rank figure that has a floor, on N local ranks, per transport, in one
# go; then benchmarks/distributed/floors.py says which figures meet their floors.
#
#   benchmarks/distributed/suite.sh                          # np 4, ucx and mpi
#   benchmarks/distributed/suite.sh --np 2 --quick --out /tmp/np2
#   benchmarks/distributed/suite.sh --np 4 --physbam-rounds 5 --transports ucx
#
# Per transport it runs, each under `timeout`:
#   brisk_cluster_workloads                      remote e2e, object transfer (the
#                                                node's default path), throughput, spill
#   ... --only=object_transfer --brisk-node-shm=unmapped
#                                                object transfer through the get path
#                                                (ucp_get_nbx / MPI_Get), as between nodes
#   brisk_template_costs                         template install, instantiate, edit
#   benchmarks/physbam/compare.sh --np N         physbam_like against hand-written MPI
#                                                (with --physbam-rounds R, R > 0)
# and writes each program's output to OUT/np<N>_<transport>_<what>.json (stderr
# beside it, .err). Ranks get a core each while they fit the machine's cores
# (--bind-to core); beyond that they share them (--oversubscribe --bind-to none,
# mpi_yield_when_idle=1; an OMPI_MCA_mpi_yield_when_idle already set is kept).
# Exit status: floors.py's (1: a figure missed its floor), or 2 when a program
# failed or timed out.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
np=4
transports="ucx mpi"
out=""
quick=0
physbam_rounds=0
build="$root/build"
limit=900

usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; echo; echo "options: --np N --transports \"ucx mpi\" --out DIR --quick --physbam-rounds R --build DIR --timeout S"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --np) np="${2-}"; shift 2 ;;
    --transports) transports="${2-}"; shift 2 ;;
    --out) out="${2-}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --physbam-rounds) physbam_rounds="${2-}"; shift 2 ;;
    --build) build="${2-}"; shift 2 ;;
    --timeout) limit="${2-}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "suite.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
for v in np limit; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "suite.sh: --${v/limit/timeout} must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[[ "$physbam_rounds" =~ ^[0-9]+$ ]] || { echo "suite.sh: --physbam-rounds must be a count, not '$physbam_rounds'" >&2; exit 2; }
[ "$np" -ge 2 ] || { echo "suite.sh: --np must be 2 or more (the figures are between ranks)" >&2; exit 2; }
for t in $transports; do
  case "$t" in
    ucx|mpi) ;;
    *) echo "suite.sh: --transports: '$t' is not a transport (ucx, mpi)" >&2; exit 2 ;;
  esac
done
bench="$build/benchmarks"
for prog in brisk_cluster_workloads brisk_template_costs; do
  [ -x "$bench/$prog" ] || { echo "suite.sh: $bench/$prog not found (build first, or pass --build DIR)" >&2; exit 2; }
done
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/brisk-suite.XXXXXX")
mkdir -p "$out" || { echo "suite.sh: cannot make $out" >&2; exit 2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$np" -le "$(nproc)" ]; then
  launch=(mpirun -np "$np" --bind-to core)
  export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-0}
else
  launch=(mpirun -np "$np" --oversubscribe --bind-to none)
  export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
fi
q=()
[ "$quick" = 1 ] && q=(--quick)

ran=0
failed=0
# run NAME COMMAND...: COMMAND's stdout to OUT/NAME.json, stderr to OUT/NAME.err.
run() {
  local name="$1"
  shift
  local start=$SECONDS
  timeout --kill-after=30 "$limit" "$@" > "$out/$name.json" 2> "$out/$name.err"
  local rc=$?
  ran=$((ran + 1))
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    local why="exit status $rc"
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after $limit s"
    echo "suite.sh: $name: $why ($out/$name.err): $*" >&2
  else
    echo "suite.sh: $name: $((SECONDS - start)) s" >&2
  fi
}

for t in $transports; do
  tag="np${np}_$t"
  run "${tag}_workloads" "${launch[@]}" "$bench/brisk_cluster_workloads" --brisk-transport="$t" "${q[@]}"
  run "${tag}_get_path" "${launch[@]}" "$bench/brisk_cluster_workloads" --brisk-transport="$t" --only=object_transfer \
    --brisk-node-shm=unmapped "${q[@]}"
  reps=()
  [ "$quick" = 1 ] && reps=(--reps=5)
  run "${tag}_templates" "${launch[@]}" "$bench/brisk_template_costs" --brisk-transport="$t" "${reps[@]}"
  if [ "$physbam_rounds" -gt 0 ]; then
    run "${tag}_physbam" env BRISK_TRANSPORT="$t" "$root/benchmarks/physbam/compare.sh" --np "$np" \
      --rounds "$physbam_rounds" --build "$build"
  fi
done

if [ $failed -gt 0 ]; then
  echo "suite.sh: $failed of $ran programs failed (output in $out)" >&2
else
  echo "suite.sh: $ran of $ran programs ran (output in $out)" >&2
fi
"$here/floors.py" "$out"/*.json
rc=$?
[ $failed -gt 0 ] && exit 2
exit $rc
