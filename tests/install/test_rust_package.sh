#!/usr/bin/env bash
# tests/install/test_rust_package.sh SOURCE_DIR [CARGO]
# The Rust crates as a registry user gets them: bindings/rust/package.sh makes the .crate files
# (kite-sys with its staged C sources, kite-c/), they are unpacked into a temporary directory
# outside the checkout, and each crate's tests are built and run there, default and with the
# feature `secure`, with KITE_SOURCE_DIR unset: kite-sys must build from what its package
# carries (from /tmp/.../kite-sys-0.1.0, build.rs's checkout fallback `../../..` has no kite).
# A temporary workspace patches crates.io's kite-sys with the unpacked one, as a registry would
# serve it to kite. cargo's own verification build is skipped (--no-verify): the builds here
# check more (the tests run too, from outside the checkout). The third-party crates come from
# the same Cargo.lock as rust_cargo_test's, through cargo's cache or crates.io.
set -euo pipefail
src=$(realpath "$1"); cargo=${2:-cargo}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
unset KITE_SOURCE_DIR
export CARGO_TARGET_DIR=$tmp/target

PATH="$(dirname "$(command -v "$cargo")"):$PATH" bash "$src/bindings/rust/package.sh" --no-verify --allow-dirty >"$tmp/package.log" 2>&1 \
  || { cat "$tmp/package.log"; echo "FAIL: package.sh"; exit 1; }
[ ! -e "$src/bindings/rust/kite-sys/kite-c" ] || { echo "FAIL: package.sh left kite-sys/kite-c behind"; exit 1; }

ws=$tmp/ws; mkdir "$ws"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$src/bindings/rust/Cargo.toml")
for c in kite-sys kite; do
  tar -xzf "$CARGO_TARGET_DIR/package/$c-$version.crate" -C "$ws"
done
# what the package carries: the C sources and the header build.rs compiles and tests read
for f in kite-c/include/kite.h kite-c/include/kite/buddy.h kite-c/src/alloc.c kite-c/src/os/linux.c \
         kite-c/CMakeLists.txt; do
  [ -f "$ws/kite-sys-$version/$f" ] || { echo "FAIL: kite-sys-$version.crate lacks $f"; exit 1; }
done
n_src=$(find "$src/src" "$src/src/os" -maxdepth 1 -name '*.c' | wc -l)
n_pkg=$(find "$ws/kite-sys-$version/kite-c/src" -name '*.c' | wc -l)
[ "$n_src" = "$n_pkg" ] || { echo "FAIL: $n_pkg C files packaged, $n_src in src/ and src/os/"; exit 1; }

cat >"$ws/Cargo.toml" <<TOML
[workspace]
resolver = "2"
members = ["kite-sys-$version", "kite-$version"]
[patch.crates-io]
kite-sys = { path = "kite-sys-$version" }
TOML
cp "$src/bindings/rust/Cargo.lock" "$ws/"
cd "$ws"
echo "== cargo test (from the unpacked packages in $ws)"
"$cargo" test 2>&1 | tee "$tmp/test.log" | grep -E '^(test result|error|FAIL)' || true
[ "${PIPESTATUS[0]}" = 0 ] || { tail -40 "$tmp/test.log"; echo "FAIL: cargo test"; exit 1; }
echo "== cargo test --features kite/secure"
"$cargo" test --features kite/secure 2>&1 | tee "$tmp/secure.log" | grep -E '^(test result|error|FAIL)' || true
[ "${PIPESTATUS[0]}" = 0 ] || { tail -40 "$tmp/secure.log"; echo "FAIL: cargo test --features kite/secure"; exit 1; }
# the secure suite really ran the secure build (kite/tests/secure.rs is empty without it)
grep -q '^test small_blocks_come_out_of_address_order \.\.\. ok' "$tmp/secure.log" \
  || { echo "FAIL: kite/tests/secure.rs did not run"; exit 1; }
echo "rust_package: both crates build and pass their tests from their packages alone"
