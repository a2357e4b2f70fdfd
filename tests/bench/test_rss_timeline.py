#!/usr/bin/env python3
"""tests/bench/test_rss_timeline.py -- bench/rss_timeline.py end to end, at tiny size.

    test_rss_timeline.py --build-dir BUILD

Runs the sampler on kite-wl-phases (tiny size) with glibc, kite (when built) and a stand-in
allocator that crashes, then parses what it wrote: rss.csv (the command on its first line,
then allocator, rep, t_s, rss_mib rows; samples strictly increasing in time for every
allocator; RSS positive and, for a healthy allocator, peaking above the tiny working set),
rss.json (phases in the program's order, peak and area consistent with the samples, the
crashing allocator reported as a crash with no peak), rss.md (a row per allocator, and the
RSS at the end of each phase consistent with the samples). The crashing peer leaves the
exit status 0 and is named on stderr; the same stand-in in kite's place exits 1. Also
-h and a bad option (exit 2). Prints one line per test and "N passed, N failed".
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "rss_timeline.py")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import check, run_tests  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    tmp = tempfile.mkdtemp(prefix="kite-rss-test-")
    out = os.path.join(tmp, "rss")
    allocs = ["glibc", "crash"] + (["kite"] if os.path.exists(os.path.join(build, "libkite.so"))
                                   else [])
    cmd = [sys.executable, SCRIPT, "--build-dir", build, "--size", "tiny", "--reps", "2",
           "--allocs", ",".join(allocs), "--alloc",
           "crash=" + os.path.join(build, "libkite-bench-crash.so"), "--no-charts",
           "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    # the same stand-in put in kite's place: kite failing fails the command
    own = subprocess.run([sys.executable, SCRIPT, "--build-dir", build, "--size", "tiny",
                          "--allocs", "glibc,kite", "--alloc",
                          "kite=" + os.path.join(build, "libkite-bench-crash.so"),
                          "--no-charts", "--out", os.path.join(tmp, "own")],
                         capture_output=True, text=True, timeout=120)
    state = {}

    def runs_and_writes():
        # exit 0: the allocator that did not complete is a peer, named on stderr with why
        check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-1500:]}")
        check("peer crash failed: CRASH sig " in p.stderr, f"stderr {p.stderr[-1500:]}")
        check(not any(f"{n} failed" in p.stderr for n in allocs if n != "crash"),
              "only the crash is named")
        for f in ("rss.csv", "rss.json", "rss.md"):
            check(os.path.exists(os.path.join(out, f)), f"{f} written")

    def kite_failing_fails():
        check(own.returncode == 1, f"exit {own.returncode}: {own.stderr[-1500:]}")
        check("kite build kite failed: CRASH sig " in own.stderr, f"stderr {own.stderr[-1500:]}")
        check("glibc failed" not in own.stderr, "glibc not named")
        with open(os.path.join(tmp, "own", "rss.md")) as f:
            md = f.read()
        check("| kite | - | - | - | **CRASH sig " in md and "| glibc | " in md, md)

    def csv_parses():
        with open(os.path.join(out, "rss.csv")) as f:
            first = f.readline()
            rows = list(csv.DictReader(f))
        check(first.startswith("# command: bench/rss_timeline.py ") and "--size tiny" in first,
              f"command first: {first!r}")
        series = {}
        for r in rows:
            series.setdefault((r["allocator"], int(r["rep"])), []).append(
                (float(r["t_s"]), float(r["rss_mib"])))
        for name in allocs:
            for rep in (1, 2):
                s = series.get((name, rep), [])
                # the crashing stand-in dies at start-up: it may leave no sample at all
                check(len(s) >= 3 or name == "crash", f"{name} rep {rep}: {len(s)} samples")
                ts = [t for t, _ in s]
                check(all(b > a for a, b in zip(ts, ts[1:])), f"{name} times increase")
                check(all(v > 0 for _, v in s), f"{name} rss positive")
                if name != "crash" and s:
                    # 8 MiB of small blocks are live at the end of the build phase
                    check(max(v for _, v in s) > 8, f"{name} peak {max(v for _, v in s)}")
        state["series"] = series

    def json_summary():
        with open(os.path.join(out, "rss.json")) as f:
            j = json.load(f)
        check(j["command"].startswith("bench/rss_timeline.py"), "json command")
        sm = j["summary"]
        check(sm["crash"]["status"].startswith("CRASH"), f"crash reported {sm['crash']}")
        check("peak_mib" not in sm["crash"], "no peak for a crash")
        for name in allocs:
            if name == "crash":
                continue
            check(sm[name]["status"] == "ok", f"{name} ok")
            runs = j["runs"][name]
            names = [ph[0] for ph in runs[0]["phases"]]
            check(names == ["build", "free", "idle", "rebuild", "threads", "idle2",
                            "teardown", "end"], f"phases {names}")
            peaks = sorted(max(k for _, k in r["samples"]) / 1024 for r in runs)
            check(abs(sm[name]["peak_mib"] - sum(peaks) / 2) < 1e-6, "peak is the median")
            s = state["series"][(name, 1)]
            dur = s[-1][0] - s[0][0]
            check(0 < sm[name]["area_mib_s"] <= max(v for _, v in s) * (dur + 0.1),
                  f"area bounded {sm[name]}")
        with open(os.path.join(out, "rss.md")) as f:
            md = f.read()
        for name in allocs:
            check(f"| {name} |" in md, f"md row {name}")
        check("**CRASH" in md, "crash in the table")
        # the second table: RSS at the end of each phase, '-' for the crash (no clean run);
        # idle2's figure is the last sample before teardown
        head = "| allocator | build | free | idle | rebuild | threads | idle2 | teardown |"
        check(head in md, "phase table header")
        rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]]
                for l in md[md.find(head):].splitlines()[2:] if l.startswith("| ")}
        check(rows.get("crash") == ["-"] * 7, f"crash phases {rows.get('crash')}")
        for name in allocs:
            if name == "crash":
                continue
            cells = rows.get(name, [])
            # a phase shorter than the sampling period may hold no sample at tiny size; the
            # idles last 30 ms
            check(len(cells) == 7 and all(c.isdigit() or c == "-" for c in cells) and
                  all(cells[i].isdigit() for i in (2, 5)), f"{name} phases {cells}")
            ends = []
            for r in j["runs"][name]:
                t_td = dict(r["phases"])["teardown"]
                ends.append([k for t, k in r["samples"] if t < t_td][-1] / 1024)
            if len(cells) == 7:
                check(cells[5] == f"{sum(ends) / 2:.0f}", f"{name} idle2 {cells[5]} vs {ends}")

    def usage_and_errors():
        q = subprocess.run([sys.executable, SCRIPT, "-h"], capture_output=True, text=True)
        check(q.returncode == 0 and "usage: bench/rss_timeline.py" in q.stdout, "-h")
        q = subprocess.run([sys.executable, SCRIPT, "--bogus"], capture_output=True, text=True)
        check(q.returncode == 2 and "usage:" in q.stderr, "bad option exits 2")
        q = subprocess.run([sys.executable, SCRIPT, "--build-dir", build, "--allocs", "nope"],
                           capture_output=True, text=True)
        check(q.returncode == 2 and "unknown allocator" in q.stderr, "unknown allocator")

    return run_tests((runs_and_writes, kite_failing_fails, csv_parses, json_summary,
                      usage_and_errors))


if __name__ == "__main__":
    sys.exit(main())
