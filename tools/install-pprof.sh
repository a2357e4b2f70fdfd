#!/usr/bin/env bash
# tools/install-pprof.sh DIR -- make sure Go's pprof (github.com/google/pprof), which the heap
# profiler's tests read kite's profiles with, is at DIR/pprof. Nothing to do when $KITE_PPROF,
# a pprof on PATH or ~/go/bin/pprof exists. Else `go install` into DIR: Go from PATH, from
# /usr/local/go, or Debian's golang-go (installed with apt-get when missing). Go 1.21 and
# later fetch the toolchain pprof's go.mod asks for; Debian 12's Go 1.19 cannot, so there the
# last pprof of spring 2023, which it builds.
set -euo pipefail
dir=${1:?usage: tools/install-pprof.sh DIR}
for c in "${KITE_PPROF:-}" "$(command -v pprof || true)" "$HOME/go/bin/pprof" "$dir/pprof"; do
  [ -n "$c" ] && [ -x "$c" ] && exit 0
done
GO=$(command -v go || true)
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
if [ -z "$GO" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "install-pprof: no Go found: installing Debian's golang-go" >&2
  $SUDO apt-get install -y -qq golang-go >/dev/null || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq golang-go; }
  GO=$(command -v go)
fi
ver=latest
"$GO" version | grep -Eq 'go1\.(1[0-9]|20)([^0-9]|$)' && ver=v0.0.0-20230406165453-00490a63f317
mkdir -p "$dir"
GOBIN="$(cd "$dir" && pwd)" "$GO" install "github.com/google/pprof@$ver"
