#!/usr/bin/env bash
# tests/unit/test_no_libgcc.sh NM FILE... -- none of FILE (kite-buddy's archive, libkite.so)
# calls or carries libgcc's bit-counting helpers (__popcountdi2, __clzdi2, __ctzdi2,
# __ffsdi2, __paritydi2 and their si/ti forms). gcc emits them for __builtin_popcountll and
# friends where the target has no instruction (baseline x86-64, no -mpopcnt): an archive then
# needs libgcc at link time for a function kite can compute in place (bits.h's
# _kite_popcount64), and a shared library carries a private copy of it and pays a call per
# count. Undefined (U) in an archive, defined locally (t) in a shared library: both fail.
set -euo pipefail
nm=$1; shift
fails=0
for f in "$@"; do
  hits=$("$nm" "$f" 2>/dev/null | grep -E ' __(popcount|clz|ctz|ffs|parity)[sdt]i2$' || true)
  if [ -n "$hits" ]; then
    echo "FAIL: $f: libgcc bit helpers:"; echo "$hits" | sort -u
    fails=$((fails + 1))
  else
    echo "ok: $f"
  fi
done
[ "$fails" = 0 ] || exit 1
echo "no libgcc bit helpers in $# files"
