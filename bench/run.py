#!/usr/bin/env python3
"""bench/run.py -- kite's benchmark runner: kite against glibc and every peer found.

    make bench                     # build, then `bench/run.py --quick`
    make bench-full                # build, then `bench/run.py` (every case), seed tables
    bench/run.py -h                # every option
    bench/run.py --size tiny --workloads churn,larson --allocs glibc,jemalloc --reps 1

Modes
  suite (the default)  every case x every allocator, --reps interleaved repetitions: the
                       tables, charts and raw results described below. --quick narrows it
                       to QUICK (one case of each shape) and leaves out the secure build and
                       its hardened peers: make bench's default, within 3 minutes on 2 idle
                       cores. Every report gives the load average against the cores before
                       and after, and the CPU share other processes took during the run; a
                       loaded machine is said to make the ratios less certain.
  --ab ROW --vs B      one row, allocator --a (default kite) against B (a peer, or another
                       kite build added with --alloc NAME=PATH): at least 11 interleaved
                       pairs (order swapped at every pair); the CPU-time and system-time
                       ratios of each pair with their min/median/max, medians of user,
                       system and wall time, page faults, context switches and peak RSS,
                       then one `strace -c -f` run of each side for futex, madvise and all
                       system calls; "level" within 5%. ab.md/ab.json (each run's user_s,
                       sys_s and cpu_s, from wait4's resource usage of the workload).
  --syscalls           one `strace -c -f` run of every row with 8 threads under every
                       allocator: futex / madvise calls per run (--docs: into
                       docs/benchmarks.md's syscalls section).
  --list               the workloads and the allocators found.

What it does
  * Workloads are the self-checking C programs in bench/workloads/ (built as
    <build>/kite-wl-<name>; `replay` is kite-wl-replay looping over the largest trace in
    tests/data/traces/), and real programs (sqlite3, python3, gcc, xz from /usr/bin) whose
    inputs the runner generates and whose output must equal the one made under glibc.
    Each workload has an argument set per size (tiny, small, medium, large) and a default
    list of thread counts; --threads overrides the latter. A (workload, thread count) pair
    is a "case".
  * Allocators: kite (<build>/libkite.so), kite-secure (<build>/libkite-secure.so, only
    when built), glibc (no preload), each peer found on the machine by its Debian soname:
    jemalloc, tcmalloc, mimalloc, tbbmalloc (its malloc proxy), and mimalloc3 (the
    cmeel-mimalloc wheel in .venv, which `make venv` installs); and the hardened peers of
    kite-secure: scudo (LLVM's scudo standalone, from Debian's libclang-rt-*-dev) and
    hardened_malloc (GrapheneOS's, built outside the tree by tools/peer-hardened-malloc
    from the crates.io package that ships its sources; `make peers`, which `make bench`
    runs, builds it when cargo has the package or can fetch it; the runner only finds it).
    --install-peers apt-get installs the missing Debian ones; --alloc NAME=PATH adds any other preloadable .so. A
    missing allocator is listed as skipped, with the reason. --alloc NAME=PATH:VAR=VALUE
    (any number of :VAR=VALUE) runs that .so with VAR=VALUE in its runs' environment alone,
    e.g. kite with a run-time setting beside plain kite
    (--alloc kite-sampled=build/libkite.so:KITE_GUARDED_SAMPLE=5000); the report's
    allocator line gives the setting.
  * Each repetition runs every case with every allocator, round robin over the allocators
    (so slow drifts of the machine hit all of them alike), the order rotated by one
    allocator at each repetition. Every run is one child process
    under LD_PRELOAD, forked by <build>/kite-bench-exec, which measures its wall time and
    takes CPU time and peak RSS from wait4's resource usage of that child alone.
  * A run that is killed by a signal is "CRASH sig N", one that exits non-zero is
    "FAIL rc=N", one whose self-check fails (exit 3, or no `checksum: ... ok` line) is
    "WRONG", one past --timeout is "TIMEOUT". A pair with any such run is reported as that
    failure, never as a time, and is not run again in later repetitions; the other pairs
    go on.
  * Reported per pair: median wall time with its spread (min, max, quartiles), median
    user+sys CPU time, median peak RSS and minor page faults, and the ratios of the median
    wall time to glibc's and to the best peer's (the fastest of the allocators that are neither glibc nor a
    build of kite, nor a hardened peer: those are kite-secure's peers, its ratio to the
    fastest of them is reported too). Cases whose fastest median is under 100 ms are start-up dominated:
    shown, marked †, left out of the geometric means.
  * Output, in --out (default bench/results/<UTC timestamp>/): results.json, results.csv
    (first line: the exact command), results.md (tables), and, unless --no-charts, PNG
    charts: time_ratio.png, peak_rss.png, scaling.png (whiskers: min..max). The markdown
    table is also printed. --docs also rewrites docs/benchmarks.md (keeping the sections
    bench/fastpath.sh and bench/rss_timeline.py write there) and README's bench-table block.

Only the standard library is needed with --no-charts; matplotlib draws the charts (in the
project's .venv, see requirements.txt). Progress is a line per run on stderr, or a bar when
tqdm happens to be installed.
"""

import argparse
import csv
import datetime as _dt
import glob
import hashlib
import json
import math
import os
import platform
import re
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
        args={"tiny": "-n 2000", "small": "-n 60000", "medium": "-n 100000",
              "large": "-n 300000"},
        threads=[4]),
    "rnbench": dict(
        desc="seed 004: per-thread slots, random alloc/free of 16..1024 bytes",
        args={"tiny": "-n 1000 -i 20000", "small": "-n 100000 -i 2500000",
              "medium": "-n 100000 -i 8000000", "large": "-n 100000 -i 30000000"},
        threads=[1, 2, 4]),
    "rnbench-seed": dict(
        desc="seed 004's own rnBench loop and parameters (100k slots, 500k iterations per "
             "thread at small size; alloc/free drawn at even odds, 16..256 bytes)",
        program="rnbench",
        args={"tiny": "-m 1 -n 1000 -i 5000", "small": "-m 1 -n 100000 -i 500000",
              "medium": "-m 1 -n 100000 -i 2000000", "large": "-m 1 -n 100000 -i 5000000"},
        threads=[1, 2, 4, 8]),
    "larson": dict(
        desc="server-like churn, slot arrays handed to the next thread each epoch",
        args={"tiny": "-n 200 -e 4 -i 2000", "small": "-n 1000 -e 10 -i 800000",
              "medium": "-n 1000 -e 10 -i 2500000", "large": "-n 4000 -e 20 -i 5000000"},
        threads=[1, 2, 4]),
    "xmalloc": dict(
        desc="producers allocate, consumers free (all frees remote)",
        args={"tiny": "-n 200", "small": "-n 30000", "medium": "-n 120000",
              "large": "-n 500000"},
        threads=[4]),
    "xfer": dict(
        desc="producer -> consumer pairs, one block at a time through a lock-free ring: "
             "every free is remote",
        args={"tiny": "-n 2000", "small": "-n 2000000", "medium": "-n 8000000",
              "large": "-n 30000000"},
        thread_args={"small": {8: "-n 600000"}, "medium": {8: "-n 2000000"},
                     "large": {8: "-n 8000000"}},
        threads=[2, 8]),
    "cache-thrash": dict(
        desc="active false sharing: per-thread 8-byte objects written many times",
        args={"tiny": "-n 200 -w 100", "small": "-n 2000 -w 30000",
              "medium": "-n 10000 -w 20000", "large": "-n 40000 -w 20000"},
        threads=[2]),
    "cache-scratch": dict(
        desc="passive false sharing: objects from main freed and reused by workers",
        args={"tiny": "-n 200 -w 100", "small": "-n 2000 -w 30000",
              "medium": "-n 10000 -w 20000", "large": "-n 40000 -w 20000"},
        threads=[2]),
    "realloc": dict(
        desc="many vectors grown side by side by realloc, 1..16 elements at a time",
        args={"tiny": "-n 50 -l 300 -r 2", "small": "-n 1000 -l 2000 -r 10",
              "medium": "-n 2000 -l 4000 -r 8", "large": "-n 2000 -l 8000 -r 4"},
        threads=[2]),
    "large": dict(
        desc="large blocks, 64 KiB..32 MiB, every page touched",
        args={"tiny": "-n 20 -l 4 -m 4194304", "small": "-n 150 -l 8",
              "medium": "-n 600 -l 8", "large": "-n 2500 -l 8"},
        threads=[2]),
    "large-5-25m": dict(
        desc="one thread, blocks of 5..25 MiB (uniform), up to 20 live, every page touched",
        program="large",
        args={"tiny": "-n 4 -l 3 -a 5242880 -m 8388608", "small": "-n 20 -l 20 -a 5242880 "
              "-m 26214400", "medium": "-n 150 -l 20 -a 5242880 -m 26214400",
              "large": "-n 600 -l 20 -a 5242880 -m 26214400"},
        threads=None),
    "graph": dict(
        desc="single thread: object graph built, walked, freed in random order",
        args={"tiny": "-n 5000 -r 2", "small": "-n 200000 -r 3", "medium": "-n 500000 -r 5",
              "large": "-n 1000000 -r 4"},
        threads=None),
    "graph-teardown": dict(
        desc="single thread: a pointer graph built, then freed in random order (no walk)",
        program="graph",
        args={"tiny": "-n 5000 -r 1 -w 0", "small": "-n 200000 -r 1 -w 0",
              "medium": "-n 1000000 -r 1 -w 0", "large": "-n 2000000 -r 2 -w 0"},
        threads=None),
    "thread-churn": dict(
        desc="many short-lived threads; half their blocks freed by main after they exit",
        args={"tiny": "-n 40 -b 50", "small": "-n 3000 -b 200", "medium": "-n 6000 -b 200",
              "large": "-n 20000 -b 400"},
        threads=[4]),
    "thread-rounds": dict(
        desc="threads re-created every round; blocks outlive their thread and are freed by "
             "a thread of a later round",
        args={"tiny": "-n 3 -k 100 -i 500", "small": "-n 20 -k 2000 -i 5000",
              "medium": "-n 60 -k 4000 -i 10000", "large": "-n 200 -k 4000 -i 20000"},
        threads=[8]),
    "churn": dict(
        desc="random sizes 8..1024, ~20% of frees by another thread (allocator-core check)",
        args={"tiny": "-n 20000 -k 256", "small": "-n 1000000 -k 4096",
              "medium": "-n 5000000 -k 4096", "large": "-n 8000000 -k 16384"},
        thread_args={"small": {2: "-n 3000000"}},
        threads=[2, 8]),
    "churn-16k": dict(
        desc="random sizes 8..16000, ~20% of frees by another thread",
        program="churn",
        args={"tiny": "-n 20000 -k 256 -m 16000", "small": "-n 600000 -k 4096 -m 16000",
              "medium": "-n 3000000 -k 4096 -m 16000", "large": "-n 8000000 -k 8192 -m 16000"},
        thread_args={"small": {8: "-n 120000"}, "medium": {8: "-n 600000"}},
        threads=[2, 8]),
    "mstress": dict(
        desc="pools of random blocks (16 B..1 MiB) replaced at random by threads re-created "
             "every round, 10% of the steps passing a block to another thread through a "
             "shared transfer array (mstress-like)",
        args={"tiny": "-n 5 -r 2", "small": "-n 100 -r 25", "medium": "-n 200 -r 50",
              "large": "-n 400 -r 100"},
        threads=[2, 8]),
    "glibc-thread": dict(
        desc="glibc's thread test shape: per-thread working set of 1024 blocks of 4..32768 "
             "bytes (probability ~ 1/size), random replacements, no block leaves its thread",
        args={"tiny": "-n 5000", "small": "-n 250000", "medium": "-n 1000000",
              "large": "-n 4000000"},
        threads=[8]),
    "rptest": dict(
        desc="rpmalloc's benchmark shape: per-thread passes over 1000 slots of 32..16000 "
             "bytes, one old block in 8 freed by the next thread",
        args={"tiny": "-n 5 -o 200", "small": "-n 100", "medium": "-n 400",
              "large": "-n 1500"},
        threads=[8]),
    "replay": dict(
        desc="the largest trace in tests/data/traces/ replayed LOOPS times in-process, every "
             "block stamped (kite-wl-replay -l LOOPS TRACE; no per-op timing)",
        args={"tiny": "-l 2", "small": "-l 200", "medium": "-l 800", "large": "-l 3000"},
        threads=None, trace=True),
    # Real programs under LD_PRELOAD, their output checked against a reference made under
    # glibc in the same invocation (see PROGRAMS below for the inputs).
    "sqlite3": dict(
        desc="sqlite3 :memory: running an SQL script: build a table, index it, query, "
             "update, delete (output checked)",
        args={"tiny": "2000", "small": "50000", "medium": "200000", "large": "1000000"},
        threads=None, real=True),
    "python3": dict(
        desc="python3 -I: dicts of strings, json dumps/loads, sorting (output checked)",
        args={"tiny": "2000", "small": "8000", "medium": "30000", "large": "120000"},
        threads=None, real=True),
    "gcc": dict(
        desc="gcc -O2 -c of a generated C file of many functions (object file checked)",
        args={"tiny": "2", "small": "10", "medium": "40", "large": "150"},
        threads=None, real=True),
    "xz": dict(
        desc="xz -T2 -1 with 1 MiB blocks compressing generated text (output checked)",
        args={"tiny": "1", "small": "3", "medium": "16", "large": "64"},
        threads=None, real=True),
}

# make bench's default (--quick): one case of each shape, the losing shapes among them, so
# that the run stays within 3 minutes on 2 idle cores: workload -> thread counts (None: a
# single-threaded workload). `make bench-full` runs every case of WORKLOADS.
QUICK = {
    "rnbench": [2], "larson": [2], "xmalloc": [4], "xfer": [8], "cache-scratch": [2],
    "realloc": [2], "large-5-25m": None, "graph": None, "graph-teardown": None,
    "thread-rounds": [8], "churn": [8], "mstress": [8], "glibc-thread": [8], "rptest": [8],
    "replay": None, "sqlite3": None,
}
# --quick leaves out the secure build and its hardened peers (`make bench-full` and `make
# security` measure those): they would double the default run's time.
QUICK_SKIP_ALLOCS = ("kite-secure", "scudo", "hardened_malloc")
AB_LEVEL = 0.05  # --ab: a median CPU-time ratio within 5% of 1 is "level"
AB_MIN_PAIRS = 11

# Peers: name -> (sonames tried in order, Debian package). tbbmalloc needs its proxy to
# replace malloc; libtbbmalloc.so alone only exports scalable_malloc. mimalloc3 (the current
# mimalloc release, PyPI's cmeel-mimalloc wheel) is found in the project's .venv (see
# VENV_PEERS). kite's own builds (KITE_BUILDS) are never peers: "best peer" is the fastest
# of the others.
PEERS = {
    "jemalloc": (["libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"], "libjemalloc2"),
    "tcmalloc": (["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so"],
                 "libtcmalloc-minimal4"),
    "mimalloc": (["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"],
                 "libmimalloc2.0"),
    "tbbmalloc": (["libtbbmalloc_proxy.so.2", "libtbbmalloc_proxy.so"], "libtbbmalloc2"),
}
# name -> (path glob under ROOT, pip distribution): peers installed into .venv by `make venv`
VENV_PEERS = {
    "mimalloc3": (".venv/lib/python3*/site-packages/cmeel.prefix/lib/libmimalloc.so.3",
                  "cmeel-mimalloc"),
}
# Hardened peers: allocators built to catch heap misuse, compared with kite-secure (not with
# kite: they are left out of "best peer"). name -> (how it is found, where it comes from).
# scudo: LLVM's standalone scudo, shipped by Debian's libclang-rt-<N>-dev. hardened_malloc:
# GrapheneOS's, in its default configuration, built by tools/peer-hardened-malloc into
# ~/.cache/kite-peers (its sources come in the crates.io package hardened-malloc-sys).
SECURE_PEERS = {
    "scudo": ("/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-x86_64.so",
              "Debian package libclang-rt-14-dev"),
    "hardened_malloc": ("tools/peer-hardened-malloc", "crates.io package hardened-malloc-sys, "
                        "built by `make peers` (tools/peer-hardened-malloc)"),
}
# name -> library in the build directory: kite and its hardened build, measured as kite
KITE_BUILDS = {"kite": "libkite.so", "kite-secure": "libkite-secure.so"}
NOT_PEERS = ("glibc",) + tuple(KITE_BUILDS) + tuple(SECURE_PEERS)
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


def find_venv_peer(pattern):
    hits = sorted(glob.glob(os.path.join(ROOT, pattern)))
    return hits[-1] if hits else None


def find_scudo():
    hits = sorted(glob.glob(SECURE_PEERS["scudo"][0]))
    return hits[-1] if hits else None


def find_hardened_malloc():
    """(path, version, reason): GrapheneOS's hardened_malloc as tools/peer-hardened-malloc
    built it outside the tree (`make peers`); path None and the reason when it is not
    built. Never fetches or builds (a test or a run without network stays one)."""
    script = os.path.join(ROOT, SECURE_PEERS["hardened_malloc"][0])
    try:
        q = subprocess.run([script, "--print"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "", f"{script}: {e}"
    path = q.stdout.strip().splitlines()[-1] if q.stdout.strip() else ""
    if q.returncode == 0 and os.path.exists(path):
        m = re.search(r"hardened_malloc-([^/]+)-(\w+)/", path)
        return path, (f"{m.group(1)} ({m.group(2)} config)" if m else ""), ""
    return None, "", ("not built (`make peers` builds it: tools/peer-hardened-malloc, from the "
                      "crates.io package hardened-malloc-sys)")


def secure_peer_allocs():
    """kite-secure's peers as allocator entries (skipped ones with the reason)."""
    out = []
    sc = find_scudo()
    if sc:
        m = re.search(r"llvm-(\d+)", sc)
        out.append(dict(name="scudo", path=sc, status="ok", reason="",
                        version=package_version(f"libclang-rt-{m.group(1)}-dev") if m else ""))
    else:
        out.append(dict(name="scudo", path=None, status="skipped",
                        reason="libclang_rt.scudo_standalone-x86_64.so not found "
                               "(Debian package libclang-rt-14-dev)"))
    hm, ver, why = find_hardened_malloc()
    if hm:
        out.append(dict(name="hardened_malloc", path=hm, status="ok", reason="", version=ver))
    else:
        out.append(dict(name="hardened_malloc", path=None, status="skipped", reason=why))
    return out


def pip_version(dist, lib):
    """The version of pip distribution `dist` whose files include `lib` ('' if unknown)."""
    site = lib.split(os.sep + "cmeel.prefix" + os.sep)[0]
    norm = dist.replace("-", "_")
    for d in glob.glob(os.path.join(site, norm + "-*.dist-info")):
        return os.path.basename(d)[len(norm) + 1:-len(".dist-info")]
    return ""


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
    for name, lib in KITE_BUILDS.items():
        kite = os.path.join(build_dir, lib)
        rel = os.path.relpath(kite, ROOT)
        if os.path.exists(kite):
            allocs.append(dict(name=name, path=kite, status="ok", reason=""))
        elif name == "kite":  # the hardened build is optional: listed only when built
            allocs.append(dict(name=name, path=kite, status="skipped",
                               reason=f"{rel} not found"))
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
    for name, (pattern, dist) in VENV_PEERS.items():
        p = find_venv_peer(pattern)
        if p:
            allocs.append(dict(name=name, path=p, status="ok", reason="",
                               version=pip_version(dist, p)))
        else:
            allocs.append(dict(name=name, path=None, status="skipped",
                               reason=f"{pattern} not found (pip package {dist}: `make venv` "
                                      "installs it)"))
    if any(a["name"] == "kite-secure" for a in allocs):  # only beside the secure build
        allocs += secure_peer_allocs()
    for spec in extra:
        name, path, env = parse_alloc_spec(spec)
        if any(a["name"] == name for a in allocs):
            allocs = [a for a in allocs if a["name"] != name]
        if os.path.exists(path):
            allocs.append(dict(name=name, path=path, status="ok", reason="", env=env))
        else:
            allocs.append(dict(name=name, path=path, status="skipped", env=env,
                               reason=f"{path} not found"))
    return allocs


def parse_alloc_spec(spec):
    """--alloc's NAME=PATH[:VAR=VALUE...] as (name, absolute path, {VAR: VALUE}). A colon
    cannot be part of a preloaded path (the loader splits LD_PRELOAD at colons), so it is
    free to start the settings."""
    if "=" not in spec:
        raise SystemExit(f"--alloc wants NAME=PATH[:VAR=VALUE...], got {spec!r}")
    name, rest = spec.split("=", 1)
    path, *sets = rest.split(":")
    env = {}
    for kv in sets:
        var, eq, val = kv.partition("=")
        if not eq or not var or var == "LD_PRELOAD":
            raise SystemExit(f"--alloc {spec!r}: {kv!r} is not VAR=VALUE")
        env[var] = val
    if not name or not path:
        raise SystemExit(f"--alloc wants NAME=PATH[:VAR=VALUE...], got {spec!r}")
    return name, os.path.abspath(path), env


def alloc_where(a, quote="`"):
    """The allocator's preload and its run-time settings, as the reports give them."""
    where = f"{quote}{a['path']}{quote}" if a["path"] else "no preload"
    if a.get("env"):
        where += " with " + " ".join(f"{k}={v}" for k, v in a["env"].items())
    return where


# --------------------------------------------------------------------------------------
# Running one process
# --------------------------------------------------------------------------------------
def spawn_wait(cmd, env, timeout, out_fd):
    """Spawns cmd in a session of its own with stdout and stderr on out_fd and waits for
    it, killing its process group after `timeout` s. Returns (status, rusage, wall, timed
    out)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(cmd[0], cmd, env, setsid=True,
                             file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0),
                                           (os.POSIX_SPAWN_DUP2, out_fd, 1),
                                           (os.POSIX_SPAWN_DUP2, out_fd, 2)])
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
    return st, ru, time.perf_counter() - t0, timed_out.is_set()


def launcher_verdict(res, rep, st):
    """Fills res from kite-bench-exec's report line `rep`; returns the child's exit code,
    or None when res["status"] is already set (a crash, or the launcher failed)."""
    f = dict(kv.split("=", 1) for kv in rep.split() if "=" in kv)
    if os.WIFSIGNALED(st) or os.WEXITSTATUS(st) != 0 or "wall" not in f:
        res["status"] = "FAIL launcher" if not os.WIFSIGNALED(st) else \
            f"CRASH sig {os.WTERMSIG(st)}"
        return None
    res.update(wall_s=float(f["wall"]), user_s=float(f["user"]), sys_s=float(f["sys"]),
               maxrss_kib=int(f["maxrss_kib"]))
    res.update({k: int(f[k]) for k in ("minflt", "majflt", "nvcsw", "nivcsw") if k in f})
    if "signaled" in f:
        res["status"] = f"CRASH sig {f['signaled']}"
        return None
    return int(f["exited"])


def run_once(argv, preload, timeout, helper=None, needs_checksum=True, wrong_rc=WRONG_EXIT,
             alloc_env=None):
    """Runs argv (argv[0] a path) with LD_PRELOAD=preload (None: no preload) and the
    allocator's settings alloc_env ({VAR: VALUE}, or None) in its environment. Returns a
    dict: status ('ok', 'CRASH sig N', 'FAIL rc=N', 'WRONG', 'TIMEOUT'), wall_s, user_s,
    sys_s, maxrss_kib, minflt, majflt, nvcsw, nivcsw (page faults and voluntary/involuntary
    context switches), rc, output (the last 4000 characters).

    With `helper` (<build>/kite-bench-exec) the child is forked by that small launcher,
    which reports its wall time, rusage and status: ru_maxrss survives exec, so a child
    spawned from this (large) Python process would report at least our own RSS. Without
    it we spawn directly and peak RSS is an upper bound. Either way the child runs in its
    own session so that a timeout kills everything it started."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(alloc_env or {})
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as resf:
        if helper:
            cmd = [helper, resf.name, preload or "", "--"] + list(argv)
        else:
            cmd = list(argv)
            if preload:
                env["LD_PRELOAD"] = preload
        st, ru, wall, timed_out = spawn_wait(cmd, env, timeout, out.fileno())
        out.seek(0)
        raw = out.read()
        text = raw.decode("utf-8", "replace")
        rep = resf.read() if helper else ""
    res = dict(wall_s=wall, user_s=ru.ru_utime, sys_s=ru.ru_stime, maxrss_kib=ru.ru_maxrss,
               minflt=ru.ru_minflt, majflt=ru.ru_majflt, nvcsw=ru.ru_nvcsw,
               nivcsw=ru.ru_nivcsw, rc=None, output=text[-4000:],
               out_sha=hashlib.sha256(raw).hexdigest(), out_bytes=len(raw))
    if timed_out:
        res["status"] = "TIMEOUT"
        return res
    if helper:
        rc = launcher_verdict(res, rep, st)
        if rc is None:
            return res
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


def why_failed(text):
    """The last line a failed run printed, which is often its own word on why ('out of
    memory allocating 40 bytes'), as 'last output: ...'; 'no output' when it printed none."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return f"last output: {lines[-1]}" if lines else "no output"


def failures_exit(failed, file=sys.stderr):
    """failed: [(allocator, status, why)] of the allocators whose runs did not complete.
    Prints one line for each and returns the command's exit status: 1 when a build of kite
    (KITE_BUILDS) failed, since kite is what the command measures; 0 when only peers did,
    since a peer that cannot run the program is a finding about that peer (its table row
    and chart say FAIL), not a failure of the measurement."""
    for name, status, why in failed:
        who = "kite build" if name in KITE_BUILDS else "peer"
        print(f"{who} {name} failed: {status} ({why})", file=file)
    return 1 if any(name in KITE_BUILDS for name, _, _ in failed) else 0


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
    """Returns (cases, skipped): cases are dicts(workload, threads, argv, label, checksum,
    wrong_rc, and for real programs ref/out/binary); skipped is [(workload, reason)].
    Real programs get their input generated (once, under <build>/bench-programs/) and their
    reference output made here, under glibc; a program that is missing, or that fails
    under glibc, is skipped with the reason."""
    quick = getattr(args, "quick", False)
    names = (list(QUICK) if quick else list(WORKLOADS)) if args.workloads == "all" else \
        [w.strip() for w in args.workloads.split(",") if w.strip()]
    cases, skipped = [], []
    for w in names:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; --list shows them")
        spec = WORKLOADS[w]
        if spec.get("real"):
            c, why = program_case(w, spec["args"][args.size], build_dir, args.timeout)
            if c:
                cases.append(c)
            else:
                skipped.append((w, why))
            continue
        exe = os.path.join(build_dir, "kite-wl-" + spec.get("program", w))
        if not os.path.exists(exe):
            skipped.append((w, f"skipped ({os.path.relpath(exe, ROOT)} not built)"))
            continue
        base = [exe] + shlex.split(spec["args"][args.size])
        if spec.get("trace"):
            trace = find_trace(args.trace)
            if not trace:
                skipped.append((w, "skipped (no trace under tests/data/traces/)"))
                continue
            base.append(trace)
        if spec["threads"] is None:
            cases.append(dict(workload=w, threads=None, label=w, checksum=True,
                              wrong_rc=WRONG_EXIT, argv=base))
            continue
        tl = args.threads_list or (quick and QUICK.get(w)) or spec["threads"]
        extra = spec.get("thread_args", {}).get(args.size, {})
        for t in tl:
            # per thread count, options appended after the base ones (getopt: last wins)
            cases.append(dict(workload=w, threads=t, label=f"{w} t{t}", checksum=True,
                              wrong_rc=WRONG_EXIT,
                              argv=base + shlex.split(extra.get(t, "")) + ["-t", str(t)]))
    return cases, skipped


# --------------------------------------------------------------------------------------
# Real programs: inputs generated deterministically, outputs compared with glibc's
# --------------------------------------------------------------------------------------
def _gen_sqlite(path, n):
    n = int(n)
    with open(path, "w") as f:
        f.write(f"""CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
INSERT INTO t(k, s, v) SELECT (x * 7919) % 1000, printf('name-%d-%s', (x * 104729) % 100003,
  hex(x * 31)), (x % 977) * 0.5 FROM c;
CREATE INDEX tk ON t(k);
CREATE INDEX ts ON t(s);
SELECT count(*), sum(k), total(v) FROM t;
SELECT k, count(*), sum(length(s)) FROM t WHERE k < 10 GROUP BY k ORDER BY k;
SELECT count(*), total(a.v * b.v) FROM t a JOIN t b ON b.k = a.k WHERE a.id % 1000 = 0;
UPDATE t SET s = s || '-updated-' || id WHERE k % 7 = 0;
DELETE FROM t WHERE k % 5 = 1;
SELECT count(*), sum(length(s)) FROM t;
SELECT s FROM t ORDER BY s LIMIT 3;
SELECT count(*) FROM t WHERE s BETWEEN 'name-2' AND 'name-3';
SELECT k, max(s), min(v) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 3;
""")


_PY_SCRIPT = r'''import hashlib, json, sys
n = int(sys.argv[1])
d = {}
for i in range(n):
    k = "key-%d-%x" % (i, (i * 2654435761) & 0xffffffff)
    d[k] = {"id": i, "name": k.upper(), "tags": [k[j:j + 3] for j in range(0, len(k), 3)],
            "v": i * 0.5}
s = json.dumps(d, sort_keys=True)
e = json.loads(s)
assert e == d
inv = {}
for v in e.values():
    for t in v["tags"]:
        inv.setdefault(t, []).append(v["id"])
words = sorted(inv)
for k in list(d)[::2]:
    del d[k]
txt = " ".join("%s:%d" % (w, len(inv[w])) for w in words)
print(len(s), len(words), len(d), hashlib.sha256(s.encode()).hexdigest()[:16],
      hashlib.sha256(txt.encode()).hexdigest()[:16])
'''


def _gen_python(path, n):
    with open(path, "w") as f:
        f.write(_PY_SCRIPT)


def _gen_c(path, nfunc):
    """A C file of nfunc functions with loops, switches, structs and arrays: work for gcc's
    optimizers. Deterministic."""
    nfunc = int(nfunc)
    w = ["/* generated by bench/run.py for the gcc row */", "#include <stddef.h>",
         "struct s { int a, b; double c; unsigned char d[16]; };"]
    for i in range(nfunc):
        cases = "".join(f"    case {k}: acc += x[{k % 8}] * {k + i % 7} - (acc >> {k % 5}); break;\n"
                        for k in range(24))
        w.append(f"""int f{i}(const int *x, size_t n, struct s *q) {{
  int acc = {i};
  for (size_t j = 0; j < n; j++) {{
    switch ((x[j] + {i}) % 24) {{
{cases}    default: acc ^= x[j];
    }}
    q[j % 4].a += acc;
    q[j % 4].c = q[j % 4].c * 0.5 + acc;
    for (int m = 0; m < 16; m++) q[j % 4].d[m] = (unsigned char)(q[j % 4].d[m] + acc + m);
  }}
  return acc + (n > {i % 50} ? f{i - 1 if i else 0}(x, n / 2, q) : 0);
}}""" if i else f"""int f0(const int *x, size_t n, struct s *q) {{
  return n ? x[0] + q->a : 0;
}}""")
    with open(path, "w") as f:
        f.write("\n".join(w) + "\n")


def _gen_text(path, mib):
    """mib MiB of word text from a fixed vocabulary and a fixed linear congruential
    generator: compressible about as much as prose."""
    vocab = [("".join(chr(97 + (i * 7 + j * 13) % 26) for j in range(2 + i % 9)))
             for i in range(4000)]
    x = 12345
    out, size, target = [], 0, int(mib) << 20
    while size < target:
        line = []
        for _ in range(12):
            x = (x * 1103515245 + 12345) & 0x7fffffff
            line.append(vocab[(x >> 8) % len(vocab) if x & 3 else (x >> 8) % 60])
        s = " ".join(line) + (".\n" if x & 16 else ",\n")
        out.append(s)
        size += len(s)
    with open(path, "w") as f:
        f.write("".join(out)[:target])


def program_case(name, param, build_dir, timeout):
    """(case, None) for real program `name` at size parameter `param`, or (None, reason)."""
    exe = {"sqlite3": "sqlite3", "python3": "python3", "gcc": "gcc", "xz": "xz"}[name]
    path = next((p for p in (f"/usr/bin/{exe}", f"/bin/{exe}") if os.path.exists(p)), None)
    if not path:
        return None, f"skipped (/usr/bin/{exe} not installed)"
    d = os.path.join(build_dir, "bench-programs")
    os.makedirs(d, exist_ok=True)
    out = False
    binary = False
    if name == "sqlite3":
        inp = os.path.join(d, f"sqlite-{param}.sql")
        gen, argv = _gen_sqlite, [path, "-batch", ":memory:", f".read {inp}"]
    elif name == "python3":
        inp = os.path.join(d, "workload.py")
        gen, argv = _gen_python, [path, "-I", inp, param]
    elif name == "gcc":
        inp = os.path.join(d, f"gen-{param}.c")
        gen, argv = _gen_c, [path, "-O2", "-w", "-c", inp, "-o", "{out}"]
        out = True
    else:
        inp = os.path.join(d, f"text-{param}.txt")
        gen, argv = _gen_text, [path, "-T2", "-1", "--block-size=1MiB", "-c", "-k", inp]
        binary = True
    if not os.path.exists(inp):
        tmp = inp + ".tmp"
        gen(tmp, param)
        os.replace(tmp, inp)
    c = dict(workload=name, threads=None, label=name, checksum=False, wrong_rc=None,
             argv=argv, out=out, binary=binary, ref=None)
    r = run_case(c, None, timeout, None)
    if r["status"] != "ok":
        return None, f"skipped (fails under glibc: {r['status']}: {r['output'][-200:]!r})"
    c["ref"] = r["digest"]
    return c, None


def run_case(c, preload, timeout, helper, alloc_env=None):
    """One run of case c under `preload` (with alloc_env), as run_once, plus the output check of a real
    program: the digest of its output (stdout, or the file it writes in place of {out})
    must equal the reference made under glibc, else the run is WRONG."""
    argv = c["argv"]
    outf = None
    if c.get("out"):
        fd, outf = tempfile.mkstemp(prefix="kite-bench-out-")
        os.close(fd)
        argv = [a.replace("{out}", outf) for a in argv]
    try:
        r = run_once(argv, preload, timeout, helper, needs_checksum=c["checksum"],
                     wrong_rc=c["wrong_rc"] if c["wrong_rc"] is not None else -1,
                     alloc_env=alloc_env)
        if "ref" in c:
            if outf:
                with open(outf, "rb") as f:
                    r["digest"] = hashlib.sha256(f.read()).hexdigest()
            else:
                r["digest"] = r["out_sha"]
            if r["status"] == "ok" and c["ref"] is not None and r["digest"] != c["ref"]:
                r["status"] = "WRONG"
                r["output"] += "\noutput differs from the reference made under glibc"
    finally:
        if outf:
            os.unlink(outf)
    if c.get("binary"):
        r["output"] = f"({r['out_bytes']} bytes of binary output)" + (
            "" if r["status"] == "ok" else " " + r["output"][-300:].encode(
                "ascii", "replace").decode())
    r.pop("out_sha", None)
    r.pop("out_bytes", None)
    return r


def quartiles(xs):
    """(first, third) quartile of a non-empty list, linear interpolation between ranks."""
    xs = sorted(xs)

    def q(f):
        k = (len(xs) - 1) * f
        lo = int(math.floor(k))
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
    return q(0.25), q(0.75)


def summarize(runs):
    """Aggregates the runs of one pair: the first failure wins, else medians, with the
    spread of the wall times (min, max, interquartile range)."""
    for r in runs:
        if r["status"] != "ok":
            return dict(status=r["status"], wall_s=None, cpu_s=None, maxrss_kib=None,
                        minflt=None,
                        wall_min_s=None, wall_max_s=None, wall_q1_s=None, wall_q3_s=None,
                        detail=r["output"][-600:])
    walls = [r["wall_s"] for r in runs]
    q1, q3 = quartiles(walls)
    return dict(status="ok",
                wall_s=median(walls),
                cpu_s=median(r["user_s"] + r["sys_s"] for r in runs),
                maxrss_kib=median(r["maxrss_kib"] for r in runs),
                minflt=median(r.get("minflt") for r in runs),
                wall_min_s=min(walls), wall_max_s=max(walls), wall_q1_s=q1, wall_q3_s=q3,
                detail="")


def spread_pct(r):
    """Half the min..max range of a pair's wall times, in percent of its median."""
    if r["status"] != "ok" or not r["wall_s"]:
        return None
    return 50.0 * (r["wall_max_s"] - r["wall_min_s"]) / r["wall_s"]


def add_ratios(rows, alloc_names):
    by_case = {}
    for r in rows:
        by_case.setdefault(r["label"], {})[r["allocator"]] = r
    for label, d in by_case.items():
        g = d.get("glibc")
        gl = g["wall_s"] if g and g["status"] == "ok" else None
        peers = [r["wall_s"] for n, r in d.items()
                 if n not in NOT_PEERS and r["status"] == "ok"]
        best = min(peers) if peers else None
        best_name = next((n for n, r in d.items() if n not in NOT_PEERS
                          and r["status"] == "ok" and r["wall_s"] == best), None)
        for r in d.values():
            ok = r["status"] == "ok"
            r["ratio_glibc"] = r["wall_s"] / gl if ok and gl else None
            r["ratio_best_peer"] = r["wall_s"] / best if ok and best else None
            r["best_peer"] = best_name


SHORT_S = 0.1  # a case whose fastest median is below this is start-up dominated


def short_cases(rows, cases):
    """Labels of the cases whose fastest clean median wall time is under SHORT_S: process
    start-up and allocator set-up weigh too much there, so they stay out of the geometric
    means (they are still run and shown, marked)."""
    by = {}
    for r in rows:
        if r["status"] == "ok":
            by.setdefault(r["label"], []).append(r["wall_s"])
    return [c["label"] for c in cases if by.get(c["label"]) and min(by[c["label"]]) < SHORT_S]


def geomeans(rows, names, cases):
    """Geometric means of each allocator's wall-time ratio to glibc (and of kite's ratio to
    the best peer) over the cases where every allocator ran cleanly and that are not
    start-up dominated (short_cases; allocators that ran no case cleanly are left out);
    None if there are no such cases."""
    by = {(r["label"], r["allocator"]): r for r in rows}
    # allocators that completed nothing (a broken library) would empty the common set
    names = [n for n in names if any(by[(c["label"], n)]["ratio_glibc"] is not None
                                     for c in cases)]
    short = set(short_cases(rows, cases))
    common = [c["label"] for c in cases if c["label"] not in short
              and all(by[(c["label"], n)]["ratio_glibc"] is not None for n in names)]
    if not common:
        return None

    def gmean(xs):
        xs = [x for x in xs if x and x > 0]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    res = dict(cases=len(common), short=sorted(short),
               ratio_glibc={n: gmean([by[(l, n)]["ratio_glibc"] for l in common]) for n in names})
    if "kite" in names:
        res["kite_best_peer"] = gmean([by[(l, "kite")]["ratio_best_peer"] for l in common])
    if "kite-secure" in names:
        res["kite_secure_best_peer"] = gmean([by[(l, "kite-secure")]["ratio_best_peer"]
                                              for l in common])
        hard = [n for n in names if n in SECURE_PEERS]
        if hard:  # kite-secure against the fastest hardened peer of each case
            res["kite_secure_best_hardened"] = gmean(
                [by[(l, "kite-secure")]["wall_s"] / min(by[(l, n)]["wall_s"] for n in hard)
                 for l in common])
            res["kite_secure_kite"] = gmean([by[(l, "kite-secure")]["wall_s"] / by[(l, "kite")]["wall_s"]
                                             for l in common]) if "kite" in names else None
    return res


def fmt_time(s):
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def wall_table(rows, names, cases, spread=True):
    """The wall-time table: median (± spread) and ratio to glibc per allocator, kite's ratio
    to the best peer, and the geometric-mean row."""
    by = {(r["label"], r["allocator"]): r for r in rows}
    gm = geomeans(rows, names, cases)
    short = set(gm["short"]) if gm else set(short_cases(rows, cases))
    out = []
    head = ["workload", "threads"] + names + (["kite / best peer"] if "kite" in names else [])
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for c in cases:
        cells = [c["workload"] + (" †" if c["label"] in short else ""), str(c["threads"] or 1)]
        oks = [by[(c["label"], n)]["wall_s"] for n in names
               if by[(c["label"], n)]["status"] == "ok"]
        fastest = min(oks) if oks else None
        for n in names:
            r = by[(c["label"], n)]
            if r["status"] != "ok":
                cells.append(f"**{r['status']}**")
                continue
            t = fmt_time(r["wall_s"])
            sp = spread_pct(r)
            if spread and sp is not None and len(r["runs"]) > 1:
                t += f" ±{sp:.0f}%"
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
    if gm:
        cells = ["**geometric mean**", f"{gm['cases']} cases"]
        for n in names:
            cells.append(f"{gm['ratio_glibc'][n]:.2f}x" if n in gm["ratio_glibc"] else "-")
        if "kite" in names:
            cells.append(f"{gm['kite_best_peer']:.2f}x" if gm.get("kite_best_peer") else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def metric_table(title, by, names, cases, cell):
    """A table of one figure per (case, allocator): cell(row) for a clean pair, the
    failure in bold otherwise."""
    out = ["", f"### {title}", "", "| workload | threads | " + " | ".join(names) + " |",
           "|" + "|".join(["---"] * 2 + ["---:"] * len(names)) + "|"]
    for c in cases:
        cells = [c["workload"], str(c["threads"] or 1)]
        for n in names:
            r = by[(c["label"], n)]
            cells.append(cell(r) if r["status"] == "ok" else f"**{r['status']}**")
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(meta, rows, allocs, skipped_wl, cases):
    names = [a["name"] for a in allocs if a["status"] == "ok"]
    by = {(r["label"], r["allocator"]): r for r in rows}
    out = []
    out.append(f"Command: `{meta['command']}`  ")
    out.append(f"Machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores, "
               f"Linux {meta['machine']['kernel']}, {meta['machine']['libc']}; "
               f"{meta['date']}  ")
    out.append(f"kite at `{meta.get('kite_commit') or '?'}`  ")
    out.append("Allocators: " + "; ".join(
        f"{a['name']} " + (f"{a['version']} " if a.get("version") else "")
        + f"({alloc_where(a)})"
        for a in allocs if a["status"] == "ok") + "  ")
    out.append(f"Size `{meta['size']}`, {meta['reps']} repetitions per pair (median shown), "
               "allocators interleaved round robin, their order rotated by one at every "
               "repetition." + (" The quick set (`make bench`'s default; `make bench-full` "
                                "runs every case)." if meta.get("quick") else ""))
    out.append("")
    if meta.get("load"):
        out.append(load_note(meta["load"]))
        out.append("")
    out.append("### Wall time (median ± half the min-max range; in parentheses: ratio to "
               "glibc, lower is better)")
    out.append("")
    out.append(wall_table(rows, names, cases))
    gm = geomeans(rows, names, cases)
    if gm:
        out.append("")
        out.append(f"± is half the range (max - min) of the {meta['reps']} runs of a pair, in "
                   "percent of its median. The last row is the geometric mean of the ratios "
                   f"to glibc over the {gm['cases']} cases that every allocator completed "
                   "(an allocator that completed none is left out) and that are not start-up "
                   f"dominated: cases marked † (fastest median under {SHORT_S * 1000:.0f} ms) "
                   "are shown but left out of it. Last column: kite's ratio to the best peer "
                   "(the fastest allocator that is neither glibc nor a build of kite) of each "
                   "case, and its geometric mean over the same cases.")
        if gm.get("kite_secure_best_hardened"):
            out.append("")
            out.append("kite-secure against its hardened peers (scudo, hardened_malloc), the "
                       "geometric mean over the same cases of its median wall time divided by "
                       f"the fastest hardened peer's: {gm['kite_secure_best_hardened']:.2f}x"
                       + (f"; divided by kite's: {gm['kite_secure_kite']:.2f}x"
                          if gm.get("kite_secure_kite") else "") + ".")
    out += metric_table("Peak RSS (MiB, median)", by, names, cases,
                        lambda r: f"{r['maxrss_kib'] / 1024:.1f}")
    out += metric_table("CPU time (user+sys, s, median)", by, names, cases,
                        lambda r: f"{r['cpu_s']:.3f}")
    out += metric_table("Minor page faults (median)", by, names, cases,
                        lambda r: "-" if r.get("minflt") is None else f"{r['minflt']:.0f}")
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
            "ratio_glibc", "ratio_best_peer", "best_peer", "runs", "walls_s", "wall_min_s",
            "wall_max_s", "wall_q1_s", "wall_q3_s", "short"]
    short = set(short_cases(rows, [dict(label=l) for l in dict.fromkeys(r["label"]
                                                                     for r in rows)]))
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
                        " ".join(f"{x['wall_s']:.4f}" for x in r["runs"]),
                        num(r["wall_min_s"]), num(r["wall_max_s"]), num(r["wall_q1_s"]),
                        num(r["wall_q3_s"]), int(r["label"] in short)])


def charts(outdir, rows, allocs, cases, size=None):
    """PNG charts (matplotlib, Agg). Returns the list of files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.ticker
    import matplotlib.pyplot as plt

    names = [a["name"] for a in allocs if a["status"] == "ok"]
    by = {(r["label"], r["allocator"]): r for r in rows}
    labels = [c["label"] for c in cases]
    colors = {"kite": "#d62728", "glibc": "#7f7f7f", "jemalloc": "#1f77b4",
              "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e", "tbbmalloc": "#9467bd",
              "mimalloc3": "#8c564b", "kite-secure": "#e377c2"}
    palette = ["#17becf", "#bcbd22", "#393b79", "#637939"]
    col = {n: colors.get(n) or palette[i % len(palette)] for i, n in enumerate(names)}
    ctx = dict(plt=plt, matplotlib=matplotlib, names=names, by=by, labels=labels, col=col,
               width=0.8 / max(1, len(names)), outdir=outdir, files=[])

    def ratio_err(r):
        k = r["ratio_glibc"] / r["wall_s"]
        return r["wall_min_s"] * k, r["wall_max_s"] * k
    grouped_chart(ctx, lambda r: r["ratio_glibc"],
                  "wall time / glibc's median (log scale; lower is better)",
                  "Wall time relative to glibc, whiskers: min..max of the repetitions "
                  "(X = crashed or wrong)", "time_ratio.png", True, 1.0, ratio_err)
    grouped_chart(ctx, lambda r: r["maxrss_kib"] / 1024 if r["maxrss_kib"] else None,
                  "peak RSS, MiB (log scale)", "Peak resident memory (X = crashed or wrong)",
                  "peak_rss.png", True)

    scaling_chart(ctx, cases, size)
    return ctx["files"]


def grouped_chart(ctx, metric, ylabel, title, fname, log, ref=None, err=None):
    """One bar chart of metric(row) per case and allocator (whiskers: err(row)), in
    panels of 17 cases; appended to ctx["files"]."""
    plt, matplotlib, names, by, labels, col, width = (ctx[k] for k in (
        "plt", "matplotlib", "names", "by", "labels", "col", "width"))
    per_row = 17  # cases per panel: a long suite gets several panels, one above the other
    chunks = [labels[k:k + per_row] for k in range(0, len(labels), per_row)] or [[]]
    fig, axes = plt.subplots(len(chunks), 1, squeeze=False, figsize=(
        max(8, 0.9 * min(len(labels), per_row) + 3), 4.6 * len(chunks) + 0.4))
    for ax, chunk in zip(axes[:, 0], chunks):
        for i, n in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for j, lab in enumerate(chunk):
                r = by[(lab, n)]
                x = j + (i - (len(names) - 1) / 2) * width
                v = metric(r)
                if r["status"] != "ok":
                    ax.text(x, ref if ref is not None else (1 if log else 0), "X",
                            ha="center", va="bottom", color=col[n], fontsize=9,
                            fontweight="bold")
                elif v is not None:
                    xs.append(x)
                    ys.append(v)
                    a, b = err(r) if err else (v, v)
                    lo.append(max(0.0, v - a))
                    hi.append(max(0.0, b - v))
            if ref is not None:  # bars grow up or down from the reference (ratio 1)
                ax.bar(xs, [y - ref for y in ys], width, bottom=ref, label=n, color=col[n])
            else:
                ax.bar(xs, ys, width, label=n, color=col[n])
            if err and xs:  # the min..max of the repetitions
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black",
                            elinewidth=0.7, capsize=1.5)
        if ref is not None:
            ax.axhline(ref, color="black", lw=0.8, ls="--")
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(
                matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            # label only the 2s and 5s between the decades: enough to read, not a smear
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:.1e}"[0] in "25" else ""))
        ax.set_xticks(range(len(chunk)))
        ax.set_xticklabels(chunk, rotation=30, ha="right")
        ax.set_xlim(-0.6, max(len(chunk), per_row if len(chunks) > 1 else 0) - 0.4)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0, 0].set_title(title)
    axes[0, 0].legend(ncol=min(8, len(names)), fontsize=8)
    fig.tight_layout()
    p = os.path.join(ctx["outdir"], fname)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    ctx["files"].append(p)


def scaling_chart(ctx, cases, size):
    """Wall time against threads for the workloads run at several thread counts."""
    plt, names, by, col = (ctx[k] for k in ("plt", "names", "by", "col"))
    multi = {}
    for c in cases:
        if c["threads"] is not None:
            multi.setdefault(c["workload"], []).append(c)
    # only workloads whose per-thread work is the same at every thread count (no
    # thread_args at this size), else the curve would not mean what the title says
    multi = {w: cs for w, cs in multi.items() if len(cs) > 1
             and not (size and WORKLOADS.get(w, {}).get("thread_args", {}).get(size))}
    if multi:
        n = len(multi)
        ncol = min(n, 3)
        nrow = (n + ncol - 1) // ncol
        fig, axes = plt.subplots(nrow, ncol, figsize=(4.8 * ncol + 1, 3.8 * nrow + 0.6),
                                 squeeze=False)
        for ax in axes.flat[n:]:
            ax.set_visible(False)
        for ax, (w, cs) in zip(axes.flat, multi.items()):
            for a in names:
                rs = [(c["threads"], by[(c["label"], a)]) for c in cs
                      if by[(c["label"], a)]["status"] == "ok"]
                if rs:
                    ax.errorbar([t for t, _ in rs], [r["wall_s"] for _, r in rs],
                                yerr=[[r["wall_s"] - r["wall_min_s"] for _, r in rs],
                                      [r["wall_max_s"] - r["wall_s"] for _, r in rs]],
                                fmt="o-", label=a, color=col[a], capsize=2, elinewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xticks([c["threads"] for c in cs])
            ax.set_xticklabels([str(c["threads"]) for c in cs])
            ax.set_xlabel("threads")
            ax.set_ylabel("wall time, s (whiskers: min..max)")
            ax.set_title(w)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"Scaling with threads: the same work per thread, so the ideal is flat "
                     f"up to {os.cpu_count()} threads (this machine's cores), linear beyond")
        fig.tight_layout()
        p = os.path.join(ctx["outdir"], "scaling.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        ctx["files"].append(p)


def docs_intro(meta, outdir):
    """docs/benchmarks.md's opening: how to regenerate it and how a run is made."""
    cmd = ("bench/run.py --quick --docs" if meta.get("quick") else
           f"bench/run.py --docs --reps {meta['reps']}"
           + ("" if meta["size"] == "small" else f" --size {meta['size']}"))
    return ["# kite benchmarks", "",
            "Produced by `make bench`'s runner, `bench/run.py`, on the machine described "
            "below; regenerate with", "", "```sh",
            f"make && make venv && .venv/bin/python {cmd}", "```", "",
            "How it runs: every workload is a small self-checking C program "
            "(`bench/workloads/`, built as `build/kite-wl-<name>`) started once per run with "
            "the allocator under test in `LD_PRELOAD` (glibc: no preload). Within each "
            "repetition every workload runs with every allocator in turn (round robin), so "
            "drifts of the machine hit all allocators alike, and the allocator order rotates "
            "by one at every repetition; the tables give the median over the repetitions "
            "with half its min-max range (±, in percent), the charts the min..max as "
            "whiskers. Cases whose fastest median is under "
            f"{SHORT_S * 1000:.0f} ms are start-up dominated: marked †, left out of the "
            "geometric means. \"Best peer\" is the fastest allocator that is neither glibc "
            "nor a build of kite (kite, kite-secure) nor a hardened peer (scudo, "
            "hardened_malloc: they are kite-secure's peers). Wall and CPU time and peak RSS "
            "are those of the workload process alone (`build/kite-bench-exec` forks it and "
            "reads `wait4`'s resource usage). A run that crashes, fails or whose self-check "
            "fails is shown as such (`CRASH sig N`, `FAIL rc=N`, `WRONG`), never as a time. "
            "Raw results, with the exact command on their first line: "
            f"`{os.path.relpath(outdir, ROOT)}/results.csv` and `results.json`.", "",
            "`make bench` runs the quick set (`--quick`: one case of each shape, kite against "
            "glibc and the speed peers, 3 repetitions: at most 3 minutes on 2 idle cores); "
            "`make bench-full` (or `make bench BENCH=full`) runs every case with every "
            "allocator found, the secure build and its hardened peers included, then the "
            "seeds' tables. Every report states the load average against the cores before and "
            "after the run and the share of the CPU other processes took while it ran; on a "
            "loaded machine it says that its ratios are less certain.", ""]


def docs_ab_method():
    """The section on how a claim about one row is measured (--ab and --syscalls)."""
    return ["## One row, two allocators: `--ab`", "",
            "A whole-suite table on a shared 2-core machine moves by 10-30% from run to run. "
            "A claim about one row (\"kite is level with mimalloc3 on mstress t8\", \"this "
            "change makes churn faster\") is measured with",
            "", "```sh", ".venv/bin/python bench/run.py --ab 'mstress t8' --vs mimalloc3",
            ".venv/bin/python bench/run.py --ab churn:8 --alloc before=/tmp/before/libkite.so "
            "--vs before", "```", "",
            f"It runs the row {AB_MIN_PAIRS} times (at least) as pairs, one run under each "
            "allocator back to back, the order swapped at every pair, and reports the ratio "
            "of CPU time (user+sys of the workload process: less disturbed by other work than "
            "wall time) of every pair with its min, median and max; the medians of wall time, "
            "minor page faults, context switches and peak RSS of each side; and, from one "
            "separate run of each side under `strace -c -f` (strace slows every system call, "
            "so those runs are not timed), the futex, madvise and total system calls. The "
            f"verdict is \"level\" when the median CPU ratio is within {AB_LEVEL * 100:.0f}% "
            "of 1, else the faster side with how many pairs agree. The report (`ab.md`, "
            "`ab.json`) states the load as the suite's does.", "",
            "## System calls per run of the 8-thread rows", "",
            "`make bench-syscalls` (`bench/run.py --quick --syscalls --docs`) runs each row of "
            "the quick set with 8 threads once per allocator under `strace -c -f` and writes "
            "the table below (without `--quick`: every 8-thread row, every allocator).", ""]


def docs_workloads(meta):
    """The table of the workloads with their arguments at the run's size."""
    w = ["## Workloads", "",
         f"Arguments at size `{meta['size']}` (each program's `-h` explains them; "
         "`-t` is the thread count). The quick set (`make bench`) runs: "
         + ", ".join(f"{n}" + ("" if t is None else " t" + ",".join(map(str, t)))
                     for n, t in QUICK.items()) + ".", "",
         "| workload | program | arguments | threads | what it stresses |",
         "|---|---|---|---|---|"]
    for name, spec in WORKLOADS.items():
        th = "1" if spec["threads"] is None else ", ".join(map(str, spec["threads"]))
        a = spec["args"][meta["size"]]
        if spec.get("real"):
            prog, a = f"/usr/bin/{name}", f"size {a}"
        else:
            prog = "kite-wl-" + spec.get("program", name)
            if spec.get("trace"):
                a += " TRACE"
        w.append(f"| {name} | `{prog}` | `{a}` | {th} | {spec['desc']} |")
    w += ["", "Real programs (`sqlite3`, `python3`, `gcc`, `xz`): Debian's binaries run under "
          "`LD_PRELOAD` on inputs the runner generates into `build/bench-programs/` (the "
          "size is the row count of the SQL script, the dict size of the Python script, the "
          "number of generated C functions, the MiB of text); their output (or, for gcc, "
          "the object file) must be byte-identical to the one made under glibc in the same "
          "invocation, else the run is `WRONG`. `replay` replays the trace LOOPS times "
          "in one process (`bench/workloads/replay.c`), so the allocator's calls, not the "
          "trace parsing or per-op timing, dominate.", ""]
    return w


def kept_sections(page):
    """The sections of an existing page that other tools (or people) write: kept as is."""
    kept = {}
    if os.path.exists(page):
        with open(page) as f:
            old = f.read()
        for tag in KEPT_SECTIONS:
            a, b = old.find(f"<!-- {tag} -->"), old.find(f"<!-- /{tag} -->")
            if a >= 0 and b > a:
                kept[tag] = old[a:b + len(f"<!-- /{tag} -->")]
    return kept


TOOLS_PART = ("## Instructions per malloc+free (fast path)", "## Workloads")


def kept_tools_part(page):
    """The part of an existing page that other tools write (bench/fastpath.sh,
    bench/rss_timeline.py, bench/ops_figures.py: from TOOLS_PART[0] up to TOOLS_PART[1]),
    kept whole, prose and sections included; '' when the page or the headings are missing."""
    if not os.path.exists(page):
        return ""
    with open(page) as f:
        old = f.read()
    a, b = old.find(TOOLS_PART[0]), old.find(TOOLS_PART[1])
    return old[a:b].rstrip("\n") + "\n" if 0 <= a < b else ""


def write_docs(meta, md, files, outdir, args, cases, rows):
    """docs/benchmarks.md: how the run was made, the tables, the charts, the workloads.
    The sections between the markers of KEPT_SECTIONS of an existing page are kept."""
    page = os.path.join(ROOT, "docs", "benchmarks.md")
    kept = kept_sections(page)
    rel = lambda p: os.path.relpath(p, os.path.dirname(page))
    w = docs_intro(meta, outdir)
    if kept.get("notes"):
        w += [kept["notes"], ""]
    w += ["## Results", "", md.rstrip("\n"), "", "## Charts", ""]
    for p in files:
        w += [f"![{os.path.basename(p)}]({rel(p)})", ""]
    w += docs_ab_method()
    w += [kept.get("syscalls", "<!-- syscalls -->\n(run `make bench-syscalls`)\n"
                               "<!-- /syscalls -->"), ""]
    w += [kept_tools_part(page) or "\n".join([
          "## Instructions per malloc+free (fast path)", "",
          kept.get("fastpath-table", "<!-- fastpath-table -->\n(run `bench/fastpath.sh "
                   "--docs`)\n<!-- /fastpath-table -->"), "",
          "## Resident memory over time", "",
          kept.get("rss-timeline", "<!-- rss-timeline -->\n(run `make bench-rss`)\n"
                   "<!-- /rss-timeline -->"), ""])]
    w += docs_workloads(meta)
    with open(page, "w") as f:
        f.write("\n".join(w))
    write_readme_table(meta, rows, [a["name"] for a in args.allocs_ok], cases)


def write_readme_table(meta, rows, names, cases):
    """The README's block between <!-- bench-table --> and <!-- /bench-table -->: the wall
    time table of this run (no spread: the docs page has it)."""
    path = os.path.join(ROOT, "README.md")
    if not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    a, b = text.find("<!-- bench-table -->"), text.find("<!-- /bench-table -->")
    if a < 0 or b < a:
        return
    m = meta["machine"]
    block = ("<!-- bench-table -->\n"
             f"Wall time, median of {meta['reps']} interleaved runs at size `{meta['size']}`"
             + (" (`make bench`'s default, the quick set)" if meta.get("quick") else "")
             + ", ratio to glibc in parentheses, lower is better; "
             f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, {m['libc']}; "
             f"{meta['date']}; kite at `{meta.get('kite_commit') or '?'}`; † start-up "
             "dominated, left out of the geometric mean:\n\n"
             + wall_table(rows, names, cases, spread=False) + "\n"
             + ("\n" + load_note(meta["load"]) + "\n" if meta.get("load") else ""))
    with open(path, "w") as f:
        f.write(text[:a] + block + text[b:])


KEPT_SECTIONS = ("notes", "fastpath-table", "rss-timeline", "syscalls")


def ensure_built(build_dir, no_build):
    """Builds the workloads (and libkite.so, if its target exists) when any is missing."""
    need = [w for w, s in WORKLOADS.items() if not s.get("real")
            and not os.path.exists(os.path.join(build_dir, "kite-wl-" + s.get("program", w)))]
    if not need or no_build:
        return
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = str(min(os.cpu_count() or 2, 16))
    print(f"building into {build_dir} ...", file=sys.stderr)
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.call(["cmake", "-S", ROOT, "-B", build_dir] + gen)
    subprocess.call(["cmake", "--build", build_dir, "-j", jobs])


# --------------------------------------------------------------------------------------
# The machine's load: the report says when other work shared the machine
# --------------------------------------------------------------------------------------
def cpu_jiffies():
    """(busy, total) CPU time of the whole machine from /proc/stat, in clock ticks; None
    where /proc/stat cannot be read."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v[:8]) - idle, sum(v[:8])


def load_figures(before, jiffies0, wall_s, own_cpu_s):
    """The load part of a run's meta: load averages before and after (the 'after' one
    counts the benchmark's own threads too), and the share of the machine's CPU that other
    processes took while it ran (busy time in /proc/stat minus the runs' own CPU time), which
    is what tells a loaded machine apart."""
    cores = os.cpu_count() or 1
    try:
        after = "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        after = "?"
    j1 = cpu_jiffies()
    other = None
    if jiffies0 and j1 and wall_s > 0:
        hz = os.sysconf("SC_CLK_TCK")
        busy = (j1[0] - jiffies0[0]) / hz
        other = max(0.0, (busy - own_cpu_s) / (wall_s * cores))
    try:
        l1 = float(before.split()[0])
    except (ValueError, IndexError):
        l1 = 0.0
    loaded = l1 >= cores / 2 or (other is not None and other >= 0.10)
    return dict(cores=cores, load_before=before, load_after=after,
                other_cpu_share=None if other is None else round(other, 3), loaded=loaded)


def load_note(load, ab=False):
    """One paragraph for the reports: the load before and after, and what it means (for
    an --ab report: that its pairs share the load alike, its spread shows what is left)."""
    if not load:
        return ""
    other = load.get("other_cpu_share")
    t = (f"Load average (1, 5, 15 min) before the run: {load['load_before']}, after: "
         f"{load['load_after']} (the benchmark's own threads included), on "
         f"{load['cores']} cores"
         + (f"; other processes used {other * 100:.0f}% of the machine's CPU while it ran"
            if other is not None else "") + ". ")
    if load["loaded"] and ab:
        return t + ("**The machine was loaded**: both runs of a pair share it alike, and "
                    "the min..max of the pairs' ratios shows how much it still moved them.")
    if load["loaded"]:
        return t + ("**The machine was loaded** (1-minute load before the run at least half "
                    "the cores, or other processes at 10% of the CPU or more): the times and "
                    "ratios are less certain than on an idle machine; for a verdict on one "
                    "row use `bench/run.py --ab ROW --vs PEER`.")
    return t + "The machine was otherwise idle."


def replace_block(path, tag, block):
    """Replaces the text between <!-- tag --> and <!-- /tag --> of file `path` (markers
    kept) by block; returns False when the file or the markers are missing."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        text = f.read()
    a, b = text.find(f"<!-- {tag} -->"), text.find(f"<!-- /{tag} -->")
    if a < 0 or b < a:
        return False
    with open(path, "w") as f:
        f.write(text[:a] + f"<!-- {tag} -->\n" + block.rstrip("\n") + "\n" + text[b:])
    return True


# --------------------------------------------------------------------------------------
# System calls of one run (strace -c -f): futex and madvise counts
# --------------------------------------------------------------------------------------
def parse_strace_c(text):
    """{syscall: calls} from `strace -c` output, with 'total' for the sum."""
    calls = {}
    for line in text.splitlines():
        t = line.split()
        if len(t) < 5 or not t[0].replace(".", "", 1).isdigit():
            continue
        try:
            calls[t[-1]] = int(t[3])
        except ValueError:
            continue
    return calls


def strace_counts(c, preload, timeout, alloc_env=None):
    """One run of case c under `preload` (with alloc_env) traced by `strace -c -f`: (calls dict, status).
    The trace is a separate run: strace slows every system call, so its times are not
    the measured ones."""
    if not shutil.which("strace"):
        return None, "strace not installed (Debian package strace)"
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as tf:
        cmd = ["strace", "-f", "-c", "-o", tf.name]
        if preload:
            cmd += ["-E", f"LD_PRELOAD={preload}"]
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(alloc_env or {})
        try:
            argv = [a.replace("{out}", os.devnull) for a in c["argv"]]
            q = subprocess.run(cmd + ["--"] + argv, capture_output=True, text=True,
                               timeout=timeout * 4, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, "TIMEOUT"
        st = classify_exit(q.returncode, q.stdout + q.stderr, c["checksum"],
                           c["wrong_rc"] if c["wrong_rc"] is not None else -1)
        return (parse_strace_c(tf.read()) if st == "ok" else None), st


# --------------------------------------------------------------------------------------
# --ab ROW: one row, two allocators, interleaved pairs: a verdict for a 2-core machine
# --------------------------------------------------------------------------------------
def ab_case(ap, args, build_dir):
    """The one case named by --ab: 'WORKLOAD', 'WORKLOAD tN' or 'WORKLOAD:N'."""
    row = args.ab.strip()
    m = re.fullmatch(r"(\S+?)(?:\s+t|:)(\d+)", row)
    name, threads = (m.group(1), int(m.group(2))) if m else (row, None)
    if name not in WORKLOADS:
        ap.error(f"--ab: unknown workload {name!r}; --list shows them")
    if threads and WORKLOADS[name]["threads"] is None:
        ap.error(f"--ab: {name} is single-threaded; name it without a thread count")
    args.workloads, args.quick = name, False
    args.threads_list = [threads] if threads else args.threads_list
    cases, skipped = build_cases(args, build_dir)
    if skipped:
        ap.error(f"--ab: {name}: {skipped[0][1]}")
    if len(cases) != 1:
        ap.error(f"--ab: {name} runs at several thread counts; name one: "
                 + ", ".join(repr(c["label"]) for c in cases))
    return cases[0]


def run_pairs(c, a, b, pairs, timeout, helper, progress=True):
    """`pairs` pairs of runs of case c, one under allocator a and one under b, back to
    back, the order swapped at every pair (a b, b a, ...) so neither always runs first.
    Returns (list of (run_a, run_b), failure or None); the first failed run stops it."""
    out = []
    for i in range(pairs):
        order = (a, b) if i % 2 == 0 else (b, a)
        got = {}
        for x in order:
            if progress:
                print(f"[pair {i + 1}/{pairs}] {c['label']} [{x['name']}]", file=sys.stderr,
                      flush=True)
            r = run_case(c, x["path"], timeout, helper, x.get("env"))
            if r["status"] != "ok":
                return out, f"{x['name']}: {r['status']}: {r['output'][-300:]}"
            got[x["name"]] = r
        out.append((got[a["name"]], got[b["name"]]))
    return out, None


def cpu_s(r):
    return r["user_s"] + r["sys_s"]


def ab_summary(pairs, level=AB_LEVEL):
    """The verdict on the pairs: per-pair ratios a/b of CPU time (user+sys), of system time
    alone (over the pairs where b's is not 0; None when there is none) and of wall time,
    with min, median and max, the medians of each side's CPU, user and system time, faults
    and context switches, and the verdict: 'level' when the median CPU ratio is within
    `level` of 1, else which side is faster, with how many pairs agree."""
    cpu = sorted(cpu_s(x) / max(cpu_s(y), 1e-9) for x, y in pairs)
    wall = sorted(x["wall_s"] / max(y["wall_s"], 1e-9) for x, y in pairs)
    sys_r = sorted(x["sys_s"] / y["sys_s"] for x, y in pairs if y["sys_s"] > 0)
    med = median(cpu)

    def side(k, f):
        return median(f(p[k]) for p in pairs)
    res = dict(pairs=len(pairs), cpu_ratio=dict(min=cpu[0], median=med, max=cpu[-1]),
               sys_ratio=dict(min=sys_r[0], median=median(sys_r), max=sys_r[-1],
                              pairs=len(sys_r)) if sys_r else None,
               wall_ratio=dict(min=wall[0], median=median(wall), max=wall[-1]))
    for k, who in ((0, "a"), (1, "b")):
        res[who] = dict(cpu_s=side(k, cpu_s), user_s=side(k, lambda r: r["user_s"]),
                        sys_s=side(k, lambda r: r["sys_s"]),
                        wall_s=side(k, lambda r: r["wall_s"]),
                        maxrss_kib=side(k, lambda r: r["maxrss_kib"]),
                        minflt=side(k, lambda r: r.get("minflt", 0)),
                        csw=side(k, lambda r: r.get("nvcsw", 0) + r.get("nivcsw", 0)))
    if abs(med - 1) <= level:
        res["verdict"] = "level"
    else:
        agree = sum(1 for x in cpu if (x < 1) == (med < 1))
        res["verdict"] = ("a faster" if med < 1 else "b faster") + \
            f" ({agree} of {len(cpu)} pairs agree)"
    return res


def ab_markdown(c, a, b, sm, calls, meta):
    """The --ab report: a table of both sides and the verdict."""
    an, bn = a["name"], b["name"]
    verdict = sm["verdict"].replace("a faster", f"{an} faster").replace("b faster",
                                                                        f"{bn} faster")
    r = sm["cpu_ratio"]
    w = sm["wall_ratio"]
    sy = sm["sys_ratio"]
    ca, cb = calls.get(an) or {}, calls.get(bn) or {}

    def ratio(x, y):
        return f"{x / y:.2f}" if x and y else "-"
    lines = [f"A/B on `{c['label']}` (`{' '.join(map(shlex.quote, c['argv']))}`), size "
             f"`{meta['size']}`: {an} against {bn}, {sm['pairs']} interleaved pairs (order "
             "swapped at every pair); CPU time is user+sys of the workload process."
             + "".join(f" {x['name']} runs {alloc_where(x)}." for x in (a, b) if x.get("env")),
             "",
             f"| | {an} | {bn} | {an} / {bn} |", "|---|---:|---:|---:|",
             f"| CPU time, median | {sm['a']['cpu_s']:.3f} s | {sm['b']['cpu_s']:.3f} s | "
             f"{r['median']:.3f} (pairs: min {r['min']:.3f}, max {r['max']:.3f}) |",
             f"| user time, median | {sm['a']['user_s']:.3f} s | {sm['b']['user_s']:.3f} s | "
             f"{ratio(sm['a']['user_s'], sm['b']['user_s'])} |",
             f"| system time, median | {sm['a']['sys_s']:.3f} s | {sm['b']['sys_s']:.3f} s | "
             + (f"{sy['median']:.3f} (pairs: min {sy['min']:.3f}, max {sy['max']:.3f}) |" if sy
                else "- (no pair with system time on both sides) |"),
             f"| wall time, median | {sm['a']['wall_s']:.3f} s | {sm['b']['wall_s']:.3f} s | "
             f"{w['median']:.3f} (min {w['min']:.3f}, max {w['max']:.3f}) |",
             f"| minor page faults, median | {sm['a']['minflt']:.0f} | {sm['b']['minflt']:.0f}"
             f" | {ratio(sm['a']['minflt'], sm['b']['minflt'])} |",
             f"| context switches, median | {sm['a']['csw']:.0f} | {sm['b']['csw']:.0f} | "
             f"{ratio(sm['a']['csw'], sm['b']['csw'])} |",
             f"| peak RSS, median | {sm['a']['maxrss_kib'] / 1024:.1f} MiB | "
             f"{sm['b']['maxrss_kib'] / 1024:.1f} MiB | "
             f"{ratio(sm['a']['maxrss_kib'], sm['b']['maxrss_kib'])} |"]
    for sc in ("futex", "madvise", "total"):
        name = "system calls, all" if sc == "total" else f"{sc} calls"
        lines.append(f"| {name} (strace -c -f, one run) | {ca.get(sc, 0) if ca else '-'} | "
                     f"{cb.get(sc, 0) if cb else '-'} | {ratio(ca.get(sc), cb.get(sc))} |")
    lines += ["", f"**Verdict: {verdict}** (median CPU-time ratio {r['median']:.3f}; "
              f"\"level\" is within {AB_LEVEL * 100:.0f}% of 1).", "",
              load_note(meta.get("load"), ab=True), ""]
    return "\n".join(lines)


def ab_mode(ap, args, allocs, build_dir, helper, command):
    """--ab ROW --vs B [--a A]: the pairs, then one strace run of each side, the report
    printed and written (ab.md, ab.json) into --out. Exit 1 when a run failed."""
    c = ab_case(ap, args, build_dir)
    by = {x["name"]: x for x in allocs}
    sides = []
    for n in (args.a, args.vs):
        if n not in by or by[n]["status"] != "ok":
            ap.error(f"--ab: allocator {n!r} is not available"
                     + (f" ({by[n]['reason']})" if n in by else "; add it with --alloc NAME=PATH"))
        sides.append(by[n])
    a, b = sides
    out = os.path.abspath(args.out or os.path.join(
        ROOT, "bench", "results", "ab-" + _dt.datetime.now(_dt.timezone.utc).strftime(
            "%Y%m%d-%H%M%S")))
    os.makedirs(out, exist_ok=True)
    machine, j0, t0 = machine_info(), cpu_jiffies(), time.time()
    pairs, failed = run_pairs(c, a, b, args.pairs, args.timeout, helper,
                              not args.no_progress)
    own = sum(cpu_s(x) + cpu_s(y) for x, y in pairs)
    load = load_figures(machine["load_at_start"], j0, time.time() - t0, own)
    if failed:
        print(f"--ab {c['label']}: a run failed, no verdict: {failed}", file=sys.stderr)
        return 1
    calls, why = {}, {}
    for x in (a, b):
        calls[x["name"]], why[x["name"]] = strace_counts(c, x["path"], args.timeout, x.get("env"))
    meta = dict(command=command, size=args.size, machine=machine, load=load,
                kite_commit=git_describe())
    sm = ab_summary(pairs)
    md = ab_markdown(c, a, b, sm, calls, meta)
    for n, w in why.items():
        if w != "ok":
            md += f"\nstrace run of {n}: {w}\n"
    with open(os.path.join(out, "ab.md"), "w") as f:
        f.write(f"Command: `{command}`\n\n" + md)
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(dict(command=command, meta=meta, row=c["label"], argv=c["argv"],
                       a=a["name"], b=b["name"], summary=sm, syscalls=calls,
                       pairs=[[dict({k: v for k, v in r.items() if k != "output"},
                                    cpu_s=cpu_s(r)) for r in p] for p in pairs]), f, indent=1)
    print(md)
    print(f"results in {os.path.relpath(out)}/ab.md and ab.json")
    return 0


# --------------------------------------------------------------------------------------
# --syscalls: futex and madvise calls per run of the 8-thread rows, every allocator
# --------------------------------------------------------------------------------------
def syscalls_mode(args, cases, active):
    """One `strace -c -f` run per (case, allocator) of the cases with 8 or more threads:
    the table of futex and madvise calls per run, printed, and with --docs written into
    docs/benchmarks.md's syscalls section. Exit 1 when strace is missing."""
    cases = [c for c in cases if (c["threads"] or 1) >= 8]
    if not shutil.which("strace"):
        print("--syscalls: strace not installed (Debian package strace)", file=sys.stderr)
        return 1
    names = [a["name"] for a in active]
    lines = ["| workload | threads | " + " | ".join(names) + " |",
             "|---|---|" + "---:|" * len(names)]
    machine = machine_info()
    for c in cases:
        cells = []
        for a in active:
            if not args.no_progress:
                print(f"strace {c['label']} [{a['name']}]", file=sys.stderr, flush=True)
            calls, st = strace_counts(c, a["path"], args.timeout, a.get("env"))
            cells.append(f"{calls.get('futex', 0)} / {calls.get('madvise', 0)}" if calls
                         else f"**{st}**")
        lines.append(f"| {c['workload']} | {c['threads']} | " + " | ".join(cells) + " |")
    flags = ("--quick " if args.quick else "") + "--syscalls" + (
        "" if args.size == "small" else " --size " + args.size)
    block = (f"futex / madvise calls in one run of each {args.size}-size row with 8 threads "
             f"{'of the quick set ' if args.quick else ''}"
             f"(`strace -c -f`, every thread of the workload process; `bench/run.py {flags}`"
             f"; {machine['cpu']}, {machine['cores']} cores, kite at `{git_describe()}`). "
             "A futex call is a lock or condition wait that went to the kernel (the workloads' "
             "own barriers and queues make some under every allocator); madvise is memory "
             "given back.\n\n" + "\n".join(lines) + "\n")
    print(block)
    if args.docs and not replace_block(os.path.join(ROOT, "docs", "benchmarks.md"),
                                       "syscalls", block):
        print("docs/benchmarks.md has no <!-- syscalls --> block; not written", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------
# Command line and the suite
# --------------------------------------------------------------------------------------
def add_suite_arguments(ap):
    ap.add_argument("--quick", action="store_true",
                    help="make bench's default: one case of each shape (QUICK), kite against "
                         "glibc and the speed peers, within 3 minutes on 2 idle cores")
    ap.add_argument("--size", choices=SIZES, default="small",
                    help="problem size of every workload (default: small)")
    ap.add_argument("--workloads", default="all",
                    help="comma-separated workloads (default: all, or QUICK's with --quick; "
                         "--list shows them)")
    ap.add_argument("--allocs", default="all",
                    help="comma-separated allocators to run (default: every one found)")
    ap.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH[:VAR=VALUE...]",
                    help="add a preloadable .so as allocator NAME, run with VAR=VALUE in "
                         "its environment when given (repeatable)")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts for every multi-thread workload "
                         "(default: each workload's own list)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per pair (default 3)")
    ap.add_argument("--short-ms", type=float, default=SHORT_S * 1000,
                    help="cases whose fastest median is under this many ms are start-up "
                         "dominated: marked and left out of the geometric means (default "
                         f"{SHORT_S * 1000:.0f}; 0 keeps every case)")
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
                         "otherwise); with --syscalls, only its section")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--install-peers", action="store_true",
                    help="apt-get install the missing peers (jemalloc, tcmalloc, mimalloc, tbbmalloc)")
    ap.add_argument("--list", action="store_true", help="list workloads and allocators, then exit")


def add_mode_arguments(ap):
    ap.add_argument("--ab", metavar="ROW",
                    help="A/B mode: one row ('WORKLOAD', 'WORKLOAD tN' or 'WORKLOAD:N'), "
                         "allocator --a against --vs over --pairs interleaved pairs: CPU-time "
                         "ratio with its spread, faults, context switches, futex and madvise "
                         "calls (one strace run each), and a verdict")
    ap.add_argument("--vs", default=None, metavar="NAME",
                    help="--ab: the allocator to compare with (a peer, or another kite build "
                         "given by --alloc NAME=PATH)")
    ap.add_argument("--a", default="kite", metavar="NAME",
                    help="--ab: the allocator measured (default kite)")
    ap.add_argument("--pairs", type=int, default=AB_MIN_PAIRS,
                    help=f"--ab: interleaved pairs (default and minimum {AB_MIN_PAIRS})")
    ap.add_argument("--syscalls", action="store_true",
                    help="futex and madvise calls per run (strace -c -f) of the rows with 8 "
                         "threads, every allocator; with --docs into docs/benchmarks.md")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Compare kite with glibc and the installed peers on kite's workloads.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  bench/run.py --quick                              # make bench\n"
               "  bench/run.py --size tiny --reps 1                 # a quick look\n"
               "  bench/run.py --workloads churn,larson --threads 1,2,4,8\n"
               "  bench/run.py --alloc mine=/path/libmine.so --allocs glibc,mine\n"
               "  bench/run.py --ab 'mstress t8' --vs mimalloc3     # one row, a verdict\n"
               "  bench/run.py --ab churn:8 --alloc old=/tmp/old/libkite.so --vs old\n"
               "  bench/run.py --docs --reps 5                      # docs/benchmarks.md\n"
               "verdicts: CRASH sig N (killed by a signal), FAIL rc=N (non-zero exit),\n"
               "WRONG (the workload's self-check failed), TIMEOUT (past --timeout).")
    add_suite_arguments(ap)
    add_mode_arguments(ap)
    args = ap.parse_args(argv)
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
    if args.short_ms < 0:
        ap.error("--short-ms must be >= 0")
    if args.ab and not args.vs:
        ap.error("--ab wants --vs NAME, the allocator to compare with")
    if args.ab and args.pairs < AB_MIN_PAIRS:
        ap.error(f"--pairs must be at least {AB_MIN_PAIRS}: fewer pairs give no verdict "
                 "worth the name on a shared 2-core machine")
    return ap, args


def select_allocators(ap, args, build_dir):
    allocs = discover_allocators(build_dir, args.alloc, args.install_peers)
    if args.allocs != "all":
        want = [a.strip() for a in args.allocs.split(",") if a.strip()]
        known = {a["name"] for a in allocs}
        for w in want:
            if w not in known:
                ap.error(f"unknown allocator {w!r} (known: {', '.join(sorted(known))}; "
                         "add others with --alloc NAME=PATH)")
        allocs = [a for a in allocs if a["name"] in want]
    elif args.quick:
        allocs = [a for a in allocs if a["name"] not in QUICK_SKIP_ALLOCS]
    return allocs


def list_mode(allocs):
    print("workloads:")
    for w, s in WORKLOADS.items():
        th = "1" if s["threads"] is None else ",".join(map(str, s["threads"]))
        print(f"  {w:14s} threads {th:6s} {s['desc']}")
    print("allocators:")
    for a in allocs:
        where = alloc_where(a, quote="")
        print(f"  {a['name']:14s} {a['status']:8s} {where if a['status'] == 'ok' else a['reason']}")
    return 0


def run_suite(args, cases, active, helper):
    """Every repetition runs every case with every allocator, round robin, the allocator
    order rotated by one at each repetition (so that no allocator always runs right after
    the same one: caches, page cache, frequency). A pair that failed is not run again.
    Returns {(label, allocator): [run, ...]}."""
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
    for rep in range(args.reps):
        k = rep % len(active)
        order = active[k:] + active[:k]
        for c in cases:
            for a in order:
                key = (c["label"], a["name"])
                done += 1
                if bar:
                    bar.update(1)
                if any(x["status"] != "ok" for x in runs[key]):
                    continue  # already a failure: that is the pair's verdict
                desc = f"rep {rep + 1}/{args.reps} {c['label']} [{a['name']}]"
                if bar:
                    bar.set_description(desc)
                elif not args.no_progress:
                    print(f"[{done}/{total}] {desc}", file=sys.stderr, flush=True)
                r = run_case(c, a["path"], args.timeout, helper, a.get("env"))
                r["order"] = order.index(a)
                runs[key].append(r)
    if bar:
        bar.close()
    return runs


def make_rows(cases, active, runs):
    rows = []
    for c in cases:
        for a in active:
            rr = runs[(c["label"], a["name"])]
            rows.append(dict(workload=c["workload"], threads=c["threads"], label=c["label"],
                             allocator=a["name"], command=" ".join(map(shlex.quote, c["argv"])),
                             runs=[{k: v for k, v in x.items() if k != "output"} for x in rr],
                             **summarize(rr)))
    add_ratios(rows, [a["name"] for a in active])
    return rows


def write_results(args, meta, allocs, skipped_wl, cases, rows, outdir):
    """results.json, results.csv, results.md and the charts into outdir (and the docs with
    --docs). Returns (markdown, chart files)."""
    active = [a for a in allocs if a["status"] == "ok"]
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(dict(command=meta["command"], meta=meta, allocators=allocs,
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
            files = charts(cdir, rows, active, cases, args.size)
        except ImportError as e:
            print(f"charts skipped: {e} (use the project's .venv, or --no-charts)",
                  file=sys.stderr)
    if args.docs:
        args.allocs_ok = active
        write_docs(meta, md, files, outdir, args, cases, rows)
    return md, files


def suite_mode(args, allocs, cases, skipped_wl, helper, command):
    active = [a for a in allocs if a["status"] == "ok"]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if args.docs:
        args.out = args.out or os.path.join(ROOT, "bench", "results", "docs-run")
        args.charts_dir = args.charts_dir or os.path.join(ROOT, "docs", "bench")
    outdir = os.path.abspath(args.out or os.path.join(ROOT, "bench", "results", stamp))
    os.makedirs(outdir, exist_ok=True)
    machine, j0 = machine_info(), cpu_jiffies()  # before the runs: the machine's own load
    t_start = time.time()
    runs = run_suite(args, cases, active, helper)
    elapsed = time.time() - t_start
    own = sum(cpu_s(r) for rr in runs.values() for r in rr)
    rows = make_rows(cases, active, runs)
    meta = dict(command=command, date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), size=args.size, reps=args.reps, quick=bool(args.quick),
        elapsed_s=round(elapsed, 1), machine=machine, build_dir=os.path.abspath(args.build_dir),
        kite_commit=git_describe(),
        load=load_figures(machine["load_at_start"], j0, elapsed, own))
    md, files = write_results(args, meta, allocs, skipped_wl, cases, rows, outdir)
    print(md)
    total = sum(len(rr) for rr in runs.values())
    print(f"{total} runs in {elapsed:.0f} s; results in {os.path.relpath(outdir)}/"
          + (f"; charts: {', '.join(os.path.relpath(p) for p in files)}" if files else ""))
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        print(f"{len(bad)} pair(s) failed: " + ", ".join(
            f"{r['label']} [{r['allocator']}] {r['status']}" for r in bad), file=sys.stderr)
    return 0


def main(argv=None):
    global SHORT_S
    ap, args = parse_args(argv)
    command = " ".join(shlex.quote(a) for a in [sys.argv[0]] + (argv if argv is not None
                                                                  else sys.argv[1:]))
    build_dir = os.path.abspath(args.build_dir)
    SHORT_S = args.short_ms / 1000
    allocs = select_allocators(ap, args, build_dir)
    if args.list:
        return list_mode(allocs)
    ensure_built(build_dir, args.no_build)
    helper = os.path.join(build_dir, "kite-bench-exec")
    if not os.path.exists(helper):
        print(f"{os.path.relpath(helper, ROOT)} not built: peak RSS will include the "
              "runner's own (an upper bound)", file=sys.stderr)
        helper = None
    if args.ab:
        return ab_mode(ap, args, allocs, build_dir, helper, command)
    cases, skipped_wl = build_cases(args, build_dir)
    active = [a for a in allocs if a["status"] == "ok"]
    for a in allocs:
        if a["status"] != "ok":
            print(f"skipped allocator {a['name']}: {a['reason']}", file=sys.stderr)
    for w, why in skipped_wl:
        print(f"workload {w}: {why}", file=sys.stderr)
    if not cases or not active:
        print("nothing to run", file=sys.stderr)
        return 1
    if args.syscalls:
        return syscalls_mode(args, cases, active)
    return suite_mode(args, allocs, cases, skipped_wl, helper, command)


if __name__ == "__main__":
    sys.exit(main())
