#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_DIR SOURCE_DIR [PREFIX]
# Installs kite from BUILD_DIR into a temporary prefix (or uses PREFIX, an already installed
# tree, e.g. unpacked Debian packages), checks the tree, then builds tests/install's C and
# C++ programs against it three ways and runs them:
#   1. CMake find_package(kite) + kite::kite
#   2. pkg-config --cflags --libs kite
#   3. static: CMake kite::kite-static
# Each program checks its own results and that kite served its allocations (consumer.h).
# Without pkg-config (.ci/run installs it) the rest runs and the test ends as skipped (77).
set -euo pipefail
build=${1:+$(realpath "$1")}; src=$(realpath "$2"); given_prefix=${3:-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if [ -n "$given_prefix" ]; then
  prefix=$(realpath "$given_prefix")
else
  prefix=$tmp/prefix
  cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
fi
version=$(sed -n 's/^#define KITE_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/kite/version.h")
major=${version%%.*}
[ -n "$version" ] || fail "no KITE_VERSION_STRING in include/kite/version.h"
libdir=$(dirname "$(find "$prefix" -name "libkite.so.$version" | head -1)")
[ -f "$libdir/libkite.so.$version" ] || { echo "FAIL: libkite.so.$version not installed"; exit 1; }

# the tree
for f in "libkite.so.$version" "libkite.so.$major" libkite.so libkite.a pkgconfig/kite.pc \
         cmake/kite/kiteConfig.cmake cmake/kite/kiteConfigVersion.cmake cmake/kite/kiteTargets.cmake \
         kite/libkite-trace.so kite/libkite-lab.so kite/kite-trace kite/kitetrace.py; do
  [ -e "$libdir/$f" ] || fail "missing $libdir/$f"
done
[ "$(readlink "$libdir/libkite.so.$major")" = "libkite.so.$version" ] || fail "libkite.so.$major link"
[ "$(readlink "$libdir/libkite.so")" = "libkite.so.$major" ] || fail "libkite.so link"
soname=$(objdump -p "$libdir/libkite.so.$version" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libkite.so.$major" ] || fail "SONAME is '$soname', want libkite.so.$major"
for f in include/kite.h include/kite/buddy.h include/kite/version.h bin/kite-replay bin/kite-trace \
         share/man/man3/kite.3 share/man/man1/kite-replay.1 share/man/man1/kite-trace.1; do
  [ -e "$prefix/$f" ] || [ -e "$prefix/$f.gz" ] || fail "missing $prefix/$f"   # .gz: Debian's
done
# the installed tools run from the tree
"$prefix/bin/kite-replay" --list | grep -qx kite || fail "installed kite-replay --list has no kite"
"$prefix/bin/kite-trace" -h | grep -q '^usage: kite-trace' || fail "installed kite-trace -h"
if command -v sort >/dev/null; then
  printf 'b\na\n' >"$tmp/in.txt"
  (cd "$tmp" && "$prefix/bin/kite-trace" -o "$tmp/sort.trace" -- sort in.txt >/dev/null 2>"$tmp/kt.err") \
    || { cat "$tmp/kt.err"; fail "installed kite-trace could not capture sort"; }
  "$prefix/bin/kite-replay" --check --kite "$tmp/sort.trace" >/dev/null || fail "replay of the installed capture"
fi

run() { # name program args...
  local name=$1 rc=0; shift
  "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "ok: $name: $(head -1 "$tmp/$name.out")"
    grep -q "^kite statistics" "$tmp/$name.out" || fail "$name printed no kite statistics"
  else
    cat "$tmp/$name.out"; fail "$name exited $rc"
  fi
}

# 1 and 3: CMake
cmake -S "$src/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/cmake.log" 2>&1 && cmake --build "$tmp/cmake" -j 2 >>"$tmp/cmake.log" 2>&1 \
  || { cat "$tmp/cmake.log"; fail "CMake consumer build"; }
if [ -x "$tmp/cmake/app_c" ]; then
  run cmake-c "$tmp/cmake/app_c" shared "$libdir/"
  run cmake-cxx "$tmp/cmake/app_cxx" shared "$libdir/"
  run static-c "$tmp/cmake/app_c_static" static
  run static-cxx "$tmp/cmake/app_cxx_static" static
  ! objdump -p "$tmp/cmake/app_c_static" | grep -q 'NEEDED.*libkite' || fail "static app needs libkite.so"
fi

# 2: pkg-config
if ! command -v pkg-config >/dev/null; then
  echo "SKIP: pkg-config is not installed: the pkg-config builds were not tried"
  [ "$fails" = 0 ] && exit 77
  exit 1
fi
# an unpacked package says prefix=/usr: look at it through a sysroot
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pc_prefix=$(pkg-config --variable=prefix kite)
if [ "$pc_prefix" != "$prefix" ] && [ "${prefix%"$pc_prefix"}" != "$prefix" ]; then
  export PKG_CONFIG_SYSROOT_DIR=${prefix%"$pc_prefix"}
fi
[ "$(pkg-config --modversion kite)" = "$version" ] || fail "pkg-config --modversion kite"
pc_libdir=$(pkg-config --variable=libdir kite)
sysroot=${PKG_CONFIG_SYSROOT_DIR:-}
[ -z "$sysroot" ] || [ "${pc_libdir#"$sysroot"}" != "$pc_libdir" ] || pc_libdir=$sysroot$pc_libdir
[ "$(realpath "$pc_libdir")" = "$(realpath "$libdir")" ] || fail "kite.pc libdir $pc_libdir, want $libdir"
# shellcheck disable=SC2046
cc -o "$tmp/pc_c" "$src/tests/install/app.c" $(pkg-config --cflags --libs kite) -Wl,-rpath,"$pc_libdir" \
  && run pkg-config-c "$tmp/pc_c" shared "$libdir/" || fail "pkg-config C build"
# shellcheck disable=SC2046
c++ -o "$tmp/pc_cxx" "$src/tests/install/app.cpp" $(pkg-config --cflags --libs kite) -Wl,-rpath,"$pc_libdir" \
  && run pkg-config-cxx "$tmp/pc_cxx" shared "$libdir/" || fail "pkg-config C++ build"

[ "$fails" = 0 ] && echo "install: all checks passed ($prefix)" || echo "install: $fails failed"
[ "$fails" = 0 ]
