#!/usr/bin/env python3
"""tests/bench/test_runner.py -- bench/run.py end to end, on tiny sizes.

    test_runner.py --build-dir BUILD

Runs the runner on two workloads (churn at 2 threads and collatz-list) with glibc, every
peer it finds, and two deliberately broken allocators from the build (libkite-bench-crash.so
segfaults in malloc; libkite-bench-wrong.so corrupts live blocks), then parses what it wrote:
results.csv (the command on the first line, one row per workload x allocator, the right
statuses), results.json (the same rows, allocators and skipped ones), results.md (a table
with a column per allocator, "CRASH sig 11" and "WRONG" in it, never a time for those).
It also checks the runner's verdicts for exit codes, --list, and bad options; the spread
(min, max, quartiles) and the rotation of the allocator order; the start-up-dominated
cases kept out of the geometric means; the kite-secure column (a copy of libkite.so in a
stand-in build directory) never counted as a peer; mimalloc3 found in .venv; the replay row
(kite-wl-replay -l N TRACE); --alloc NAME=PATH:VAR=VALUE's settings reaching that
allocator's runs alone and named in the report; and the real-program rows: under glibc their output check
passes, a forged reference makes them WRONG, and the corrupting and crashing preloads are
reported as failures; the load before and after in the report; the quick set; and the
--ab mode (its verdicts on made-up pairs, then end to end on a tiny row with glibc against
libkite-bench-slow.so: 11 pairs, order swapped, the verdict, the strace counts) and its
errors; --syscalls on a tiny 8-thread row. Charts are checked too when matplotlib is importable (PNG signature),
else run with --no-charts.
Prints one line per test and the harness's "N passed, N failed" line.
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "bench", "run.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import check, run_tests  # noqa: E402

def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    tmp = tempfile.mkdtemp(prefix="kite-bench-test-")
    crash = os.path.join(build, "libkite-bench-crash.so")
    wrong = os.path.join(build, "libkite-bench-wrong.so")
    out = os.path.join(tmp, "run")
    charts = have_matplotlib()
    cmd = [sys.executable, RUNNER, "--build-dir", build, "--no-build", "--size", "tiny",
           "--reps", "2", "--workloads", "churn,collatz-list", "--threads", "2",
           "--alloc", f"crash={crash}", "--alloc", f"wrong={wrong}",
           "--out", out, "--no-progress", "--short-ms", "0"] + ([] if charts else ["--no-charts"])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    state = {}

    def runner_exits_zero():
        check(p.returncode == 0, f"runner exit {p.returncode}: {p.stderr[-2000:]}")
        for f in ("results.csv", "results.json", "results.md"):
            check(os.path.exists(os.path.join(out, f)), f"{f} written")

    def csv_is_well_formed():
        with open(os.path.join(out, "results.csv")) as f:
            first = f.readline()
            rows = list(csv.DictReader(f))
        check(first.startswith("# command: ") and "--workloads churn,collatz-list" in first,
              f"command line first: {first!r}")
        state["rows"] = rows
        allocs = sorted({r["allocator"] for r in rows})
        state["allocs"] = allocs
        for need in ("glibc", "crash", "wrong"):
            check(need in allocs, f"allocator {need} in csv ({allocs})")
        check("kite" not in allocs or os.path.exists(os.path.join(build, "libkite.so")),
              "kite only when built")
        wls = sorted({r["workload"] for r in rows})
        check(wls == ["churn", "collatz-list"], f"workloads {wls}")
        check(len(rows) == 2 * len(allocs), f"{len(rows)} rows for {len(allocs)} allocators")
        for r in rows:
            check(r["threads"] == ("2" if r["workload"] == "churn" else "2"), f"threads {r}")
            check(r["runs"] == "2" or r["status"] != "ok", f"two runs per pair: {r}")
            if r["status"] == "ok":
                check(float(r["wall_s"]) > 0 and float(r["cpu_s"]) >= 0, f"times {r}")
                check(float(r["peak_rss_mib"]) > 0.5, f"rss {r}")
                # the runner's own RSS is over 20 MiB; mimalloc3 alone reaches ~12 here
                check(float(r["peak_rss_mib"]) < 16, f"rss measures the workload only: {r}")
                check(len(r["walls_s"].split()) == 2, f"both walls listed {r}")
            else:
                check(r["wall_s"] == "" and r["ratio_glibc"] == "", f"no time for failure {r}")
        by = {(r["workload"], r["allocator"]): r for r in rows}
        check(by[("churn", "glibc")]["status"] == "ok", "glibc runs churn")
        check(by[("collatz-list", "glibc")]["status"] == "ok", "glibc runs collatz-list")
        check(abs(float(by[("churn", "glibc")]["ratio_glibc"]) - 1.0) < 1e-9, "glibc ratio 1")
        for w in ("churn", "collatz-list"):
            check(by[(w, "crash")]["status"] == "CRASH sig 11", f"{w} crash: {by[(w, 'crash')]}")
            check(by[(w, "wrong")]["status"] == "WRONG", f"{w} wrong: {by[(w, 'wrong')]}")
            check(by[(w, "crash")]["runs"] == "1", "a crashed pair is not run again")
        peers = [x for x in allocs if x not in ("kite", "glibc", "crash", "wrong")]
        for x in peers:  # the Debian peers are healthy: they must produce times
            check(by[("churn", x)]["status"] == "ok", f"peer {x} runs churn")

    def spread_and_rotation():
        with open(os.path.join(out, "results.json")) as f:
            j = json.load(f)
        n_alloc = len({r["allocator"] for r in j["rows"]})
        for r in j["rows"]:
            if r["status"] != "ok":
                check(r["wall_min_s"] is None and r["wall_max_s"] is None, f"no spread {r}")
                continue
            walls = [x["wall_s"] for x in r["runs"]]
            check(r["wall_min_s"] == min(walls) and r["wall_max_s"] == max(walls),
                  f"min/max of the runs {r}")
            check(r["wall_min_s"] <= r["wall_q1_s"] <= r["wall_s"] <= r["wall_q3_s"]
                  <= r["wall_max_s"], f"quartiles ordered {r}")
            orders = [x["order"] for x in r["runs"]]
            # two repetitions: the order rotates by one, so every allocator moves
            check(len(orders) == 2 and orders[1] == (orders[0] - 1) % n_alloc,
                  f"order rotated {orders} of {n_alloc}")
        for r in state["rows"]:
            if r["status"] == "ok":
                check(float(r["wall_min_s"]) <= float(r["wall_s"]) <= float(r["wall_max_s"]),
                      f"csv spread {r}")
                check(r["short"] == "0", "--short-ms 0: nothing is short")
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        body = [l for l in md.splitlines() if l.startswith("| churn ")]
        check(body and " ±" in body[0] and "ms ±" in body[0], f"spread in the table {body[:1]}")
        # the same rows with a 1000 s threshold: every case is start-up dominated
        import run
        keep = run.SHORT_S
        try:
            run.SHORT_S = 1000.0
            cases = [dict(label=l, workload=l.split()[0], threads=2)
                     for l in dict.fromkeys(r["label"] for r in j["rows"])]
            check(sorted(run.short_cases(j["rows"], cases)) == sorted(c["label"] for c in cases),
                  "all short")
            names = sorted({r["allocator"] for r in j["rows"]})
            check(run.geomeans(j["rows"], names, cases) is None, "no geometric mean of short cases")
            t = run.wall_table(j["rows"], names, cases)
            check("| churn † |" in t and "geometric mean" not in t, f"short marked: {t}")
            run.SHORT_S = 0.0
            gm = run.geomeans(j["rows"], names, cases)
            check(gm and gm["cases"] >= 1 and gm["short"] == [], f"threshold 0 keeps all: {gm}")
        finally:
            run.SHORT_S = keep

    def json_matches_csv():
        with open(os.path.join(out, "results.json")) as f:
            j = json.load(f)
        check(list(j)[0] == "command" and "--workloads churn,collatz-list" in j["command"],
              "json command first")
        check(len(j["rows"]) == len(state["rows"]), "json rows")
        names = [x["name"] for x in j["allocators"]]
        builds = [n for n in names if n != "kite-secure"]  # listed after kite when built
        check(builds[:2] == ["kite", "glibc"], f"kite and glibc listed first: {names}")
        kite = j["allocators"][0]
        if kite["status"] == "skipped":
            check(kite["reason"].endswith("libkite.so not found"), f"kite reason {kite}")
        sm = j["summary"]
        check(sm is not None and 1 <= sm["cases"] <= 2, f"summary {sm}")
        if sm:
            check("crash" not in sm["ratio_glibc"] and "wrong" not in sm["ratio_glibc"],
                  "broken allocators are left out of the geometric means")
            check(abs(sm["ratio_glibc"]["glibc"] - 1.0) < 1e-9, "glibc geomean 1")
        for r in j["rows"]:
            check(r["status"] == "ok" or r["wall_s"] is None, "json failure has no time")
            check(len(r["runs"]) >= 1, "runs kept")

    def markdown_table():
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        lines = [l for l in md.splitlines() if l.startswith("| ")]
        head = lines[0].split("|")[1:-1]
        head = [h.strip() for h in head]
        check(head[:2] == ["workload", "threads"], f"md head {head}")
        for x in state["allocs"]:
            check(x in head, f"md column {x}")
        body = [l for l in lines if l.startswith("| churn ") or l.startswith("| collatz-list ")]
        check(len(body) == 8, f"four tables of two rows: {len(body)}")
        ci = head.index("crash")
        wi = head.index("wrong")
        for l in body:
            cells = [c.strip() for c in l.split("|")[1:-1]]
            check(len(cells) == len(head) or len(cells) == len(head) - 1, f"cells {cells}")
            check(cells[ci] == "**CRASH sig 11**", f"crash cell {cells[ci]}")
            check(cells[wi] == "**WRONG**", f"wrong cell {cells[wi]}")
        check("CRASH sig 11" in p.stdout, "table printed")
        check("| **geometric mean** |" in md, "geometric mean row")

    def charts_written():
        if not charts:
            return
        for f in ("time_ratio.png", "peak_rss.png"):
            path = os.path.join(out, f)
            ok = os.path.exists(path)
            check(ok, f"{f} exists")
            if ok:
                with open(path, "rb") as fh:
                    check(fh.read(8) == b"\x89PNG\r\n\x1a\n", f"{f} is a PNG")

    def verdicts():
        import run
        check(run.classify_exit(0, "time: 1 s\nchecksum: 00ff ok\n") == "ok", "ok")
        check(run.classify_exit(0, "time: 1 s\n") == "WRONG", "missing checksum")
        check(run.classify_exit(3, "WRONG: 2 blocks\n") == "WRONG", "exit 3")
        check(run.classify_exit(0, "WRONG: x\nchecksum: 1 ok\n") == "WRONG", "WRONG line")
        check(run.classify_exit(1, "boom\n") == "FAIL rc=1", "rc 1")
        check(run.classify_exit(0, "replayed\n", needs_checksum=False) == "ok", "external")
        check(run.classify_exit(1, "bad block\n", False, 1) == "WRONG", "replay check failed")
        check(run.classify_exit(3, "out of memory\n", False, 1) == "FAIL rc=3", "replay oom")
        r = run.run_once(["/bin/sh", "-c", "kill -SEGV $$"], None, 10,
                         os.path.join(build, "kite-bench-exec"))
        check(r["status"] == "CRASH sig 11", f"signal through the launcher {r['status']}")
        r = run.run_once(["/bin/sh", "-c", "exit 5"], None, 10,
                         os.path.join(build, "kite-bench-exec"))
        check(r["status"] == "FAIL rc=5", f"rc through the launcher {r['status']}")
        r = run.run_once(["/bin/sleep", "5"], None, 0.3, os.path.join(build, "kite-bench-exec"))
        check(r["status"] == "TIMEOUT", f"timeout {r['status']}")
        r = run.run_once(["/bin/sh", "-c", "echo $LD_PRELOAD; echo checksum: 1 ok"], "/x.so",
                         10, os.path.join(build, "kite-bench-exec"))
        check("/x.so" in r["output"].splitlines(), f"preload passed {r['output']!r}")

    def list_and_errors():
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--list"],
                           capture_output=True, text=True, timeout=60)
        check(q.returncode == 0, "--list")
        for w in ("collatz-ivec", "collatz-list", "rnbench", "larson", "xmalloc",
                  "cache-thrash", "cache-scratch", "realloc", "large", "graph",
                  "thread-churn", "churn", "replay", "glibc", "xfer", "thread-rounds",
                  "rnbench-seed", "churn-16k", "large-5-25m", "graph-teardown", "sqlite3",
                  "python3", "gcc", "xz", "mstress", "glibc-thread", "rptest"):
            check(f"  {w} " in q.stdout, f"--list names {w}")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--workloads", "nope",
                            "--no-progress", "--no-charts", "--out", os.path.join(tmp, "x")],
                           capture_output=True, text=True, timeout=60)
        check(q.returncode != 0 and "unknown workload" in q.stderr, "unknown workload")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--allocs", "nope",
                            "--no-progress", "--no-charts", "--out", os.path.join(tmp, "x")],
                           capture_output=True, text=True, timeout=60)
        check(q.returncode != 0 and "unknown allocator" in q.stderr, "unknown allocator")

    def replay_reported():
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", tmp, "--no-build",
                            "--workloads", "replay", "--allocs", "glibc", "--no-progress",
                            "--no-charts", "--out", os.path.join(tmp, "y")],
                           capture_output=True, text=True, timeout=60)
        check("replay: skipped (" in q.stderr and "kite-wl-replay not built)" in q.stderr,
              f"replay skip {q.stderr}")
        # a stand-in kite-wl-replay: the runner passes -l LOOPS TRACE and wants a checksum
        fake = os.path.join(tmp, "fake")
        os.makedirs(fake)
        with open(os.path.join(fake, "kite-wl-replay"), "w") as f:
            f.write('#!/bin/sh\necho "args: $*"\n[ "$1" = -l ] && [ -f "$3" ] && '
                    'echo "checksum: 1 ok"\n')
        os.chmod(os.path.join(fake, "kite-wl-replay"), 0o755)
        trace = os.path.join(tmp, "t.trace")
        with open(trace, "w") as f:
            f.write("a 0 16\nf 0\n")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", fake, "--no-build",
                            "--workloads", "replay", "--allocs", "glibc", "--trace", trace,
                            "--reps", "1", "--no-progress", "--no-charts",
                            "--out", os.path.join(tmp, "z")],
                           capture_output=True, text=True, timeout=60)
        check(q.returncode == 0, f"replay run {q.stderr}")
        with open(os.path.join(tmp, "z", "results.json")) as f:
            rows = json.load(f)["rows"]
        check(len(rows) == 1 and rows[0]["workload"] == "replay"
              and rows[0]["status"] == "ok" and rows[0]["command"].endswith(
                  "kite-wl-replay -l 200 " + trace), f"replay row {rows}")

    def alloc_env_reaches_runs():
        """--alloc NAME=PATH:VAR=VALUE: the setting is in that allocator's runs alone (through
        kite-bench-exec and without it) and in the report's allocator line."""
        import run
        kite = os.path.join(build, "libkite.so")
        fake = os.path.join(tmp, "envfake")
        os.makedirs(fake)
        os.symlink(os.path.join(build, "kite-bench-exec"), os.path.join(fake, "kite-bench-exec"))
        log = os.path.join(tmp, "env.log")
        with open(os.path.join(fake, "kite-wl-replay"), "w") as f:
            f.write('#!/bin/sh\necho "${LD_PRELOAD:+preload} ${KITE_TEST_SET-unset} '
                    f'${{KITE_TEST_TWO-unset}}" >> {log}\necho "checksum: 1 ok"\n')
        os.chmod(os.path.join(fake, "kite-wl-replay"), 0o755)
        trace = os.path.join(tmp, "env.trace")
        with open(trace, "w") as f:
            f.write("a 0 16\nf 0\n")
        spec = f"withenv={kite}:KITE_TEST_SET=42:KITE_TEST_TWO=a=b"
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", fake, "--no-build",
                            "--workloads", "replay", "--allocs", "glibc,withenv", "--alloc",
                            spec, "--trace", trace, "--reps", "1", "--no-progress",
                            "--no-charts", "--out", os.path.join(tmp, "e")],
                           capture_output=True, text=True, timeout=60)
        check(q.returncode == 0, f"--alloc with settings: {q.stderr[-1000:]}")
        with open(log) as f:
            seen = sorted(f.read().splitlines())
        check(seen == [" unset unset", "preload 42 a=b"], f"settings in the runs: {seen}")
        with open(os.path.join(tmp, "e", "results.md")) as f:
            md = f.read()
        check(f"withenv (`{kite}` with KITE_TEST_SET=42 KITE_TEST_TWO=a=b)" in md,
              f"allocator line: {md[:600]}")
        os.unlink(log)
        c = dict(argv=[os.path.join(fake, "kite-wl-replay")], checksum=True, wrong_rc=None)
        r = run.run_case(c, kite, 60, None, {"KITE_TEST_SET": "7"})
        with open(log) as f:
            seen = f.read()
        check(r["status"] == "ok" and seen == "preload 7 unset\n", f"no launcher: {seen!r}")
        for bad in ("x=" + kite + ":NOVALUE", "x=" + kite + ":=1", "x=:A=1"):
            q = subprocess.run([sys.executable, RUNNER, "--build-dir", fake, "--no-build",
                                "--list", "--alloc", bad], capture_output=True, text=True,
                               timeout=60)
            check(q.returncode != 0 and "--alloc" in q.stderr, f"{bad}: {q.stderr[-300:]}")

    def kite_secure_and_mimalloc3():
        kite = os.path.join(build, "libkite.so")
        if not os.path.exists(kite):
            return
        fake = os.path.join(tmp, "secure")
        os.makedirs(fake)
        for f in ("kite-wl-churn", "kite-bench-exec", "libkite.so"):
            os.symlink(os.path.join(build, f), os.path.join(fake, f))
        os.symlink(kite, os.path.join(fake, "libkite-secure.so"))
        import run
        allocs = run.discover_allocators(fake, [], False)
        names = [a["name"] for a in allocs]
        check(names[:3] == ["kite", "kite-secure", "glibc"], f"kite builds first: {names}")
        mi3 = [a for a in allocs if a["name"] == "mimalloc3"]
        check(len(mi3) == 1, "mimalloc3 listed")
        if mi3 and mi3[0]["status"] == "ok":
            check(mi3[0]["path"].endswith("cmeel.prefix/lib/libmimalloc.so.3")
                  and mi3[0]["version"].startswith("3."), f"mimalloc3 {mi3[0]}")
        elif mi3:
            check("cmeel-mimalloc" in mi3[0]["reason"], f"mimalloc3 reason {mi3[0]}")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", fake, "--no-build",
                            "--size", "tiny", "--workloads", "churn", "--threads", "2",
                            "--reps", "1", "--short-ms", "0", "--no-progress", "--no-charts",
                            "--out", os.path.join(tmp, "s")],
                           capture_output=True, text=True, timeout=120)
        check(q.returncode == 0, f"secure run {q.stderr[-1000:]}")
        with open(os.path.join(tmp, "s", "results.json")) as f:
            j = json.load(f)
        rows = {r["allocator"]: r for r in j["rows"]}
        check("kite-secure" in rows and rows["kite-secure"]["status"] == "ok",
              f"kite-secure measured: {sorted(rows)}")
        for r in rows.values():
            check(r["best_peer"] not in ("kite", "kite-secure", "glibc"), f"peer {r['best_peer']}")
        peers = [n for n in rows if n not in ("kite", "kite-secure", "glibc")]
        if peers:
            check(j["summary"] and "kite_secure_best_peer" in j["summary"], "secure geomean")
        with open(os.path.join(tmp, "s", "results.md")) as f:
            head = next(l for l in f if l.startswith("| workload"))
        check("| kite-secure |" in head, f"kite-secure column {head}")

    def real_programs():
        import run
        helper = os.path.join(build, "kite-bench-exec")
        progs = [p for p in ("sqlite3", "python3", "gcc") if os.path.exists("/usr/bin/" + p)]
        for p in progs:
            c, why = run.program_case(p, run.WORKLOADS[p]["args"]["tiny"], build, 60)
            check(c is not None and c["ref"], f"{p}: reference made under glibc ({why})")
            if not c:
                continue
            r = run.run_case(c, None, 60, helper)
            check(r["status"] == "ok" and r["digest"] == c["ref"], f"{p} again: {r['status']}")
            c["ref"] = "0" * 64  # a forged reference: the output check must fail
            r = run.run_case(c, None, 60, helper)
            check(r["status"] == "WRONG" and "differs from the reference" in r["output"],
                  f"{p} forged reference: {r['status']}")
        if not progs:
            return
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--no-build",
                            "--size", "tiny", "--workloads", ",".join(progs), "--reps", "1",
                            "--allocs", "glibc,wrong,crash", "--alloc", f"wrong={wrong}",
                            "--alloc", f"crash={crash}", "--short-ms", "0", "--no-progress",
                            "--no-charts", "--out", os.path.join(tmp, "p")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, KITE_BENCH_WRONG_EVERY="7"))
        check(q.returncode == 0, f"programs run {q.stderr[-1000:]}")
        with open(os.path.join(tmp, "p", "results.json")) as f:
            rows = {(r["workload"], r["allocator"]): r for r in json.load(f)["rows"]}
        for p in progs:
            check(rows[(p, "glibc")]["status"] == "ok", f"{p} under glibc")
            # gcc's driver reports its crashed cc1 with exit 1: a FAIL, never a time
            st = rows[(p, "crash")]["status"]
            check(st == ("FAIL rc=1" if p == "gcc" else "CRASH sig 11"), f"{p} crash: {st}")
        # blocks corrupted under python3 and gcc: never reported as a time
        for p in ("python3", "gcc"):
            if p in progs:
                st = rows[(p, "wrong")]["status"]
                check(st == "WRONG" or st.startswith(("FAIL", "CRASH")), f"{p} wrong: {st}")

    def docs_and_readme_blocks():
        """--docs rewrites docs/benchmarks.md keeping the sections other tools write, and the
        README's bench-table block, keeping its markers and the text around them."""
        import run
        with open(os.path.join(out, "results.json")) as f:
            j = json.load(f)
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("before\n<!-- bench-table -->\nold table\n<!-- /bench-table -->\nafter\n")
        kept = ("<!-- notes -->\nhand notes\n<!-- /notes -->",
                "<!-- fastpath-table -->\n| fast | 1 |\n<!-- /fastpath-table -->",
                "<!-- rss-timeline -->\nrss table\n<!-- /rss-timeline -->")
        tools_part = ("## Instructions per malloc+free (fast path)\n\n" + kept[1] + "\n\n"
                      "## Resident memory over time\n\n" + kept[2] + "\nprose of a tool\n\n"
                      "## Resident memory after the threads exit\n\n<!-- exit-rss -->\n"
                      "exit table\n<!-- /exit-rss -->\n")
        with open(os.path.join(root, "docs", "benchmarks.md"), "w") as f:
            f.write("# old\n\n" + kept[0] + "\n\nstale text\n\n" + tools_part
                    + "\n## Workloads\n\nold workloads\n")
        names = [a["name"] for a in j["allocators"] if a["status"] == "ok"]
        cases = [dict(label=l, workload=l.split()[0], threads=2 if " " in l else None)
                 for l in dict.fromkeys(r["label"] for r in j["rows"])]

        class A:
            allocs_ok = [a for a in j["allocators"] if a["status"] == "ok"]
        keep, keep_short = run.ROOT, run.SHORT_S
        try:
            run.ROOT, run.SHORT_S = root, 0.0
            run.write_docs(j["meta"], "RESULTS-TABLE\n", [], out, A, cases, j["rows"])
        finally:
            run.ROOT, run.SHORT_S = keep, keep_short
        with open(os.path.join(root, "docs", "benchmarks.md")) as f:
            page = f.read()
        for k in kept:
            check(page.count(k) == 1, f"kept once: {k[:30]}")
        check("RESULTS-TABLE" in page and "stale text" not in page and "# old" not in page
              and "old workloads" not in page, "page regenerated")
        check(page.count(tools_part) == 1, "the part other tools write kept whole, prose and "
              "sections they add (exit-rss) included")
        check(page.index("<!-- syscalls -->") < page.index("<!-- fastpath-table -->"),
              "syscalls section before the tools' part")
        check(page.index("<!-- fastpath-table -->") < page.index("<!-- rss-timeline -->")
              < page.index("## Workloads"), "sections in order")
        with open(os.path.join(root, "README.md")) as f:
            readme = f.read()
        check(readme.startswith("before\n<!-- bench-table -->\nWall time, median of 2 interleaved "
                               "runs at size `tiny`, ratio")
              and readme.endswith("<!-- /bench-table -->\nafter\n")
              and "old table" not in readme and "| churn " in readme
              and "| **geometric mean** |" in readme and " ±" not in readme,
              f"README block: {readme}")

    def load_reported():
        """The report states the load before and after against the cores, and says when
        the machine was loaded that its ratios are less certain."""
        import run
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        check("Load average (1, 5, 15 min) before the run: " in md and ", after: " in md
              and f"on {os.cpu_count()} cores" in md, "load in the report")
        with open(os.path.join(out, "results.json")) as f:
            load = json.load(f)["meta"]["load"]
        check(set(load) >= {"load_before", "load_after", "cores", "loaded", "other_cpu_share"},
              f"load in the json: {load}")
        cores = os.cpu_count()
        busy = run.load_figures(f"{cores / 2:.2f} 0.00 0.00", None, 1.0, 0.0)
        idle = run.load_figures("0.00 0.00 0.00", None, 1.0, 0.0)
        check(busy["loaded"] and not idle["loaded"], f"loaded from the load before {busy}")
        check("less certain" in run.load_note(busy) and "otherwise idle" in run.load_note(idle),
              "what a loaded machine means")
        j0 = run.cpu_jiffies()
        check(j0 is not None and j0[1] >= j0[0] > 0, f"/proc/stat read: {j0}")

    def quick_set():
        """--quick: QUICK's cases only, at QUICK's thread counts, without the secure build
        and its hardened peers."""
        import run
        ns = argparse.Namespace(quick=True, workloads="all", threads_list=None, size="tiny",
                                trace=None, timeout=60, allocs="all", alloc=[],
                                install_peers=False)
        cases, skipped = run.build_cases(ns, build)
        got = sorted(c["label"] for c in cases) + sorted(w for w, _ in skipped)
        want = sorted(w if t is None else f"{w} t{t[0]}" for w, t in run.QUICK.items())
        check(sorted(got) == want, f"quick cases {got} != {want}")
        fake = os.path.join(tmp, "secure")  # made by kite_secure_and_mimalloc3, when built
        if os.path.isdir(fake):
            names = [a["name"] for a in run.select_allocators(None, ns, fake)]
            check("kite" in names and not set(names) & set(run.QUICK_SKIP_ALLOCS),
                  f"quick allocators {names}")

    def ab_verdicts():
        """ab_summary on made-up pairs: ratios, spread, and the verdict with its 5% band."""
        import run

        def pair(ca, cb):
            mk = lambda c: dict(user_s=c * 0.75, sys_s=c * 0.25, wall_s=c * 2,
                                maxrss_kib=2048, minflt=100, nvcsw=3, nivcsw=1)
            return mk(ca), mk(cb)
        sm = run.ab_summary([pair(1.0 + 0.004 * i, 1.0) for i in range(11)])
        check(sm["verdict"] == "level" and abs(sm["cpu_ratio"]["median"] - 1.02) < 1e-9
              and abs(sm["cpu_ratio"]["max"] - 1.04) < 1e-9 and sm["pairs"] == 11,
              f"level: {sm}")
        sm = run.ab_summary([pair(0.8, 1.0)] * 9 + [pair(1.1, 1.0)] * 2)
        check(sm["verdict"] == "a faster (9 of 11 pairs agree)"
              and abs(sm["cpu_ratio"]["min"] - 0.8) < 1e-9
              and abs(sm["cpu_ratio"]["max"] - 1.1) < 1e-9, f"a faster: {sm}")
        sm = run.ab_summary([pair(1.2, 1.0)] * 11)
        check(sm["verdict"] == "b faster (11 of 11 pairs agree)"
              and sm["a"]["csw"] == 4 and sm["a"]["minflt"] == 100, f"b faster: {sm}")
        # the split of CPU time: each side's user and system medians, the system-time ratio
        check(abs(sm["a"]["user_s"] - 0.9) < 1e-9 and abs(sm["a"]["sys_s"] - 0.3) < 1e-9
              and abs(sm["b"]["sys_s"] - 0.25) < 1e-9
              and abs(sm["a"]["user_s"] + sm["a"]["sys_s"] - sm["a"]["cpu_s"]) < 1e-9
              and abs(sm["sys_ratio"]["median"] - 1.2) < 1e-9 and sm["sys_ratio"]["pairs"] == 11,
              f"user/sys split: {sm}")
        zero = lambda c: dict(user_s=c, sys_s=0.0, wall_s=c, maxrss_kib=1, minflt=1)
        sm = run.ab_summary([(zero(1.0), zero(1.0))] * 11)
        check(sm["sys_ratio"] is None and sm["verdict"] == "level", f"no system time: {sm}")
        sm = run.ab_summary([pair(1.06, 1.0)] * 11)
        check(sm["verdict"].startswith("b faster"), f"6% is not level: {sm['verdict']}")
        calls = run.parse_strace_c(
            "% time     seconds  usecs/call     calls    errors syscall\n"
            "------ ----------- ----------- --------- --------- ----------------\n"
            " 60.00    0.000600          10        60         3 futex\n"
            " 40.00    0.000400           5        80           madvise\n"
            "------ ----------- ----------- --------- --------- ----------------\n"
            "100.00    0.001000           7       140         3 total\n")
        check(calls == {"futex": 60, "madvise": 80, "total": 140}, f"strace -c parsed: {calls}")

    def ab_end_to_end():
        """--ab on a tiny row with a known pair: glibc against glibc made slow (every malloc
        spins first): 11 pairs, the order swapped at every pair, the verdict glibc faster."""
        slow = os.path.join(build, "libkite-bench-slow.so")
        d = os.path.join(tmp, "ab")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--no-build",
                            "--size", "tiny", "--ab", "churn t2", "--a", "glibc", "--vs", "slow",
                            "--alloc", f"slow={slow}", "--out", d],
                           capture_output=True, text=True, timeout=300)
        check(q.returncode == 0, f"--ab exit {q.returncode}: {q.stderr[-1500:]}")
        if q.returncode:
            return
        with open(os.path.join(d, "ab.json")) as f:
            j = json.load(f)
        check(j["row"] == "churn t2" and j["a"] == "glibc" and j["b"] == "slow"
              and len(j["pairs"]) == 11 and j["summary"]["pairs"] == 11, "11 pairs of the row")
        check(j["summary"]["verdict"].startswith("a faster (")
              and j["summary"]["cpu_ratio"]["max"] < 0.95, f"verdict {j['summary']}")
        # each run's user and system seconds (wait4's rusage of the workload) sum to its CPU
        runs = [r for p in j["pairs"] for r in p]
        split = all(isinstance(r.get(k), (int, float)) and r[k] >= 0 for r in runs
                    for k in ("user_s", "sys_s", "cpu_s"))
        bad = [r for r in runs if not split or abs(r["user_s"] + r["sys_s"] - r["cpu_s"]) > 1e-6]
        check(len(runs) == 22 and not bad, f"per-run user/sys/cpu: {(bad or runs)[:2]}")
        for k in ("a", "b"):
            sk = j["summary"][k]
            check("user_s" in sk and "sys_s" in sk and sk["user_s"] <= sk["cpu_s"] + 1e-9,
                  f"summary {k}: {sk}")
        check("sys_ratio" in j["summary"], f"sys_ratio in the summary: {j['summary']}")
        firsts = [l.split("[")[-1].rstrip("]") for l in q.stderr.splitlines()
                  if l.startswith("[pair ")][::2]
        check(firsts == ["glibc", "slow"] * 5 + ["glibc"], f"order swapped: {firsts}")
        with open(os.path.join(d, "ab.md")) as f:
            md = f.read()
        check("**Verdict: glibc faster (" in md and "| CPU time, median |" in md
              and "| user time, median |" in md and "| system time, median |" in md
              and "| minor page faults, median |" in md and "| context switches, median |" in md
              and "Load average" in md, f"ab.md: {md}")
        if not shutil.which("strace"):
            print("ab_end_to_end: strace not installed: futex/madvise counts not checked")
            return
        for n in ("glibc", "slow"):
            check(j["syscalls"][n] and j["syscalls"][n]["total"] > 0, f"strace of {n}")
        check("| futex calls (strace -c -f, one run) |" in md, "futex row")

    def ab_errors():
        def err(*extra):
            q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--no-build",
                                "--no-progress"] + list(extra),
                               capture_output=True, text=True, timeout=60)
            return q.returncode, q.stderr
        rc, e = err("--ab", "churn", "--vs", "glibc")
        check(rc == 2 and "name one: 'churn t2', 'churn t8'" in e, f"churn needs a count: {e}")
        rc, e = err("--ab", "churn t2")
        check(rc == 2 and "--ab wants --vs" in e, f"--vs needed: {e}")
        rc, e = err("--ab", "churn t2", "--vs", "glibc", "--pairs", "5")
        check(rc == 2 and "at least 11" in e, f"11 pairs at least: {e}")
        rc, e = err("--ab", "nope", "--vs", "glibc")
        check(rc == 2 and "unknown workload 'nope'" in e, f"unknown row: {e}")
        rc, e = err("--ab", "graph t4", "--vs", "glibc")
        check(rc == 2 and "single-threaded" in e, f"graph has no thread count: {e}")
        rc, e = err("--ab", "churn:2", "--vs", "nosuch")
        check(rc == 2 and "allocator 'nosuch' is not available" in e, f"unknown --vs: {e}")

    def syscalls_block():
        """replace_block: the syscalls section of the docs page is rewritten in place."""
        import run
        p = os.path.join(tmp, "page.md")
        with open(p, "w") as f:
            f.write("a\n<!-- syscalls -->\nold\n<!-- /syscalls -->\nb\n")
        check(run.replace_block(p, "syscalls", "new table\n"), "block found")
        with open(p) as f:
            check(f.read() == "a\n<!-- syscalls -->\nnew table\n<!-- /syscalls -->\nb\n",
                  "block replaced")
        check(not run.replace_block(p, "nosuch", "x"), "missing markers")
        q = subprocess.run([sys.executable, RUNNER, "--build-dir", build, "--no-build",
                            "--size", "tiny", "--syscalls", "--workloads", "rptest,graph",
                            "--allocs", "glibc", "--no-progress"],
                           capture_output=True, text=True, timeout=120)
        if not shutil.which("strace"):
            check(q.returncode == 1 and "strace not installed" in q.stderr, "no strace said")
            return
        rows = [l for l in q.stdout.splitlines() if l.startswith("| ")]
        check(q.returncode == 0 and len(rows) == 2 and rows[0] == "| workload | threads | glibc |"
              and re.fullmatch(r"\| rptest \| 8 \| \d+ / \d+ \|", rows[1]) is not None,
              f"--syscalls: the 8-thread row only, futex / madvise: {q.stdout[-800:]}")

    return run_tests((runner_exits_zero, csv_is_well_formed, spread_and_rotation,
                      json_matches_csv, markdown_table, charts_written, verdicts,
                      list_and_errors, replay_reported, alloc_env_reaches_runs,
                      kite_secure_and_mimalloc3,
                      real_programs, docs_and_readme_blocks, load_reported, quick_set,
                      ab_verdicts, ab_end_to_end, ab_errors, syscalls_block))


if __name__ == "__main__":
    sys.exit(main())
