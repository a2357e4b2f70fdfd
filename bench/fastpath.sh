#!/usr/bin/env bash
# bench/fastpath.sh [BUILD_DIR] -- instructions per malloc+free pair, per allocator and size.
#
# Runs BUILD_DIR/kite-fastpath under `valgrind --tool=callgrind` twice per (allocator, size),
# with N1 and N2 pairs, and prints (Ir2 - Ir1) / (N2 - N1): start-up and warm-up cancel out.
# Allocators: glibc (no preload), kite (BUILD_DIR/libkite.so), mimalloc
# (/usr/lib/x86_64-linux-gnu/libmimalloc.so.2) when installed. Output: a table
#   allocator size instr/pair
set -euo pipefail
usage() {
  echo "usage: bench/fastpath.sh [-h] [BUILD_DIR]"
  echo "  instructions per malloc+free pair for glibc, kite and mimalloc (when installed),"
  echo "  counted with callgrind; BUILD_DIR (default: build) holds kite-fastpath and libkite.so."
  echo "  Environment: FASTPATH_N1, FASTPATH_N2 (pair counts), FASTPATH_SIZES (sizes)."
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -*) echo "fastpath.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }
BUILD=${1:-build}
BIN="$BUILD/kite-fastpath"
N1=${FASTPATH_N1:-100000}
N2=${FASTPATH_N2:-200000}
SIZES=${FASTPATH_SIZES:-"16 64 256 1024 4096"}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
[ -x "$BIN" ] || { echo "$BIN not found: build the kite-fastpath target" >&2; exit 1; }

declare -a NAMES=(glibc kite)
declare -A PRELOAD=([glibc]="" [kite]="$(realpath "$BUILD/libkite.so")")
MI=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
if [ -e "$MI" ]; then NAMES+=(mimalloc); PRELOAD[mimalloc]=$MI; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# total instructions of one run
ir() { # preload n size
  local out="$tmp/cg.out"
  if [ -n "$1" ]; then
    LD_PRELOAD="$1" valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" "$2" "$3" >/dev/null 2>&1
  else
    valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" "$2" "$3" >/dev/null 2>&1
  fi
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

printf "%-10s %6s %10s\n" allocator size instr/pair
for name in "${NAMES[@]}"; do
  for size in $SIZES; do
    a=$(ir "${PRELOAD[$name]}" "$N1" "$size")
    b=$(ir "${PRELOAD[$name]}" "$N2" "$size")
    awk -v n="$name" -v s="$size" -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" \
      'BEGIN { printf "%-10s %6d %10.1f\n", n, s, (b - a) / (n2 - n1) }'
  done
done
