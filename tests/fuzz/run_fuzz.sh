#!/bin/sh
# tests/fuzz/run_fuzz.sh -- the CTest run of one fuzzer (cmake/fuzz.cmake registers it).
#
#   run_fuzz.sh FUZZER FUZZDIR WORKDIR RUNS SECONDS
#
# 1. regress: every input under FUZZDIR/regress/NAME/ (reproducers of fixed crashes) runs once.
# 2. corpus:  every seed input under FUZZDIR/corpus/NAME/ runs once.
# 3. fuzz:    a bounded libFuzzer run (-runs=RUNS -max_total_time=SECONDS) that starts from the
#             seed corpus; new inputs go to WORKDIR/corpus (never into the source tree), a
#             crashing input to WORKDIR/crash-* (printed with its reproduction command).
# A dictionary FUZZDIR/NAME.dict is used when there is one.
# Prints one line per step and the harness's "N passed, N failed" line; exits non-zero on
# any failure.
set -u
fuzzer=$1 dir=$2 work=$3 runs=$4 secs=$5
name=$(basename "$fuzzer")
pass=0 fail=0

step() { # step NAME COMMAND...: run, report, count
  s=$1; shift
  if "$@" >"$work/$s.log" 2>&1; then
    echo "ok   $name.$s"; pass=$((pass + 1))
  else
    tail -n 60 "$work/$s.log"
    echo "FAIL $name.$s (log: $work/$s.log)"; fail=$((fail + 1))
  fi
}

inputs() { # the files of a directory, or nothing
  [ -d "$1" ] && find "$1" -type f ! -name '.*' | sort
}

mkdir -p "$work/corpus" || exit 1
rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*
opts="-artifact_prefix=$work/ -rss_limit_mb=4096 -timeout=30 -print_final_stats=1"
[ -f "$dir/$name.dict" ] && opts="$opts -dict=$dir/$name.dict"

# Steps 1 and 2: an empty directory is a passing step with nothing to run.
for set in regress corpus; do
  files=$(inputs "$dir/$set/$name")
  if [ -n "$files" ]; then
    # shellcheck disable=SC2086  # one argument per file (names have no spaces: committed here)
    step "$set" "$fuzzer" $opts -runs=1 $files
  else
    echo "ok   $name.$set (no inputs)"; pass=$((pass + 1))
  fi
done

seeds=
[ -d "$dir/corpus/$name" ] && seeds="$dir/corpus/$name"
# shellcheck disable=SC2086
step fuzz "$fuzzer" $opts -runs="$runs" -max_total_time="$secs" "$work/corpus" $seeds
for c in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$c" ] && echo "reproduce: $fuzzer $c"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
