#!/usr/bin/env bash
# tests/install/test_man.sh SOURCE_DIR -- the man pages under man/ render without a warning
# (groff -man -ww, and man -l when man-db is there), kite.3 covers every KITE_* variable
# the core reads (src/) and every function include/kite.h declares, and kite-lab.1 every
# option of `kite-lab advise`.
# Exit 77 (skip) without groff.
set -uo pipefail
src=$1
command -v groff >/dev/null || { echo "SKIP: groff is not installed"; exit 77; }
fails=0
shopt -s nullglob
pages=("$src"/man/*.[1-8])
[ "${#pages[@]}" = 5 ] || { echo "FAIL: want kite.3, kite-replay.1, kite-trace.1, kite-lab.1, kite-stats.1 in $src/man, found ${#pages[@]} pages"; fails=$((fails + 1)); }
for page in "${pages[@]}"; do
  before=$fails
  err=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" 2>&1)
  [ -z "$err" ] || { echo "FAIL: groff warnings in $page:"; echo "$err"; fails=$((fails + 1)); }
  if command -v man >/dev/null; then
    err=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
    [ -z "$err" ] || { echo "FAIL: man -l warnings in $page:"; echo "$err"; fails=$((fails + 1)); }
  fi
  out=$(LC_ALL=C.UTF-8 MANWIDTH=80 groff -man -Tutf8 "$page" 2>/dev/null | grep -c .)
  [ "$out" -gt 20 ] || { echo "FAIL: $page renders to $out lines"; fails=$((fails + 1)); }
  [ "$fails" != "$before" ] || echo "ok: $(basename "$page")"
done
vars=$(grep -rhoE '"KITE_[A-Z_]+"' "$src/src" | tr -d '"' | sort -u)
[ -n "$vars" ] || { echo "FAIL: no KITE_* variable found in $src/src"; fails=$((fails + 1)); }
# a name is described by its own .B line, or by a .B line naming a prefix ending in _ (the
# page's "a name ending in _ stands for every name it begins")
prefixes=$(grep -oE '^\.B KITE_[A-Z_]*_$' "$src/man/kite.3" | cut -c4-)
for v in $vars; do
  grep -q "^\.B $v\$" "$src/man/kite.3" && continue
  covered=0
  for p in $prefixes; do case "$v" in "$p"*) covered=1 ;; esac; done
  [ "$covered" = 1 ] || { echo "FAIL: kite.3 does not describe $v"; fails=$((fails + 1)); }
done
fns=$(grep -oE '\bkite_[a-z_]+\(' "$src/include/kite.h" | tr -d '(' | sort -u)
[ -n "$fns" ] || { echo "FAIL: no kite_* function found in $src/include/kite.h"; fails=$((fails + 1)); }
for fn in $fns; do
  grep -q "\b$fn\b" "$src/man/kite.3" || { echo "FAIL: kite.3 does not mention $fn"; fails=$((fails + 1)); }
done
# kite-lab.1 describes every option of `kite-lab advise -h`
opts=$(python3 "$src/tools/kite-lab" advise -h | grep -oE '^  (-[a-z], )?--[a-z-]+' | grep -oE -- '--[a-z-]+' | sort -u)
[ -n "$opts" ] || { echo "FAIL: kite-lab advise -h lists no option"; fails=$((fails + 1)); }
for o in $opts; do
  grep -q -- "^\.BI\? .*${o//-/\\\\-}" "$src/man/kite-lab.1" || { echo "FAIL: kite-lab.1 does not describe $o"; fails=$((fails + 1)); }
done
[ "$fails" = 0 ]
