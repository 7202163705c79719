#!/usr/bin/env bash
# physbam_like against hand-written MPI: the same simulation with physbam_mpi, with
# physbam_brisk (templates) and, unless --no-untemplated, physbam_brisk
# --brisk-templates=off, run in turn round after round (so that the machine's drift
# hits all alike), one frame per run. Prints each run's JSON line, then one summary
# line per brisk variant: the medians of the frame times, and the median and
# quartiles over the rounds of the ratio to the MPI run of the same round.
#
#   benchmarks/physbam/compare.sh                       # np 2, 160^3 in 8 blocks, 8 rounds
#   benchmarks/physbam/compare.sh --np 1 --rounds 5
#   benchmarks/physbam/compare.sh --grid 64 --rounds 12 --max-cg 1000
#   benchmarks/physbam/compare.sh --baseline /path/to/other/build   # A/B of two builds
#
# The default grid is the grain the templates issue names: 8 blocks of 80^3, where
# the median block task takes about 1 ms (CG pieces 0.7-1.3 ms, advection 25 ms) and
# the reductions' tasks a few us. --max-cg (default 100) caps each pressure solve so
# that a round takes seconds (both programs run the same iterations: the counts are
# checked). Ranks get one core each (--bind-to core) while they fit the machine's
# cores; beyond that they share them (--oversubscribe --bind-to none). With
# --baseline DIR, DIR's physbam_brisk runs too, as variant "baseline", in the same
# rounds: two builds compared without the machine's drift between separate runs.
set -euo pipefail

np=2 grid=160 blocks=2 rounds=8 frames=1 max_cg=100 untemplated=1 baseline=
build="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build"
extra=()
usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --grid) grid="$2"; shift 2 ;;
    --blocks) blocks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --frames) frames="$2"; shift 2 ;;
    --max-cg) max_cg="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --baseline) baseline="$2"; shift 2 ;;
    --no-untemplated) untemplated=0; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "compare.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
for v in np rounds frames max_cg; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --${v//_/-} must be a positive integer, not '${!v}'" >&2; exit 2; }
done
apps="$build/apps/physbam_like"
for app in physbam_mpi physbam_brisk; do
  [ -x "$apps/$app" ] || { echo "compare.sh: $apps/$app not found (build first, or pass --build DIR)" >&2; exit 2; }
done
if [ -n "$baseline" ] && [ ! -x "$baseline/apps/physbam_like/physbam_brisk" ]; then
  echo "compare.sh: --baseline: $baseline/apps/physbam_like/physbam_brisk not found" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
if [ "$np" -le "$cores" ]; then
  bind=(--bind-to core)
  # Ranks that do not share cores: Open MPI need not yield inside its polls.
  export OMPI_MCA_mpi_yield_when_idle=0
else
  bind=(--oversubscribe --bind-to none)
  export OMPI_MCA_mpi_yield_when_idle=1
fi
args=(--grid="$grid" --blocks="$blocks" --frames="$frames" --max-cg="$max_cg" --json --quiet "${extra[@]}")
variants=(mpi brisk)
[ "$untemplated" = 1 ] && variants+=(brisk_untemplated)
[ -n "$baseline" ] && variants+=(baseline)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    case "$v" in
      mpi) cmd=("$apps/physbam_mpi" "${args[@]}") ;;
      brisk) cmd=("$apps/physbam_brisk" "${args[@]}") ;;
      brisk_untemplated) cmd=("$apps/physbam_brisk" "${args[@]}" --brisk-templates=off) ;;
      baseline) cmd=("$baseline/apps/physbam_like/physbam_brisk" "${args[@]}") ;;
    esac
    line=$(mpirun -np "$np" "${bind[@]}" "${cmd[@]}" 2>&1 | grep '^{' | tail -1) || true
    if [ -z "$line" ]; then
      echo "compare.sh: round $r, $v printed no JSON line: ${cmd[*]}" >&2
      exit 1
    fi
    echo "$line"
    echo "$r $v $line" >> "$out"
  done
done

# Per variant: median frame time; per round, the ratio to MPI's (median, quartiles).
# The CG iteration counts must agree with MPI's in every round. A figure with no
# value (a time that was null, or a ratio to no time) is written as null.
awk -v np="$np" -v grid="$grid" -v blocks="$blocks" -v max_cg="$max_cg" '
  function field(s, k,   m) { return match(s, "\"" k "\":[0-9.e+-]+") ? substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 : -1 }
  function num(x, f) { return x == "" ? "null" : sprintf(f, x) }
  function isort(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
  function q(a, n, f,   p, i) { p = f * (n - 1); i = int(p); return i + 1 < n ? a[i + 1] + (p - i) * (a[i + 2] - a[i + 1]) : a[n] }
  {
    r = $1; v = $2; line = $0; sub(/^[^ ]+ [^ ]+ /, "", line)
    t[v, r] = field(line, "median_frame_seconds"); it[v, r] = field(line, "cg_iterations")
    if (!(v in seen)) { seen[v] = 1; order[++nv] = v }
    if (r > rounds) rounds = r
  }
  END {
    for (k = 1; k <= nv; k++) {
      v = order[k]; n = 0; m = 0
      for (r = 1; r <= rounds; r++) {
        if (!((v, r) in t)) continue
        if (t[v, r] >= 0) a[++n] = t[v, r]
        if (v != "mpi") {
          if (it[v, r] != it["mpi", r]) { printf "compare.sh: round %d: %s ran %d CG iterations, MPI %d\n", r, v, it[v, r], it["mpi", r] > "/dev/stderr"; bad = 1 }
          if (t["mpi", r] > 0 && t[v, r] >= 0) b[++m] = t[v, r] / t["mpi", r]
        }
      }
      isort(a, n); med[v] = n > 0 ? q(a, n, 0.5) : ""
      if (v == "mpi") continue
      isort(b, m)
      ratio = (med[v] != "" && med["mpi"] != "" && med["mpi"] > 0) ? med[v] / med["mpi"] : ""
      p2 = m > 0 ? q(b, m, 0.5) : ""; p1 = m > 0 ? q(b, m, 0.25) : ""; p3 = m > 0 ? q(b, m, 0.75) : ""
      printf "{\"name\":\"physbam_compare\",\"variant\":\"%s\",\"ranks\":%d,\"grid\":\"%s\",\"blocks\":\"%s\",\"max_cg\":%d,\"rounds\":%d,\"median_frame_seconds\":%s,\"mpi_median_frame_seconds\":%s,\"ratio_of_medians\":%s,\"paired_ratio_median\":%s,\"paired_ratio_q1\":%s,\"paired_ratio_q3\":%s}\n", v, np, grid, blocks, max_cg, m, num(med[v], "%.4f"), num(med["mpi"], "%.4f"), num(ratio, "%.3f"), num(p2, "%.3f"), num(p1, "%.3f"), num(p3, "%.3f")
    }
    exit bad
  }' "$out"
