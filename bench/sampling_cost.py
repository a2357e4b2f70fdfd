#!/usr/bin/env python3
"""bench/sampling_cost.py -- what the two samplers cost on every make bench row, counted in
instructions: each row (bench/run.py's cases at --size) runs under `valgrind
--tool=callgrind --fair-sched=yes --trace-children=yes` with libkite.so preloaded three
ways, and its total Ir (summed over the processes it starts) is compared:

    kite      neither sampler on
    guarded   KITE_GUARDED_SAMPLE=5000
    prof      KITE_PROF=<a temporary prefix> (the heap profiler at its default gap)

    bench/sampling_cost.py [--build build] [--lib LIB] [--size tiny] [--workloads a,b] [--configs ...]
                           [--threads 1,2] [--quick] [--reps N] [-j 2] [--purge-delay-ms -1]
                           [--json FILE] [--log FILE]

Every run, of every configuration, has the same fixed KITE_PURGE_DELAY_MS (--purge-delay-ms,
default -1: freed runs stay committed until malloc_trim, so no purge and no purger thread
runs): with a positive delay, what is purged and when follows the clock, which callgrind
slows by a factor that varies with the machine's load, and the purges' instructions then
move by several percent from run to run of one library (docs/benchmarks.md, heap profiler
cost). 0 (decommit at once) is as steady, with a madvise at every freed run.

--quick takes make bench's own rows (bench/run.py --quick: one case of each shape); with
--size small, the sizes make bench runs them at.

Prints one line per run as it ends (also to --log), then a markdown table (Ir of kite, and
each sampler's change against it; with --reps N the median of N runs of each) with the
geometric means of the ratios. Instruction counts do not
depend on the machine's load; threaded rows still vary a little from run to run (the
scheduler's interleaving changes which lists are refilled when).
"""

import argparse
import concurrent.futures as cf
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402  (bench/run.py: the rows and their arguments)

CONFIGS = {
    "kite": {},
    "guarded": {"KITE_GUARDED_SAMPLE": "5000"},
    "prof": {"KITE_PROF": None},  # None: a fresh prefix in a temporary directory
}


def callgrind_ir(case, lib, extra_env, timeout, purge_delay_ms):
    """Total Ir of one run of case under callgrind with lib preloaded, or a failure word."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["KITE_PURGE_DELAY_MS"] = str(purge_delay_ms)  # the same for every configuration
    tmp = tempfile.mkdtemp(prefix="kite-cost-")
    try:
        for k, v in extra_env.items():
            env[k] = v if v is not None else os.path.join(tmp, "prof")
        env["LD_PRELOAD"] = lib
        argv = [a.replace("{out}", os.path.join(tmp, "out")) for a in case["argv"]]
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               "--fair-sched=yes", "--trace-children=yes"] + argv
        try:
            q = subprocess.run(cmd, env=env, capture_output=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "TIMEOUT"
        if q.returncode != 0:
            return f"FAIL rc={q.returncode}"
        if case["checksum"] and b"ok" not in q.stdout:
            return "WRONG"
        err = q.stderr.decode("utf-8", "replace")
        irs = [int(m.replace(",", "")) for m in re.findall(r"Collected : ([\d,]+)", err)]
        return sum(irs) if irs else "NO Ir"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_load():
    """The 1-minute load average, as /proc/loadavg gives it."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--lib", help="the libkite.so measured (default: BUILD/libkite.so; the "
                    "workloads still come from --build)")
    ap.add_argument("--size", default="tiny", choices=bench.SIZES)
    ap.add_argument("--workloads", default="all")
    ap.add_argument("--threads", help="thread counts, comma-separated (default: each row's)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--quick", action="store_true", help="make bench's rows (bench/run.py --quick)")
    ap.add_argument("-j", type=int, default=2, help="runs at once")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--reps", type=int, default=1, help="runs of each row and configuration")
    ap.add_argument("--purge-delay-ms", type=int, default=-1,
                    help="KITE_PURGE_DELAY_MS of every run (default -1: no purge but malloc_trim's)")
    ap.add_argument("--json", help="write the raw figures there")
    ap.add_argument("--log", help="append each run's line there as it ends")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed")
    lib = os.path.realpath(args.lib or os.path.join(args.build, "libkite.so"))
    if not os.path.exists(lib):
        raise SystemExit(f"{lib} not built")
    ns = types.SimpleNamespace(workloads=args.workloads, size=args.size, trace=None,
                               threads_list=[int(t) for t in args.threads.split(",")] if args.threads else None,
                               timeout=300, quick=args.quick)
    cases, skipped = bench.build_cases(ns, args.build)
    for w, why in skipped:
        print(f"{w}: {why}", file=sys.stderr)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    load0 = read_load()
    res = {}
    runs = {}
    log = open(args.log, "a") if args.log else None
    with cf.ThreadPoolExecutor(max_workers=args.j) as ex:
        futs = {ex.submit(callgrind_ir, c, lib, CONFIGS[k], args.timeout, args.purge_delay_ms): (c["label"], k)
                for _ in range(args.reps) for c in cases for k in configs}
        for f in cf.as_completed(futs):
            label, k = futs[f]
            v = f.result()
            runs.setdefault(label, {}).setdefault(k, []).append(v)
            for out in (sys.stderr, log):
                if out:
                    print(f"{label} {k} {v}", file=out, flush=True)
    for label, by in runs.items():
        for k, vs in by.items():
            ok = sorted(v for v in vs if isinstance(v, int))
            # the median of the runs; any failure is reported as that failure
            res.setdefault(label, {})[k] = next((v for v in vs if not isinstance(v, int)),
                                                ok[len(ok) // 2] if ok else None)
    load = f"load average {load0} at the start, {read_load()} at the end"
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "size": args.size, "lib": lib, "load": load,
                       "purge_delay_ms": args.purge_delay_ms,
                       "rows": res, "runs": runs}, f,
                      indent=1)
    others = [k for k in configs if k != "kite"]
    print("| row | kite Ir | " + " | ".join(others) + " |")
    print("|---|---:|" + "---:|" * len(others))
    logs = {k: [] for k in others}
    for c in cases:
        r = res[c["label"]]
        base = r.get("kite")
        cells = []
        for k in others:
            v = r.get(k)
            if isinstance(base, int) and isinstance(v, int):
                cells.append(f"{(v / base - 1) * 100:+.1f}%")
                logs[k].append(math.log(v / base))
            else:
                cells.append(str(v))
        print(f"| {c['label']} | {base:,} | " if isinstance(base, int) else
              f"| {c['label']} | {base} | ", end="")
        print(" | ".join(cells) + " |")
    gm = [f"{(math.exp(sum(v) / len(v)) - 1) * 100:+.1f}%" if v else "-"
          for v in logs.values()]
    print("| geometric mean | | " + " | ".join(gm) + " |")
    print(f"\n{lib}; KITE_PURGE_DELAY_MS={args.purge_delay_ms} in every run; {load} "
          "(instruction counts do not depend on it)")


if __name__ == "__main__":
    main()
