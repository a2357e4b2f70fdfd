#!/usr/bin/env bash
# bench/fastpath.sh [-h] [--docs] [BUILD_DIR] -- instructions per malloc+free, per allocator,
# loop shape and size.
#
# Runs BUILD_DIR/kite-fastpath under `valgrind --tool=callgrind` twice per (allocator,
# shape, size), with N1 and N2 pairs, and prints (Ir2 - Ir1) / (N2 - N1): start-up and
# warm-up cancel out. Shapes (bench/fastpath.c): one block live at sizes FASTPATH_SIZES;
# 64 live blocks of 16..72 bytes freeing the oldest ("ring"); malloc on one thread, free
# on another ("xthread", sizes FASTPATH_XSIZES, counted over both threads).
# Allocators: glibc (no preload), kite (BUILD_DIR/libkite.so), kite-secure
# (BUILD_DIR/libkite-secure.so, when built), and each of these when installed: mimalloc
# (Debian's libmimalloc.so.2), mimalloc3 (the cmeel-mimalloc wheel in .venv, `make venv`),
# jemalloc, tcmalloc. Output: lines "allocator shape size instr/pair", then a markdown
# table; --docs also writes that table into docs/benchmarks.md and README.md between their
# <!-- fastpath-table --> markers.
set -euo pipefail
usage() { printf 'usage: '; sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
DOCS=0
BUILD=build
for a in "$@"; do
  case "$a" in
    -h|--help) usage; exit 0 ;;
    --docs) DOCS=1 ;;
    -*) echo "fastpath.sh: unknown option '$a'" >&2; usage >&2; exit 2 ;;
    *) BUILD=$a ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$BUILD/kite-fastpath"
N1=${FASTPATH_N1:-102400}
N2=${FASTPATH_N2:-204800}
SIZES=${FASTPATH_SIZES:-"16 64 256 1024 4096"}
XSIZES=${FASTPATH_XSIZES:-"16 256"}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
[ -x "$BIN" ] || { echo "$BIN not found: build the kite-fastpath target" >&2; exit 1; }

LIBDIR=/usr/lib/x86_64-linux-gnu
ver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null | sed 's/[-+].*//' || true; }
declare -a NAMES=(glibc kite)
declare -A PRELOAD=([glibc]="" [kite]="$(realpath "$BUILD/libkite.so")")
declare -A LABEL=([glibc]="glibc $(ver libc6)" [kite]="kite")
add() { # name path label
  if [ -e "$2" ]; then NAMES+=("$1"); PRELOAD[$1]=$(realpath "$2"); LABEL[$1]=$3; fi
}
add kite-secure "$BUILD/libkite-secure.so" "kite-secure"
add mimalloc "$LIBDIR/libmimalloc.so.2" "mimalloc $(ver libmimalloc2.0) (Debian)"
MI3=$(ls "$ROOT"/.venv/lib/python3*/site-packages/cmeel.prefix/lib/libmimalloc.so.3 2>/dev/null | tail -1 || true)
MI3V=$(ls -d "$ROOT"/.venv/lib/python3*/site-packages/cmeel_mimalloc-*.dist-info 2>/dev/null | tail -1 | sed 's/.*cmeel_mimalloc-//; s/\.dist-info//' || true)
[ -n "$MI3" ] && add mimalloc3 "$MI3" "mimalloc3 $MI3V (cmeel-mimalloc)"
add jemalloc "$LIBDIR/libjemalloc.so.2" "jemalloc $(ver libjemalloc2)"
add tcmalloc "$LIBDIR/libtcmalloc_minimal.so.4" "tcmalloc $(ver libtcmalloc-minimal4)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# total instructions of one run (every thread)
ir() { # preload shape n [size]
  local out="$tmp/cg.out" pre=$1
  shift
  env ${pre:+LD_PRELOAD="$pre"} valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN" -s "$@" >/dev/null 2>&1
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}
per_pair() { # preload shape [size]
  local a b
  a=$(ir "$1" "$2" "$N1" ${3:+"$3"})
  b=$(ir "$1" "$2" "$N2" ${3:+"$3"})
  awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.1f", (b - a) / (n2 - n1) }'
}

res="$tmp/res"
printf "%-12s %-8s %6s %10s\n" allocator shape size instr/pair
for name in "${NAMES[@]}"; do
  for size in $SIZES; do
    v=$(per_pair "${PRELOAD[$name]}" one "$size")
    printf "%-12s %-8s %6s %10s\n" "$name" one "$size" "$v" | tee -a "$res"
  done
  v=$(per_pair "${PRELOAD[$name]}" ring)
  printf "%-12s %-8s %6s %10s\n" "$name" ring 16-72 "$v" | tee -a "$res"
  for size in $XSIZES; do
    v=$(per_pair "${PRELOAD[$name]}" xthread "$size")
    printf "%-12s %-8s %6s %10s\n" "$name" xthread "$size" "$v" | tee -a "$res"
  done
done

md="$tmp/table.md"
{
  printf "| allocator |"
  for s in $SIZES; do printf " %s B |" "$s"; done
  printf " 64 live, 16–72 B |"
  for s in $XSIZES; do printf " cross-thread %s B |" "$s"; done
  printf "\n|---|"
  for s in $SIZES; do printf -- "---:|"; done
  printf -- "---:|"
  for s in $XSIZES; do printf -- "---:|"; done
  printf "\n"
  for name in "${NAMES[@]}"; do
    printf "| %s |" "${LABEL[$name]}"
    for s in $SIZES; do printf " %s |" "$(awk -v n="$name" -v s="$s" '$1 == n && $2 == "one" && $3 == s { print $4 }' "$res")"; done
    printf " %s |" "$(awk -v n="$name" '$1 == n && $2 == "ring" { print $4 }' "$res")"
    for s in $XSIZES; do printf " %s |" "$(awk -v n="$name" -v s="$s" '$1 == n && $2 == "xthread" && $3 == s { print $4 }' "$res")"; done
    printf "\n"
  done
} > "$md"
echo
cat "$md"
if [ "$DOCS" = 1 ]; then
  python3 - "$md" "$ROOT/README.md" "$ROOT/docs/benchmarks.md" <<'PY'
import sys
table = open(sys.argv[1]).read()
intro = ("Instructions per malloc+free (callgrind, loop included, every thread counted; "
         "`bench/fastpath.sh`): one block live at each size; 64 live blocks of 8 sizes "
         "freeing the oldest; malloc on one thread and free on another.\n\n")
for path in sys.argv[2:]:
    text = open(path).read()
    a, b = text.find("<!-- fastpath-table -->"), text.find("<!-- /fastpath-table -->")
    if a < 0 or b < a:
        print(f"{path}: no <!-- fastpath-table --> block, not written", file=sys.stderr)
        continue
    body = (intro if "benchmarks.md" in path else "") + table
    open(path, "w").write(text[:a] + "<!-- fastpath-table -->\n" + body + text[b:])
    print(f"wrote {path}")
PY
fi
