#!/usr/bin/env python3
"""lab.py -- the lab's seed experiments (`make lab`): writes docs/lab.md, docs/lab/*.png and the
raw results docs/lab/results.json.

    tools/lab.py [--build DIR] [--out DIR] [--ns N,N,...] [--repeats K] [--no-peers] [--quick]

--quick runs small N once each: its answers are marked not decisive (they flip between runs).
    tools/lab.py --report-only [--out DIR]      (rewrite lab.md and the charts from results.json)

For each N it generates the seed's two timing scripts (tools/gen_trace.py, seeded):
  insert-delete N   2N mallocs, N frees of every other block, N mallocs; timed: the N frees
                    and N mallocs (lines 2N+1 .. 4N)
  realloc N         2N mallocs, N frees of every other block, N reallocs to 200-1000 bytes
                    (each coalesces with both free neighbours); timed: the reallocs (3N+1 .. 4N)
and replays each with build/kite-replay --json -r START END on every allocator: every lab
policy, kite, glibc's malloc, and each installed peer (jemalloc, tcmalloc, mimalloc,
tbbmalloc, mimalloc3 from .venv) preloaded under --malloc. Then it replays each captured program trace in
tests/data/traces/ whole, and the longest of them once more cut into 10 line intervals, and
each large program trace of --big-traces (build/lab-traces/, from `make lab-traces`) whole.
Runs at N <= 100,000 are repeated (--repeats, default 3): the report gives the median and
the min-max of the repeats, and calls an answer undecided where that spread reaches equal
time; larger N run once. A run that fails is recorded as a failure with its
message, never as a time. Default N: 5k 10k 25k 50k 100k 250k 500k 1M -- the seed's range,
the synthetic part takes 10-20 minutes on a 2-core machine, the large traces as long again.
"""
import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitecommon  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

try:
    from tqdm import tqdm
except ImportError:  # the venv has it; fall back to a plain counter
    tqdm = None

DEFAULT_NS = [5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000]
QUICK_NS = [1000, 5000, 20000]
SKIP_S = 40
BIG_TIMEOUT_S = 60  # one whole replay of a large program trace (a few seconds for a tree)
PEERS = [("jemalloc", "libjemalloc.so.2"), ("tcmalloc", "libtcmalloc_minimal.so.4"),
         ("mimalloc", "libmimalloc.so.2"), ("tbbmalloc", "libtbbmalloc_proxy.so.2")]
LIBDIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]


def find_lib(name):
    for d in LIBDIRS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def allocators(replay, peers):
    """[(label, replay args, extra env)] in plot order: policies, kite, glibc, peers."""
    names = subprocess.run([replay, "--list"], capture_output=True, text=True, check=True).stdout.split()
    out = []
    for n in names:
        if n == "malloc":
            out.append(("glibc", ["--malloc"], {}))
        elif n == "kite":
            out.append(("kite", ["--kite"], {}))
        else:
            out.append((n, ["--policy", n], {}))
    if peers:
        for label, lib in PEERS:
            p = find_lib(lib)
            if p:
                out.append((label, ["--malloc"], {"LD_PRELOAD": p}))
        # mimalloc3: the cmeel-mimalloc wheel `make venv` installs (as bench/run.py finds it)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        mi3 = sorted(glob.glob(os.path.join(here, ".venv", "lib", "python3*", "site-packages",
                                            "cmeel.prefix", "lib", "libmimalloc.so.3")))
        if mi3:
            out.append(("mimalloc3", ["--malloc"], {"LD_PRELOAD": mi3[-1]}))
    return out


def run_replay(replay, args, env_extra, path, rng=None, timeout=150, intervals=None):
    """One kite-replay run; rng = (START, END) times one range, intervals = [(START, END)...]
    times several (their per-range averages come back as "intervals")."""
    ranges = [rng] if rng else (intervals or [])
    cmd = [replay, "--json"] + args + [x for a, b in ranges for x in ("-r", str(a), str(b))] + [path]
    env = dict(os.environ)
    env.update(env_extra)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    j = json.loads(r.stdout)
    rg = j["ranges"][0]
    out = {k: rg[k] for k in ("requests", "samples", "preempted", "total_ns", "avg_ns", "p50_ns", "p90_ns",
                              "p99_ns", "max_ns")} | {
        "peak_live_bytes": j["peak_live_bytes"], "footprint_bytes": j["footprint_bytes"],
        "rss_bytes": j.get("rss_bytes"), "timer": j.get("timer"),
        # utilization only where it is a heap span (lab policies): null for a real malloc
        "utilization": j["utilization"] if j["footprint_bytes"] else None}
    if intervals:
        out["intervals"] = [x["avg_ns"] for x in j["ranges"]]
    return out, None


BREAKDOWN_N = 100000  # the realloc script whose utilization is taken apart


def realloc_breakdown(replay, work, seed, n=BREAKDOWN_N, policy="rbtree_clrs"):
    """Why `realloc N` reaches ~88% utilization and not the workshop's 98%: the policy's
    utilization taken apart into the block overhead of the live requests (header and 8-byte
    granule, the seed's layout: the ceiling a perfectly packed heap reaches) and the free
    holes left inside the heap span at the peak (after the N reallocs, line 4N, from
    `kite-replay --free-at`); and how many reallocs cannot stay in place even with both free
    neighbours whole (a property of the script)."""
    path, _ = generate("realloc", n, seed, work)
    first, resize = [], []
    with open(path) as f:
        for line in f:
            t = line.split()
            if t[0] == "a":
                first.append(int(t[2]))
            elif t[0] == "r":
                resize.append(int(t[2]))

    def blk(x):  # ds/blocks.h with the seed's granule: 8-byte header, 8-byte steps, 40 B minimum
        return max(40, (x + 8 + 7) // 8 * 8)
    r = subprocess.run([replay, "--json", "--policy", policy, "--free-at", str(4 * n), "-r",
                        str(3 * n + 1), str(4 * n), path], capture_output=True, text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 0 or not lines or not lines[0].startswith("free-at"):
        return None
    j = json.loads(r.stdout)
    free = sorted((int(a), int(b)) for a, b in (x.split() for x in lines[1:]))
    # the largest free block is the unused rest of the region above the span: not a hole
    cap, cnt = free[-1]
    free[-1] = (cap, cnt - 1)
    holes = sum((c + 8) * k for c, k in free)
    nholes = sum(k for _, k in free)
    right = [blk(x) for x in first[2::2]] + [float("inf")]  # the last block meets the heap's top
    stay = sum(1 for i, x in enumerate(resize)
               if blk(x) <= blk(first[2 * i + 1]) + blk(first[2 * i]) + right[i])
    # the same script with reallocs near the old size (-25% .. +33%): they stay in place
    near = os.path.join(work, f"realloc-near-{n}-s{seed}.script")
    if not os.path.exists(near):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_trace.py"), "realloc", str(n), "--near",
                        "--seed", str(seed), "-o", near], capture_output=True, check=True)
    rn = subprocess.run([replay, "--json", "--policy", policy, "-r", str(3 * n + 1), str(4 * n), near],
                        capture_output=True, text=True, timeout=300)
    near_u = json.loads(rn.stdout)["utilization"] if rn.returncode == 0 else None
    return {"n": n, "policy": policy, "near_utilization": near_u, "utilization": j["utilization"],
            "span": j["footprint_bytes"],
            "peak_live": j["peak_live_bytes"], "initial_span": sum(blk(x) for x in first),
            "initial_live": sum(first), "live_blocks": sum(blk(x) for x in resize),
            "holes": holes, "nholes": nholes, "cannot_stay": n - stay}


def trace_info(path):
    """A large trace's size and the command it was captured from (its header)."""
    info = {"ops": 0, "bytes": os.path.getsize(path), "command": None, "mallocs": 0, "frees": 0,
            "reallocs": 0}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                if line.startswith("# command:"):
                    info["command"] = line[len("# command:"):].strip()
                continue
            info["ops"] += 1
            c = line[:1]
            if c in "mca":
                info["mallocs"] += 1
            elif c == "f":
                info["frees"] += 1
            elif c == "r":
                info["reallocs"] += 1
    return info


def generate(kind, n, seed, work):
    path = os.path.join(work, f"{kind}-{n}-s{seed}.script")
    rng_path = path + ".range"
    if not (os.path.exists(path) and os.path.exists(rng_path)):
        r = subprocess.run([sys.executable, os.path.join(HERE, "gen_trace.py"), kind, str(n), "-o", path,
                            "--seed", str(seed)], capture_output=True, text=True, check=True)
        with open(rng_path, "w") as f:
            f.write(r.stderr.strip())
    toks = open(rng_path).read().split()
    return path, (int(toks[1]), int(toks[2]))


PEAK_N = 50000  # the seed's picture: the tree at the peak of 50,000 insert-delete requests
PEAK_POLICIES = ("rbtree_linked", "seglist")


def peaks(replay, work, seed):
    """The free structure at the heap's peak of insert-delete PEAK_N (after the N frees, line
    3N): each policy's free blocks by capacity, from `kite-replay --free-at`."""
    path, rng = generate("insert-delete", PEAK_N, seed, work)
    line = rng[0] + PEAK_N - 1
    out = {"n": PEAK_N, "line": line, "policies": {}}
    for pol in PEAK_POLICIES:
        r = subprocess.run([replay, "--policy", pol, "--free-at", str(line), "-r", "1", "1", path],
                           capture_output=True, text=True, timeout=300)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 0 or not lines or not lines[0].startswith("free-at"):
            continue
        sizes = [[int(a), int(b)] for a, b in (x.split() for x in lines[1:])]
        out["policies"][pol] = {"blocks": sum(c for _, c in sizes), "sizes": sizes}
    return out


def machine():
    m = kitecommon.machine_info()
    m["python"] = platform.python_version()
    return m


# ---------------------------------------------------------------------------------------
# the report


def med(runs, key):
    return kitecommon.median(r.get(key) for r in runs)


def grid(labels, cols, heads, lookup, cell):
    """Markdown table lines: one row per allocator in labels, one column per entry of cols
    headed by heads. lookup(a, c) gives the result record or None; a record that was skipped
    or failed reads as such, any other as cell(record)."""
    lines = ["| allocator | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(cols)]
    for a in labels:
        cells = []
        for c in cols:
            r = lookup(a, c)
            cells.append("" if not r else "skipped" if r.get("skipped")
                         else "failed" if r.get("error") else cell(r))
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines


def spread_of(runs, key):
    return kitecommon.spread(r.get(key) for r in runs)


def table_of(res, exp, key, scale, fmt, ns, labels):
    """Median of the repeats, and [min-max] of them where there were several."""
    rows = {(r["allocator"], r["n"]): r for r in res["synthetic"] if r["experiment"] == exp}

    def cell(r):
        v = med(r["runs"], key)
        if v is None:
            return "n/a"
        txt = fmt.format(v * scale)
        sp = spread_of(r["runs"], key)
        if len(r["runs"]) > 1 and sp:
            txt += " [" + fmt.format(sp[0] * scale) + "–" + fmt.format(sp[1] * scale) + "]"
        return txt
    return "\n".join(grid(labels, ns, [f"{n:,}" for n in ns],
                           lambda a, n: rows.get((a, n)), cell))


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def ratio(res, exp, a, b):
    """Geometric mean over N of time(a) / time(b), the per-N ratios, and the spread of that
    mean the repeats allow: (geometric mean of min(a)/max(b), of max(a)/min(b)); None if
    unmeasured."""
    t, sp = {}, {}
    for r in res["synthetic"]:
        if r["experiment"] == exp and not r.get("error") and r["allocator"] in (a, b) and r["runs"]:
            t[(r["allocator"], r["n"])] = med(r["runs"], "total_ns")
            sp[(r["allocator"], r["n"])] = spread_of(r["runs"], "total_ns")
    keep = [n for n in res["ns"] if t.get((a, n)) and t.get((b, n)) and sp[(a, n)][0] and sp[(b, n)][0]]
    rs = [(n, t[(a, n)] / t[(b, n)]) for n in keep]
    if not rs:
        return None, [], None
    lo = gmean([sp[(a, n)][0] / sp[(b, n)][1] for n in keep])
    hi = gmean([sp[(a, n)][1] / sp[(b, n)][0] for n in keep])
    return gmean([x for _, x in rs]), rs, (lo, hi)


def compare(res, a, b):
    """One sentence comparing a with b on both experiments."""
    have = set(res["allocators"])
    if a not in have or b not in have:
        missing = " and ".join(x for x in (a, b) if x not in have)
        return None, f"not measured here: {missing} is not among the policies this build has"
    parts = []
    verdicts = []
    for exp in ("insert-delete", "realloc"):
        g, rs, lohi = ratio(res, exp, a, b)
        if g is None:
            continue
        lo, hi = lohi
        big = [x for n, x in rs if n >= 100000] or [x for _, x in rs]
        gb = gmean(big)
        if abs(g - 1) < 0.05:
            word = "the same time as (within 5%)"
        elif g > 1:
            word = f"{(g - 1) * 100:.0f}% more time than"
        else:
            word = f"{(1 - g) * 100:.0f}% less time than"
        if res.get("repeats", 1) > 1:
            spread = f"; the repeats' spread puts the ratio between {lo:.2f} and {hi:.2f}"
            if lo < 1.05 and hi > 0.95:
                spread += (", which reaches equal time: **undecided** on this machine")
                UNDECIDED.add((a, b, exp))
        else:
            spread = "; one run per N, so no spread to judge by"
            UNDECIDED.add((a, b, exp))
        parts.append(f"On {exp}, `{a}` takes {word} `{b}` (geometric mean over all N, ratio "
                     f"{g:.2f}; {gb:.2f}x at N >= 100k{spread})")
        verdicts.append(g)
    return verdicts, " ".join(p + "." for p in parts)


UNDECIDED = set()  # (a, b, experiment) whose spread reaches equal time, filled by compare()


def answer(verdicts):
    if not verdicts:
        return "unmeasured"
    lo, hi = min(verdicts), max(verdicts)
    span = f"{abs(lo - 1) * 100:.0f}-{abs(hi - 1) * 100:.0f}%" if lo >= 1 else f"{(1 - hi) * 100:.0f}-{(1 - lo) * 100:.0f}%"
    if all(abs(v - 1) < 0.05 for v in verdicts):
        return "no measurable difference (all within 5%)"
    if all(v < 1 for v in verdicts):
        return f"a benefit ({span} less time)"
    if all(v > 1 for v in verdicts):
        return f"a cost ({span} more time)"
    return (f"mixed: between {(1 - lo) * 100:.0f}% less and {(hi - 1) * 100:.0f}% more time, "
            "depending on the workload")


def qualify(text, nv):
    """The answer, marked undecided where the repeats' spread reaches equal time (UNDECIDED
    holds what compare() found for this question's comparisons; nv is their number)."""
    if not nv:
        return text
    k = len(UNDECIDED)
    UNDECIDED.clear()
    if k >= nv:
        return (f"undecided: the medians say {text}, but the spread of the repeats reaches equal "
                "time in every comparison")
    if k:
        return f"{text}; {k} of the {nv} comparisons are undecided by their spread"
    return text


def questions(res):
    out = []
    UNDECIDED.clear()
    v, s = compare(res, "rbtree_unified", "rbtree_clrs")
    out.append(("Is there any cost or benefit to uniting the left and right cases of tree based "
                "allocators into one case with an array of pointers?",
                f"**Measured: {qualify(answer(v), len(v or []))}.** `rbtree_unified` is the CLRS tree with `links[2]` "
                f"instead of `left`/`right`. {s} (The seed found the array slightly slower and "
                "kept it for readability.)"))
    v, s = compare(res, "rbtree_linked", "rbtree_clrs")
    a2 = qualify(answer(v), len(v or []))
    extra = []
    for other in ("rbtree_stack", "rbtree_topdown"):
        if other in res["allocators"]:
            _, s2 = compare(res, other, "rbtree_clrs")
            extra.append(s2)
    UNDECIDED.clear()
    out.append(("Does storing duplicate node sizes in a linked list benefit performance by trimming "
                "the tree?",
                f"**Measured: {a2}.** `rbtree_linked` is the CLRS tree plus a list of "
                f"same-size blocks hanging off one tree node. {s}" + (" The parent-less trees, which "
                "also keep duplicates in a list, against `rbtree_clrs`: " + " ".join(extra) if extra else "")
                + " (The seed's answer was the same: \"absolutely\".)"))
    found = [p for p in ("rbtree_stack", "rbtree_topdown") if p in res["allocators"]]
    if found:
        txt = []
        vs = []
        for p in found:
            v, s = compare(res, p, "rbtree_linked")
            vs += v or []
            txt.append(s)
        a3 = qualify(answer(vs), len(vs))
        body = (f"**Measured: {a3}** (less time means the parent-less tree is faster). The trees without "
                f"a parent field (`{'`, `'.join(found)}`) against `rbtree_linked`, which keeps the "
                f"parent and adds the duplicate list: " + " ".join(txt) + " (The seed found little "
                "loss for the bottom-up stack and some for top-down.)")
    else:
        body = ("**Not measured in this build:** the parent-less trees (`rbtree_stack`, "
                "`rbtree_topdown`) are not among the policies `kite-replay --list` shows, so this "
                "question waits for them; rerun `make lab` once they are built.")
    out.append(("When we abandon the parent field of the tree node in exchange for the linked list "
                "field, do we sacrifice performance?", body))
    pairs = [("rbtree_topdown", "rbtree_stack"), ("splay_topdown", "splay_stack")]
    txt = []
    vs = []
    for a, b in pairs:
        if a in res["allocators"] and b in res["allocators"]:
            v, s = compare(res, a, b)
            vs += v or []
            txt.append(s)
    if txt:
        body = (f"**Measured: {qualify(answer(vs), len(vs))}** (less time means top-down is faster). " + " ".join(txt)
                + " (The seed called it too close to answer definitively.)")
    else:
        body = ("**Not measured in this build:** it needs the top-down and bottom-up pairs "
                "(`rbtree_topdown` vs `rbtree_stack`, `splay_topdown` vs `splay_stack`), which "
                "`kite-replay --list` does not show yet; rerun `make lab` once they are built.")
    out.append(("Does a top-down approach to fixing a Red Black or Splay Tree reduce the number of "
                "O(lgN) operations enough to make a difference?", body))
    return out


def buddy_figures():
    """{variant: seconds to allocate 1 GiB in 4 KiB units} from docs/lab/buddy-seed-size.txt
    (build/kite-buddy-bench --seed-size output kept beside this page), or {}."""
    out = {}
    try:
        with open(os.path.join(ROOT, "docs", "lab", "buddy-seed-size.txt")) as f:
            for line in f:
                m = re.match(r"^([a-z-]+)/seq-alloc-1GiB: ([0-9.]+) ns/op", line)
                if m:
                    out[m.group(1)] = float(m.group(2)) * 262144e-9
    except OSError:
        pass
    return out


def fidelity(res):
    """The "fidelity" section: each seed item, the lab's equivalent, measured beside the
    seed's own figure where it has one."""
    have = set(res["allocators"])
    nmax = max(res["ns"])
    syn = {(r["allocator"], r["experiment"], r["n"]): r for r in res["synthetic"]
           if r["runs"] and not r.get("error")}

    def t_at(a, exp):  # median total ms at the largest N a measured
        ns = sorted(n for (x, e, n) in syn if x == a and e == exp)
        return (ns[-1], med(syn[(a, exp, ns[-1])]["runs"], "total_ns") / 1e6) if ns else (None, None)

    def util(a, exp, n):
        r = syn.get((a, exp, n))
        return med(r["runs"], "utilization") if r else None

    def largest(a, exp):  # the largest N at which a has a measurement
        ns = sorted(n for (x, e, n) in syn if x == a and e == exp)
        return ns[-1] if ns else None

    trees = [p for p in ("rbtree_clrs", "rbtree_unified", "rbtree_linked", "rbtree_stack", "rbtree_topdown",
                         "splay_stack", "splay_topdown") if p in have]
    rows = []
    # list_segregated against the trees on insert-delete
    n_seg, t_seg = t_at("seglist", "insert-delete")
    tt = [(p, med(syn[(p, "insert-delete", n_seg)]["runs"], "total_ns") / 1e6) for p in trees
          if (p, "insert-delete", n_seg) in syn]
    if t_seg and tt:
        slow = max(tt, key=lambda x: x[1])
        m = f"{t_seg:.1f} ms at N = {n_seg:,}: {t_seg / slow[1]:.1f}x the slowest tree (`{slow[0]}`, {slow[1]:.1f} ms)"
    else:
        m = "not measured"
    rows.append(("000 list_segregated: 17 unsorted buckets, first fit upward; the outlier of "
                 "insert-delete, \"approaches O(N^2)\"", "`seglist` (lab/seglist.c), same design; "
                 "the lab's earlier exact-size lists are `seglist_exact`", m,
                 "about 2x the slowest tree on the workshop's insert-delete script"))
    # minimum blocks and utilization
    ut = []
    for key in ("big_traces", "traces"):  # the large traces first: the seed's were large
        rows_k = res.get(key) or []
        for tr in sorted({r["trace"] for r in rows_k}):
            vals = {r["allocator"]: med(r["runs"], "utilization") for r in rows_k
                    if r["trace"] == tr and r["runs"] and not r.get("error")}
            if vals.get("rbtree_linked") and vals.get("rbtree_clrs"):
                tag = f"{tr} (large)" if key == "big_traces" else tr
                ut.append(f"{tag}: {vals['rbtree_linked'] * 100:.2f}% vs {vals['rbtree_clrs'] * 100:.2f}%")
    rows.append(("000 minimum blocks: list 32 B, trees and splays 40 B, rbtree_linked 48 B "
                 "(8-byte granule); \"rbtree_linked costs utilization\"",
                 "the same minimum blocks and granule (trees, splays, seglist), checked by "
                 "tests/lab/test_policy.c (minimum_blocks_are_the_seeds)",
                 "utilization rbtree_linked vs rbtree_clrs: " + ("; ".join(ut) if ut else "not measured"),
                 "gcc trace: 72.95% vs 76.44%"))
    info = res.get("big_info") or {}
    rows.append(("000 real-program traces: gcc, emacs, firefox, a cargo build (ltrace)",
                 "`tools/kite-lab-traces` (`make lab-traces`): kite's shim on Debian's gcc -O2 "
                 "(cc1), python3, perl and sqlite3 into build/lab-traces/",
                 ("; ".join(f"{t}: {i['ops']:,} ops" for t, i in sorted(info.items()))
                  + " (section \"Large program traces\")") if info else "not captured on this run",
                 "traced with ltrace; sizes not given; \"mostly calls to malloc() and free()\""))
    nu = largest("rbtree_clrs", "realloc")
    u = util("rbtree_clrs", "realloc", nu) if nu else None
    b = res.get("realloc_breakdown")
    rows.append(("000 realloc script utilization", "`realloc N` of tools/gen_trace.py; taken apart in "
                 "\"Why realloc utilization ...\" above",
                 (f"rbtree_clrs at N = {nu:,}: {u * 100:.1f}%" if u else "not measured")
                 + (f"; {b['cannot_stay']:,} of {b['n']:,} reallocs cannot stay in place, holes "
                    f"{100 * b['holes'] / b['span']:.1f}% of the span; with reallocs near the old size "
                    f"(`--near`) {b['near_utilization'] * 100:.1f}%, the block-overhead ceiling"
                    if b and b.get("near_utilization") else ""),
                 "98% (measured in issue #13 with the workshop's own realloc script, not in the seed)"))
    rows.append(("000 `.script` semantics (an id is a slot: a second `f` is free(NULL), `r` of "
                 "NULL is realloc(NULL), `a` of a live id leaks)", "lab/trace/trace_io.c, "
                 "docs/trace-format.md; one script per case in tests/data/scripts/",
                 "every case replays in `--check` under every allocator (tests/tools/test_replay.py)",
                 "3 of its 29 scripts needed these rules"))
    n_h, t_h = t_at("hwx", "insert-delete")
    rows.append(("001/002 hwx: one lock, one address-ordered list, first fit, 4 KiB pages, "
                 "coalescing rescans the list", "`hwx` (lab/hwx.c); the lab's earlier K&R list is "
                 "`hwx_kr`; HWX column of [seed-tables.md](seed-tables.md)",
                 (f"insert-delete {t_h:.0f} ms at N = {n_h:,} (its largest N here)" if t_h else "not measured")
                 + "; collatz tables: see seed-tables.md", "list N = 5000: 21.0 s; ivec: 1.65 s "
                 "(the seed's own hwx, preloaded into its programs)"))
    n_p, t_p = t_at("pow2", "insert-delete")
    up = util("pow2", "insert-delete", n_p) if n_p else None
    rows.append(("002 power-of-two bins 16..4096, split, coalesce touching neighbours",
                 "`pow2` (lab/pow2.c), one arena", (f"insert-delete {t_p:.1f} ms at N = {n_p:,}, "
                 f"utilization {up * 100:.1f}%" if t_p and up else "not measured"),
                 "no figure for the arena alone (its tables time whole collatz runs)"))
    bf = buddy_figures()

    def bfig(k):
        return f"{bf[k]:.3g} s" if k in bf else "not measured"
    rows.append(("003 naive per-order lists at 1 GiB (vector, doubly linked)",
                 "`lists-vector`, `lists-dlist` (lab/buddy_lists.c), `kite-buddy-bench --seed-size`",
                 f"{bfig('lists-vector')}, {bfig('lists-dlist')} (one run, busy shared machine)",
                 "2 min, 25 min"))
    rows.append(("003 plain bitmap tree (one byte per node)", "`bitmap-bytes` (lab/buddy_bitmap.c); "
                 "kite's own is `bitmap-tree`", f"{bfig('bitmap-bytes')} (kite's: {bfig('bitmap-tree')})",
                 "~0.07 s"))
    nk = largest("kite", "insert-delete")
    k = syn.get(("kite", "insert-delete", nk))
    rows.append(("000 timing per request", "TSC per request in kite-replay",
                 f"kite insert-delete p50 at N = {nk:,}: {med(k['runs'], 'p50_ns'):.1f} ns" if k else "n/a",
                 "clock() over whole ranges"))
    rows.append(("000 interval plots of a real trace", "trace-intervals.png (above)",
                 "drawn" if res.get("intervals") else "not drawn", "cargo build interval and response plots"))
    pk = (res.get("peaks") or {}).get("policies", {}).get("rbtree_linked")
    rows.append(("000 the tree picture at the heap's peak (peaks tool)", "peak-free.png (above), "
                 "`kite-replay --free-at LINE`",
                 f"insert-delete 50k: {pk['blocks']:,} free blocks, {len(pk['sizes'])} tree nodes" if pk else "not drawn",
                 "50k insert-delete red-black tree, \"notice how many duplicates\""))
    L = ["## Fidelity to the seeds\n",
         "Each item of the seeds, the lab's equivalent, and what it measures here beside the "
         "seed's own figure (different machines: compare shapes and ratios, not seconds).\n",
         "| seed item | the lab's equivalent | measured here | the seed's figure |",
         "|---|---|---|---|"]
    for a, b, c, d in rows:
        L.append(f"| {a} | {b} | {c} | {d} |")
    L.append("")
    return L


def mb(x):
    return f"{x / 1e6:.1f} MB"


def breakdown_section(b):
    """Why the realloc script's utilization is about 88% and the workshop's was 98%."""
    if not b:
        return []
    n = b["n"]
    ceiling = b["peak_live"] / b["live_blocks"]
    L = [f"### Why realloc utilization is {b['utilization'] * 100:.1f}% here and 98% in the workshop\n",
         "The measure is the seed's: peak requested bytes over the heap's span (its text does not "
         "define it further; 98% is what issue #13 measured running the workshop's own harness on "
         "its own realloc script, which is not among the seed's files). Taken apart at "
         f"N = {n:,} for `{b['policy']}` (`kite-replay --free-at {4 * n}`: the free blocks at the "
         "peak, after the reallocs):\n",
         f"- The 2N mallocs (1-500 B) lay out a span of {mb(b['initial_span'])} holding "
         f"{mb(b['initial_live'])}. The N reallocs (200-1000 B) raise the live bytes to "
         f"{mb(b['peak_live'])}, the peak: {mb(b['peak_live'] - b['initial_span'])} more than that "
         "whole span.",
         f"- {b['cannot_stay']:,} of the {n:,} reallocs ({100 * b['cannot_stay'] / n:.1f}%) ask for "
         "more than their block and both free neighbours hold together, so they cannot stay in place "
         "under any policy that leaves the other blocks where they are. They move to the top of the "
         f"heap, and the blocks they leave become {b['nholes']:,} free holes of "
         f"{mb(b['holes'])} inside the final span of {mb(b['span'])} "
         f"({100 * b['holes'] / b['span']:.1f}%), most too small for the later requests.",
         f"- Packed without holes, the live requests need {mb(b['live_blocks'])} of blocks (8-byte "
         f"header, 8-byte granule): a ceiling of {ceiling * 100:.1f}%. The holes take the rest: "
         f"{mb(b['peak_live'])} / {mb(b['span'])} = {b['utilization'] * 100:.1f}%.",
         ""]
    if b.get("near_utilization"):
        L.append("The seed describes its realloc script as \"a random distribution of calls for more "
                 "or less space, with a slight skew towards asking for more space\". The same script "
                 "with each realloc asking for -25% .. +33% of its block (`tools/gen_trace.py realloc "
                 f"{n} --near`) leaves no holes: `{b['policy']}` reaches "
                 f"{b['near_utilization'] * 100:.1f}%, the block-overhead ceiling of 1-500 B requests "
                 f"(its peak is then the 2N mallocs). So the lab's {b['utilization'] * 100:.0f}% comes from its script, whose "
                 "reallocs grow the live bytes by 20%, past the span laid out before them, not from the "
                 "measure or the policies; the workshop's 98% reads as the ceiling of a script "
                 "whose reallocs stay in place; with 8-12 bytes of overhead a block, 98% implies "
                 "requests of about 500 B on average, larger than the lab's 1-500 B (an inference: "
                 "its sizes are not known here). The lab keeps its script: it is the one that "
                 "exercises coalescing on both sides and moving.\n")
    return L


TREES = ("rbtree_clrs", "rbtree_unified", "rbtree_linked", "rbtree_stack", "rbtree_topdown",
         "splay_stack", "splay_topdown")


def big_section(res, labels, charts, trace_cell):
    """docs/lab.md's section on the large program traces (tools/kite-lab-traces)."""
    big = res.get("big_traces") or []
    if not big:
        return []
    info = res.get("big_info", {})
    names = sorted({r["trace"] for r in big})
    reps = max((len(r["runs"]) for r in big), default=0)
    L = ["## Large program traces\n",
         "Real programs as the seed traced gcc, emacs, firefox and a cargo build (with ltrace): "
         "captured by `tools/kite-lab-traces` (`make lab-traces`) with kite's shim into "
         "`build/lab-traces/`, kept out of git for their size (`make lab-traces` regenerates "
         f"them; the programs and inputs are in that script), each replayed whole, {reps} times per allocator; a run over "
         f"{BIG_TIMEOUT_S} s stops that allocator on the large traces.\n",
         "| trace | ops | malloc+calloc / free / realloc | size | captured command |",
         "|---|---:|---:|---:|---|"]
    for t in names:
        i = info.get(t, {})
        cmd = (i.get("command") or "").replace(ROOT + os.sep, "")  # the worktree's own path
        cmd = cmd if len(cmd) <= 90 else cmd[:87] + "..."
        L.append(f"| {t} | {i.get('ops', 0):,} | {i.get('mallocs', 0):,} / {i.get('frees', 0):,} / "
                 f"{i.get('reallocs', 0):,} | {i.get('bytes', 0) / 2**20:,.0f} MiB | `{cmd}` |")
    L.append("")
    for c in ("big-traces-response.png", "big-traces-utilization.png", "big-traces-rss.png"):
        if c in charts:
            L.append(f"![{c}](lab/{c})\n")
    row = {(r["allocator"], r["trace"]): r for r in big}
    L.extend(grid(labels, names, [f"{t} avg ns [min–max] (p99) / util. / RSS KiB" for t in names],
                  lambda a, t: row.get((a, t)), trace_cell))
    L.append("")
    # beside what the seed says of its traces
    L.append("What the seed says of its traces, against these:\n")
    for t in names:
        i = info.get(t, {})
        ut = {a: med(row[(a, t)]["runs"], "utilization") for a in TREES
              if (a, t) in row and row[(a, t)]["runs"]}
        ut = {a: u for a, u in ut.items() if u is not None}
        parts = []
        if i.get("ops"):
            parts.append(f"realloc is {100 * i['reallocs'] / i['ops']:.1f}% of its ops")
        if ut:
            lo, hi = min(ut, key=ut.get), max(ut, key=ut.get)
            parts.append(f"tree and splay utilization {ut[lo] * 100:.2f}% (`{lo}`) to "
                         f"{ut[hi] * 100:.2f}% (`{hi}`)")
            if "rbtree_linked" in ut and "rbtree_clrs" in ut:
                parts.append(f"`rbtree_linked` {ut['rbtree_linked'] * 100:.2f}% vs `rbtree_clrs` "
                             f"{ut['rbtree_clrs'] * 100:.2f}%")
        L.append(f"- `{t}`: " + "; ".join(parts) + ".")
    L.append("")
    costs, free_ = [], []
    for t in names:
        a, b = row.get(("rbtree_linked", t)), row.get(("rbtree_clrs", t))
        if a and b and a["runs"] and b["runs"]:
            d = (med(b["runs"], "utilization") - med(a["runs"], "utilization")) * 100
            if d >= 0.5:
                costs.append(f"`{t}` {d:.1f}")
            else:
                free_.append(f"`{t}`")
    others = [p for p in TREES if p != "rbtree_linked"]
    agree = 0.0
    for t in names:
        us = [med(row[(p, t)]["runs"], "utilization") for p in others
              if (p, t) in row and row[(p, t)]["runs"]]
        us = [u for u in us if u is not None]
        if us:
            agree = max(agree, (max(us) - min(us)) * 100)
    shares = {t: 100 * info[t]["reallocs"] / info[t]["ops"] for t in names if info.get(t, {}).get("ops")}
    L.append("The seed found its traces \"mostly calls to malloc() and free()\", with few reallocs, "
             "and the utilization of most of its allocators \"the same or very similar\", "
             "`rbtree_linked` paying for its larger node (its gcc trace: 72.95% against 76.44% "
             "for the other trees, 3.5 points). Here: " +
             (f"`rbtree_linked` loses utilization against `rbtree_clrs` on {', '.join(costs)} "
              "points (the seed's finding, on these traces)" if costs else
              "`rbtree_linked` loses no utilization to speak of against `rbtree_clrs`") +
             (f", and less than half a point on {', '.join(free_)}" if free_ and costs else "") +
             f"; the other trees and splays, all on 40-byte blocks, differ by at most {agree:.2f} points. "
             + (f"Reallocs are {min(shares.values()):.1f}% to {max(shares.values()):.1f}% of the ops "
                f"(`{max(shares, key=shares.get)}` the most)." if shares else "") + "\n")
    skipped = [r for r in big if r.get("skipped")]
    if skipped:
        L.append("*skipped* in this table: " + "; ".join(
            f"{r['allocator']} on `{r['trace']}` ({r['skipped']})" for r in skipped) + ".\n")
    return L


def write_report(res, path, charts):
    labels = res["allocators"]
    ns = res["ns"]
    L = []
    L.append("# The lab's seed experiments\n")
    L.append(f"Generated by `{res['command']}` on {res['date']} in {res['elapsed_s']:.0f} s "
             f"({res['machine']['cpu']}, {res['machine']['cores']} cores, Linux "
             f"{res['machine']['kernel']}, {res['machine']['libc']}). Raw numbers: "
             "[lab/results.json](lab/results.json); charts redrawn by `tools/plot.py`.\n")
    if res.get("quick") or res.get("repeats", 1) < 2:
        L.append("> **Not decisive.** This is a quick run (N = " + ", ".join(f"{n:,}" for n in ns)
                 + f", {res.get('repeats', 1)} run each): there is no spread to judge by, and the "
                 "answers below flip from one quick run to the next. Run `make lab` for answers "
                 "with their spread.\n")
    L.append("## What is measured\n")
    L.append("The seed's two timing scripts, generated for each N by `tools/gen_trace.py` (seed "
             f"{res['seed']}) and replayed by `build/kite-replay --json -r START END`:\n")
    L.append("- **insert-delete N**: 2N mallocs of 1-500 bytes, then `free` of every other block "
             "(N insertions into the free structure, no coalescing because both neighbours stay "
             "allocated), then N mallocs of 1-500 bytes (N removals). Timed: the N frees and N "
             "mallocs, lines 2N+1 .. 4N.")
    L.append("- **realloc N**: the same 2N mallocs and N frees, then `realloc` of each of the N "
             "remaining blocks to 200-1000 bytes; each one meets a free neighbour on both sides. "
             "Timed: the N reallocs, lines 3N+1 .. 4N.\n")
    L.append("Every request in a range is timed on its own (the time-stamp counter, read with "
             "`lfence` on both sides and calibrated against `CLOCK_MONOTONIC`, around the "
             "allocator call only; the cost of the read pair, calibrated at start, is subtracted, "
             "so a 10 ns request reads about 10 ns, not 0). A request during which the replay thread was preempted "
             "(getrusage's involuntary context switches moved) is dropped from the samples: on "
             "this shared machine such a sample holds milliseconds of another process. *Average "
             "response* is the mean of the kept samples, *time* that mean times the N requests "
             "of the range. N = " + ", ".join(f"{n:,}" for n in ns) +
             f"; runs at N <= 100,000 are repeated {res['repeats']} times: tables show the median "
             "and, in brackets, the minimum and maximum of the repeats. The N points stop at 1,000,000, as the seed's did. "
             "A policy that grows quadratically is stopped where its next N would take over "
             f"{SKIP_S} s a run, so how many points it gets depends on the machine's load; this run "
             f"took {res.get('elapsed_s', 0) / 60:.0f} minutes in all.\n")
    L.append("Allocators: the lab policies (single-threaded reference designs over one heap "
             "region), kite (`kite_malloc`...), glibc's malloc, and the installed peers preloaded "
             "under `--malloc`. Two footprints, kept apart: **utilization** (lab policies only) = "
             "peak live requested bytes / the heap's span (highest block end minus lowest block "
             "start), the seed's measure; **peak RSS growth** (every allocator) = the process's "
             "resident high-water mark over its resident size at the start of the replay, every "
             "block touched once a page outside the timed calls. Only the second compares "
             "policies with real mallocs; a real malloc gets no utilization, since RSS counts "
             "pages it may have held before the replay.\n")
    L.append("## Insert / delete\n")
    for c in ("insert-delete-time.png", "insert-delete-response.png"):
        if c in charts:
            L.append(f"![{c}](lab/{c})\n")
    L.append("Time for the N frees and N mallocs (ms):\n")
    L.append(table_of(res, "insert-delete", "total_ns", 1e-6, "{:.2f}", ns, labels) + "\n")
    L.append("Average response time (ns per request):\n")
    L.append(table_of(res, "insert-delete", "avg_ns", 1, "{:.0f}", ns, labels) + "\n")
    L.append("## Realloc (coalescing)\n")
    for c in ("realloc-time.png", "realloc-response.png"):
        if c in charts:
            L.append(f"![{c}](lab/{c})\n")
    L.append("Time for the N reallocs (ms):\n")
    L.append(table_of(res, "realloc", "total_ns", 1e-6, "{:.2f}", ns, labels) + "\n")
    L.append("Average response time (ns per request):\n")
    L.append(table_of(res, "realloc", "avg_ns", 1, "{:.0f}", ns, labels) + "\n")
    nmax = max((r["n"] for r in res["synthetic"] if r["runs"]), default=max(ns))  # largest N measured
    L.append(f"## Latency percentiles and utilization at N = {nmax:,}\n")
    L.append("| allocator | insert-delete p50 / p90 / p99 / max (ns) | realloc p50 / p90 / p99 / max (ns) "
             "| utilization insert-delete | utilization realloc | peak RSS growth insert-delete (KiB) "
             "| peak RSS growth realloc (KiB) |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    rows = {(r["allocator"], r["experiment"]): r for r in res["synthetic"] if r["n"] == nmax}
    for a in labels:
        cells = []
        for e in ("insert-delete", "realloc"):
            r = rows.get((a, e))
            if not r or r.get("error") or not r["runs"]:
                cells.append("" if not r else "skipped" if r.get("skipped") else "failed")
            else:
                cells.append(" / ".join(f"{med(r['runs'], k):.0f}" for k in ("p50_ns", "p90_ns", "p99_ns", "max_ns")))
        for e in ("insert-delete", "realloc"):
            r = rows.get((a, e))
            u = med(r["runs"], "utilization") if r and r["runs"] else None
            cells.append(f"{u * 100:.1f}%" if u is not None else "–")
        for e in ("insert-delete", "realloc"):
            r = rows.get((a, e))
            m = med(r["runs"], "rss_bytes") if r and r["runs"] else None
            cells.append(f"{m / 1024:,.0f}" if m else "n/a")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    L.append("")
    if "utilization.png" in charts:
        L.append("![utilization.png](lab/utilization.png)\n")
    L.extend(breakdown_section(res.get("realloc_breakdown")))
    L.append("## Captured programs\n")
    L.append("The traces in `tests/data/traces/` (captured with `tools/kite-trace`, see "
             "[trace-format.md](trace-format.md)), each replayed whole.\n")
    for c in ("traces-response.png", "traces-utilization.png"):
        if c in charts:
            L.append(f"![{c}](lab/{c})\n")
    traces = sorted({r["trace"] for r in res["traces"]})
    trow = {(r["allocator"], r["trace"]): r for r in res["traces"]}

    def trace_cell(r):
        u = med(r["runs"], "utilization")
        m = med(r["runs"], "rss_bytes")
        sp = spread_of(r["runs"], "avg_ns")
        avg = f"{med(r['runs'], 'avg_ns'):.0f}" + (f" [{sp[0]:.0f}–{sp[1]:.0f}]" if sp and len(r["runs"]) > 1 else "")
        return (f"{avg} ({med(r['runs'], 'p99_ns'):.0f}) / " + (f"{u * 100:.1f}%" if u is not None else "–")
                + (f" / {m / 1024:,.0f}" if m else ""))
    L.extend(grid(labels, traces, [f"{t} avg ns [min–max] (p99) / util. / RSS KiB" for t in traces],
                  lambda a, t: trow.get((a, t)), trace_cell))
    L.append("")
    L.extend(big_section(res, labels, charts, trace_cell))
    skips = [r for r in res["synthetic"] if r.get("skipped")]
    if skips:
        who = sorted({r["allocator"] for r in skips})
        L.append("*skipped*: " + ", ".join(f"`{w}`" for w in who) + " grew quadratically here; its runs "
                 "stop at the last N whose successor would take over " + str(SKIP_S) + " s a run (" +
                 "; ".join(f"{r['allocator']} {r['experiment']} N={r['n']:,}: {r['skipped']}"
                           for r in skips[:4]) + (" ..." if len(skips) > 4 else "") + ").\n")
    fails = [r for r in res["synthetic"] + res["traces"] + res.get("big_traces", []) if r.get("error")]
    if fails:
        L.append("Failed runs (recorded, not timed):\n")
        for r in fails:
            L.append(f"- {r['allocator']} on {r.get('experiment', r.get('trace'))} "
                     f"{r.get('n', '')}: {r['error']}")
        L.append("")
    pk = res.get("peaks")
    if pk and pk.get("policies"):
        L.append("### The free structure at the heap's peak\n")
        L.append(f"As the seed's picture of its tree after 50,000 insert-delete requests: the free "
                 f"blocks each policy holds at line {pk['line']:,} of insert-delete {pk['n']:,} (after "
                 f"the {pk['n']:,} frees, before the mallocs), from `kite-replay --free-at` (the "
                 "policy's own heap walk).\n")
        for pol, d in pk["policies"].items():
            k = len(d["sizes"])
            if pol == "seglist":
                L.append(f"- `{pol}`: {d['blocks']:,} free blocks in its 17 unsorted lists; the "
                         "picture shows how long each list is, which a first-fit search walks.")
            else:
                L.append(f"- `{pol}`: {d['blocks']:,} free blocks but only {k} distinct sizes: a tree "
                         f"of {k} nodes, the other {d['blocks'] - k:,} blocks on duplicate lists (the "
                         "seed's case for duplicate lists).")
        L.append("")
        if "peak-free.png" in charts:
            L.append("![peak-free.png](lab/peak-free.png)\n")
    if res.get("intervals"):
        L.append("### Over time, on one real trace\n")
        L.append(f"`{res['intervals']['trace']}` cut into {len(res['intervals']['ranges'])} equal "
                 "line intervals, each timed on its own (`-r` ranges of one replay; average ns "
                 "per request in each interval, median of the repeats), as the seed's interval "
                 "plots of its cargo trace:\n")
        if "trace-intervals.png" in charts:
            L.append("![trace-intervals.png](lab/trace-intervals.png)\n")
    L.append("## The seed's four questions, answered from these measurements\n")
    L.append("Each answer compares total time over the timed ranges (median of the repeats), as a "
             "geometric mean of the per-N ratios; differences under 5% are called no difference, "
             "since this shared 2-core machine does not resolve less. Beside it, the spread the "
             "repeats allow: the geometric mean of min(a)/max(b) and of max(a)/min(b) over the "
             "N; where that interval reaches equal time (within 5%) the comparison is called "
             "undecided.\n")
    for i, (q, a) in enumerate(questions(res), 1):
        L.append(f"{i}. *{q}*\n\n   {a}\n")
    L.extend(fidelity(res))
    L.append("## Reproducing\n")
    L.append("```sh\nmake lab                                   # this whole page\n"
             "tools/gen_trace.py insert-delete 100000 -o id.script   # prints -r 200001 400000\n"
             "build/kite-replay --policy rbtree_clrs -r 200001 400000 id.script\n"
             "tools/plot.py docs/lab/results.json docs/lab # redraw the charts\n"
             "make lab-traces   # capture the large program traces into build/lab-traces/ (then make lab)\n```\n")
    with open(path, "w") as f:
        f.write("\n".join(L))


# ---------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(prog="lab.py", description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), metavar="DIR",
                    help="build folder with kite-replay and the preloads (default: build/)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"), metavar="DIR",
                    help="where lab.md and lab/ are written (default: docs/)")
    ap.add_argument("--ns", type=lambda v: [int(x) for x in v.split(",")], default=DEFAULT_NS,
                    metavar="N,N,...", help="the N of the synthetic experiments")
    ap.add_argument("--repeats", type=int, default=3, metavar="K",
                    help="repetitions of the runs at N <= 100,000 (default 3)")
    ap.add_argument("--no-peers", action="store_true", help="leave out the preloaded peers")
    ap.add_argument("--big-traces", default=None, metavar="DIR",
                    help="the large program traces to replay whole (default: build/lab-traces, "
                         "written by tools/kite-lab-traces, when it exists; '' for none)")
    ap.add_argument("--quick", action="store_true", help="small N, one repetition")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite lab.md and the charts from results.json")
    a = ap.parse_args(argv)
    build, out, ns, repeats = a.build, a.out, a.ns, a.repeats
    peers, report_only, seed = not a.no_peers, a.report_only, 42
    quick = a.quick
    if quick:
        ns, repeats = QUICK_NS, 1
    charts_dir = os.path.join(out, "lab")
    if report_only:  # redraw the page and charts from the last results
        import plot
        res = plot.load_results(os.path.join(charts_dir, "results.json"))
        replay = os.path.join(build, "kite-replay")
        changed = False
        if "peaks" not in res and os.path.exists(replay):  # results from before the peaks view
            os.makedirs(os.path.join(build, "lab"), exist_ok=True)
            res["peaks"] = peaks(replay, os.path.join(build, "lab"), res.get("seed", seed))
            changed = True
        if "realloc_breakdown" not in res and os.path.exists(replay):  # from before it
            os.makedirs(os.path.join(build, "lab"), exist_ok=True)
            res["realloc_breakdown"] = realloc_breakdown(replay, os.path.join(build, "lab"),
                                                         res.get("seed", seed))
            changed = True
        if changed:
            with open(os.path.join(charts_dir, "results.json"), "w") as f:
                f.write(json.dumps({"command": res["command"]}) + "\n")
                json.dump(res, f, indent=1)
        write_report(res, os.path.join(out, "lab.md"), plot.draw_all(res, charts_dir))
        return 0
    replay = os.path.join(build, "kite-replay")
    if not os.path.exists(replay):
        print(f"lab.py: {replay} not found; run make first", file=sys.stderr)
        return 2
    work = os.path.join(build, "lab")
    os.makedirs(work, exist_ok=True)
    charts_dir = os.path.join(out, "lab")
    os.makedirs(charts_dir, exist_ok=True)
    t0 = time.time()
    allocs = allocators(replay, peers)
    data_dir = os.path.join(ROOT, "tests", "data", "traces")
    traces = sorted(f for f in os.listdir(data_dir) if f.endswith(".trace") or f.endswith(".script"))
    big_dir = os.path.join(build, "lab-traces") if a.big_traces is None else a.big_traces
    big = sorted(f for f in os.listdir(big_dir) if f.endswith(".trace")) \
        if big_dir and os.path.isdir(big_dir) and not quick else []
    jobs = []
    for n in ns:
        for exp in ("insert-delete", "realloc"):
            for label, args, env in allocs:
                jobs.append(("syn", exp, n, label, args, env))
    for t in traces:
        for label, args, env in allocs:
            jobs.append(("trace", t, None, label, args, env))
    for t in big:
        for label, args, env in allocs:
            jobs.append(("big", t, None, label, args, env))
    res = {"command": "tools/lab.py " + " ".join(shlex.quote(a) for a in argv), "date":
           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine(), "ns": ns, "repeats": repeats, "seed": seed,
           "allocators": [a[0] for a in allocs], "synthetic": [], "traces": [], "quick": quick,
           "big_traces": [], "big_info": {t: trace_info(os.path.join(big_dir, t)) for t in big}}
    bar = tqdm(total=len(jobs), unit="run", desc="lab") if tqdm else None
    done = 0
    last = {}  # (experiment, allocator) -> (N, wall seconds of one run)
    big_out = {}  # allocator -> the large trace it ran out of time on
    for kind, what, n, label, args, env in jobs:
        if kind == "big" and label in big_out:
            # a policy too slow for one large trace (hwx's list walk) is not run on the others
            res["big_traces"].append({"trace": what, "allocator": label, "runs": [],
                                      "skipped": f"over {BIG_TIMEOUT_S} s a run on {big_out[label]}"})
            done += 1
            if bar:
                bar.update(1)
            continue
        prev = last.get((what, label)) if kind == "syn" else None
        if prev and prev[1] * (n / prev[0]) ** 2 > SKIP_S:
            # a policy that is quadratic here (hwx's list walk) would take hours at 1M
            res["synthetic"].append({"experiment": what, "n": n, "allocator": label, "runs": [],
                                     "skipped": f"projected over {SKIP_S} s per run from "
                                                f"{prev[1]:.1f} s at N = {prev[0]:,}"})
            done += 1
            if bar:
                bar.update(1)
            continue
        if kind == "syn":
            path, rng = generate(what, n, seed, work)
            reps = repeats if n <= 100000 else 1
            row = {"experiment": what, "n": n, "allocator": label, "range": list(rng), "runs": []}
        else:
            path, rng = os.path.join(data_dir if kind == "trace" else big_dir, what), None
            reps = repeats
            row = {"trace": what, "allocator": label, "runs": []}
        for _ in range(reps):
            w0 = time.time()
            r, err = run_replay(replay, args, env, path, rng,
                                timeout=BIG_TIMEOUT_S if kind == "big" else 150)
            if err and kind == "big" and err.startswith("timed out"):
                big_out[label] = what
            if kind == "syn":
                last[(what, label)] = (n, time.time() - w0)
            if err:
                row["error"] = err
                row["runs"] = []
                break
            row["runs"].append(r)
        res[{"syn": "synthetic", "trace": "traces", "big": "big_traces"}[kind]].append(row)
        done += 1
        if bar:
            bar.set_postfix_str(f"{label} {what} {n or ''}")
            bar.update(1)
        elif done % 10 == 0 or done == len(jobs):
            print(f"lab: {done}/{len(jobs)} runs", file=sys.stderr)
    if bar:
        bar.close()
    # the per-interval view of the longest captured trace: 10 equal line ranges, one replay
    if traces:
        longest = max(traces, key=lambda t: sum(1 for _ in open(os.path.join(data_dir, t))))
        nl = sum(1 for _ in open(os.path.join(data_dir, longest)))
        k = 10
        cuts = [(1 + nl * i // k, nl * (i + 1) // k) for i in range(k)]
        iv = {"trace": longest, "ranges": cuts, "rows": {}}
        for label, args, env in allocs:
            runs = []
            for _ in range(repeats):
                r, err = run_replay(replay, args, env, os.path.join(data_dir, longest), intervals=cuts)
                if err:
                    break
                runs.append(r["intervals"])
            if runs:
                iv["rows"][label] = runs
        res["intervals"] = iv
    res["peaks"] = peaks(replay, work, seed)
    res["realloc_breakdown"] = realloc_breakdown(replay, work, seed)
    res["elapsed_s"] = time.time() - t0
    with open(os.path.join(charts_dir, "results.json"), "w") as f:
        f.write(json.dumps({"command": res["command"]}) + "\n")  # the command line first
        json.dump(res, f, indent=1)
    import plot  # matplotlib: only needed from here on
    charts = plot.draw_all(res, charts_dir)
    write_report(res, os.path.join(out, "lab.md"), charts)
    print(f"lab: wrote {os.path.join(out, 'lab.md')} and {len(charts)} charts in {res['elapsed_s']:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
