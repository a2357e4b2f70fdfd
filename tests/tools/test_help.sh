#!/usr/bin/env bash
# tests/tools/test_help.sh BUILD_DIR SOURCE_DIR -- every tool answers -h and --help with its
# usage on stdout and exit 0, and a bad option with its usage on stderr, nothing on stdout and
# exit 2: the built binaries (workloads, kite-bench-exec, kite-replay, kite-buddy-bench,
# kite-fastpath) and the scripts (tools/, bench/). Python scripts run with the repository's
# .venv when it exists (none needs a package for its help).
set -uo pipefail
build=$(realpath "$1"); src=$(realpath "$2")
py=$src/.venv/bin/python; [ -x "$py" ] || py=python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0 n=0

check() { # name cmd...
  local name=$1; shift
  n=$((n + 1))
  local rc
  for h in -h --help; do
    "$@" "$h" >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ "$rc" != 0 ] || ! grep -qi '^usage:' "$tmp/out" || [ -s "$tmp/err" ]; then
      echo "FAIL: $name $h: exit $rc (want 0), usage on stdout: $(grep -ci '^usage:' "$tmp/out"), stderr: $(head -c 300 "$tmp/err")"
      fails=$((fails + 1))
    fi
  done
  "$@" --no-such-option >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" != 2 ] || ! grep -qi 'usage:' "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL: $name --no-such-option: exit $rc (want 2), usage on stderr: $(grep -ci 'usage:' "$tmp/err"), stdout: $(head -c 300 "$tmp/out")"
    fails=$((fails + 1))
  else
    echo "ok: $name"
  fi
}

for exe in "$build"/kite-wl-* "$build"/kite-bench-exec "$build"/kite-replay "$build"/kite-buddy-bench \
           "$build"/kite-fastpath "$build"/kite-tables; do
  [ -x "$exe" ] || { echo "FAIL: $exe not built"; fails=$((fails + 1)); continue; }
  check "$(basename "$exe")" "$exe"
done
for s in tools/kite-trace tools/kite-lab tools/kite-lab-traces tools/kite-stats tools/trace-convert tools/gen_trace.py tools/kitetrace.py tools/lab.py tools/flame.py \
         tools/plot.py tools/gen_tables.py bench/run.py bench/seed_tables.py bench/sampling_cost.py; do
  check "$s" "$py" "$src/$s"
done
check bench/fastpath.sh bash "$src/bench/fastpath.sh"
check tools/peer-hardened-malloc bash "$src/tools/peer-hardened-malloc"
# the scripts are executable themselves (the README runs them so)
for s in tools/kite-trace tools/kite-stats tools/trace-convert tools/gen_trace.py tools/kitetrace.py tools/lab.py tools/flame.py \
         tools/plot.py tools/gen_tables.py bench/run.py bench/seed_tables.py bench/sampling_cost.py bench/fastpath.sh tools/peer-hardened-malloc; do
  [ -x "$src/$s" ] && head -1 "$src/$s" | grep -q '^#!' || { echo "FAIL: $s is not an executable script"; fails=$((fails + 1)); }
done
# every script the README names (tools/..., bench/...) is an executable script, so the
# README's command line runs as written
for s in $(grep -oE '(^|[`( ])(tools|bench)/[A-Za-z0-9_.-]+' "$src/README.md" | sed 's/^[`( ]//' | sort -u); do
  [ -f "$src/$s" ] || { echo "FAIL: README.md names $s, which is not a file"; fails=$((fails + 1)); continue; }
  [ -x "$src/$s" ] && head -1 "$src/$s" | grep -q '^#!' || { echo "FAIL: README.md names $s, not an executable script"; fails=$((fails + 1)); }
done
# kite-lab without a command lists its commands (on stderr, exit 2: no command is bad usage)
"$py" "$src/tools/kite-lab" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" != 2 ] || ! grep -q '^ *advise ' "$tmp/err"; then
  echo "FAIL: kite-lab without a command: exit $rc (want 2), its commands on stderr: $(head -c 300 "$tmp/err")"
  fails=$((fails + 1))
fi
echo "$n tools checked, $fails failures"
[ "$fails" = 0 ]
