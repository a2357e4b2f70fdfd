#!/usr/bin/env bash
# tools/uninstall.sh MANIFEST PREFIX -- `make uninstall`: removes every file and link that
# `cmake --install` listed in MANIFEST (build/install_manifest.txt) under PREFIX, then the
# directories kite alone owns there (lib*/kite, lib*/cmake/kite, include/kite) once empty.
# A path of the manifest outside PREFIX is left alone and named (an install to another prefix
# wrote that manifest). Prints one line per file removed; exit 1 when one could not be.
set -uo pipefail
[ $# = 2 ] || { echo "usage: tools/uninstall.sh MANIFEST PREFIX" >&2; exit 2; }
manifest=$1
given=${2%/}
prefix=$(cd "$2" 2>/dev/null && pwd -P) || { echo "uninstall: no directory $2" >&2; exit 1; }
rc=0
while IFS= read -r f || [ -n "$f" ]; do
  [ -n "$f" ] || continue
  case "$f" in
    "$prefix"/* | "$given"/*) ;;
    *) echo "uninstall: $f is not under $prefix (installed with another PREFIX?): left"; rc=1; continue ;;
  esac
  if [ -e "$f" ] || [ -L "$f" ]; then
    rm -f -- "$f" && echo "removed $f" || rc=1
  fi
done < "$manifest"
for d in "$given"/lib*/kite/bench "$given"/lib*/kite "$given"/lib*/*/kite/bench "$given"/lib*/*/kite \
         "$given"/lib*/cmake/kite "$given"/lib*/*/cmake/kite "$given"/include/kite; do
  [ -d "$d" ] && rmdir -- "$d" 2>/dev/null && echo "removed $d/"
done
exit $rc
