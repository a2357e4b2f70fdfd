#!/usr/bin/env bash
# tests/introspect/test_valgrind.sh BUILD_DIR -- memcheck sees kite's blocks through the
# kite-valgrind library: the planted leak (vg_leak: 4000 bytes in 4 blocks definitely lost,
# allocated in leak_some) and the planted use after free (vg_uaf: an invalid read inside a
# block free'd, freed by the library's free, not memcheck's) are reported, and a clean churning program (vg_clean) has no error, no leak.
set -uo pipefail
build=$1
command -v valgrind >/dev/null || { echo "SKIP: valgrind is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
vg() { # name: run under memcheck, log in $tmp/name.log
  # nouserintercepts: memcheck must not put its own malloc in place of the library's
  valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts \
    --leak-check=full --show-leak-kinds=definite --error-exitcode=99 \
    --log-file="$tmp/$1.log" "$build/$1" >"$tmp/$1.out" 2>&1
}

vg vg_leak; rc=$?
grep -q "definitely lost: 4,000 bytes in 4 blocks" "$tmp/vg_leak.log" && grep -q "leak_some" "$tmp/vg_leak.log" \
  && [ "$rc" = 99 ] && ok "planted leak: 4,000 bytes in 4 blocks definitely lost, in leak_some" \
  || { bad "planted leak not reported (rc $rc)"; cat "$tmp/vg_leak.log"; }

vg vg_uaf; rc=$?
grep -q "Invalid read of size 1" "$tmp/vg_uaf.log" && grep -q "40 bytes inside a block of size 64 free'd" "$tmp/vg_uaf.log" \
  && grep -Eq "[(/]valgrind.c:" "$tmp/vg_uaf.log" \
  && [ "$rc" = 99 ] && ok "planted use after free: invalid read 40 bytes inside a freed block of 64 (kite's free)" \
  || { bad "planted use after free not reported (rc $rc)"; cat "$tmp/vg_uaf.log"; }

vg vg_clean; rc=$?
grep -q "ERROR SUMMARY: 0 errors" "$tmp/vg_clean.log" && grep -q "definitely lost: 0 bytes\|All heap blocks were freed" "$tmp/vg_clean.log" \
  && [ "$rc" = 0 ] && ok "clean program: no error, no leak" \
  || { bad "clean program reported (rc $rc)"; head -60 "$tmp/vg_clean.log"; }
[ "$fails" = 0 ]
