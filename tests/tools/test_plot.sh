#!/usr/bin/env bash
# tests/tools/test_plot.sh SOURCE_DIR -- tools/plot.py from a fresh clone: without matplotlib
# (python3 -S: no site-packages, as a system Python without it) it says in one line what to
# install and exits 1; with the project's .venv it draws bench/run.py's charts from a
# committed bench results.json, and tools/lab.py's from docs/lab/results.json.
set -uo pipefail
src=$(realpath "$1")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
bench=$src/bench/results/docs-run/results.json
python3 -S "$src/tools/plot.py" "$bench" "$tmp/none" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q 'needs matplotlib.*python3-matplotlib' "$tmp/err" && [ ! -s "$tmp/out" ]; then
  echo "ok: without matplotlib: $(cat "$tmp/err")"
else
  echo "FAIL: without matplotlib: exit $rc, stderr: $(head -c 600 "$tmp/err")"; fails=$((fails + 1))
fi
py=$src/.venv/bin/python
if [ -x "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
  "$py" "$src/tools/plot.py" "$bench" "$tmp/bench" >"$tmp/out" 2>"$tmp/err"; rc=$?
  # scaling.png exists only for results with a workload at several thread counts (the
  # full run; make bench's quick set has one case per shape)
  charts="time_ratio.png peak_rss.png"
  "$py" -c 'import json, sys, collections
c = collections.Counter(r["workload"] for r in json.load(open(sys.argv[1]))["rows"]
                        if r["threads"] is not None and r["allocator"] == "kite")
sys.exit(0 if any(n > 1 for n in c.values()) else 1)' "$bench" && charts="$charts scaling.png"
  for f in $charts; do
    if [ "$rc" != 0 ] || ! grep -qx "$tmp/bench/$f" "$tmp/out" || [ "$(head -c 4 "$tmp/bench/$f" | od -An -c | tr -d ' ')" != "211PNG" ]; then
      echo "FAIL: bench results: $f (exit $rc): $(head -c 600 "$tmp/err")"; fails=$((fails + 1))
    fi
  done
  [ "$fails" = 0 ] && echo "ok: bench/run.py's results drawn: $(tr '\n' ' ' <"$tmp/out")"
else
  echo "not checked: drawing, as $py with matplotlib is missing (make venv makes it)"
fi
"$py" "$src/tools/plot.py" "$src/README.md" "$tmp/x" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" = 1 ] && grep -q "is not a results.json" "$tmp/err"; then echo "ok: a file that is not results"
else echo "FAIL: README.md as results: exit $rc: $(head -c 300 "$tmp/err")"; fails=$((fails + 1)); fi
[ "$fails" = 0 ]
