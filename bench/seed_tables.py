#!/usr/bin/env python3
"""bench/seed_tables.py -- the seeds' HWX / SYS / OPT speedup tables, with kite as OPT.

Seed 001 timed `collatz-{ivec,list}-{hwx,sys,opt} N` and printed two tables:
"Comparing to the hwx allocator" (N chosen so that HWX takes ~10 s) and "Comparing to the
system (sys) allocator" (N chosen so that SYS takes ~10 s), each with Speedup = REF/OPT and
Difference = REF-OPT. Seed 002 compared the same three kinds of allocator at fixed inputs
(ivec 10k, list 2k). This script reproduces all three tables on kite's workloads:

  HWX  LD_PRELOAD=<build>/libkite-lab.so KITE_LAB_POLICY=hwx  (the seeds' hwx design, lab/hwx.c)
  SYS  the C library's malloc (no preload)
  OPT  LD_PRELOAD=<build>/libkite.so

Workloads: <build>/kite-wl-collatz-ivec and <build>/kite-wl-collatz-list, run as the seeds
ran them (`prog N`), or `prog -n N -t THREADS` with --threads.

Calibration (per table and test, unless --n-hwx / --n-sys fix N): N doubles from a small
start until the reference allocator's run takes >= T/2, then N is scaled to ~T (linearly,
or by the power law t ~ N^k fitted to the last two runs when both are long enough to time)
and checked by a run; outside 0.8T..1.25T it is rescaled again (at most 3 checks: the last
N stands, whatever its time). N is
capped at N_MAX so the tasks stay within memory. Measurement: --reps rounds, each
round runs every allocator of the row once (interleaved, so load drift hits all of them
alike); a cell is the median wall time. Wall time is time.perf_counter() around
subprocess.run.

Validity: every run must exit 0, print `Max steps is at X: S steps` and a checksum line
ending in "ok" (the workload's own self-check), and the `Max steps` line must be identical
for every allocator of the row. A run that fails any of this makes its cell FAIL (and the
row's Speedup/Difference FAIL): a broken allocator never shows a time.

Exit status: 0 all cells measured, 1 some cell FAIL, 2 usage error (bad --build-dir, bad
option values).
"""
import argparse
import math
import os
import platform
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from kitecommon import machine_info, median  # noqa: E402
import time

TESTS = ("ivec", "list")
N_START = 100
N_MAX = 8_000_000  # ivec needs ~0.9 KiB per task at its peak: ~7 GiB
CAL_CHECKS = 3
SEED002_N = {"ivec": 10000, "list": 2000}  # seed 002's inputs: ivec-10k, list-2k
MAX_RE = re.compile(r"^Max steps is at \d+: \d+ steps$", re.M)
SUM_RE = re.compile(r"^checksum: [0-9a-f]+ ok$", re.M)


class Run:
    """One child run: wall seconds, or ok=False with the reason."""

    def __init__(self, ok, secs=0.0, line="", why=""):
        self.ok, self.secs, self.line, self.why = ok, secs, line, why


class Bench:
    def __init__(self, build, threads, timeout, verbose):
        self.verbose = verbose
        self.build = build
        self.threads = threads
        self.timeout = timeout
        self.log = []  # (alloc, test, n, Run), every run in order

    def env(self, alloc):
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        e.pop("KITE_LAB_POLICY", None)
        if alloc == "HWX":
            e["LD_PRELOAD"] = os.path.join(self.build, "libkite-lab.so")
            e["KITE_LAB_POLICY"] = "hwx"
        elif alloc == "OPT":
            e["LD_PRELOAD"] = os.path.join(self.build, "libkite.so")
        return e

    def argv(self, test, n):
        prog = os.path.join(self.build, "kite-wl-collatz-" + test)
        if self.threads:
            return [prog, "-n", str(n), "-t", str(self.threads)]
        return [prog, str(n)]

    def run(self, alloc, test, n):
        t0 = time.perf_counter()
        try:
            p = subprocess.run(self.argv(test, n), env=self.env(alloc), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=self.timeout, text=True)
        except subprocess.TimeoutExpired:
            r = Run(False, why="timeout after %.0fs" % self.timeout)
        else:
            secs = time.perf_counter() - t0
            m = MAX_RE.search(p.stdout)
            if p.returncode < 0:
                r = Run(False, why="killed by signal %d" % -p.returncode)
            elif p.returncode != 0:
                r = Run(False, why="exit status %d" % p.returncode)
            elif not m:
                r = Run(False, why="no 'Max steps' line")
            elif not SUM_RE.search(p.stdout):
                r = Run(False, why="self-check failed")
            else:
                r = Run(True, secs, m.group(0))
        self.log.append((alloc, test, n, r))
        if self.verbose:
            print("  run %s %s N=%d: %s" % (alloc, test, n, "%.3fs" % r.secs if r.ok else r.why),
                  file=sys.stderr, flush=True)
        return r

    def calibrate(self, alloc, test, target):
        """N such that `alloc` takes ~target seconds, or (None, why) when a run fails."""
        n, pts = N_START, []
        while True:
            r = self.run(alloc, test, n)
            if not r.ok:
                return None, r.why
            pts.append((n, r.secs))
            if r.secs >= target / 2 or n >= N_MAX:
                break
            n *= 2
        # scale to T, then check by a run; the scaling follows the power law t ~ N^k fitted
        # to the last two runs long enough to time (>= T/20), k in 1..4 (linear when there
        # is no such pair): HWX's list walks make its time grow ~N^2..N^3
        for _ in range(CAL_CHECKS):
            k = 1.0
            use = [p for p in pts if p[1] >= target / 20]
            if len(use) >= 2 and use[-1][0] != use[-2][0]:
                (n0, t0), (n1, t1) = use[-2], use[-1]
                k = min(4.0, max(1.0, math.log(t1 / t0) / math.log(n1 / n0)))
            n_new = max(1, min(N_MAX, int(round(n * (target / max(r.secs, 1e-6)) ** (1 / k)))))
            if n_new == n:
                break
            n = n_new
            r = self.run(alloc, test, n)
            if not r.ok:
                return None, r.why
            pts.append((n, r.secs))
            if 0.8 * target <= r.secs <= 1.25 * target or n >= N_MAX:
                break
        return n, ""

    def measure(self, allocs, test, n, reps):
        """{alloc: median seconds or None}, plus the reasons of failures."""
        runs = {a: [] for a in allocs}
        for _ in range(reps):
            for a in allocs:
                runs[a].append(self.run(a, test, n))
        lines = {r.line for a in allocs for r in runs[a] if r.ok}
        out, why = {}, []
        for a in allocs:
            bad = [r for r in runs[a] if not r.ok]
            if bad:
                out[a] = None
                why.append("%s %s N=%d: %s" % (test.upper(), a, n, bad[0].why))
            elif len(lines) > 1:
                out[a] = None
                why.append("%s %s N=%d: answer differs across allocators (%s)"
                           % (test.upper(), a, n, runs[a][0].line))
            else:
                out[a] = median(r.secs for r in runs[a])
        return out, why


def fmt_speed(s):
    return "%.1f" % s if s >= 100 else "%.2f" % s


def seed001_rows(times, ref):
    """Rows [test, N, REF, OPT, Speedup, Difference] from {test: (n, {alloc: secs|None})}."""
    rows = []
    for test, (n, t) in times.items():
        cells = [test.upper(), str(n) if n else "FAIL"]
        cells += ["%.3fs" % t[a] if t.get(a) is not None else "FAIL" for a in (ref, "OPT")]
        if t.get(ref) is not None and t.get("OPT"):
            cells += [fmt_speed(t[ref] / t["OPT"]), "%.3f" % (t[ref] - t["OPT"])]
        else:
            cells += ["FAIL", "FAIL"]
        rows.append(cells)
    return rows


def ascii_table(header, rows):
    """The seed's box style: every column centred, a rule after every row."""
    w = [max(len(header[i]), *(len(r[i]) for r in rows)) + 4 for i in range(len(header))]
    rule = "+" + "+".join("-" * x for x in w) + "+"
    out = [rule, "|" + "|".join(h.center(x) for h, x in zip(header, w)) + "|", rule]
    for r in rows:
        out += ["|" + "|".join(c.center(x) for c, x in zip(r, w)) + "|", rule]
    return "\n".join(out)


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def machine():
    """One line: CPU, count, kernel, load at start (the runner's machine_info)."""
    m = machine_info()
    return "%s, %d CPUs, %s %s, load %s at start" % (
        m["cpu"], m["cores"] or 0, platform.system(), m["kernel"], m["load_at_start"].split()[0])


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Reproduce the seeds' HWX/SYS/OPT speedup tables (collatz-ivec, "
        "collatz-list) with kite as OPT, the lab's hwx policy as HWX and the C library "
        "as SYS. Exit status: 0 ok, 1 some cell FAIL, 2 usage error.")
    ap.add_argument("--build-dir", default="build",
                    help="build tree with libkite.so, libkite-lab.so and kite-wl-collatz-* "
                    "(default: build)")
    ap.add_argument("--target-seconds", type=float, default=1.0, metavar="T",
                    help="calibrate N so the reference allocator takes ~T s (seed 001: 10; "
                    "default 1.0)")
    ap.add_argument("--reps", type=int, default=3, metavar="R",
                    help="interleaved rounds per row; cells are medians (default 3)")
    ap.add_argument("--n-hwx", type=int, metavar="N",
                    help="fix N of the HWX table instead of calibrating")
    ap.add_argument("--n-sys", type=int, metavar="N",
                    help="fix N of the SYS table instead of calibrating")
    ap.add_argument("--threads", type=int, metavar="K",
                    help="run `prog -n N -t K` (default: `prog N`, the workload's 4 threads)")
    ap.add_argument("--tests", default="ivec,list",
                    help="comma-separated subset of ivec,list (default: both)")
    ap.add_argument("--no-seed002", action="store_true",
                    help="skip seed 002's fixed-input table (ivec 10000, list 2000)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print every run (calibration included) to stderr")
    ap.add_argument("-o", "--output", metavar="FILE",
                    help="also write the tables as markdown to FILE")
    a = ap.parse_args(argv)

    def die(msg):
        print("seed_tables.py: error: " + msg, file=sys.stderr)
        return 2

    if not a.target_seconds > 0:
        return die("--target-seconds must be > 0")
    if a.reps < 1:
        return die("--reps must be >= 1")
    for name, v in (("--n-hwx", a.n_hwx), ("--n-sys", a.n_sys)):
        if v is not None and not 1 <= v <= N_MAX:
            return die("%s must be in 1..%d" % (name, N_MAX))
    if a.threads is not None and a.threads < 1:
        return die("--threads must be >= 1")
    tests = [t for t in a.tests.split(",") if t]
    if not tests or any(t not in TESTS for t in tests):
        return die("--tests takes a comma-separated subset of ivec,list")
    build = os.path.abspath(a.build_dir)
    need = ["libkite.so", "libkite-lab.so"] + ["kite-wl-collatz-" + t for t in tests]
    missing = [f for f in need if not os.path.isfile(os.path.join(build, f))]
    if missing:
        return die("--build-dir %s: missing %s (build the targets kite, kite-lab, "
                   "kite-wl-collatz-ivec, kite-wl-collatz-list)" % (a.build_dir, ", ".join(missing)))

    b = Bench(build, a.threads, timeout=max(60.0, 20 * a.target_seconds), verbose=a.verbose)
    command = "bench/seed_tables.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    note = "machine: %s; command: %s" % (machine(), command)
    failures = []
    sections = []  # (title, header, rows, footer lines)

    for ref, fixed in (("HWX", a.n_hwx), ("SYS", a.n_sys)):
        times = {}
        for test in tests:
            n = fixed
            if n is None:
                n, why = b.calibrate(ref, test, a.target_seconds)
                if n is None:
                    failures.append("%s %s calibration: %s" % (test.upper(), ref, why))
                    times[test] = (None, {})
                    continue
            t, why = b.measure((ref, "OPT"), test, n, a.reps)
            failures += why
            times[test] = (n, t)
        title = ("Comparing to the hwx allocator:" if ref == "HWX"
                 else "Comparing to the system (sys) allocator:")
        foot = ["Speedup = %s exec time / OPT exec time" % ref,
                "Difference = %s exec time - OPT exec time" % ref]
        sections.append((title, ["Test", "N", ref, "OPT", "Speedup", "Difference"],
                         seed001_rows(times, ref), foot))

    if not a.no_seed002:
        rows = []
        for test in tests:
            n = SEED002_N[test]
            t, why = b.measure(("SYS", "HWX", "OPT"), test, n, a.reps)
            failures += why
            rows.append(["%s-%dk input" % (test, n // 1000)] +
                        ["%.3fs" % t[x] if t[x] is not None else "FAIL"
                         for x in ("SYS", "HWX", "OPT")])
        sections.append(("Seed 002's fixed inputs:", ["Input", "SYS", "HWX", "OPT"], rows,
                         ["(median wall time of %d run%s each)" % (a.reps, "s" if a.reps > 1 else "")]))

    out = []
    for title, header, rows, foot in sections:
        out += [title, "", ascii_table(header, rows), ""] + foot + [""]
    out.append(note)
    if failures:
        out += ["", "FAILURES:"] + ["  " + f for f in failures]
    print("\n".join(out))

    if a.output:
        md = []
        for title, header, rows, foot in sections:
            md += ["**%s**" % title.rstrip(":"), "", md_table(header, rows), ""]
            md += [f + "  " for f in foot[:-1]] + foot[-1:] + [""]
        md += ["Median of %d interleaved run%s per cell, wall time (`time.perf_counter` around "
               "`subprocess.run`)." % (a.reps, "s" if a.reps > 1 else ""), "", note.replace(
                   "command: ", "command: `").rstrip() + "`", ""]
        if failures:
            md += ["Failures:", ""] + ["- " + f for f in failures] + [""]
        try:
            with open(a.output, "w") as f:
                f.write("\n".join(md))
        except OSError as e:
            return die("-o %s: %s" % (a.output, e.strerror))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
