#!/usr/bin/env bash
# The installed package works as users use it, with no LD_LIBRARY_PATH anywhere:
#  1. brisk installs from BUILD_DIR into a scratch prefix. Its libraries carry a
#     versioned SONAME and RUNPATH $ORIGIN (brisk-ckpt: $ORIGIN/<bindir to libdir>), and
#     no installed text file names the source tree, the build tree or the prefix.
#  2. examples/hello builds against the prefix with find_package(brisk) and runs under
#     mpirun -np 2 in a clean environment (env -i: PATH, HOME, OMPI_ALLOW_RUN_AS_ROOT*,
#     OMPI_MCA_*); its output and exit status are checked.
#  3. The prefix is copied to another directory and the original deleted (the first
#     hello then must fail to load). hello builds against the copy with CMake and with
#     pkg-config (c++ $(pkg-config --cflags brisk) hello.cpp $(pkg-config --libs brisk)),
#     and both run.
#   install_test.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR MPIEXEC
set -euo pipefail
src=$(realpath "$1"); build=$(realpath "$2"); scratch=$3; mpiexec=$4
rm -rf "$scratch"; mkdir -p "$scratch"; scratch=$(realpath "$scratch")
prefix=$scratch/prefix
modules=(core mpi_transport scheduler checkpoint runtime)

fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
step() { echo "install_test: $*"; }

# env -i with only what a root CI's mpirun needs.
clean_env=(env -i "PATH=$PATH" "HOME=${HOME:-/}")
for v in $(compgen -e); do
  case $v in OMPI_ALLOW_RUN_AS_ROOT*|OMPI_MCA_*) clean_env+=("$v=${!v}") ;; esac
done
clean() { "${clean_env[@]}" "$@"; }

# The SONAME version: the minor version changes the ABI before 1.0.
version=$(sed -nE 's/^project\(brisk VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$src/CMakeLists.txt")
[[ $version =~ ^([0-9]+)\.([0-9]+)\. ]] || fail "no project version in $src/CMakeLists.txt"
soversion=${BASH_REMATCH[1]}
[ "$soversion" = 0 ] && soversion=0.${BASH_REMATCH[2]}

# dynamic_tag FILE TAG: the value of a dynamic-section tag (SONAME, RUNPATH, RPATH).
dynamic_tag() { readelf -d "$1" | sed -nE "s/.*\(($2)\).*\[(.*)\]$/\2/p"; }

# check_search_path FILE FIRST: the loader's search path starts with FIRST and names no
# directory of the source, build or scratch trees.
check_search_path() {
  local path
  path=$(dynamic_tag "$1" RUNPATH)
  [ -n "$path" ] || path=$(dynamic_tag "$1" RPATH)
  [ "${path%%:*}" = "$2" ] || fail "$1: RUNPATH is '$path', expected it to start with '$2'"
  case ":$path:" in *":$src"*|*":$build"*|*":$scratch"*) fail "$1: RUNPATH '$path' names a build path" ;; esac
}

# check_hello EXE PREFIX LOG: EXE loads brisk from PREFIX only and runs on 2 ranks.
check_hello() {
  local exe=$1 pfx=$2 log=$3 lib
  clean ldd "$exe" > "$log.ldd" || fail "ldd $exe"
  if grep -q "not found" "$log.ldd"; then cat "$log.ldd"; fail "$exe: a library is not found"; fi
  for m in "${modules[@]}"; do
    lib=$(sed -nE "s/^\s*libbrisk_$m\.so\.$soversion => (\S+).*/\1/p" "$log.ldd")
    [ -n "$lib" ] || { cat "$log.ldd"; fail "$exe does not load libbrisk_$m.so.$soversion"; }
    case $(realpath "$lib") in "$pfx"/*) ;; *) fail "$exe loads $lib, outside $pfx" ;; esac
  done
  local rc=0
  clean "$mpiexec" -n 2 --oversubscribe --bind-to none "$exe" > "$log" 2>&1 || rc=$?
  cat "$log"
  [ "$rc" -eq 0 ] || fail "$exe under mpirun -np 2 exited with $rc"
  grep -q "^1 + 2 + 10 = 13$" "$log" || fail "$exe did not print '1 + 2 + 10 = 13'"
}

# build_with_cmake PREFIX DIR: configure and build examples/hello in DIR against PREFIX.
build_with_cmake() {
  clean cmake -S "$src/examples/hello" -B "$2" -DCMAKE_PREFIX_PATH="$1" -DCMAKE_BUILD_TYPE=Release \
    > "$2.configure.log" 2>&1 || { cat "$2.configure.log"; fail "configuring hello against $1"; }
  local dir
  dir=$(sed -n 's/^brisk_DIR:PATH=//p' "$2/CMakeCache.txt")
  [ "$(realpath "$dir")" = "$(realpath "$libdir/cmake/brisk")" ] || fail "hello found brisk in '$dir', not in $1"
  clean cmake --build "$2" > "$2.build.log" 2>&1 || { cat "$2.build.log"; fail "building hello against $1"; }
}

step "installing into $prefix"
cmake --install "$build" --prefix "$prefix" > "$scratch/install.log"
config=$(find "$prefix" -name briskConfig.cmake)
[ -n "$config" ] || fail "no briskConfig.cmake under $prefix"
libdir=$(dirname "$(dirname "$(dirname "$config")")")
libdir_rel=${libdir#"$prefix"/}

step "checking SONAME and RUNPATH of the installed libraries (SONAME version $soversion)"
for m in "${modules[@]}"; do
  real=$libdir/libbrisk_$m.so.$version
  [[ -f $real && ! -L $real ]] || fail "$real is not installed"
  [ "$(readlink -f "$libdir/libbrisk_$m.so")" = "$real" ] || fail "namelink libbrisk_$m.so does not lead to $real"
  [ "$(readlink -f "$libdir/libbrisk_$m.so.$soversion")" = "$real" ] || fail "libbrisk_$m.so.$soversion does not lead to $real"
  soname=$(dynamic_tag "$real" SONAME)
  [ "$soname" = "libbrisk_$m.so.$soversion" ] || fail "$real: SONAME is '$soname', expected libbrisk_$m.so.$soversion"
  check_search_path "$real" "\$ORIGIN"
done
ckpt=$prefix/bin/brisk-ckpt
[ -x "$ckpt" ] || fail "$ckpt is not installed"
check_search_path "$ckpt" "\$ORIGIN/$(realpath -m --relative-to="$prefix/bin" "$libdir")"

step "checking that no installed text file names a build or install path"
if grep -rIlF -e "$src" -e "$build" -e "$scratch" "$prefix"; then
  fail "the files above name $src, $build or $scratch: the package cannot move"
fi

step "building hello against $prefix with CMake and running it in a clean environment"
build_with_cmake "$prefix" "$scratch/hello"
check_hello "$scratch/hello/hello" "$prefix" "$scratch/hello.out"

moved=$scratch/elsewhere/deeper/brisk
step "copying the prefix to $moved and deleting the original"
mkdir -p "$(dirname "$moved")"
cp -a "$prefix" "$moved"
rm -rf "$prefix"
prefix=$moved; libdir=$moved/$libdir_rel
# With the original gone, the first hello must not find brisk anywhere else.
clean ldd "$scratch/hello/hello" > "$scratch/hello.moved.ldd" || true
grep -q "libbrisk_runtime.so.$soversion => not found" "$scratch/hello.moved.ldd" ||
  { cat "$scratch/hello.moved.ldd"; fail "with the original prefix gone, hello still finds libbrisk_runtime"; }
clean "$prefix/bin/brisk-ckpt" --help > "$scratch/brisk-ckpt.out" 2>&1 ||
  { cat "$scratch/brisk-ckpt.out"; fail "brisk-ckpt --help from the moved prefix"; }

step "building hello against the moved prefix with CMake"
build_with_cmake "$prefix" "$scratch/hello-moved"
check_hello "$scratch/hello-moved/hello" "$prefix" "$scratch/hello-moved.out"

step "building hello against the moved prefix with pkg-config"
pc() { clean "PKG_CONFIG_PATH=$libdir/pkgconfig" pkg-config --print-errors "$@"; }
[ "$(realpath "$(pc --variable=libdir brisk)")" = "$libdir" ] || fail "brisk.pc's libdir is not $libdir"
pc --static --libs brisk > /dev/null || fail "pkg-config --static --libs brisk"
cflags=$(pc --cflags brisk) || fail "pkg-config --cflags brisk"
libs=$(pc --libs brisk) || fail "pkg-config --libs brisk"
# shellcheck disable=SC2086 # the flags are words
clean c++ $cflags "$src/examples/hello/hello.cpp" -o "$scratch/hello-pc" $libs > "$scratch/hello-pc.build.log" 2>&1 ||
  { cat "$scratch/hello-pc.build.log"; fail "c++ \$(pkg-config --cflags brisk) hello.cpp \$(pkg-config --libs brisk)"; }
check_hello "$scratch/hello-pc" "$prefix" "$scratch/hello-pc.out"

step "PASS"
