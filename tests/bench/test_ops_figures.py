#!/usr/bin/env python3
"""tests/bench/test_ops_figures.py -- bench/ops_figures.py end to end, at tiny sizes.

    test_ops_figures.py --build-dir BUILD

exit-rss on a few threads with glibc, kite (when built) and a stand-in allocator that
crashes: exit 0 (the failed allocator is a peer; a line on stderr names it, and the same
stand-in in kite's place exits 1), results.csv with the command first and one row
per run, every healthy run's high-water mark at least its later RSS readings, the table's
medians those of the CSV, the crash reported as such. hugepages on an 8 MiB heap: a row
per variant, the kernel's THP modes recorded, the pairwise ratio line. Also -h, a missing
subcommand, a bad option, an unknown allocator and --reps 0 (exit 2). Prints one line
per test and "N passed, N failed".
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "ops_figures.py")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import check, run_tests  # noqa: E402


def read_csv(path):
    with open(path) as f:
        first = f.readline()
        return first, list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    tmp = tempfile.mkdtemp(prefix="kite-ops-test-")
    have_kite = os.path.exists(os.path.join(build, "libkite.so"))
    allocs = ["glibc", "crash"] + (["kite"] if have_kite else [])
    ex_out = os.path.join(tmp, "exit")
    ex = subprocess.run([sys.executable, SCRIPT, "exit-rss", "--build-dir", build, "--reps", "2",
                         "--args", "-t 4 -n 20 -b 20 -k 50", "--idle-ms", "5",
                         "--allocs", ",".join(allocs), "--alloc",
                         "crash=" + os.path.join(build, "libkite-bench-crash.so"),
                         "--out", ex_out], capture_output=True, text=True, timeout=120)
    # the same stand-in put in kite's place: kite failing fails the command
    own = subprocess.run([sys.executable, SCRIPT, "exit-rss", "--build-dir", build, "--reps",
                          "1", "--args", "-t 4 -n 20 -b 20 -k 50", "--idle-ms", "5",
                          "--allocs", "glibc,kite", "--alloc",
                          "kite=" + os.path.join(build, "libkite-bench-crash.so"),
                          "--out", os.path.join(tmp, "own")],
                         capture_output=True, text=True, timeout=120)
    hp_out = os.path.join(tmp, "huge")
    hp = None
    if have_kite:
        hp = subprocess.run([sys.executable, SCRIPT, "hugepages", "--build-dir", build,
                             "--reps", "2", "--mib", "8", "--steps", "1", "--out", hp_out],
                            capture_output=True, text=True, timeout=120)

    def exit_rss_runs():
        # exit 0: the allocator that did not complete is a peer, named on stderr with why
        check(ex.returncode == 0, f"exit {ex.returncode}: {ex.stderr[-1500:]}")
        check("peer crash failed: CRASH sig " in ex.stderr, f"stderr {ex.stderr[-1500:]}")
        check(own.returncode == 1 and "kite build kite failed: CRASH sig " in own.stderr and
              "glibc failed" not in own.stderr, f"kite failing: exit {own.returncode}: "
              f"{own.stderr[-1500:]}")
        for f in ("results.csv", "results.json", "table.md"):
            check(os.path.exists(os.path.join(ex_out, f)), f"{f} written")

    def exit_rss_csv_and_table():
        first, rows = read_csv(os.path.join(ex_out, "results.csv"))
        check(first.startswith("# command: bench/ops_figures.py exit-rss "), f"first {first!r}")
        with open(os.path.join(ex_out, "table.md")) as f:
            md = f.read()
        for name in allocs:
            mine = [r for r in rows if r["variant"] == name]
            check(len(mine) == 2, f"{name}: {len(mine)} rows")
            if name == "crash":
                check(all(r["status"].startswith("CRASH") for r in mine), f"crash rows {mine}")
                check(f"| crash | - | - | - | - | **CRASH" in md, "crash in the table")
                continue
            check(all(r["status"] == "ok" for r in mine), f"{name} ok")
            for r in mine:
                peak, at_exit, idle = (float(r[k]) for k in ("rss_peak_mib", "rss_exit_mib",
                                                             "rss_idle_mib"))
                check(0 < at_exit <= peak and 0 < idle <= peak, f"{name} figures {r}")
            med = statistics.median(float(r["rss_exit_mib"]) for r in mine)
            row = next((l for l in md.splitlines() if l.startswith(f"| {name} |")), "")
            check(row.split("|")[3].strip().startswith(f"{med:.1f}"), f"median in {row!r}")
        with open(os.path.join(ex_out, "results.json")) as f:
            j = json.load(f)
        check(j["meta"]["args"] == "-t 4 -n 20 -b 20 -k 50 -i 5", f"args {j['meta']['args']}")

    def hugepages_runs():
        if hp is None:
            return
        check(hp.returncode == 0, f"exit {hp.returncode}: {hp.stderr[-1500:]}")
        first, rows = read_csv(os.path.join(hp_out, "results.csv"))
        check(first.startswith("# command: bench/ops_figures.py hugepages "), f"first {first!r}")
        variants = sorted({r["variant"] for r in rows})
        check(variants == ["glibc (reference)", "kite, KITE_HUGEPAGES=0",
                           "kite, KITE_HUGEPAGES=1"], f"variants {variants}")
        check(all(r["status"] == "ok" and float(r["chase"]) > 0 and float(r["rss_mib"]) > 8
                  for r in rows), "every run ok, chase timed, the heap resident")
        with open(os.path.join(hp_out, "results.json")) as f:
            j = json.load(f)
        check(set(j["meta"]["thp"]) == {"enabled", "defrag"}, f"thp {j['meta']['thp']}")
        with open(os.path.join(hp_out, "table.md")) as f:
            md = f.read()
        check("KITE_HUGEPAGES=1 / =0, run by run: chase " in md and "of 2 pairs" in md, md)

    def usage_and_errors():
        q = subprocess.run([sys.executable, SCRIPT, "-h"], capture_output=True, text=True)
        check(q.returncode == 0 and "usage: bench/ops_figures.py" in q.stdout, "-h")
        for bad in ([], ["exit-rss", "--bogus"], ["hugepages", "--reps", "0"],
                    ["exit-rss", "--build-dir", build, "--allocs", "nope"]):
            q = subprocess.run([sys.executable, SCRIPT] + bad, capture_output=True, text=True)
            check(q.returncode == 2 and q.stderr.strip(), f"{bad}: exit {q.returncode}")
        q = subprocess.run([sys.executable, SCRIPT, "exit-rss", "--build-dir", build, "--allocs",
                            "nope"], capture_output=True, text=True)
        check("unknown allocator 'nope'" in q.stderr, q.stderr)

    return run_tests((exit_rss_runs, exit_rss_csv_and_table, hugepages_runs, usage_and_errors))


if __name__ == "__main__":
    sys.exit(main())
