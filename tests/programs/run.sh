#!/usr/bin/env bash
# tests/programs/run.sh BUILD_DIR -- real programs on kite.
#
# Each program runs once on the system allocator (the reference) and once on kite
# (LD_PRELOAD=BUILD_DIR/libkite.so, or a build linked with libkite.so / libkite.a). Its
# output must be byte-identical, and kite must have served it: with KITE_SHOW_STATS=1 kite
# prints its statistics to stderr at exit, and the check requires that summary with a
# non-zero allocation count. A negative control shows that the check can fail: the
# reference run gets KITE_SHOW_STATS=1 too and must print no such summary.
#
# Programs: python3 (an allocation-heavy script with a digest), sort (200k seeded random
# lines, external merge, 2 threads), a C++ new/delete churn (preloaded and linked), xz -T2
# (compress + decompress round trip), sqlite3 (if installed), gcc compiling a C file, a
# pthread C program (preloaded and linked statically with libkite.a).
# Under an emulator (KITE_TEST_EMULATOR: the aarch64 build under qemu-user, tests/test.h)
# the project's own programs (3 and 7) run through it, kite preloaded into the emulated
# program (qemu's -E, so that the x86-64 emulator itself does not load an aarch64 library);
# Debian's programs (1, 2, 4, 5, 6) are x86-64 ones and are skipped, saying so.
# Prints one line per check and ends with "N passed, N failed"; exit status 1 on failure.
set -u
B=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
LIB="$B/libkite.so"
T=$(mktemp -d "${TMPDIR:-/tmp}/kite-programs.XXXXXX")
trap 'rm -rf "$T"' EXIT
export LC_ALL=C
unset LD_PRELOAD KITE_SHOW_STATS
passed=0
failed=0
# EMU: the emulator's words (empty on the build machine itself)
read -r -a EMU <<<"${KITE_TEST_EMULATOR:-}"
emulated() { [ ${#EMU[@]} -gt 0 ]; }
# preload CMD...: CMD with libkite.so preloaded
preload() {
  if emulated; then "${EMU[@]}" -E LD_PRELOAD="$LIB" "$@"; else env LD_PRELOAD="$LIB" "$@"; fi
}

ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }

# has_stats FILE: kite's exit summary is in FILE ("kite statistics", then lines such as
# "  small allocations: N ...", "  large allocations: N") with a non-zero allocation count.
has_stats() {
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
if not re.search(r"^kite statistics", text, re.M):
    sys.exit(1)
counts = [int(n) for n in re.findall(r"^\s*(?:small|large|huge) allocations: (\d+)", text, re.M)]
sys.exit(0 if counts and sum(counts) > 0 else 1)
EOF
}

# check NAME REF_OUT KITE_OUT KITE_ERR: identical outputs and stats present.
check() {
  local name=$1 ref=$2 out=$3 err=$4
  if ! cmp -s "$ref" "$out"; then
    bad "$name" "output differs from the reference run"
    diff "$ref" "$out" | head -5
  elif [ ! -s "$ref" ]; then
    bad "$name" "empty output"
  elif ! has_stats "$err"; then
    bad "$name" "no kite statistics on stderr (not served by kite?)"
    head -20 "$err"
  else
    ok "$name"
  fi
}

# run_pair NAME CMD...: the reference run (with the negative control), then under preload.
run_pair() {
  local name=$1; shift
  KITE_SHOW_STATS=1 ${EMU[@]+"${EMU[@]}"} "$@" >"$T/$name.ref" 2>"$T/$name.ref.err" </dev/null
  local rc_ref=$?
  if has_stats "$T/$name.ref.err"; then
    bad "$name-control" "kite statistics without kite: the check proves nothing"
  else
    ok "$name-control"
  fi
  KITE_SHOW_STATS=1 preload "$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
  local rc=$?
  if [ $rc -ne $rc_ref ]; then
    bad "$name" "exit status $rc under kite, $rc_ref without"
    tail -5 "$T/$name.err"
  else
    check "$name" "$T/$name.ref" "$T/$name.out" "$T/$name.err"
  fi
}

[ -f "$LIB" ] || { bad "libkite.so" "missing in $B"; echo "$passed passed, $failed failed"; exit 1; }

if emulated; then
  echo "skip python3, sort, xz, sqlite3, gcc (this machine's programs, not built for the emulated target)"
else
# 1. python3 (Debian's, not a wrapper script)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
run_pair python3 "$PY" "$HERE/alloc_heavy.py" 40

# 2. sort: 200k seeded random lines, external merge through temp files, 2 threads
awk 'BEGIN { srand(42); for (i = 0; i < 200000; i++)
  printf "%08x %d %s\n", int(rand() * 4294967295), i, substr("abcdefghijklmnopqrstuvwxyz", 1 + int(rand() * 26)) }' \
  >"$T/lines.txt"
mkdir -p "$T/sorttmp"
run_pair sort sort -S 1M --parallel=2 -T "$T/sorttmp" "$T/lines.txt"
if [ "$(wc -l <"$T/sort.out")" -ne 200000 ]; then bad sort-lines "sorted output lost lines"; else ok sort-lines; fi

# 4. xz -T2 round trip: compressed bytes equal xz's on glibc, decompression gives the input
if command -v xz >/dev/null; then
  xz -T2 -1 -c "$T/lines.txt" >"$T/xz.ref"
  KITE_SHOW_STATS=1 preload xz -T2 -1 -c "$T/lines.txt" >"$T/xz.out" 2>"$T/xz.err"
  check xz-compress "$T/xz.ref" "$T/xz.out" "$T/xz.err"
  KITE_SHOW_STATS=1 preload xz -T2 -d -c "$T/xz.out" >"$T/unxz.out" 2>"$T/unxz.err"
  check xz-decompress "$T/lines.txt" "$T/unxz.out" "$T/unxz.err"
else
  echo "skip xz (not installed)"
fi

# 5. sqlite3: a table of 50k rows built by a recursive CTE, an index, aggregates
if command -v sqlite3 >/dev/null; then
  cat >"$T/q.sql" <<'EOF'
CREATE TABLE t(a INTEGER, b TEXT, c REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000)
INSERT INTO t SELECT i, printf('row-%d-%s', i, hex(i * 7919)), i * 0.5 FROM n;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(a), sum(length(b)), total(c) FROM t;
SELECT b FROM t WHERE a % 9973 = 0 ORDER BY b;
SELECT substr(b, 1, 6), count(*) FROM t GROUP BY substr(b, 1, 6) ORDER BY 2 DESC, 1 LIMIT 5;
EOF
  run_pair sqlite3 sqlite3 -batch ":memory:" ".read $T/q.sql"
else
  echo "skip sqlite3 (not installed)"
fi

# 6. gcc (driver, cc1, as: every process preloaded) compiles a C file; the object files
#    must be identical
if command -v gcc >/dev/null; then
  run_pair gcc gcc -O2 -c "$HERE/mt_churn.c" -o /dev/stdout
else
  echo "skip gcc (not installed)"
fi
fi

# 3. C++ new/delete churn: preloaded, and linked with libkite.so
run_pair cxx "$B/core_prog_cxx"
KITE_SHOW_STATS=1 ${EMU[@]+"${EMU[@]}"} "$B/core_prog_cxx_linked" >"$T/cxx_linked.out" 2>"$T/cxx_linked.err" </dev/null
check cxx-linked "$T/cxx.ref" "$T/cxx_linked.out" "$T/cxx_linked.err"

# 7. a pthread C program: preloaded, and linked statically with libkite.a
run_pair mt "$B/core_prog_mt"
KITE_SHOW_STATS=1 ${EMU[@]+"${EMU[@]}"} "$B/core_prog_mt_static" >"$T/mt_static.out" 2>"$T/mt_static.err" </dev/null
check mt-static "$T/mt.ref" "$T/mt_static.out" "$T/mt_static.err"
if grep -q "served by kite: yes" "$T/mt_static.err"; then ok mt-static-owns; else bad mt-static-owns "malloc is not kite's in the static build"; fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
