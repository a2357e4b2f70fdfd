#!/usr/bin/env python3
"""lab.py -- the lab's seed experiments (`make lab`): writes docs/lab.md, docs/lab/*.png and the
raw results docs/lab/results.json.

    tools/lab.py [--build DIR] [--out DIR] [--ns N,N,...] [--repeats K] [--no-peers] [--quick]
    tools/lab.py --report-only [--out DIR]      (rewrite lab.md and the charts from results.json)

For each N it generates the seed's two timing scripts (tools/gen_trace.py, seeded):
  insert-delete N   2N mallocs, N frees of every other block, N mallocs; timed: the N frees
                    and N mallocs (lines 2N+1 .. 4N)
  realloc N         2N mallocs, N frees of every other block, N reallocs to 200-1000 bytes
                    (each coalesces with both free neighbours); timed: the reallocs (3N+1 .. 4N)
and replays each with build/kite-replay --json -r START END on every allocator: every lab
policy, kite, glibc's malloc, and each installed peer (jemalloc, tcmalloc, mimalloc,
tbbmalloc, mimalloc3 from .venv) preloaded under --malloc. Then it replays each captured program trace in
tests/data/traces/ whole. Runs at N <= 100,000 are repeated (--repeats, default 3) and the
median is reported; larger N run once. A run that fails is recorded as a failure with its
message, never as a time. Default N: 5k 10k 25k 50k 100k 250k 500k 1M -- the seed's range,
sized so the whole job stays under ~10 minutes on a 2-core machine.
"""
import argparse
import datetime
import glob
import json
import math
import os
import platform
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


def run_replay(replay, args, env_extra, path, rng=None, timeout=150):
    cmd = [replay, "--json"] + args + (["-r", str(rng[0]), str(rng[1])] if rng else []) + [path]
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
    return {k: rg[k] for k in ("requests", "samples", "preempted", "total_ns", "avg_ns", "p50_ns", "p90_ns",
                               "p99_ns", "max_ns")} | {
        "peak_live_bytes": j["peak_live_bytes"], "footprint_bytes": j["footprint_bytes"],
        "utilization": j["utilization"] if j["footprint_bytes"] else None}, None


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


def table_of(res, exp, key, scale, fmt, ns, labels):
    rows = {(r["allocator"], r["n"]): r for r in res["synthetic"] if r["experiment"] == exp}

    def cell(r):
        v = med(r["runs"], key)
        return fmt.format(v * scale) if v is not None else "n/a"
    return "\n".join(grid(labels, ns, [f"{n:,}" for n in ns],
                           lambda a, n: rows.get((a, n)), cell))


def ratio(res, exp, a, b):
    """Geometric mean over N of time(a) / time(b), and the per-N ratios; None if unmeasured."""
    t = {}
    for r in res["synthetic"]:
        if r["experiment"] == exp and not r.get("error") and r["allocator"] in (a, b):
            t[(r["allocator"], r["n"])] = med(r["runs"], "total_ns")
    rs = [(n, t[(a, n)] / t[(b, n)]) for n in res["ns"] if t.get((a, n)) and t.get((b, n))]
    if not rs:
        return None, []
    return math.exp(sum(math.log(x) for _, x in rs) / len(rs)), rs


def compare(res, a, b):
    """One sentence comparing a with b on both experiments."""
    have = set(res["allocators"])
    if a not in have or b not in have:
        missing = " and ".join(x for x in (a, b) if x not in have)
        return None, f"not measured here: {missing} is not among the policies this build has"
    parts = []
    verdicts = []
    for exp in ("insert-delete", "realloc"):
        g, rs = ratio(res, exp, a, b)
        if g is None:
            continue
        big = [x for n, x in rs if n >= 100000] or [x for _, x in rs]
        gb = math.exp(sum(math.log(x) for x in big) / len(big))
        if abs(g - 1) < 0.05:
            word = "the same time as (within 5%)"
        elif g > 1:
            word = f"{(g - 1) * 100:.0f}% more time than"
        else:
            word = f"{(1 - g) * 100:.0f}% less time than"
        parts.append(f"On {exp}, `{a}` takes {word} `{b}` (geometric mean over all N; "
                     f"{gb:.2f}x at N >= 100k)")
        verdicts.append(g)
    return verdicts, " ".join(p + "." for p in parts)


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


def questions(res):
    out = []
    v, s = compare(res, "rbtree_unified", "rbtree_clrs")
    out.append(("Is there any cost or benefit to uniting the left and right cases of tree based "
                "allocators into one case with an array of pointers?",
                f"**Measured: {answer(v)}.** `rbtree_unified` is the CLRS tree with `links[2]` "
                f"instead of `left`/`right`. {s} (The seed found the array slightly slower and "
                "kept it for readability.)"))
    v, s = compare(res, "rbtree_linked", "rbtree_clrs")
    extra = []
    for other in ("rbtree_stack", "rbtree_topdown"):
        if other in res["allocators"]:
            _, s2 = compare(res, other, "rbtree_clrs")
            extra.append(s2)
    out.append(("Does storing duplicate node sizes in a linked list benefit performance by trimming "
                "the tree?",
                f"**Measured: {answer(v)}.** `rbtree_linked` is the CLRS tree plus a list of "
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
        a3 = answer(vs)
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
        body = (f"**Measured: {answer(vs)}** (less time means top-down is faster). " + " ".join(txt)
                + " (The seed called it too close to answer definitively.)")
    else:
        body = ("**Not measured in this build:** it needs the top-down and bottom-up pairs "
                "(`rbtree_topdown` vs `rbtree_stack`, `splay_topdown` vs `splay_stack`), which "
                "`kite-replay --list` does not show yet; rerun `make lab` once they are built.")
    out.append(("Does a top-down approach to fixing a Red Black or Splay Tree reduce the number of "
                "O(lgN) operations enough to make a difference?", body))
    return out


def write_report(res, path, charts):
    labels = res["allocators"]
    ns = res["ns"]
    L = []
    L.append("# The lab's seed experiments\n")
    L.append(f"Generated by `{res['command']}` on {res['date']} in {res['elapsed_s']:.0f} s "
             f"({res['machine']['cpu']}, {res['machine']['cores']} cores, Linux "
             f"{res['machine']['kernel']}, {res['machine']['libc']}). Raw numbers: "
             "[lab/results.json](lab/results.json); charts redrawn by `tools/plot.py`.\n")
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
    L.append("Every request in a range is timed on its own (`clock_gettime(CLOCK_MONOTONIC)` "
             "around the allocator call only; the cost of the clock read pair, calibrated at "
             "start, is subtracted). A request during which the replay thread was preempted "
             "(getrusage's involuntary context switches moved) is dropped from the samples: on "
             "this shared machine such a sample holds milliseconds of another process. *Average "
             "response* is the mean of the kept samples, *time* that mean times the N requests "
             "of the range. N = " + ", ".join(f"{n:,}" for n in ns) +
             f"; runs at N <= 100,000 are repeated {res['repeats']} times and the median is "
             "shown. The N points stop at 1,000,000, as the seed's did, so the job stays near "
             "10 minutes on a 2-core machine.\n")
    L.append("Allocators: the lab policies (single-threaded reference designs over one heap "
             "region), kite (`kite_malloc`...), glibc's malloc, and the installed peers preloaded "
             "under `--malloc`. Utilization = peak live requested bytes / peak footprint: for a "
             "lab policy the highest block end minus the lowest block start, for a real malloc "
             "the peak RSS growth during the replay (every block is touched once a page).\n")
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
    nmax = max(ns)
    L.append(f"## Latency percentiles and utilization at N = {nmax:,}\n")
    L.append("| allocator | insert-delete p50 / p90 / p99 / max (ns) | realloc p50 / p90 / p99 / max (ns) "
             "| utilization insert-delete | utilization realloc |")
    L.append("|---|---:|---:|---:|---:|")
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
            cells.append(f"{u * 100:.1f}%" if u is not None else "n/a")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
    L.append("")
    if "utilization.png" in charts:
        L.append("![utilization.png](lab/utilization.png)\n")
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
        return (f"{med(r['runs'], 'avg_ns'):.0f} ({med(r['runs'], 'p99_ns'):.0f}) / "
                + (f"{u * 100:.1f}%" if u is not None else "n/a"))
    L.extend(grid(labels, traces, [f"{t} avg ns (p99) / util." for t in traces],
                  lambda a, t: trow.get((a, t)), trace_cell))
    L.append("")
    skips = [r for r in res["synthetic"] if r.get("skipped")]
    if skips:
        who = sorted({r["allocator"] for r in skips})
        L.append("*skipped*: " + ", ".join(f"`{w}`" for w in who) + " grew quadratically here; its runs "
                 "stop at the last N whose successor would take over " + str(SKIP_S) + " s a run (" +
                 "; ".join(f"{r['allocator']} {r['experiment']} N={r['n']:,}: {r['skipped']}"
                           for r in skips[:4]) + (" ..." if len(skips) > 4 else "") + ").\n")
    fails = [r for r in res["synthetic"] + res["traces"] if r.get("error")]
    if fails:
        L.append("Failed runs (recorded, not timed):\n")
        for r in fails:
            L.append(f"- {r['allocator']} on {r.get('experiment', r.get('trace'))} "
                     f"{r.get('n', '')}: {r['error']}")
        L.append("")
    L.append("## The seed's four questions, answered from these measurements\n")
    L.append("Each answer compares total time over the timed ranges (median of the repeats), as a "
             "geometric mean of the per-N ratios; differences under 5% are called no difference, "
             "since this shared 2-core machine does not resolve less.\n")
    for i, (q, a) in enumerate(questions(res), 1):
        L.append(f"{i}. *{q}*\n\n   {a}\n")
    L.append("## Reproducing\n")
    L.append("```sh\nmake lab                                   # this whole page\n"
             "tools/gen_trace.py insert-delete 100000 -o id.script   # prints -r 200001 400000\n"
             "build/kite-replay --policy rbtree_clrs -r 200001 400000 id.script\n"
             "tools/plot.py docs/lab/results.json docs/lab # redraw the charts\n```\n")
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
    ap.add_argument("--quick", action="store_true", help="small N, one repetition")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite lab.md and the charts from results.json")
    a = ap.parse_args(argv)
    build, out, ns, repeats = a.build, a.out, a.ns, a.repeats
    peers, report_only, seed = not a.no_peers, a.report_only, 42
    if a.quick:
        ns, repeats = QUICK_NS, 1
    charts_dir = os.path.join(out, "lab")
    if report_only:  # redraw the page and charts from the last results
        import plot
        res = plot.load_results(os.path.join(charts_dir, "results.json"))
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
    jobs = []
    for n in ns:
        for exp in ("insert-delete", "realloc"):
            for label, args, env in allocs:
                jobs.append(("syn", exp, n, label, args, env))
    for t in traces:
        for label, args, env in allocs:
            jobs.append(("trace", t, None, label, args, env))
    res = {"command": "tools/lab.py " + " ".join(shlex.quote(a) for a in argv), "date":
           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine(), "ns": ns, "repeats": repeats, "seed": seed,
           "allocators": [a[0] for a in allocs], "synthetic": [], "traces": []}
    bar = tqdm(total=len(jobs), unit="run", desc="lab") if tqdm else None
    done = 0
    last = {}  # (experiment, allocator) -> (N, wall seconds of one run)
    for kind, what, n, label, args, env in jobs:
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
            path, rng = os.path.join(data_dir, what), None
            reps = repeats
            row = {"trace": what, "allocator": label, "runs": []}
        for _ in range(reps):
            w0 = time.time()
            r, err = run_replay(replay, args, env, path, rng)
            if kind == "syn":
                last[(what, label)] = (n, time.time() - w0)
            if err:
                row["error"] = err
                row["runs"] = []
                break
            row["runs"].append(r)
        res["synthetic" if kind == "syn" else "traces"].append(row)
        done += 1
        if bar:
            bar.set_postfix_str(f"{label} {what} {n or ''}")
            bar.update(1)
        elif done % 10 == 0 or done == len(jobs):
            print(f"lab: {done}/{len(jobs)} runs", file=sys.stderr)
    if bar:
        bar.close()
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
