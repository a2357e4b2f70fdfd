#!/usr/bin/env bash
# tests/tools/test_make_generator.sh SOURCE_DIR -- the Makefile's jobs work in a build
# directory configured earlier with the other CMake generator (a plain `cmake -B build`
# before ninja was installed, or a Ninja tree where the Makefile would pick make): cmake
# refuses a generator that differs from the one in CMakeCache.txt, so the Makefile must keep
# the one there. Each directory the Makefile configures (build, build-asan, build-tsan, the
# clang build, build-aarch64, build-musl) is configured first with the generator the Makefile
# would not pick, then its job runs; the job must pass and the cache keep that generator.
# The Makefile runs in a copy beside a tiny project (no compiler, the targets kite and
# kite-static empty, stub toolchain files), so only the Makefile's own cmake lines are
# tested. Exits 77 (skipped) without both make and ninja.
set -uo pipefail
src=$(realpath "$1")
command -v make >/dev/null && command -v ninja >/dev/null || { echo "skipped: needs make and ninja"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0

fresh() { # a tiny project beside a copy of the Makefile in $tmp/p
  rm -rf "$tmp/p"; mkdir -p "$tmp/p/cmake/toolchains" "$tmp/p/venv"
  cp "$src/Makefile" "$tmp/p/"
  cat >"$tmp/p/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(kite_make_test NONE)
add_custom_target(kite)
add_custom_target(kite-static)
CM
  : >"$tmp/p/cmake/toolchains/aarch64-linux-gnu.cmake"; : >"$tmp/p/cmake/toolchains/musl.cmake"
  : >"$tmp/p/cmake/toolchains/qemu-aarch64-run"
  : >"$tmp/p/requirements.txt"; : >"$tmp/p/constraints.txt"; touch "$tmp/p/venv/.ok"
}

# DIR JOB GENERATOR: configure DIR with GENERATOR, run `make JOB`, check the cache after
check() {
  local dir=$1 job=$2 gen=$3
  fresh
  (cd "$tmp/p" && cmake -S . -B "$dir" -G "$gen" >"$tmp/pre.log" 2>&1) || { echo "FAIL: setup: cmake -G '$gen' -B $dir"; cat "$tmp/pre.log"; fails=$((fails + 1)); return; }
  if ! (cd "$tmp/p" && make PY_VENV=venv CLANG_BUILD=build-clang "$job" >"$tmp/make.log" 2>&1); then
    echo "FAIL: make $job in $dir configured with '$gen':"; tail -5 "$tmp/make.log"; fails=$((fails + 1)); return
  fi
  local now; now=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$tmp/p/$dir/CMakeCache.txt")
  if [ "$now" != "$gen" ]; then
    echo "FAIL: make $job: $dir's generator is now '$now' (want '$gen')"; fails=$((fails + 1)); return
  fi
  echo "ok: make $job keeps $dir's '$gen'"
}

for pair in build:build build-asan:test-asan build-tsan:test-tsan build-clang:clang-build \
            build-aarch64:cross-aarch64 build-musl:musl; do
  check "${pair%%:*}" "${pair#*:}" "Unix Makefiles"
done
# and the other way round: a Ninja tree where the Makefile would pick make (no ninja on PATH
# for make itself; cmake still finds ninja by its full path recorded in the cache)
fresh
(cd "$tmp/p" && cmake -S . -B build -G Ninja >"$tmp/pre.log" 2>&1)
if (cd "$tmp/p" && make GEN= build >"$tmp/make.log" 2>&1) &&
   grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$tmp/p/build/CMakeCache.txt"; then
  echo "ok: make build keeps build's 'Ninja' where the Makefile would pick make"
else
  echo "FAIL: make build in a Ninja tree where the Makefile would pick make:"; tail -5 "$tmp/make.log"; fails=$((fails + 1))
fi

# a new directory gets Ninja, where ninja is installed
fresh
if (cd "$tmp/p" && make build >"$tmp/make.log" 2>&1) &&
   grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$tmp/p/build/CMakeCache.txt"; then
  echo "ok: make build configures a new build with 'Ninja'"
else
  echo "FAIL: make build in a new directory:"; tail -5 "$tmp/make.log"; grep CMAKE_GENERATOR: "$tmp/p/build/CMakeCache.txt"; fails=$((fails + 1))
fi

[ "$fails" = 0 ] && echo "all Makefile generator checks passed" || { echo "$fails failed"; exit 1; }
