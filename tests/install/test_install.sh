#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_DIR SOURCE_DIR [PREFIX]
# Installs kite from BUILD_DIR into a temporary prefix (or uses PREFIX, an already installed
# tree, e.g. unpacked Debian packages), checks the tree, then builds tests/install's C and
# C++ programs against it three ways and runs them:
#   1. CMake find_package(kite) + kite::kite
#   2. pkg-config --cflags --libs kite
#   3. static: CMake kite::kite-static
# Each program checks its own results and that kite served its allocations (consumer.h).
# Also: the secure build and libkite-api installed (a program linked with -lkite-api through
# pkg-config keeps glibc's malloc beside kite_malloc: api_beside.c), the tools kite-lab and
# kite-stats with their man pages, run from the tree (kite-lab advise writes a report), and,
# for an install of its own, make uninstall's script leaves no file behind.
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
         kite/libkite-trace.so kite/libkite-lab.so kite/kite-trace kite/kitetrace.py \
         "libkite-secure.so.$version" "libkite-secure.so.$major" "libkite-api.so.$version" \
         "libkite-api.so.$major" libkite-api.so pkgconfig/kite-api.pc kite/kite-lab kite/advise.py \
         kite/kitewindow.py kite/kitesites.py kite/kitecommon.py kite/bench/run.py kite/kite-stats \
         kite/kite-replay kite/libkite.so kite/libkite-secure.so; do
  [ -e "$libdir/$f" ] || fail "missing $libdir/$f"
done
[ "$(readlink "$libdir/libkite.so.$major")" = "libkite.so.$version" ] || fail "libkite.so.$major link"
[ "$(readlink "$libdir/libkite.so")" = "libkite.so.$major" ] || fail "libkite.so link"
soname=$(objdump -p "$libdir/libkite.so.$version" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libkite.so.$major" ] || fail "SONAME is '$soname', want libkite.so.$major"
for f in include/kite.h include/kite/buddy.h include/kite/version.h bin/kite-replay bin/kite-trace \
         bin/kite-lab bin/kite-stats share/man/man3/kite.3 share/man/man1/kite-replay.1 \
         share/man/man1/kite-trace.1 share/man/man1/kite-lab.1 share/man/man1/kite-stats.1; do
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
  # kite-lab advise from the installed tree: its allocators are the installed kite and glibc
  "$prefix/bin/kite-lab" advise -q -n 1 --budget 0 --allocators kite,glibc,seglist -o "$tmp/advise.html" \
    --trace "$tmp/sort.trace" 2>"$tmp/advise.err" || { cat "$tmp/advise.err"; fail "installed kite-lab advise"; }
  grep -q 'data-allocator="kite"><td>kite</td><td>real malloc</td><td class="num"' "$tmp/advise.html" 2>/dev/null \
    || fail "installed kite-lab advise: no timed kite row"
  # the secure build, preloaded by its SONAME's path, serves a real program
  LD_PRELOAD="$libdir/libkite-secure.so.$major" KITE_SHOW_STATS=json sort "$tmp/in.txt" >"$tmp/sorted" 2>"$tmp/stats.json" \
    || fail "sort under the installed libkite-secure.so"
  [ "$(tr -d '\n' <"$tmp/sorted")" = ab ] || fail "sort under libkite-secure.so: wrong output"
  "$prefix/bin/kite-stats" "$tmp/stats.json" >"$tmp/stats.txt" 2>&1 && [ -s "$tmp/stats.txt" ] \
    || { cat "$tmp/stats.txt"; fail "installed kite-stats on a snapshot"; }
fi
"$prefix/bin/kite-lab" >/dev/null 2>"$tmp/lab.err" || true   # exit 2: no command
grep -q '^ *advise ' "$tmp/lab.err" || fail "installed kite-lab without a command lists no command"

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

# libkite-api through pkg-config: malloc stays glibc's, kite_malloc is kite's
# shellcheck disable=SC2046
cc -o "$tmp/api_beside" "$src/tests/install/api_beside.c" $(pkg-config --cflags --libs kite-api) -ldl \
    -Wl,-rpath,"$pc_libdir" && "$tmp/api_beside" "$(realpath "$libdir")/" || fail "libkite-api program"

# make uninstall removes every file of an install of our own
if [ -z "$given_prefix" ]; then
  bash "$src/tools/uninstall.sh" "$build/install_manifest.txt" "$prefix" >"$tmp/uninstall.log" 2>&1 \
    || { cat "$tmp/uninstall.log"; fail "uninstall"; }
  left=$(find "$prefix" \( -type f -o -type l \) | head -5)
  [ -z "$left" ] || fail "uninstall left files: $left"
fi

[ "$fails" = 0 ] && echo "install: all checks passed ($prefix)" || echo "install: $fails failed"
[ "$fails" = 0 ]
