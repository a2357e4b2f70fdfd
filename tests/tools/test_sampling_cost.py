#!/usr/bin/env python3
"""tests/tools/test_sampling_cost.py -- bench/sampling_cost.py runs every configuration of a
row (kite without a sampler, KITE_GUARDED_SAMPLE, KITE_PROF) at one fixed
KITE_PURGE_DELAY_MS: -1 unless --purge-delay-ms says otherwise, and says so in its JSON and
under its table. A stand-in `valgrind` first on PATH records the environment of each run
and reports a fixed instruction count, so nothing is measured.

    test_sampling_cost.py BUILD_DIR REPO_ROOT
"""
import json
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, eq, run_tests  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(sys.argv[2])
TOOL = os.path.join(ROOT, "bench", "sampling_cost.py")

# what each run saw: its sampler variables and the purge delay, one line a run
FAKE = """#!/bin/sh
echo "gs=${KITE_GUARDED_SAMPLE:-unset} prof=${KITE_PROF:+set} delay=${KITE_PURGE_DELAY_MS:-unset}" >> "$FAKE_LOG"
echo ok
echo "==1== Collected : 1,000" >&2
"""


def cost(*args):
    """Run the tool on rnbench -t 1 at size tiny with the stand-in: (exit status, stdout,
    the runs' lines, the JSON)."""
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "valgrind")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        log, out = os.path.join(d, "runs"), os.path.join(d, "cost.json")
        env = dict(os.environ, PATH=d + os.pathsep + os.environ["PATH"], FAKE_LOG=log)
        env.pop("KITE_PURGE_DELAY_MS", None)
        p = subprocess.run([sys.executable, TOOL, "--build", BUILD, "--workloads", "rnbench", "--threads", "1",
                            "--size", "tiny", "-j", "1", "--json", out] + list(args),
                           capture_output=True, text=True, env=env, cwd=ROOT)
        runs = open(log).read().split() if os.path.exists(log) else []
        rec = json.load(open(out)) if os.path.exists(out) else {}
        return p.returncode, p.stdout, [r for r in runs if r.startswith("delay=")], rec


def test_default_pins_minus_one():
    rc, out, delays, rec = cost()
    eq(rc, 0, "exit status")
    eq(delays, ["delay=-1"] * 3, "KITE_PURGE_DELAY_MS of the three configurations' runs")
    eq(rec.get("purge_delay_ms"), -1, "the JSON's purge_delay_ms")
    check("KITE_PURGE_DELAY_MS=-1 in every run" in out, f"the table's footer names the delay: {out[-300:]!r}")


def test_option_sets_every_run():
    rc, out, delays, rec = cost("--purge-delay-ms", "0", "--configs", "kite,prof", "--reps", "2")
    eq(rc, 0, "exit status")
    eq(delays, ["delay=0"] * 4, "KITE_PURGE_DELAY_MS of kite's and the profiler's runs, two each")
    eq(rec.get("purge_delay_ms"), 0, "the JSON's purge_delay_ms")


if __name__ == "__main__":
    if not os.path.exists(os.path.join(BUILD, "kite-wl-rnbench")) or not os.path.exists(
            os.path.join(BUILD, "libkite.so")):
        print("skipped: kite-wl-rnbench or libkite.so not built")
        sys.exit(77)
    sys.exit(run_tests([test_default_pins_minus_one, test_option_sets_every_run], "test_"))
