#!/usr/bin/env python3
"""bench/run.py -- kite's benchmark runner: kite against glibc and every peer found.

    make bench                     # build, then this script at the default (small) size
    bench/run.py -h                # every option
    bench/run.py --size tiny --workloads churn,larson --allocs glibc,jemalloc --reps 1

What it does
  * Workloads are the self-checking C programs in bench/workloads/ (built as
    <build>/kite-wl-<name>), plus `replay`, which runs <build>/kite-replay --malloc on a
    trace from tests/data/traces/ when both exist. Each workload has an argument set per
    size (tiny, small, medium, large) and a default list of thread counts; --threads
    overrides the latter. A (workload, thread count) pair is a "case".
  * Allocators: kite (<build>/libkite.so), glibc (no preload), and each peer found on the
    machine by its Debian soname: jemalloc, tcmalloc, mimalloc, tbbmalloc (its malloc
    proxy). --install-peers apt-get installs the missing ones; --alloc NAME=PATH adds any
    other preloadable .so. A missing allocator is listed as skipped, with the reason.
  * Each repetition runs every case with every allocator, round robin over the allocators
    (so slow drifts of the machine hit all of them alike). Every run is one child process
    under LD_PRELOAD, forked by <build>/kite-bench-exec, which measures its wall time and
    takes CPU time and peak RSS from wait4's resource usage of that child alone.
  * A run that is killed by a signal is "CRASH sig N", one that exits non-zero is
    "FAIL rc=N", one whose self-check fails (exit 3, or no `checksum: ... ok` line) is
    "WRONG", one past --timeout is "TIMEOUT". A pair with any such run is reported as that
    failure, never as a time, and is not run again in later repetitions; the other pairs
    go on.
  * Reported per pair: median wall time, median user+sys CPU time, median peak RSS, and
    the ratios of the median wall time to glibc's and to the best peer's (the fastest of
    the allocators that are neither kite nor glibc).
  * Output, in --out (default bench/results/<UTC timestamp>/): results.json, results.csv
    (first line: the exact command), results.md (tables), and, unless --no-charts, PNG
    charts: time_ratio.png, peak_rss.png, scaling.png. The markdown table is also printed.

Only the standard library is needed with --no-charts; matplotlib draws the charts (in the
project's .venv, see requirements.txt). Progress is a line per run on stderr, or a bar when
tqdm happens to be installed.
"""

import argparse
import csv
import datetime as _dt
import glob
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from kitecommon import machine_info, median  # noqa: E402  (one machine description, one median)

# --------------------------------------------------------------------------------------
# Workloads: name -> description, executable, args per size, default thread counts.
# `threads: None` means single-threaded (no -t passed, one case). The default (small) size
# keeps each run around a few tenths of a second under glibc on a 2-core machine, so the
# whole default suite stays within a few minutes with all six allocators.
# --------------------------------------------------------------------------------------
SIZES = ("tiny", "small", "medium", "large")

WORKLOADS = {
    "collatz-ivec": dict(
        desc="seed 001/002: collatz sequences as header + realloc-doubled long arrays, "
             "copied and extended across 4 threads",
        args={"tiny": "-n 2000", "small": "-n 100000", "medium": "-n 250000",
              "large": "-n 500000"},
        threads=[4]),
    "collatz-list": dict(
        desc="seed 001/002: collatz sequences as lists of 16-byte cells across 4 threads",
        args={"tiny": "-n 2000", "small": "-n 30000", "medium": "-n 100000",
              "large": "-n 300000"},
        threads=[4]),
    "rnbench": dict(
        desc="seed 004: per-thread slots, random alloc/free of 16..1024 bytes",
        args={"tiny": "-n 1000 -i 20000", "small": "-n 100000 -i 2000000",
              "medium": "-n 100000 -i 8000000", "large": "-n 100000 -i 30000000"},
        threads=[1, 2, 4]),
    "larson": dict(
        desc="server-like churn, slot arrays handed to the next thread each epoch",
        args={"tiny": "-n 200 -e 4 -i 2000", "small": "-n 1000 -e 10 -i 600000",
              "medium": "-n 1000 -e 10 -i 2500000", "large": "-n 4000 -e 20 -i 5000000"},
        threads=[1, 2, 4]),
    "xmalloc": dict(
        desc="producers allocate, consumers free (all frees remote)",
        args={"tiny": "-n 200", "small": "-n 30000", "medium": "-n 120000",
              "large": "-n 500000"},
        threads=[4]),
    "cache-thrash": dict(
        desc="active false sharing: per-thread 8-byte objects written many times",
        args={"tiny": "-n 200 -w 100", "small": "-n 2000 -w 20000",
              "medium": "-n 10000 -w 20000", "large": "-n 40000 -w 20000"},
        threads=[2]),
    "cache-scratch": dict(
        desc="passive false sharing: objects from main freed and reused by workers",
        args={"tiny": "-n 200 -w 100", "small": "-n 2000 -w 20000",
              "medium": "-n 10000 -w 20000", "large": "-n 40000 -w 20000"},
        threads=[2]),
    "realloc": dict(
        desc="many vectors grown side by side by realloc, 1..16 elements at a time",
        args={"tiny": "-n 50 -l 300 -r 2", "small": "-n 1000 -l 2000 -r 4",
              "medium": "-n 2000 -l 4000 -r 8", "large": "-n 2000 -l 8000 -r 4"},
        threads=[2]),
    "large": dict(
        desc="large blocks, 64 KiB..32 MiB, every page touched",
        args={"tiny": "-n 20 -l 4 -m 4194304", "small": "-n 150 -l 8",
              "medium": "-n 600 -l 8", "large": "-n 2500 -l 8"},
        threads=[2]),
    "graph": dict(
        desc="single thread: object graph built, walked, freed in random order",
        args={"tiny": "-n 5000 -r 2", "small": "-n 200000 -r 3", "medium": "-n 500000 -r 5",
              "large": "-n 1000000 -r 4"},
        threads=None),
    "thread-churn": dict(
        desc="many short-lived threads; half their blocks freed by main after they exit",
        args={"tiny": "-n 40 -b 50", "small": "-n 1500 -b 200", "medium": "-n 6000 -b 200",
              "large": "-n 20000 -b 400"},
        threads=[4]),
    "churn": dict(
        desc="random sizes 8..1024, ~20% of frees by another thread (allocator-core check)",
        args={"tiny": "-n 20000 -k 256", "small": "-n 1000000 -k 4096",
              "medium": "-n 5000000 -k 4096", "large": "-n 8000000 -k 16384"},
        threads=[2, 8]),
    "replay": dict(
        desc="the largest trace in tests/data/traces/ replayed in-process by "
             "kite-replay --malloc",
        args={s: "" for s in SIZES},
        threads=None, external=True),
}

# Peers: name -> (sonames tried in order, Debian package). tbbmalloc needs its proxy to
# replace malloc; libtbbmalloc.so alone only exports scalable_malloc.
PEERS = {
    "jemalloc": (["libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"], "libjemalloc2"),
    "tcmalloc": (["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so"],
                 "libtcmalloc-minimal4"),
    "mimalloc": (["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"],
                 "libmimalloc2.0"),
    "tbbmalloc": (["libtbbmalloc_proxy.so.2", "libtbbmalloc_proxy.so"], "libtbbmalloc2"),
}
LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/local/lib", "/usr/lib/aarch64-linux-gnu"]
WRONG_EXIT = 3


# --------------------------------------------------------------------------------------
# Allocators
# --------------------------------------------------------------------------------------
def find_peer(sonames):
    for d in LIB_DIRS:
        for so in sonames:
            p = os.path.join(d, so)
            if os.path.exists(p):
                return p
    return None


def package_version(pkg):
    """The installed Debian package's version, or '' (no dpkg, not installed)."""
    try:
        q = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True,
                           text=True, timeout=10)
        return q.stdout.strip() if q.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def git_describe():
    """The commit the runner's tree is at, with '-dirty' when it has local changes."""
    try:
        q = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=10)
        return q.stdout.strip() if q.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def install_peers(missing_pkgs):
    """apt-get install the given packages (with sudo when not root). Returns True on success."""
    if not missing_pkgs:
        return True
    if not shutil.which("apt-get"):
        print("--install-peers: apt-get not found", file=sys.stderr)
        return False
    pre = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("installing: " + " ".join(missing_pkgs), file=sys.stderr)
    ok = subprocess.call(pre + ["apt-get", "install", "-y", "-qq"] + missing_pkgs, env=env) == 0
    if not ok:
        subprocess.call(pre + ["apt-get", "update", "-qq"], env=env)
        ok = subprocess.call(pre + ["apt-get", "install", "-y", "-qq"] + missing_pkgs,
                             env=env) == 0
    return ok


def discover_allocators(build_dir, extra, want_install):
    """Returns [dict(name, path, status, reason)] in report order: kite, glibc, peers,
    extras. status is 'ok' or 'skipped'; path None means no preload (glibc)."""
    allocs = []
    kite = os.path.join(build_dir, "libkite.so")
    rel = os.path.relpath(kite, ROOT)
    if os.path.exists(kite):
        allocs.append(dict(name="kite", path=kite, status="ok", reason=""))
    else:
        allocs.append(dict(name="kite", path=kite, status="skipped", reason=f"{rel} not found"))
    allocs.append(dict(name="glibc", path=None, status="ok", reason="",
                       version=package_version("libc6")))
    if want_install:
        missing = [pkg for _, (sonames, pkg) in PEERS.items() if not find_peer(sonames)]
        install_peers(missing)
    for name, (sonames, pkg) in PEERS.items():
        p = find_peer(sonames)
        if p:
            allocs.append(dict(name=name, path=p, status="ok", reason="",
                               version=package_version(pkg)))
        else:
            allocs.append(dict(name=name, path=None, status="skipped",
                               reason=f"{sonames[0]} not found (Debian package {pkg}; "
                                      "run with --install-peers)"))
    for spec in extra:
        if "=" not in spec:
            raise SystemExit(f"--alloc wants NAME=PATH, got {spec!r}")
        name, path = spec.split("=", 1)
        path = os.path.abspath(path)
        if any(a["name"] == name for a in allocs):
            allocs = [a for a in allocs if a["name"] != name]
        if os.path.exists(path):
            allocs.append(dict(name=name, path=path, status="ok", reason=""))
        else:
            allocs.append(dict(name=name, path=path, status="skipped",
                               reason=f"{path} not found"))
    return allocs


# --------------------------------------------------------------------------------------
# Running one process
# --------------------------------------------------------------------------------------
def run_once(argv, preload, timeout, helper=None, needs_checksum=True, wrong_rc=WRONG_EXIT):
    """Runs argv (argv[0] a path) with LD_PRELOAD=preload (None: no preload). Returns a
    dict: status ('ok', 'CRASH sig N', 'FAIL rc=N', 'WRONG', 'TIMEOUT'), wall_s, user_s,
    sys_s, maxrss_kib, rc, output (the last 4000 characters).

    With `helper` (<build>/kite-bench-exec) the child is forked by that small launcher,
    which reports its wall time, rusage and status: ru_maxrss survives exec, so a child
    spawned from this (large) Python process would report at least our own RSS. Without
    it we spawn directly and peak RSS is an upper bound. Either way the child runs in its
    own session so that a timeout kills everything it started."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as resf:
        if helper:
            cmd = [helper, resf.name, preload or "", "--"] + list(argv)
        else:
            cmd = list(argv)
            if preload:
                env["LD_PRELOAD"] = preload
        fd = out.fileno()
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            t0 = time.perf_counter()
            pid = os.posix_spawn(cmd[0], cmd, env, setsid=True,
                                 file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0),
                                               (os.POSIX_SPAWN_DUP2, fd, 1),
                                               (os.POSIX_SPAWN_DUP2, fd, 2)])
        finally:
            os.close(devnull)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, st, ru = os.wait4(pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
        rep = resf.read() if helper else ""
    res = dict(wall_s=wall, user_s=ru.ru_utime, sys_s=ru.ru_stime, maxrss_kib=ru.ru_maxrss,
               rc=None, output=text[-4000:])
    if timed_out.is_set():
        res["status"] = "TIMEOUT"
        return res
    if helper:
        f = dict(kv.split("=", 1) for kv in rep.split() if "=" in kv)
        if os.WIFSIGNALED(st) or os.WEXITSTATUS(st) != 0 or "wall" not in f:
            res["status"] = "FAIL launcher" if not os.WIFSIGNALED(st) else \
                f"CRASH sig {os.WTERMSIG(st)}"
            return res
        res.update(wall_s=float(f["wall"]), user_s=float(f["user"]), sys_s=float(f["sys"]),
                   maxrss_kib=int(f["maxrss_kib"]))
        if "signaled" in f:
            res["status"] = f"CRASH sig {f['signaled']}"
            return res
        rc = int(f["exited"])
    elif os.WIFSIGNALED(st):
        res["status"] = f"CRASH sig {os.WTERMSIG(st)}"
        return res
    else:
        rc = os.WEXITSTATUS(st)
    res["rc"] = rc
    res["status"] = classify_exit(rc, text, needs_checksum, wrong_rc)
    return res


def classify_exit(rc, text, needs_checksum=True, wrong_rc=WRONG_EXIT):
    """The verdict for a process that exited with rc and printed text. Workloads exit
    WRONG_EXIT (3) when their self-check fails; kite-replay --check exits 1."""
    if rc == wrong_rc or "\nWRONG" in "\n" + text:
        return "WRONG"
    if rc != 0:
        return f"FAIL rc={rc}"
    if needs_checksum and not any(l.startswith("checksum: ") and l.endswith(" ok")
                                  for l in text.splitlines()):
        return "WRONG"
    return "ok"


# --------------------------------------------------------------------------------------
# The suite
# --------------------------------------------------------------------------------------
def find_trace(explicit):
    if explicit:
        return explicit if os.path.exists(explicit) else None
    # the largest trace there (the most work); documentation files are not traces
    cands = [c for c in glob.glob(os.path.join(ROOT, "tests", "data", "traces", "*"))
             if os.path.isfile(c) and not c.endswith((".md", ".txt", ".py"))]
    return max(cands, key=lambda c: (os.path.getsize(c), c)) if cands else None


def build_cases(args, build_dir):
    """Returns (cases, skipped): cases are dicts(workload, threads, argv, label, checksum);
    skipped is [(workload, reason)]."""
    names = list(WORKLOADS) if args.workloads == "all" else \
        [w.strip() for w in args.workloads.split(",") if w.strip()]
    cases, skipped = [], []
    for w in names:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; --list shows them")
        spec = WORKLOADS[w]
        if spec.get("external"):
            exe = os.path.join(build_dir, "kite-replay")
            trace = find_trace(args.trace)
            if not os.path.exists(exe):
                skipped.append((w, "skipped (kite-replay not built)"))
                continue
            if not trace:
                skipped.append((w, "skipped (no trace under tests/data/traces/)"))
                continue
            # timing mode, as DESIGN.md names it; kite-replay exits 1 when a check fails.
            # (--check is not used: it demands 16-byte alignment even for blocks under 16
            # bytes, which mimalloc rightly aligns to 8.)
            cases.append(dict(workload=w, threads=None, label=w, checksum=False, wrong_rc=1,
                              argv=[exe, "--malloc", trace]))
            continue
        exe = os.path.join(build_dir, "kite-wl-" + w)
        if not os.path.exists(exe):
            skipped.append((w, f"skipped ({os.path.relpath(exe, ROOT)} not built)"))
            continue
        base = [exe] + shlex.split(spec["args"][args.size])
        if spec["threads"] is None:
            cases.append(dict(workload=w, threads=None, label=w, checksum=True,
                              wrong_rc=WRONG_EXIT, argv=base))
            continue
        tl = args.threads_list or spec["threads"]
        for t in tl:
            cases.append(dict(workload=w, threads=t, label=f"{w} t{t}", checksum=True,
                              wrong_rc=WRONG_EXIT, argv=base + ["-t", str(t)]))
    return cases, skipped


def summarize(runs):
    """Aggregates the runs of one pair: the first failure wins, else medians."""
    for r in runs:
        if r["status"] != "ok":
            return dict(status=r["status"], wall_s=None, cpu_s=None, maxrss_kib=None,
                        detail=r["output"][-600:])
    return dict(status="ok",
                wall_s=median(r["wall_s"] for r in runs),
                cpu_s=median(r["user_s"] + r["sys_s"] for r in runs),
                maxrss_kib=median(r["maxrss_kib"] for r in runs),
                detail="")


def add_ratios(rows, alloc_names):
    by_case = {}
    for r in rows:
        by_case.setdefault(r["label"], {})[r["allocator"]] = r
    for label, d in by_case.items():
        g = d.get("glibc")
        gl = g["wall_s"] if g and g["status"] == "ok" else None
        peers = [r["wall_s"] for n, r in d.items()
                 if n not in ("kite", "glibc") and r["status"] == "ok"]
        best = min(peers) if peers else None
        best_name = next((n for n, r in d.items() if n not in ("kite", "glibc")
                          and r["status"] == "ok" and r["wall_s"] == best), None)
        for r in d.values():
            ok = r["status"] == "ok"
            r["ratio_glibc"] = r["wall_s"] / gl if ok and gl else None
            r["ratio_best_peer"] = r["wall_s"] / best if ok and best else None
            r["best_peer"] = best_name


def geomeans(rows, names, cases):
    """Geometric means of each allocator's wall-time ratio to glibc (and of kite's ratio to
    the best peer) over the cases where every allocator ran cleanly (allocators that ran no
    case cleanly are left out); None if there are no such cases."""
    by = {(r["label"], r["allocator"]): r for r in rows}
    # allocators that completed nothing (a broken library) would empty the common set
    names = [n for n in names if any(by[(c["label"], n)]["ratio_glibc"] is not None
                                     for c in cases)]
    common = [c["label"] for c in cases
              if all(by[(c["label"], n)]["ratio_glibc"] is not None for n in names)]
    if not common:
        return None

    def gmean(xs):
        xs = [x for x in xs if x and x > 0]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    res = dict(cases=len(common),
               ratio_glibc={n: gmean([by[(l, n)]["ratio_glibc"] for l in common]) for n in names})
    if "kite" in names:
        res["kite_best_peer"] = gmean([by[(l, "kite")]["ratio_best_peer"] for l in common])
    return res


def fmt_time(s):
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def markdown(meta, rows, allocs, skipped_wl, cases):
    names = [a["name"] for a in allocs if a["status"] == "ok"]
    by = {(r["label"], r["allocator"]): r for r in rows}
    out = []
    out.append(f"Command: `{meta['command']}`  ")
    out.append(f"Machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores, "
               f"Linux {meta['machine']['kernel']}, {meta['machine']['libc']}; "
               f"{meta['date']}  ")
    out.append(f"Load average before the run: {meta['machine']['load_at_start']}; kite at "
               f"`{meta.get('kite_commit') or '?'}`  ")
    out.append("Allocators: " + "; ".join(
        f"{a['name']} " + (f"{a['version']} " if a.get("version") else "")
        + (f"(`{a['path']}`)" if a["path"] else "(no preload)")
        for a in allocs if a["status"] == "ok") + "  ")
    out.append(f"Size `{meta['size']}`, {meta['reps']} repetitions per pair (median shown), "
               "allocators interleaved round robin.")
    out.append("")
    out.append("### Wall time (median; in parentheses: ratio to glibc, lower is better)")
    out.append("")
    head = ["workload", "threads"] + names + (["kite / best peer"] if "kite" in names else [])
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for c in cases:
        cells = [c["workload"], str(c["threads"] or 1)]
        oks = [by[(c["label"], n)]["wall_s"] for n in names
               if by[(c["label"], n)]["status"] == "ok"]
        fastest = min(oks) if oks else None
        for n in names:
            r = by[(c["label"], n)]
            if r["status"] != "ok":
                cells.append(f"**{r['status']}**")
                continue
            t = fmt_time(r["wall_s"])
            if r["ratio_glibc"] is not None and n != "glibc":
                t += f" ({r['ratio_glibc']:.2f}x)"
            if r["wall_s"] == fastest:
                t = f"**{t}**"
            cells.append(t)
        if "kite" in names:
            k = by[(c["label"], "kite")]
            cells.append(f"{k['ratio_best_peer']:.2f}x ({k['best_peer']})"
                         if k["ratio_best_peer"] is not None else "-")
        out.append("| " + " | ".join(cells) + " |")
    gm = geomeans(rows, names, cases)
    if gm:
        cells = ["**geometric mean**", f"{gm['cases']} cases"]
        for n in names:
            cells.append(f"{gm['ratio_glibc'][n]:.2f}x" if n in gm["ratio_glibc"] else "-")
        if "kite" in names:
            cells.append(f"{gm['kite_best_peer']:.2f}x" if gm.get("kite_best_peer") else "-")
        out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append(f"The last row is the geometric mean of the ratios to glibc over the "
                   f"{gm['cases']} cases that every allocator completed (an allocator that "
                   "completed none is left out), and, last column, of kite's ratio to the best "
                   "peer of each of those cases.")
    out.append("")
    out.append("### Peak RSS (MiB, median)")
    out.append("")
    head = ["workload", "threads"] + names
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 2 + ["---:"] * len(names)) + "|")
    for c in cases:
        cells = [c["workload"], str(c["threads"] or 1)]
        for n in names:
            r = by[(c["label"], n)]
            cells.append(f"{r['maxrss_kib'] / 1024:.1f}" if r["status"] == "ok"
                         else f"**{r['status']}**")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("### CPU time (user+sys, s, median)")
    out.append("")
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 2 + ["---:"] * len(names)) + "|")
    for c in cases:
        cells = [c["workload"], str(c["threads"] or 1)]
        for n in names:
            r = by[(c["label"], n)]
            cells.append(f"{r['cpu_s']:.3f}" if r["status"] == "ok" else f"**{r['status']}**")
        out.append("| " + " | ".join(cells) + " |")
    skipped = [a for a in allocs if a["status"] != "ok"]
    if skipped or skipped_wl:
        out.append("")
        out.append("### Skipped")
        out.append("")
        for a in skipped:
            out.append(f"- allocator {a['name']}: {a['reason']}")
        for w, why in skipped_wl:
            out.append(f"- workload {w}: {why}")
    out.append("")
    return "\n".join(out)


def write_csv(path, meta, rows):
    cols = ["workload", "threads", "allocator", "status", "wall_s", "cpu_s", "peak_rss_mib",
            "ratio_glibc", "ratio_best_peer", "best_peer", "runs", "walls_s"]
    with open(path, "w", newline="") as f:
        f.write("# command: " + meta["command"] + "\n")
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            def num(v, fmt="{:.6f}"):
                return "" if v is None else fmt.format(v)
            w.writerow([r["workload"], r["threads"] or 1, r["allocator"], r["status"],
                        num(r["wall_s"]), num(r["cpu_s"]),
                        num(None if r["maxrss_kib"] is None else r["maxrss_kib"] / 1024, "{:.2f}"),
                        num(r["ratio_glibc"], "{:.4f}"), num(r["ratio_best_peer"], "{:.4f}"),
                        r["best_peer"] or "", len(r["runs"]),
                        " ".join(f"{x['wall_s']:.4f}" for x in r["runs"])])


def charts(outdir, rows, allocs, cases):
    """PNG charts (matplotlib, Agg). Returns the list of files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.ticker
    import matplotlib.pyplot as plt

    names = [a["name"] for a in allocs if a["status"] == "ok"]
    by = {(r["label"], r["allocator"]): r for r in rows}
    labels = [c["label"] for c in cases]
    colors = {"kite": "#d62728", "glibc": "#7f7f7f", "jemalloc": "#1f77b4",
              "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e", "tbbmalloc": "#9467bd"}
    palette = ["#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    col = {n: colors.get(n) or palette[i % len(palette)] for i, n in enumerate(names)}
    files = []
    width = 0.8 / max(1, len(names))

    def grouped(metric, ylabel, title, fname, log, ref=None):
        fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(labels) + 3), 5))
        for i, n in enumerate(names):
            xs, ys = [], []
            for j, lab in enumerate(labels):
                r = by[(lab, n)]
                x = j + (i - (len(names) - 1) / 2) * width
                v = metric(r)
                if r["status"] != "ok":
                    ax.text(x, ref if ref is not None else (1 if log else 0), "X", ha="center", va="bottom", color=col[n],
                            fontsize=9, fontweight="bold")
                elif v is not None:
                    xs.append(x)
                    ys.append(v)
            if ref is not None:  # bars grow up or down from the reference (ratio 1)
                ax.bar(xs, [y - ref for y in ys], width, bottom=ref, label=n, color=col[n])
            else:
                ax.bar(xs, ys, width, label=n, color=col[n])
        if ref is not None:
            ax.axhline(ref, color="black", lw=0.8, ls="--")
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            # label only the 2s and 5s between the decades: enough to read, not a smear
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:.1e}"[0] in "25" else ""))
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(ncol=min(6, len(names)), fontsize=8)
        ax.grid(axis="y", alpha=0.3, which="both")
        fig.tight_layout()
        p = os.path.join(outdir, fname)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)

    grouped(lambda r: r["ratio_glibc"], "wall time / glibc's (log scale; lower is better)",
            "Wall time relative to glibc (X = crashed or wrong)", "time_ratio.png", True, 1.0)
    grouped(lambda r: r["maxrss_kib"] / 1024 if r["maxrss_kib"] else None,
            "peak RSS, MiB (log scale)", "Peak resident memory (X = crashed or wrong)",
            "peak_rss.png", True)

    multi = {}
    for c in cases:
        if c["threads"] is not None:
            multi.setdefault(c["workload"], []).append(c)
    multi = {w: cs for w, cs in multi.items() if len(cs) > 1}
    if multi:
        n = len(multi)
        fig, axes = plt.subplots(1, n, figsize=(4.5 * n + 1, 4), squeeze=False)
        for ax, (w, cs) in zip(axes[0], multi.items()):
            for a in names:
                pts = [(c["threads"], by[(c["label"], a)]["wall_s"]) for c in cs
                       if by[(c["label"], a)]["status"] == "ok"]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=a,
                            color=col[a])
            ax.set_xscale("log", base=2)
            ax.set_xticks([c["threads"] for c in cs])
            ax.set_xticklabels([str(c["threads"]) for c in cs])
            ax.set_xlabel("threads")
            ax.set_ylabel("wall time, s")
            ax.set_title(w)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"Scaling with threads: the same work per thread, so the ideal is flat "
                     f"up to {os.cpu_count()} threads (this machine's cores), linear beyond")
        fig.tight_layout()
        p = os.path.join(outdir, "scaling.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)
    return files


def write_docs(meta, md, files, outdir, args, cases):
    """docs/benchmarks.md: how the run was made, the workloads, the tables, the charts.
    A hand-written section between the NOTES markers of an existing page is kept."""
    page = os.path.join(ROOT, "docs", "benchmarks.md")
    notes = ""
    if os.path.exists(page):
        with open(page) as f:
            old = f.read()
        a, b = old.find("<!-- notes -->"), old.find("<!-- /notes -->")
        if a >= 0 and b > a:
            notes = old[a + len("<!-- notes -->"):b].strip("\n")
    rel = lambda p: os.path.relpath(p, os.path.dirname(page))
    w = []
    w.append("# kite benchmarks")
    w.append("")
    w.append("Produced by `make bench`'s runner, `bench/run.py`, on the machine described "
             "below; regenerate with")
    w.append("")
    w.append("```sh")
    w.append(f"make && make venv && .venv/bin/python bench/run.py --docs --reps {meta['reps']}"
             + ("" if meta["size"] == "small" else f" --size {meta['size']}"))
    w.append("```")
    w.append("")
    w.append("How it runs: every workload is a small self-checking C program "
             "(`bench/workloads/`, built as `build/kite-wl-<name>`) started once per run with "
             "the allocator under test in `LD_PRELOAD` (glibc: no preload). Within each "
             "repetition every workload runs with every allocator in turn (round robin), so "
             "drifts of the machine hit all allocators alike; the tables give the median "
             "over the repetitions. Wall and CPU time and peak RSS are those of the workload "
             "process alone (`build/kite-bench-exec` forks it and reads `wait4`'s resource "
             "usage). A run that crashes, fails or whose self-check fails is shown as such "
             "(`CRASH sig N`, `FAIL rc=N`, `WRONG`), never as a time. Raw results, with the "
             f"exact command on their first line: `{os.path.relpath(outdir, ROOT)}/results.csv` "
             "and `results.json`.")
    w.append("")
    if notes:
        w.append("<!-- notes -->")
        w.append(notes)
        w.append("<!-- /notes -->")
        w.append("")
    w.append("## Results")
    w.append("")
    w.append(md.rstrip("\n"))
    w.append("")
    w.append("## Charts")
    w.append("")
    for p in files:
        w.append(f"![{os.path.basename(p)}]({rel(p)})")
        w.append("")
    w.append("## Workloads")
    w.append("")
    w.append(f"Arguments at size `{meta['size']}` (each program's `-h` explains them; "
             "`-t` is the thread count).")
    w.append("")
    w.append("| workload | program | arguments | threads | what it stresses |")
    w.append("|---|---|---|---|---|")
    for name, spec in WORKLOADS.items():
        prog = "kite-replay --malloc" if spec.get("external") else f"kite-wl-{name}"
        th = "1" if spec["threads"] is None else ", ".join(map(str, spec["threads"]))
        w.append(f"| {name} | `{prog}` | `{spec['args'][meta['size']] or 'TRACE'}` | {th} | "
                 f"{spec['desc']} |")
    w.append("")
    with open(page, "w") as f:
        f.write("\n".join(w))


def ensure_built(build_dir, no_build):
    """Builds the workloads (and libkite.so, if its target exists) when any is missing."""
    need = [w for w, s in WORKLOADS.items() if not s.get("external")
            and not os.path.exists(os.path.join(build_dir, "kite-wl-" + w))]
    if not need or no_build:
        return
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = str(min(os.cpu_count() or 2, 16))
    print(f"building into {build_dir} ...", file=sys.stderr)
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.call(["cmake", "-S", ROOT, "-B", build_dir] + gen)
    subprocess.call(["cmake", "--build", build_dir, "-j", jobs])


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Compare kite with glibc and the installed peers on kite's workloads.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  bench/run.py --size tiny --reps 1                 # a quick look\n"
               "  bench/run.py --workloads churn,larson --threads 1,2,4,8\n"
               "  bench/run.py --alloc mine=/path/libmine.so --allocs glibc,mine\n"
               "  bench/run.py --docs --reps 5                      # docs/benchmarks.md\n"
               "verdicts: CRASH sig N (killed by a signal), FAIL rc=N (non-zero exit),\n"
               "WRONG (the workload's self-check failed), TIMEOUT (past --timeout).")
    ap.add_argument("--size", choices=SIZES, default="small",
                    help="problem size of every workload (default: small, a few minutes)")
    ap.add_argument("--workloads", default="all",
                    help="comma-separated workloads (default: all; --list shows them)")
    ap.add_argument("--allocs", default="all",
                    help="comma-separated allocators to run (default: every one found)")
    ap.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                    help="add a preloadable .so as allocator NAME (repeatable)")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts for every multi-thread workload "
                         "(default: each workload's own list)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per pair (default 3)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds before a run is killed and reported TIMEOUT (default 60)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                    help="where kite-wl-*, libkite.so and kite-replay are (default build/)")
    ap.add_argument("--no-build", action="store_true",
                    help="do not try to build missing workloads")
    ap.add_argument("--trace", default=None,
                    help="trace for the replay workload (default: the largest in "
                         "tests/data/traces/)")
    ap.add_argument("--out", default=None,
                    help="output directory (default bench/results/<UTC timestamp>/)")
    ap.add_argument("--charts-dir", default=None,
                    help="where to write the PNG charts (default: the output directory)")
    ap.add_argument("--no-charts", action="store_true", help="skip the PNG charts (no matplotlib)")
    ap.add_argument("--docs", action="store_true",
                    help="also write docs/benchmarks.md, with the charts in docs/bench/ and the "
                         "raw results in bench/results/docs-run/ (unless --out/--charts-dir say "
                         "otherwise)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--install-peers", action="store_true",
                    help="apt-get install the missing peers (jemalloc, tcmalloc, mimalloc, tbbmalloc)")
    ap.add_argument("--list", action="store_true", help="list workloads and allocators, then exit")
    args = ap.parse_args(argv)
    command = " ".join(shlex.quote(a) for a in [sys.argv[0]] + (argv if argv is not None
                                                                  else sys.argv[1:]))
    build_dir = os.path.abspath(args.build_dir)
    args.threads_list = None
    if args.threads:
        try:
            args.threads_list = [int(t) for t in args.threads.split(",") if t.strip()]
        except ValueError:
            ap.error("--threads wants a comma-separated list of integers")
        if not args.threads_list or min(args.threads_list) < 1:
            ap.error("--threads wants positive integers")
    if args.reps < 1:
        ap.error("--reps must be >= 1")

    allocs = discover_allocators(build_dir, args.alloc, args.install_peers)
    if args.allocs != "all":
        want = [a.strip() for a in args.allocs.split(",") if a.strip()]
        known = {a["name"] for a in allocs}
        for w in want:
            if w not in known:
                ap.error(f"unknown allocator {w!r} (known: {', '.join(sorted(known))}; "
                         "add others with --alloc NAME=PATH)")
        allocs = [a for a in allocs if a["name"] in want]

    if args.list:
        print("workloads:")
        for w, s in WORKLOADS.items():
            th = "1" if s["threads"] is None else ",".join(map(str, s["threads"]))
            print(f"  {w:14s} threads {th:6s} {s['desc']}")
        print("allocators:")
        for a in allocs:
            where = a["path"] or "(no preload)"
            print(f"  {a['name']:14s} {a['status']:8s} {where if a['status'] == 'ok' else a['reason']}")
        return 0

    ensure_built(build_dir, args.no_build)
    cases, skipped_wl = build_cases(args, build_dir)
    active = [a for a in allocs if a["status"] == "ok"]
    helper = os.path.join(build_dir, "kite-bench-exec")
    if not os.path.exists(helper):
        print(f"{os.path.relpath(helper, ROOT)} not built: peak RSS will include the "
              "runner's own (an upper bound)", file=sys.stderr)
        helper = None
    for a in allocs:
        if a["status"] != "ok":
            print(f"skipped allocator {a['name']}: {a['reason']}", file=sys.stderr)
    for w, why in skipped_wl:
        print(f"workload {w}: {why}", file=sys.stderr)
    if not cases or not active:
        print("nothing to run", file=sys.stderr)
        return 1

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if args.docs:
        args.out = args.out or os.path.join(ROOT, "bench", "results", "docs-run")
        args.charts_dir = args.charts_dir or os.path.join(ROOT, "docs", "bench")
    outdir = os.path.abspath(args.out or os.path.join(ROOT, "bench", "results", stamp))
    os.makedirs(outdir, exist_ok=True)

    machine = machine_info()  # before the runs: the load average is the machine's own
    total = args.reps * len(cases) * len(active)
    bar = None
    if not args.no_progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            bar = None
    runs = {(c["label"], a["name"]): [] for c in cases for a in active}
    done = 0
    t_start = time.time()
    for rep in range(args.reps):
        for c in cases:
            for a in active:
                key = (c["label"], a["name"])
                if any(x["status"] != "ok" for x in runs[key]):
                    # already a failure: that is the pair's verdict; do not spend a timeout
                    # or a crash on it again
                    done += 1
                    if bar:
                        bar.update(1)
                    continue
                desc = f"rep {rep + 1}/{args.reps} {c['label']} [{a['name']}]"
                if bar:
                    bar.set_description(desc)
                elif not args.no_progress:
                    print(f"[{done + 1}/{total}] {desc}", file=sys.stderr, flush=True)
                r = run_once(c["argv"], a["path"], args.timeout, helper,
                             needs_checksum=c["checksum"], wrong_rc=c["wrong_rc"])
                runs[key].append(r)
                done += 1
                if bar:
                    bar.update(1)
    if bar:
        bar.close()
    elapsed = time.time() - t_start

    rows = []
    for c in cases:
        for a in active:
            rr = runs[(c["label"], a["name"])]
            s = summarize(rr)
            rows.append(dict(workload=c["workload"], threads=c["threads"], label=c["label"],
                             allocator=a["name"], command=" ".join(map(shlex.quote, c["argv"])),
                             runs=[{k: v for k, v in x.items() if k != "output"} for x in rr],
                             **s))
    add_ratios(rows, [a["name"] for a in active])

    meta = dict(command=command, date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), size=args.size, reps=args.reps, elapsed_s=round(elapsed, 1),
        machine=machine, build_dir=build_dir, kite_commit=git_describe())
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(dict(command=command, meta=meta,
                       allocators=allocs,
                       workloads={w: dict(desc=s["desc"], args=s["args"][args.size],
                                          threads=s["threads"])
                                  for w, s in WORKLOADS.items()},
                       skipped_workloads=[dict(workload=w, reason=r) for w, r in skipped_wl],
                       summary=geomeans(rows, [a["name"] for a in active], cases),
                       rows=rows), f, indent=1)
    write_csv(os.path.join(outdir, "results.csv"), meta, rows)
    md = markdown(meta, rows, allocs, skipped_wl, cases)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(md)
    files = []
    if not args.no_charts:
        cdir = os.path.abspath(args.charts_dir or outdir)
        os.makedirs(cdir, exist_ok=True)
        try:
            files = charts(cdir, rows, active, cases)
        except ImportError as e:
            print(f"charts skipped: {e} (use the project's .venv, or --no-charts)",
                  file=sys.stderr)
    if args.docs:
        write_docs(meta, md, files, outdir, args, cases)
    print(md)
    print(f"{total} runs in {elapsed:.0f} s; results in {os.path.relpath(outdir)}/"
          + (f"; charts: {', '.join(os.path.relpath(p) for p in files)}" if files else ""))
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        print(f"{len(bad)} pair(s) failed: " + ", ".join(
            f"{r['label']} [{r['allocator']}] {r['status']}" for r in bad), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
