#!/usr/bin/env bash
# brisk-ckpt ls/verify on a good checkpoint, a corrupted copy (bytes flipped inside
# a dataset's data), a truncated copy, and a directory whose newest is truncated;
# h5dump (hdf5-tools) reads the file, where CMake found it (H5DUMP; "none": not
# found at configure time, and these checks are left out, saying so).
#   tool_test.sh BRISK_CKPT FIXTURE_WRITER MPIEXEC SCRATCH [H5DUMP|none]
set -u
tool=$1; writer=$2; mpiexec=$3; scratch=$4; h5dump=${5:-none}
rm -rf "$scratch"; mkdir -p "$scratch/dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect RC REGEX -- command...: the exit code and the combined output.
expect() {
  local want=$1 regex=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  printf '$ %s\n%s\n' "$*" "$out"
  [ "$rc" -eq "$want" ] || fail "exit code $rc, wanted $want: $*"
  grep -Eq -- "$regex" <<<"$out" || fail "output does not match /$regex/: $*"
}

"$mpiexec" --oversubscribe --bind-to none -n 2 "$writer" "$scratch/dir" 1 || { echo "FAIL: writer"; exit 1; }
"$mpiexec" --oversubscribe --bind-to none -n 2 "$writer" "$scratch/dir" 2 || { echo "FAIL: writer"; exit 1; }
good=$scratch/dir/ckpt-000001.h5

expect 0 "written by 2 ranks" -- "$tool" ls "$good"
expect 0 "objects +1048576 0x[0-9a-f]{8} +0 +[0-9]+  /objects/alpha" -- "$tool" ls "$good"
expect 0 "objects +102400 0x[0-9a-f]{8} +1 +[0-9]+  /objects/part%2F1" -- "$tool" ls "$good"
expect 0 "step \(4 bytes\): 2a 00 00 00" -- "$tool" ls "$good"
expect 0 "^OK .*ckpt-000001.h5: 6 datasets" -- "$tool" verify "$good"
expect 0 "latest usable checkpoint in .*: ckpt-000002.h5" -- "$tool" ls "$scratch/dir"

if [ "$h5dump" != none ]; then
  expect 0 'DATASET "alpha"' -- "$h5dump" -H "$good"
  expect 0 '"/objects/alpha"' -- "$h5dump" -d /manifest "$good"
else
  echo "SKIPPED: the h5dump checks (configured without h5dump: install hdf5-tools and configure again)"
fi

# Flip 4 bytes in the middle of /objects/alpha's data.
offset=$("$tool" ls "$good" | awk '$NF == "/objects/alpha" { print $5 }')
[ -n "$offset" ] || fail "no offset for /objects/alpha"
cp "$good" "$scratch/corrupt.h5"
printf 'XXXX' | dd of="$scratch/corrupt.h5" bs=1 seek=$((offset + 4096)) conv=notrunc status=none
expect 1 "checksum mismatch in /objects/alpha" -- "$tool" verify "$scratch/corrupt.h5"
expect 0 "/objects/alpha" -- "$tool" ls "$scratch/corrupt.h5"

# Truncated copies: half, and 100 bytes (the superblock survives).
size=$(stat -c %s "$good")
head -c $((size / 2)) "$good" > "$scratch/half.h5"
expect 1 "truncated" -- "$tool" verify "$scratch/half.h5"
head -c 100 "$good" > "$scratch/tiny.h5"
expect 1 "cannot open checkpoint|not an HDF5 file" -- "$tool" verify "$scratch/tiny.h5"
expect 1 "not an HDF5 file" -- "$tool" verify "$0"
expect 1 "does not exist" -- "$tool" verify "$scratch/missing.h5"

# A directory whose newest checkpoint is truncated: the older one is used, and said so.
truncate -s $(( $(stat -c %s "$scratch/dir/ckpt-000002.h5") / 2 )) "$scratch/dir/ckpt-000002.h5"
expect 0 "skipped ckpt-000002.h5: .*truncated" -- "$tool" verify "$scratch/dir"
expect 0 "^OK .*ckpt-000001.h5" -- "$tool" verify "$scratch/dir"
expect 1 "BAD ckpt-000002.h5" -- "$tool" verify --all "$scratch/dir"
expect 2 "" -- "$tool" frobnicate

rm -rf "$scratch"
if [ "$failures" -ne 0 ]; then echo "tool_test: $failures failures"; exit 1; fi
echo "tool_test: ok"
