# shellcheck shell=bash disable=SC2154
# frames.sh — sourced by the physbam_like test scripts, after they set `mpiexec` and
# `scratch`.

# run NAME RANKS EXE ARGS...: runs EXE on RANKS oversubscribed ranks, which must exit
# 0 and print one "frame ..." line per frame (--frames=N among ARGS); keeps those
# lines in $scratch/NAME.frames.
run() {
  local name=$1 ranks=$2 exe=$3 rc=0 frames=""
  shift 3
  for a in "$@"; do
    case "$a" in --frames=*) frames=${a#--frames=} ;; esac
  done
  "$mpiexec" --oversubscribe --bind-to none -n "$ranks" "$exe" --quiet "$@" > "$scratch/$name.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then echo "FAIL: $name exited with $rc"; cat "$scratch/$name.out"; exit 1; fi
  grep '^frame ' "$scratch/$name.out" > "$scratch/$name.frames" || true
  local got
  got=$(wc -l < "$scratch/$name.frames")
  if [ -z "$frames" ] || [ "$got" -ne "$frames" ]; then
    echo "FAIL: $name printed $got frame lines, expected ${frames:-the number given by --frames}"
    cat "$scratch/$name.out"
    exit 1
  fi
  echo "$name: $got frames"
}

# same A B: the two runs printed the same frame lines (as many, and some), bit for bit.
same() {
  if [ ! -s "$scratch/$1.frames" ]; then echo "FAIL: $1 printed no frames"; exit 1; fi
  if ! diff "$scratch/$1.frames" "$scratch/$2.frames"; then echo "FAIL: $1 and $2 differ"; exit 1; fi
}
