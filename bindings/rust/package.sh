#!/usr/bin/env bash
# bindings/rust/package.sh [CARGO_PACKAGE_ARGS...] -- `cargo package` of kite's crates (kite-sys
# and kite; kite-bench is not published) with kite-sys self-contained: the C sources its build
# script compiles are staged into bindings/rust/kite-sys/kite-c/ first, so the .crate carries
# them and builds with no kite checkout and no KITE_SOURCE_DIR (kite-sys/build.rs takes the
# staged copy where the crate is not part of a checkout: an unpacked package). kite-c/ is
# generated, git-ignored (never committed beside the real src/ and include/), and removed
# again when this script ends, however it ends; builds in the checkout never read it.
#   kite-c/src/**.{c,h}     src/ and src/os/ (src/gen/ is a table generator, not the core)
#   kite-c/include/**.h     the public headers
#   kite-c/CMakeLists.txt   only the top-level project() line: the version, which build.rs reads
# Extra arguments go to cargo package (--offline, --no-verify, --list, ...). The .crate files are
# copied to $CARGO_TARGET_DIR/package (default bindings/rust/target/package).
# cargo counts the staged (ignored yet packaged) files as uncommitted changes, so it is always
# passed --allow-dirty; the check it stands for is made here instead: the files the package is
# made from (src/, include/, CMakeLists.txt, bindings/rust/) must be committed, unless
# --allow-dirty is given here too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
stage="$here/kite-sys/kite-c"

allow_dirty=0
for a in "$@"; do [ "$a" = --allow-dirty ] && allow_dirty=1; done
if [ "$allow_dirty" = 0 ] && git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  dirty="$(git -C "$root" status --porcelain -- src include CMakeLists.txt bindings/rust)"
  if [ -n "$dirty" ]; then
    echo "package.sh: uncommitted changes in what the package is made from (--allow-dirty to go on):" >&2
    echo "$dirty" >&2
    exit 1
  fi
fi

unset KITE_SOURCE_DIR   # the package must build from what it carries, not from a checkout
# cargo verifies kite against the just-packaged kite-sys through a temporary registry in the
# target directory, and unpacks it under $CARGO_HOME/registry/src/<hash of that registry's
# path>/. An unpacked copy already there is reused as it is, so a second run with the same
# target directory verified against the first run's kite-sys (seen: a build.rs of before
# kite-c/). Hence a new target directory each run; the .crate files are copied to the usual
# place after. The unpacked copies stay in cargo's cache (its automatic cleaning removes
# sources unused for a month): removing them here could hit another run's.
target=$(realpath -m "${CARGO_TARGET_DIR:-$here/target}")
mkdir -p "$target/package"
work=$(mktemp -d "$target/package-run.XXXXXX")
rm -rf "$stage"
trap 'rm -rf "$stage" "$work"' EXIT
mkdir -p "$stage/src/os" "$stage/include/kite"
for d in src src/os include include/kite; do
  find "$root/$d" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) -exec cp {} "$stage/$d/" \;
done
{
  echo "# kite's version for kite-sys/build.rs: the project() line of kite's CMakeLists.txt,"
  echo "# copied by bindings/rust/package.sh (this is not a build file)"
  grep -m1 '^project(kite VERSION ' "$root/CMakeLists.txt"
} >"$stage/CMakeLists.txt"

cd "$here"
[ "$allow_dirty" = 1 ] || set -- --allow-dirty "$@"
CARGO_TARGET_DIR=$work cargo package --workspace --exclude kite-bench "$@"
for f in "$work"/package/*.crate; do   # none with --list
  [ -f "$f" ] && cp "$f" "$target/package/" && echo "package.sh: $target/package/$(basename "$f")"
done
exit 0
