#!/usr/bin/env bash
# tests/bench/test_seed_tables.sh BUILD_DIR -- bench/seed_tables.py end to end at tiny N.
#
# Checks: (1) with the real allocators both tables (HWX, SYS) list IVEC and LIST with a
# numeric time per cell, numeric Speedup and Difference, the seed 002 fixed-input table,
# the machine/command note, no FAIL, exit 0, and the markdown file (-o) holds the same rows;
# (2) a bogus --build-dir is a clear error with exit status 2; (3) a crashing "OPT" (a
# build dir whose libkite.so is the test-only libkite-bench-crash.so) shows FAIL cells,
# never a time, names the signal, and exits 1.
set -u
build=${1:?usage: test_seed_tables.sh BUILD_DIR}
build=$(cd "$build" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
script="$here/bench/seed_tables.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
check() { # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then
    echo "PASS $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name"
    fail=$((fail + 1))
  fi
}
has() { grep -Eq -- "$1" "$2"; }
hasnt() { ! grep -Eq -- "$1" "$2"; }

num='-?[0-9]+\.[0-9]+'
row() { # row TEST: a seed-001 row with N, two times, speedup, difference
  echo "^\\| +$1 +\\| +200 +\\| +$num""s +\\| +$num""s +\\| +$num +\\| +$num +\\|$"
}

# (1) the real thing
python3 "$script" --build-dir "$build" --target-seconds 0.05 --reps 1 --n-hwx 200 \
  --n-sys 200 -o "$tmp/t.md" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
check "exit status 0" test "$rc" -eq 0
check "HWX table title" has '^Comparing to the hwx allocator:$' "$tmp/out"
check "SYS table title" has '^Comparing to the system \(sys\) allocator:$' "$tmp/out"
check "HWX header" has '^\| +Test +\| +N +\| +HWX +\| +OPT +\| +Speedup +\| +Difference +\|$' "$tmp/out"
check "SYS header" has '^\| +Test +\| +N +\| +SYS +\| +OPT +\| +Speedup +\| +Difference +\|$' "$tmp/out"
check "IVEC rows in both tables" test "$(grep -Ec "$(row IVEC)" "$tmp/out")" -eq 2
check "LIST rows in both tables" test "$(grep -Ec "$(row LIST)" "$tmp/out")" -eq 2
check "seed 002 ivec-10k row" has "^\\| +ivec-10k input +\\| +$num""s +\\| +$num""s +\\| +$num""s +\\|$" "$tmp/out"
check "seed 002 list-2k row" has "^\\| +list-2k input +\\| +$num""s +\\| +$num""s +\\| +$num""s +\\|$" "$tmp/out"
check "speedup formulas" test "$(grep -Ec '^Speedup = (HWX|SYS) exec time / OPT exec time$' "$tmp/out")" -eq 2
check "machine and command note" has '^machine: .*; command: bench/seed_tables.py --build-dir ' "$tmp/out"
check "no FAIL" hasnt 'FAIL' "$tmp/out"
check "markdown rows" test "$(grep -Ec "^\\| (IVEC|LIST) \\| 200 \\| $num""s \\| $num""s \\| $num \\| $num \\|$" "$tmp/t.md")" -eq 4

# (2) a bogus build dir
python3 "$script" --build-dir "$tmp/nowhere" --reps 1 >"$tmp/out2" 2>"$tmp/err2"
rc=$?
cat "$tmp/err2"
check "bogus --build-dir exits 2" test "$rc" -eq 2
check "bogus --build-dir message" has "^seed_tables.py: error: --build-dir .*nowhere: missing libkite.so" "$tmp/err2"
check "bogus --build-dir prints no table" test ! -s "$tmp/out2"

# (3) a crashing OPT
if [ -f "$build/libkite-bench-crash.so" ]; then
  mkdir "$tmp/crash"
  for f in libkite-lab.so kite-wl-collatz-ivec kite-wl-collatz-list; do
    ln -s "$build/$f" "$tmp/crash/$f"
  done
  ln -s "$build/libkite-bench-crash.so" "$tmp/crash/libkite.so"
  KITE_BENCH_CRASH_AFTER=20 python3 "$script" --build-dir "$tmp/crash" --reps 1 --n-hwx 200 \
    --n-sys 200 --no-seed002 >"$tmp/out3" 2>&1
  rc=$?
  cat "$tmp/out3"
  check "crashing OPT exits 1" test "$rc" -eq 1
  check "crashing OPT cells are FAIL" test "$(grep -Ec '^\| +(IVEC|LIST) +\| +200 +\| +[0-9.]+s +\| +FAIL +\| +FAIL +\| +FAIL +\|$' "$tmp/out3")" -eq 4
  check "crash reason reported" has '^  IVEC OPT N=200: killed by signal 11$' "$tmp/out3"
else
  echo "SKIP crashing OPT (no libkite-bench-crash.so)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
