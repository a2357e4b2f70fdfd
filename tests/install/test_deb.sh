#!/usr/bin/env bash
# tests/install/test_deb.sh SOURCE_DIR [OUT_DIR] -- build kite's Debian packages and test them
# (make deb).
#   1. copies the source tree (git's tracked and unignored files) to a temp dir: dpkg-buildpackage
#      writes ../*.deb, so it must not run in the repository itself;
#   2. dpkg-buildpackage -b -us -uc: libkite0, libkite-dev, kite-tools;
#   3. lintian on the result: any error or warning that debian/ does not override fails;
#   4. dpkg -x of the three packages into a scratch root, then tests/install/test_install.sh
#      against root/usr: the tree, the installed tools, and C and C++ programs built with
#      find_package(kite), pkg-config and kite::kite-static, run and checked.
# The .deb files are copied to OUT_DIR (default: build-deb). Exit 77 (skip) without debhelper, dpkg-dev, fakeroot,
# lintian or pkg-config (.ci/run installs them). Takes about 1.5 minutes on 2 cores.
set -euo pipefail
src=$(realpath "$1"); out=$(realpath -m "${2:-$src/build-deb}")
for t in dpkg-buildpackage dh fakeroot lintian pkg-config; do
  command -v "$t" >/dev/null || { echo "SKIP: $t is missing (apt-get install debhelper dpkg-dev fakeroot lintian pkg-config)"; exit 77; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

version=$(sed -n 's/^project(kite VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
debver=$(sed -n '1s/^kite (\([^)]*\)).*/\1/p' "$src/debian/changelog")
[ "${debver%-*}" = "$version" ] || { echo "FAIL: debian/changelog is $debver, the project is $version"; exit 1; }

mkdir "$tmp/kite-$version"
if command -v git >/dev/null && git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - --no-recursion) \
    | tar -xf - -C "$tmp/kite-$version"
else  # not a git checkout: everything but build outputs
  tar -C "$src" -cf - --exclude='./build*' --exclude=./.venv --exclude=./.git --exclude='./obj-*' \
      --exclude=./debian/.debhelper . | tar -xf - -C "$tmp/kite-$version"
fi
echo "== dpkg-buildpackage -b -us -uc (in $tmp/kite-$version)"
(cd "$tmp/kite-$version" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
   dpkg-buildpackage -b -us -uc) >"$tmp/build.log" 2>&1 || { tail -60 "$tmp/build.log"; exit 1; }
mkdir -p "$out"
cp "$tmp"/*.deb "$out"/
ls -l "$out"/*.deb

echo "== lintian"
changes=$(ls "$tmp"/kite_*.changes)
lintian --display-info --pedantic "$changes" >"$tmp/lintian.log" 2>&1 || true
cat "$tmp/lintian.log"
fails=0
if grep -E '^(E|W): ' "$tmp/lintian.log"; then
  echo "FAIL: lintian errors or warnings (above)"; fails=1
fi

echo "== unpacked into a scratch root"
root=$tmp/root
for p in libkite0 libkite-dev kite-tools; do
  deb=$(ls "$tmp"/${p}_"$debver"_*.deb)
  dpkg -x "$deb" "$root"
  echo "$(basename "$deb"): $(dpkg-deb -c "$deb" | wc -l) entries"
done
bash "$src/tests/install/test_install.sh" "" "$src" "$root/usr" || fails=1
[ "$fails" = 0 ] && echo "test_deb: packages built, lintian clean, consumer programs pass"
[ "$fails" = 0 ]
