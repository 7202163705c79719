# shellcheck shell=bash disable=SC2154
# frames.sh — sourced by the physbam_like test scripts, after they set `mpiexec` and
# `scratch`.

# run NAME RANKS EXE ARGS...: runs EXE on RANKS oversubscribed ranks and keeps its
# "frame ..." lines in $scratch/NAME.frames.
run() {
  local name=$1 ranks=$2 exe=$3
  shift 3
  "$mpiexec" --oversubscribe --bind-to none -n "$ranks" "$exe" --quiet "$@" > "$scratch/$name.out"
  grep '^frame ' "$scratch/$name.out" > "$scratch/$name.frames" || true
  echo "$name: $(wc -l < "$scratch/$name.frames") frames"
}

# same A B: the two runs printed the same frame lines, bit for bit.
same() {
  if ! diff "$scratch/$1.frames" "$scratch/$2.frames"; then echo "FAIL: $1 and $2 differ"; exit 1; fi
}
