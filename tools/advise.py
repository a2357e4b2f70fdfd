"""advise -- "which allocator suits my program?": the engine of `tools/kite-lab advise`.

    tools/kite-lab advise [-o REPORT.html] [--repeats N] ... -- PROGRAM ARGS...
    tools/kite-lab advise --trace FILE [-o REPORT.html] ...
    tools/kite-lab advise --profile FILE [-o REPORT.html] ...

1. Capture: PROGRAM runs once under build/libkite-trace.so (tools/kite-trace) with
   KITE_TRACE_SITES=1, so every allocation carries its call site and the trace ends with the
   process's executable mappings (docs/trace-format.md). --trace analyses a trace already
   captured instead (sites and leaks by site only when it has them).
2. Analyse the trace in one pass: requests by kind and thread, live bytes after every
   request, request sizes, object lifetimes (in requests, from the first allocation to the
   free; a realloc continues its object), blocks never freed, allocation sites.
3. Replay it with build/kite-replay --json under every allocator installed (kite, glibc and
   the peers bench/run.py discovers, plus mimalloc 3 when .venv has cmeel-mimalloc) and every
   lab policy (kite-replay --list), --repeats times round robin, so a slow drift of the
   machine hits all alike.
4. Write one self-contained HTML file: inline SVG charts, the numbers also as a JSON block
   (<script type="application/json" id="kite-advise-data">), no script, no external asset.

For a program too big to trace, --profile reads a heap profile instead (KITE_PROF's file,
pprof's format; --trace given a profile reads it as one too): its sampled sites, by bytes
allocated and by bytes live, in the same kind of report, without replays (a profile has
the sites and sizes of a sample, not the order of the requests).

Standard library only (binutils' addr2line and nm symbolize the sites when installed).
"""
import datetime as _dt
import html
import importlib.util
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import kiteprof  # noqa: E402
import kitesites  # noqa: E402
import kitewindow  # noqa: E402
from kitecommon import machine_info, median  # noqa: E402

KITE_COLOR = "#e8590c"
REAL_COLOR = "#4c6e9e"
POLICY_COLOR = "#7fa7a0"
SERIES_COLOR = "#3b6ea5"
# Each chart's frame has its own colour, a mauve grey that differs only in blue: invisible as
# a difference to a reader, exact in a screenshot (tests/tools/test_advise.py finds each chart
# by it). No colour drawn on the page, nor a blend of one with white or with text, has red >
# blue > green like these.
FRAME_BASE = (0xd2, 0xc3, 0xcb)


KIND_NAMES = dict(m="malloc", c="calloc", a="aligned", r="realloc", f="free")


class AdviseError(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Trace analysis
# ---------------------------------------------------------------------------------------
def size_bucket(n):
    """Bucket k holds sizes in (2^(k-1), 2^k]; sizes up to 8 are bucket 3."""
    return max(3, (n - 1).bit_length()) if n > 0 else 3


def life_bucket(n):
    """Bucket k holds lifetimes in [2^k, 2^(k+1)) requests."""
    return max(0, n.bit_length() - 1)


def analyze(path, log=None):
    """One pass over a kite trace (or a .script). Returns a dict of plain data; log (when
    given) gets a progress line every 4 M requests."""
    a = dict(path=path, command="", pid=None, ops=0, kinds=Counter(), tids=Counter(),
             foreign_frees=0, foreign_reallocs=0, bytes_requested=0, peak_live=0, peak_at=0,
             sizes=Counter(), size_bytes=Counter(), lifetimes=Counter(), freed=0,
             sites_recorded=False, maps=[])
    live_series = array("q")
    codes = array("B")   # kind and size bucket per request (kitewindow.choose_window)
    live = {}      # id -> [size, first birth op, site]
    site_stats = defaultdict(lambda: [0, 0])  # pcs -> [allocations, bytes]
    last_alloc = None
    cur = 0
    fmt = "script" if str(path).endswith(".script") else None
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        raise AdviseError(f"cannot read {path}: {e.strerror}")
    with f:
        for lineno, line in enumerate(f, 1):
            s = line.strip()
            if not s:
                continue
            where = f"{path}:{lineno}"
            if s[0] == "#":
                if s.startswith(kitesites.SITE_PREFIX):
                    try:
                        bid, pcs = kitesites.parse_site_line(s)
                    except ValueError as e:
                        raise AdviseError(f"{where}: {e}")
                    b = live.get(bid)
                    if b is not None and bid == last_alloc:
                        b[2] = pcs
                        st = site_stats[pcs]
                        st[0] += 1
                        st[1] += b[0]
                    a["sites_recorded"] = True
                elif s.startswith(kitesites.MAP_PREFIX):
                    m = kitesites.parse_map_line(s)
                    if m:
                        a["maps"].append(m)
                elif fmt is None and s.startswith("# kite-trace v"):
                    if s.split()[2:3] != ["v1"] or s.endswith(" raw"):
                        raise AdviseError(f"{where}: not a finalized v1 kite trace ('{s[:60]}')")
                    fmt = "kite"
                elif s.startswith("# command:"):
                    a["command"] = s[len("# command:"):].strip()
                elif s.startswith("# pid "):
                    a["pid"] = s[6:].strip()
                continue
            if fmt is None:
                fmt = "script"
            t = s.split()
            op = t[0]
            try:
                if fmt == "script":
                    if op == "a":
                        t = ["m", t[1], t[2], "0"]
                    elif op == "r":
                        t = ["r", t[1], t[1], t[2], "0"]
                    elif op == "f":
                        t = ["f", t[1], "0"]
                    op = t[0]
                want = {"m": 4, "c": 5, "a": 5, "r": 5, "f": 3}.get(op)
                if want is None:
                    raise AdviseError(f"{where}: unknown op '{op[:20]}'")
                if len(t) != want:
                    raise AdviseError(f"{where}: '{op}' wants {want - 1} fields, has {len(t) - 1}")
                tid = t[-1]
                if op == "f":
                    if t[1] == "-":
                        a["foreign_frees"] += 1
                    else:
                        b = live.pop(int(t[1]), None)
                        if b is None:
                            raise AdviseError(f"{where}: free of unknown id {t[1]}")
                        cur -= b[0]
                        a["lifetimes"][life_bucket(a["ops"] - b[1])] += 1
                        a["freed"] += 1
                        code = kitewindow.request_code("f", size_bucket(b[0]))
                    if t[1] == "-":
                        code = kitewindow.request_code("f", 3)
                    last_alloc = None
                else:
                    if op == "r":
                        first = a["ops"]
                        if t[1] == "-":
                            a["foreign_reallocs"] += 1
                        else:
                            old = live.pop(int(t[1]), None)
                            if old is None:
                                raise AdviseError(f"{where}: realloc of unknown id {t[1]}")
                            cur -= old[0]
                            first = old[1]
                        bid, size = int(t[2]), int(t[3])
                    else:
                        first = a["ops"]
                        bid = int(t[1])
                        size = int(t[2]) if op == "m" else int(t[3]) * (int(t[2]) if op == "c" else 1)
                        if op == "a":
                            size = int(t[3])
                    if bid in live:
                        raise AdviseError(f"{where}: id {bid} allocated while still live")
                    live[bid] = [size, first, None]
                    last_alloc = bid
                    cur += size
                    a["bytes_requested"] += size
                    k = size_bucket(size)
                    a["sizes"][k] += 1
                    a["size_bytes"][k] += size
                    code = kitewindow.request_code(op, k)
            except ValueError:
                raise AdviseError(f"{where}: cannot read the numbers in '{s[:80]}'")
            a["kinds"][op] += 1
            a["tids"][tid] += 1
            a["ops"] += 1
            codes.append(code)
            if cur > a["peak_live"]:
                a["peak_live"], a["peak_at"] = cur, a["ops"]
            live_series.append(cur)
            if log and not a["ops"] & ((1 << 22) - 1):
                log(f"reading the trace: {a['ops']:,} requests")
    if fmt is None or a["ops"] == 0:
        raise AdviseError(f"{path}: no allocation requests in the trace")
    a["format"] = fmt
    a["live_series"] = live_series
    a["codes"] = codes
    a["end_live"] = cur
    a["leaked"] = [(bid, b[0], b[2]) for bid, b in live.items()]
    a["site_stats"] = dict(site_stats)
    return a


def downsample(series, points=600):
    """[(request index, max live bytes over the bucket)], at most `points` of them."""
    n = len(series)
    step = max(1, math.ceil(n / points))
    return [(min(i + step, n), max(series[i:i + step])) for i in range(0, n, step)]


def symbolize_sites(a, top=15):
    """Sites by allocations and leaks by site, each with its frames' labels (one label per
    frame, the innermost first); sites whose labels match are merged."""
    sym = kitesites.Symbolizer(a["maps"])

    def label(pcs):
        if not pcs:
            return ("(no site recorded)",)
        fr = sym.frames(pcs)
        if not fr:
            return (f"0x{pcs[0]:x} (unmapped)",)
        return tuple(kitesites.frame_label(f) for f in fr)

    allpcs = set()
    for pcs in a["site_stats"]:
        allpcs.update(pcs)
    for _, _, pcs in a["leaked"]:
        if pcs:
            allpcs.update(pcs)
    sym.resolve(allpcs)
    by = defaultdict(lambda: [0, 0])
    for pcs, (n, b) in a["site_stats"].items():
        e = by[label(pcs)]
        e[0] += n
        e[1] += b
    sites = sorted(({"frames": list(k), "allocations": v[0], "bytes": v[1]} for k, v in by.items()),
                   key=lambda d: (-d["allocations"], -d["bytes"], d["frames"]))
    lk = defaultdict(lambda: [0, 0, Counter()])
    for _, size, pcs in a["leaked"]:
        e = lk[label(pcs)]
        e[0] += 1
        e[1] += size
        e[2][size] += 1
    leaks = sorted(({"frames": list(k), "blocks": v[0], "bytes": v[1],
                     "sizes": [s for s, _ in v[2].most_common(3)]} for k, v in lk.items()),
                   key=lambda d: (-d["bytes"], -d["blocks"], d["frames"]))
    return sites[:top], len(sites), leaks[:top], len(leaks)


# ---------------------------------------------------------------------------------------
# Allocators and replays
# ---------------------------------------------------------------------------------------
def _bench_run_module():
    """bench/run.py, imported for its allocator discovery (one list of peers in the project):
    installed, the copy beside this file (lib/kite/bench/run.py)."""
    path = os.path.join(HERE, "bench", "run.py")
    if not os.path.exists(path):
        path = os.path.join(ROOT, "bench", "run.py")
    spec = importlib.util.spec_from_file_location("kite_bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mimalloc3_path():
    """libmimalloc.so.3 from the cmeel-mimalloc wheel in the project's .venv, or None."""
    import glob
    for p in sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages",
                                           "cmeel.prefix", "lib", "libmimalloc.so.3*"))):
        if os.path.isfile(p):
            return p
    return None


# the link flag that puts each real malloc in a program at build time (Debian's -dev names)
LINK_FLAGS = dict(kite="-lkite", jemalloc="-ljemalloc", tcmalloc="-ltcmalloc",
                  mimalloc="-lmimalloc", tbbmalloc="-ltbbmalloc_proxy")


def find_allocators(build_dir, want_policies=True):
    """[dict(name, kind 'real'|'policy', preload, args, status, reason)] in report order,
    each name once (bench/run.py's discovery lists mimalloc3 itself when .venv has it)."""
    found = []
    for d in _bench_run_module().discover_allocators(build_dir, [], False):
        found.append(dict(name=d["name"], kind="real", preload=d["path"], args=["--malloc"],
                          status=d["status"], reason=d["reason"]))
    if not any(x["name"] == "mimalloc3" for x in found):
        m3 = mimalloc3_path()
        found.append(dict(name="mimalloc3", kind="real", preload=m3, args=["--malloc"],
                          status="ok" if m3 else "skipped",
                          reason="" if m3 else "cmeel-mimalloc not in .venv (pip install cmeel-mimalloc)"))
    if want_policies:
        replay = os.path.join(build_dir, "kite-replay")
        try:
            names = subprocess.run([replay, "--list"], capture_output=True, text=True,
                                   timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            names = []
        for n in names:
            if n not in ("kite", "malloc"):
                found.append(dict(name=n, kind="policy", preload=None, args=["--policy", n],
                                  status="ok", reason=""))
    seen = set()
    out = []
    for x in found:
        if x["name"] not in seen:
            seen.add(x["name"])
            out.append(x)
    return out


def replay_once(build_dir, alloc, trace, timeout, rng=None):
    """One kite-replay --json run (timing lines rng=(first, last) only, when given).
    Returns (result dict, None) or (None, failure text); a timeout's text starts TIMEOUT."""
    cmd = [os.path.join(build_dir, "kite-replay")] + alloc["args"] + ["--json"]
    if rng:
        cmd += ["-r", str(rng[0]), str(rng[1])]
    cmd.append(trace)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if alloc["preload"]:
        env["LD_PRELOAD"] = alloc["preload"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"TIMEOUT after {timeout:.0f} s"
    except OSError as e:
        return None, f"cannot run kite-replay: {e.strerror}"
    if r.returncode != 0:
        why = {1: "check failed", 2: "refused the trace", 3: "out of memory"}.get(
            r.returncode, f"exit {r.returncode}" if r.returncode > 0 else f"signal {-r.returncode}")
        msg = r.stderr.strip().splitlines()
        return None, why + (f": {msg[-1][:160]}" if msg else "")
    try:
        j = json.loads(r.stdout)
        rg = j["ranges"][0]
        return dict(total_ns=rg["total_ns"], avg_ns=rg["avg_ns"], p50_ns=rg["p50_ns"],
                    p99_ns=rg["p99_ns"], requests=rg["requests"],
                    footprint=j["footprint_bytes"], footprint_kind=j["footprint_kind"],
                    peak_live=j["peak_live_bytes"], utilization=j["utilization"]), None
    except (ValueError, KeyError, IndexError) as e:
        return None, f"unreadable kite-replay output ({e})"


def replay_all(build_dir, allocs, trace, repeats, timeout, log, rng=None, deadline=None):
    """Runs every ok allocator `repeats` times, round robin. Fills alloc['runs'] /
    ['failure']. With a deadline (time.monotonic()), no replay starts after it and none runs
    past it: an allocator that got no run is 'skipped' (budget spent), one that got fewer
    keeps them. Each replay prints a progress line with the time spent and an estimate of
    the time left (the replays so far, per allocator, times the ones still to come)."""
    todo = [x for x in allocs if x["status"] == "ok"]
    for x in todo:
        x["runs"], x["failure"], x["spent"] = [], None, []
    total = len(todo) * repeats
    t0 = time.monotonic()
    done = 0
    cut = False
    for rep in range(repeats):
        for x in todo:
            if x["failure"]:
                done += 1
                continue
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0.05:
                cut = True
                break
            t1 = time.monotonic()
            res, fail = replay_once(build_dir, x, trace, timeout if left is None else min(timeout, left), rng)
            x["spent"].append(time.monotonic() - t1)
            done += 1
            if fail and fail.startswith("TIMEOUT") and left is not None and left < timeout:
                cut = True     # the budget, not the allocator, ended it: the run is dropped
                break
            if fail:
                x["failure"] = fail
            else:
                x["runs"].append(res)
            el = time.monotonic() - t0
            est = sum(median(y["spent"]) if y["spent"] else median(x["spent"]) for y in todo
                      if not y["failure"]) * repeats - sum(sum(y["spent"]) for y in todo if not y["failure"])
            what = fail if fail else f"{fmt_ns(res['total_ns'])} of allocator time"
            log(f"replay {done}/{total} (round {rep + 1}/{repeats}) {x['name']}: {what}; "
                f"{el:.0f} s elapsed, about {max(est, 0):.0f} s left")
        if cut:
            log(f"budget spent after {time.monotonic() - t0:.0f} s: {done} of {total} replays run")
            break
    for x in todo:
        if x["failure"]:
            x["status"] = "failed"
            x["reason"] = x["failure"]
            continue
        if not x["runs"]:
            x["status"] = "skipped"
            x["reason"] = "the time budget was spent before its turn (raise --budget)"
            continue
        t = [r["total_ns"] for r in x["runs"]]
        fp = [r["footprint"] for r in x["runs"]]
        x.update(time_med=median(t), time_min=min(t), time_max=max(t),
                 fp_med=median(fp), fp_min=min(fp), fp_max=max(fp),
                 avg_ns=median([r["avg_ns"] for r in x["runs"]]),
                 p99_ns=median([r["p99_ns"] for r in x["runs"]]),
                 util=median([r["utilization"] for r in x["runs"]]),
                 footprint_kind=x["runs"][0]["footprint_kind"])
    return time.monotonic() - t0


# ---------------------------------------------------------------------------------------
# Verdict
# ---------------------------------------------------------------------------------------
def fmt_ns(ns):
    if ns is None:
        return "-"
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns:.0f} ns"


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:.3g} {unit}"
    return f"{b:.0f} B"


def ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def rank(rows, key):
    """(best, [rows whose min..max range overlaps the best's], ordered rows) on metric key."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r[key + "_med"])
    if not ok:
        return None, [], []
    best = ok[0]
    ties = [r for r in ok[1:] if r[key + "_min"] <= best[key + "_max"]]
    return best, ties, ok


def verdict(a, allocs, repeats):
    """Sentences (HTML) drawn from the numbers."""
    real = [x for x in allocs if x["kind"] == "real"]
    pol = [x for x in allocs if x["kind"] == "policy"]
    out = []
    e = html.escape

    def span(r, key, f):
        return f"{f(r[key + '_med'])} ({f(r[key + '_min'])}&ndash;{f(r[key + '_max'])})"

    best, ties, order = rank(real, "time")
    if best:
        if ties:
            names = ", ".join(f"<b>{e(r['name'])}</b> {span(r, 'time', fmt_ns)}" for r in [best] + ties)
            out.append(f"Fastest: <b>undecided</b> between {names}: their min&ndash;max ranges over "
                       f"{repeats} replays overlap, so the ranking among them is noise.")
        elif len(order) > 1:
            second = order[1]
            gain = (second["time_med"] - best["time_med"]) / second["time_med"] * 100
            out.append(f"Fastest: <b>{e(best['name'])}</b>, {span(best, 'time', fmt_ns)} of allocator "
                       f"time, {gain:.0f}% less than the next, {e(second['name'])} "
                       f"{span(second, 'time', fmt_ns)} (median, min&ndash;max of {repeats}).")
        else:
            out.append(f"Only {e(best['name'])} could be replayed: {span(best, 'time', fmt_ns)}.")
    lbest, lties, lorder = rank(real, "fp")
    if lbest:
        if lties:
            names = ", ".join(f"<b>{e(r['name'])}</b> {span(r, 'fp', fmt_bytes)}" for r in [lbest] + lties)
            out.append(f"Leanest (peak RSS growth): <b>undecided</b> between {names} (ranges overlap).")
        else:
            out.append(f"Leanest (peak RSS growth): <b>{e(lbest['name'])}</b>, {span(lbest, 'fp', fmt_bytes)}"
                       f" for a peak of {fmt_bytes(a['peak_live'])} live.")
    kite = next((x for x in order if x["name"] == "kite"), None)
    if kite and best and kite is not best:
        pos = order.index(kite) + 1
        tied = kite in ties
        out.append(f"kite is {ordinal(pos)} of {len(order)} on time "
                   f"({kite['time_med'] / best['time_med']:.2f}&times; the fastest"
                   f"{', within its spread' if tied else ''}) and "
                   f"{ordinal(lorder.index(kite) + 1)} of {len(lorder)} on footprint.")
    elif kite and best is kite:
        out.append(f"kite is {'among the fastest' if ties else 'the fastest'} here and "
                   f"{ordinal(lorder.index(kite) + 1)} of {len(lorder)} on footprint.")
    pbest, pties, porder = rank(pol, "time")
    if pbest:
        compact = max((p for p in porder), key=lambda p: p["util"] or 0)
        slow = porder[-1]
        out.append(f"Among the lab policies (a study, not drop-in mallocs): fastest "
                   f"<b>{e(pbest['name'])}</b>{' (undecided with ' + ', '.join(e(p['name']) for p in pties) + ')' if pties else ''}"
                   f", slowest {e(slow['name'])} ({slow['time_med'] / pbest['time_med']:.1f}&times;), most compact "
                   f"<b>{e(compact['name'])}</b> ({compact['util'] * 100:.1f}% utilization).")
    small = sum(n for k, n in a["sizes"].items() if k <= 6)
    allocs_n = sum(a["sizes"].values())
    lt = a["lifetimes"]
    freed = sum(lt.values())
    med_life = None
    if freed:
        acc = 0
        for k in sorted(lt):
            acc += lt[k]
            if acc * 2 >= freed:
                med_life = k
                break
    prof = (f"The program made {a['ops']:,} requests; {small * 100 / max(allocs_n, 1):.0f}% of its "
            f"{allocs_n:,} allocations are 64 bytes or less")
    if med_life is not None:
        prof += f", and half the freed objects live fewer than {2 ** (med_life + 1):,} requests"
    prof += (f". Live bytes peak at {fmt_bytes(a['peak_live'])}; {len(a['leaked']):,} blocks "
             f"({fmt_bytes(sum(s for _, s, _ in a['leaked']))}) are still allocated at exit.")
    out.append(prof)
    if len(a["tids"]) > 1:
        out.append(f"<b>Threads:</b> the program ran {len(a['tids'])} threads; the replay is "
                   "single-threaded (one thread replays every request in the captured order), so "
                   "per-thread caches and lock contention are not measured here: confirm with a "
                   "whole-program run under LD_PRELOAD.")
    return out


def python_runtime(cmd, env):
    """For a CPython program: 'hidden' when it keeps small objects in its own allocator
    (pymalloc: objects up to 512 bytes never reach malloc), 'malloc' when PYTHONMALLOC=malloc
    sends them all to malloc; None for any other program. Looks at the program's name and,
    for a script, its #! line."""
    if not cmd:
        return None
    names = [os.path.basename(cmd[0])]
    path = shutil.which(cmd[0]) or cmd[0]
    try:
        with open(path, "rb") as f:
            head = f.read(128)
        if head.startswith(b"#!"):
            names += [os.path.basename(w) for w in head[2:].split(b"\n")[0].decode("latin-1").split()]
    except OSError:
        pass
    for nm in names:
        base = nm.split("python", 1)
        if len(base) == 2 and base[0] == "" and all(c.isdigit() or c == "." for c in base[1]):
            return "malloc" if env.get("PYTHONMALLOC", "") in ("malloc", "malloc_debug") else "hidden"
    return None


def switch_line(x, cmd, runtime):
    """(preload line, link flag or None) that gives cmd allocator x, as it was measured: with
    PYTHONMALLOC=malloc in front when the capture had it."""
    prefix = "PYTHONMALLOC=malloc " if runtime == "malloc" else ""
    prog = shlex.join(cmd) if cmd else "PROGRAM ARGS"
    if x["preload"] is None:
        return (f"{prefix}{prog}", None)
    return (f"{prefix}LD_PRELOAD={shlex.quote(x['preload'])} {prog}", LINK_FLAGS.get(x["name"]))


def program_verdict(a, allocs, meta):
    """The verdict's first sentences, in the program's terms: its run time, the share of it
    spent in the allocator it has (glibc's), what the fastest real malloc would save in
    seconds and peak memory, and the line that switches to it. Also returns the figures for
    the JSON block."""
    e = html.escape
    prog, win = meta.get("program"), meta["window"]
    scale = win["scale"]
    real = [x for x in allocs if x["kind"] == "real"]
    best, ties, order = rank(real, "time")
    glibc = next((x for x in real if x["name"] == "glibc" and x["status"] == "ok"), None)
    out, fig = [], {}
    if not best or not glibc:
        return out, fig
    t_g = glibc["time_med"] * scale / 1e9
    fig["glibc_s"] = t_g
    reqs = f"{a['ops']:,} malloc-family requests"
    if prog:
        share = t_g / prog["wall_s"] if prog["wall_s"] > 0 else None
        fig["share"] = share
        out.append(f"<b>The program ran {prog['wall_s']:.2f} s</b> (peak RSS "
                   f"{fmt_bytes(prog['maxrss_kib'] * 1024)}, timed once without the capture). Its "
                   f"{reqs} take about <b>{t_g * 1e3:.3g} ms in glibc's malloc</b>, the one it uses "
                   f"now: <b>{share * 100:.2g}% of its run time</b>.")
    else:
        out.append(f"Its {reqs} take about <b>{t_g * 1e3:.3g} ms in glibc's malloc</b> (the run "
                   f"time of the program is not known from a trace alone: run advise on the "
                   f"program to see the share).")
    runtime = meta.get("runtime")
    cmd = meta.get("cmd")
    if best is glibc or glibc in ties:
        out.append("glibc's malloc is " + ("among the fastest here (within the spread of the "
                   "best)" if best is not glibc else "the fastest here") +
                   ": switching allocators would not save time on this program.")
        fig["best"] = "glibc"
        return out + _python_note(runtime), fig
    t_b = best["time_med"] * scale / 1e9
    save = t_g - t_b
    fig.update(best=best["name"], best_s=t_b, save_s=save)
    tie = (f" (undecided with {', '.join(e(r['name']) for r in ties)}: within its spread)"
           if ties else "")
    part = f"{save * 1e3:.3g} ms less"
    if prog and prog["wall_s"] > 0:
        frac = save / prog["wall_s"]
        fig["save_share"] = frac
        part += f", <b>{frac * 100:.2g}% of the run</b>"
        if frac < 0.01:
            part += " (under 1%: the allocator is not where this program's time goes)"
    mem = ""
    if glibc.get("fp_med") is not None and best.get("fp_med") is not None:
        d = glibc["fp_med"] - best["fp_med"]
        fig["save_peak_bytes"] = d
        mem = (f"; its peak footprint in the replay is {fmt_bytes(best['fp_med'])} against "
               f"glibc's {fmt_bytes(glibc['fp_med'])} "
               f"({fmt_bytes(abs(d))} {'less' if d >= 0 else 'more'})")
    out.append(f"The fastest, <b>{e(best['name'])}</b>{tie}, would take about {t_b * 1e3:.3g} ms: "
               f"{part}{mem}.")
    pre, link = switch_line(best, cmd, runtime)
    fig["switch"] = pre
    how = f"To switch: <code class=\"switch\">{e(pre)}</code>"
    if link:
        how += f", or link the program with <code>{e(link)}</code>"
        fig["link"] = link
    out.append(how + ".")
    return out + _python_note(runtime), fig


def _python_note(runtime):
    if runtime == "hidden":
        return ["<b>Python</b> keeps objects of up to 512 bytes in its own allocator "
                   "(pymalloc), which the trace does not see: this compares only what reaches "
                   "malloc. To compare the mallocs on every object, run advise again with "
                   "<code>PYTHONMALLOC=malloc</code> in front; a switch found that way needs "
                   "it in front of the program too."]
    return []


# ---------------------------------------------------------------------------------------
# SVG charts
# ---------------------------------------------------------------------------------------
def frame_color(k):
    r, g, b = FRAME_BASE
    return f"#{r:02x}{g:02x}{b + 2 * k:02x}"


def _nice_max(v, binary=False):
    """A round axis end at or above v (for bytes: a round number of KiB, MiB ...)."""
    if v <= 0:
        return 1
    if binary and v >= 1024:
        unit = 1024 ** int(math.log(v, 1024))
        return _nice_max(v / unit) * unit
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def _svg_open(w, h, k, title):
    e = html.escape
    return [f'<svg class="chart" data-chart="{k}" data-frame="{frame_color(k)}" width="{w}" '
            f'height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{e(title)}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
            f'<rect x="0.5" y="0.5" width="{w - 1}" height="{h - 1}" fill="#ffffff"/>',
            f'<text x="10" y="18" font-size="13" font-weight="bold" fill="#222">{e(title)}</text>']


def _svg_close(w, h, k):
    """The frame, drawn last so that no label or bar near the edge covers it (the tests find
    each chart on a screenshot by its frame's colour, whole)."""
    return [f'<rect x="0.5" y="0.5" width="{w - 1}" height="{h - 1}" fill="none" '
            f'stroke="{frame_color(k)}" stroke-width="1" shape-rendering="crispEdges"/>', "</svg>"]


def hbar_chart(k, title, rows, fmt, width=540):
    """rows: [(label, med, lo, hi, color)]; horizontal bars with min-max whiskers. A bar more
    than 4 times the median of the others is cut at the axis end (marked with a break and
    its value), so one outlier does not flatten the rest."""
    e = html.escape
    bar_h, gap, left, top = 16, 6, 120, 30
    h = top + len(rows) * (bar_h + gap) + 28
    out = _svg_open(width, h, k, title)
    top_v = max([r[3] for r in rows] + [0])
    meds = sorted(r[1] for r in rows)
    if len(meds) >= 3 and meds[-1] > 4 * meds[len(meds) // 2]:
        top_v = max([r[3] for r in rows if r[1] <= 4 * meds[len(meds) // 2]] + [0]) * 1.15
    vmax = _nice_max(top_v, binary=fmt is fmt_bytes)
    plot_w = width - left - 80
    for t in range(5):
        v = vmax * t / 4
        x = left + plot_w * t / 4
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{h - 22}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{x:.1f}" y="{h - 8}" text-anchor="middle" fill="#555" font-size="10">{e(fmt(v))}</text>')
    for i, (label, med, lo, hi, color) in enumerate(rows):
        y = top + i * (bar_h + gap)
        cut = med > vmax
        if cut:
            med_shown, lo, hi = med, min(lo, vmax), min(hi, vmax)
            med = vmax
        w = plot_w * med / vmax
        weight = ' font-weight="bold"' if color == KITE_COLOR else ""
        out.append(f'<text x="{left - 6}" y="{y + bar_h - 4}" text-anchor="end" fill="#222"{weight}>{e(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{color}"/>')
        x0, x1 = left + plot_w * lo / vmax, left + plot_w * hi / vmax
        ym = y + bar_h / 2
        out.append(f'<path d="M{x0:.1f},{ym - 4}v8M{x0:.1f},{ym}H{x1:.1f}M{x1:.1f},{ym - 4}v8" '
                   f'stroke="#222" stroke-width="1.2" fill="none"/>')
        if cut:
            xe = left + w
            out.append(f'<path d="M{xe - 14:.1f},{y + bar_h + 1}l6,-{bar_h + 2}M{xe - 8:.1f},{y + bar_h + 1}l6,-{bar_h + 2}" '
                       f'stroke="#ffffff" stroke-width="3"/>')
            out.append(f'<text x="{xe - 20:.1f}" y="{y + bar_h - 4}" fill="#ffffff" font-size="11" '
                       f'text-anchor="end" font-weight="bold">{e(fmt(med_shown))} (axis cut)</text>')
            continue
        out.append(f'<text x="{max(x1, left + w) + 5:.1f}" y="{y + bar_h - 4}" fill="#222" font-size="11">{e(fmt(med))}</text>')
    out += _svg_close(width, h, k)
    return "\n".join(out)


def vbar_chart(k, title, labels, values, xlabel, ylabel, width=540, height=260, colors=None):
    e = html.escape
    left, right, top, bottom = 56, 12, 30, 50
    out = _svg_open(width, height, k, title)
    vmax = _nice_max(max(values + [0]))
    pw, ph = width - left - right, height - top - bottom
    n = max(len(values), 1)
    for t in range(5):
        v = vmax * t / 4
        y = top + ph - ph * t / 4
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" fill="#555" font-size="10">{v:,.0f}</text>')
    bw = pw / n
    for i, v in enumerate(values):
        bh = ph * v / vmax
        x = left + i * bw
        c = colors[i] if colors else SERIES_COLOR
        if v:
            out.append(f'<rect x="{x + 1:.1f}" y="{top + ph - bh:.1f}" width="{max(bw - 2, 1):.1f}" '
                       f'height="{max(bh, 1):.1f}" fill="{c}"><title>{e(labels[i])}: {v:,}</title></rect>')
        if n <= 16 or i % 2 == 0:
            out.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph + 13}" text-anchor="middle" fill="#555" '
                       f'font-size="9">{e(labels[i])}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 10}" text-anchor="middle" fill="#333">{e(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2:.1f}" text-anchor="middle" fill="#333" '
               f'transform="rotate(-90 14 {top + ph / 2:.1f})">{e(ylabel)}</text>')
    out += _svg_close(width, height, k)
    return "\n".join(out)


def line_chart(k, title, points, peak, width=1100, height=280):
    """points: [(x, y)] increasing x; an area under the line; the peak marked."""
    e = html.escape
    left, right, top, bottom = 70, 16, 30, 40
    out = _svg_open(width, height, k, title)
    xmax = max(points[-1][0], 1)
    ymax = _nice_max(max(y for _, y in points), binary=True)
    pw, ph = width - left - right, height - top - bottom

    def X(x):
        return left + pw * x / xmax

    def Y(y):
        return top + ph - ph * y / ymax

    for t in range(5):
        y = ymax * t / 4
        out.append(f'<line x1="{left}" y1="{Y(y):.1f}" x2="{width - right}" y2="{Y(y):.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{left - 4}" y="{Y(y) + 4:.1f}" text-anchor="end" fill="#555" font-size="10">{e(fmt_bytes(y))}</text>')
    for t in range(6):
        x = xmax * t / 5
        out.append(f'<text x="{X(x):.1f}" y="{top + ph + 14}" text-anchor="middle" fill="#555" font-size="10">{x:,.0f}</text>')
    pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in points)
    out.append(f'<polygon points="{X(0):.1f},{Y(0):.1f} {pts} {X(points[-1][0]):.1f},{Y(0):.1f}" '
               f'fill="{SERIES_COLOR}" fill-opacity="0.25" stroke="none"/>')
    out.append(f'<polyline points="{pts}" fill="none" stroke="{SERIES_COLOR}" stroke-width="1.5"/>')
    px, py = peak
    out.append(f'<circle cx="{X(px):.1f}" cy="{Y(py):.1f}" r="4" fill="{KITE_COLOR}"/>')
    anchor = "end" if X(px) > width * 0.7 else "start"
    dx = -8 if anchor == "end" else 8
    out.append(f'<text x="{X(px) + dx:.1f}" y="{Y(py) + 4:.1f}" text-anchor="{anchor}" fill="#222" '
               f'font-size="11">peak {e(fmt_bytes(py))} at request {px:,}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle" fill="#333">'
               f'requests (malloc-family calls, in program order)</text>')
    out += _svg_close(width, height, k)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------
CSS = """
body { font-family: 'DejaVu Sans', Arial, sans-serif; margin: 24px; color: #222; max-width: 1140px; }
h1 { font-size: 22px; margin: 0 0 4px 0; } h2 { font-size: 17px; margin: 26px 0 8px 0;
  border-bottom: 1px solid #ddd; padding-bottom: 3px; }
.meta { color: #555; font-size: 12px; } code { background: #f3f3f3; padding: 1px 4px; }
.verdict { background: #fff7f0; border-left: 4px solid #e8590c; padding: 8px 14px; }
.verdict p { margin: 6px 0; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border-bottom: 1px solid #e6e6e6; padding: 3px 8px; text-align: left; vertical-align: top;
  white-space: nowrap; }
td.site, td.why { white-space: normal; }
th { background: #f5f5f5; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.kite td { background: #fff1e6; font-weight: bold; }
tr.failed td, tr.skipped td { color: #888; }
.grid { display: grid; grid-template-columns: 560px 560px; gap: 12px; }
.note { color: #555; font-size: 12px; }
td.site { font-family: 'DejaVu Sans Mono', monospace; font-size: 11px; }
"""


def _num_td(value, text=None):
    v = "" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))
    return f'<td class="num" data-value="{v}">{html.escape(text if text is not None else v)}</td>'


def render(a, allocs, sites, n_sites, leaks, n_leaks, repeats, meta):
    e = html.escape
    parts = []
    title = a["command"] or os.path.basename(a["path"])
    parts.append(f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 f"<title>kite advise: {e(title[:80])}</title><style>{CSS}</style></head><body>")
    parts.append(f"<h1>Which allocator suits <code>{e(title[:160])}</code>?</h1>")
    mi = meta["machine"]
    rc = meta["program_rc"]
    rc_note = "" if rc in (None, 0) else f"; the program exited with status {rc}"
    kinds = ", ".join(f"{KIND_NAMES[k]} {a['kinds'][k]:,}" for k in "mcarf" if a["kinds"].get(k))
    parts.append(f'<p class="meta">Report by <code>tools/kite-lab advise</code>, {e(meta["date"])}; '
                 f'{e(mi["cpu"])}, {mi["cores"]} cores, Linux {e(mi["kernel"])}, {e(mi["libc"])}; '
                 f'kite at <code>{e(meta["git"] or "?")}</code>. Trace: {a["ops"]:,} requests '
                 f'({kinds}), '
                 f'{len(a["tids"])} thread{"s" if len(a["tids"]) != 1 else ""}'
                 f'{rc_note}.</p>')
    parts.append('<h2 id="verdict">Verdict</h2><div class="verdict">')
    first, figures = program_verdict(a, allocs, meta)
    win = meta["window"]
    if win["whole"]:
        wnote = f"Replayed: the whole trace ({a['ops']:,} requests)."
    else:
        wnote = (f'Replayed: <span id="window">requests {win["start"] + 1:,}..{win["end"]:,} of '
                 f'{a["ops"]:,}</span> ({win["ops"] * 100 / a["ops"]:.2g}%), the window of that '
                 f'length whose mix of request kinds and sizes is nearest the whole trace\'s '
                 f'(distance {win["distance"]:.3f} of 1), to fit the budget of '
                 f'{meta["budget"]:g} s; its {win["warm"]:,} blocks live at the start are '
                 f'allocated first, untimed. The times in the sentences above are the window\'s scaled by '
                 f'{win["scale"]:.3g} to the whole run; footprints are the window\'s.')
    for s in first + [wnote] + verdict(a, allocs, repeats):
        parts.append(f"<p>{s}</p>")
    parts.append("</div>")

    # -- allocators table
    parts.append('<h2 id="allocators">Time and footprint per allocator</h2>')
    scope = ("the captured requests" if win["whole"] else
             f"the window of {win['ops']:,} requests (times not scaled here)")
    parts.append(f'<p class="note">Each allocator replays {scope} '
                 f'(<code>kite-replay --json</code>) {repeats} times, round robin; shown: median '
                 f'(min&ndash;max). <i>Time</i> is the allocator\'s own time: the sum of the '
                 f'per-request latencies, clock cost subtracted. <i>Footprint</i> is, for a real '
                 f'allocator, the peak RSS growth of the replay process (page granular), and for '
                 f'a lab policy the span of its heap (highest block end minus lowest block '
                 f'start): the two are not comparable with each other.</p>')
    parts.append('<table id="allocator-table"><tr><th>allocator</th><th>kind</th>'
                 '<th class="num">time (median)</th><th class="num">min</th><th class="num">max</th>'
                 '<th class="num">avg / request</th><th class="num">p99 / request</th>'
                 '<th class="num">footprint (median)</th><th class="num">min</th><th class="num">max</th>'
                 '<th class="num">utilization</th><th>status</th></tr>')
    for x in allocs:
        cls = "kite" if x["name"] == "kite" else ("" if x["status"] == "ok" else x["status"])
        kind = "real malloc" if x["kind"] == "real" else "lab policy"
        if x["status"] == "ok":
            cells = (_num_td(x["time_med"], fmt_ns(x["time_med"])) + _num_td(x["time_min"], fmt_ns(x["time_min"]))
                     + _num_td(x["time_max"], fmt_ns(x["time_max"])) + _num_td(x["avg_ns"], f"{x['avg_ns']:.1f} ns")
                     + _num_td(x["p99_ns"], f"{x['p99_ns']:.0f} ns")
                     + _num_td(x["fp_med"], fmt_bytes(x["fp_med"])) + _num_td(x["fp_min"], fmt_bytes(x["fp_min"]))
                     + _num_td(x["fp_max"], fmt_bytes(x["fp_max"]))
                     + _num_td(x["util"], "—" if x["util"] is None else f"{x['util'] * 100:.1f}%") + f"<td>ok ({len(x['runs'])} run{'s' if len(x['runs']) != 1 else ''})</td>")
        else:
            cells = f"<td colspan=\"11\" class=\"why\">{e(x['status'])}: {e(x['reason'])}</td>"
        parts.append(f'<tr class="{cls}" data-allocator="{e(x["name"])}"><td>{e(x["name"])}</td>'
                     f"<td>{kind}</td>{cells}</tr>")
    parts.append("</table>")

    def bars(kind, key, fmt):
        rows = []
        for x in allocs:
            if x["kind"] == kind and x["status"] == "ok":
                c = KITE_COLOR if x["name"] == "kite" else (REAL_COLOR if kind == "real" else POLICY_COLOR)
                rows.append((x["name"], x[key + "_med"], x[key + "_min"], x[key + "_max"], c))
        return rows

    charts = []
    for kind, key, fmt, ttl in (("real", "time", fmt_ns, "Allocator time: real mallocs"),
                                ("policy", "time", fmt_ns, "Allocator time: lab policies"),
                                ("real", "fp", fmt_bytes, "Peak footprint: real mallocs (RSS growth)"),
                                ("policy", "fp", fmt_bytes, "Peak footprint: lab policies (heap span)")):
        rows = bars(kind, key, fmt)
        if rows:
            charts.append(hbar_chart(len(meta["charts"]), ttl, rows, fmt))
            meta["charts"].append(ttl)
    parts.append('<div class="grid">' + "\n".join(charts) + "</div>")
    parts.append('<p class="note">Bars: median; whiskers: min&ndash;max over the repeats; kite in orange.</p>')

    # -- live bytes
    parts.append('<h2 id="live">Live bytes over time</h2>')
    pts = downsample(a["live_series"])
    parts.append(line_chart(len(meta["charts"]), "Live requested bytes after each request", pts,
                            (a["peak_at"], a["peak_live"])))
    meta["charts"].append("live bytes")
    parts.append(f'<p class="note">Bytes the program had asked for and not yet freed (requested '
                 f'sizes, no allocator overhead); each point is the maximum over '
                 f'{max(1, math.ceil(len(a["live_series"]) / 600)):,} requests.</p>')

    # -- sizes and lifetimes
    ks = list(range(3, max(a["sizes"]) + 1)) if a["sizes"] else [3]
    labels = ["\u22648"] + [f"\u2264{fmt_bytes(2 ** k).replace(' ', '')}" for k in ks[1:]]
    size_svg = vbar_chart(len(meta["charts"]), "Request sizes (allocations per size class)",
                          labels, [a["sizes"].get(k, 0) for k in ks], "requested size (up to)", "allocations")
    meta["charts"].append("sizes")
    lt = a["lifetimes"]
    lks = list(range(0, max(lt) + 1)) if lt else [0]
    llabels = [f"{2 ** k:,}" if 2 ** k < 10000 else f"2^{k}" for k in lks] + ["never"]
    lvals = [lt.get(k, 0) for k in lks] + [len(a["leaked"])]
    life_svg = vbar_chart(len(meta["charts"]), "Object lifetimes (requests from allocation to free)",
                          llabels, lvals, "lifetime at least (requests); never = not freed at exit",
                          "objects", colors=[SERIES_COLOR] * len(lks) + ["#b5452a"])
    meta["charts"].append("lifetimes")
    parts.append('<h2 id="sizes">Request sizes and object lifetimes</h2>')
    parts.append(f'<div class="grid">{size_svg}\n{life_svg}</div>')
    parts.append('<table id="size-table"><tr><th>size class (up to)</th><th class="num">allocations</th>'
                 '<th class="num">bytes</th></tr>')
    for k, lab in zip(ks, labels):
        parts.append(f"<tr><td>{e(lab)}</td>{_num_td(a['sizes'].get(k, 0))}{_num_td(a['size_bytes'].get(k, 0))}</tr>")
    parts.append("</table>")
    parts.append('<p class="note">A lifetime is counted in requests (the trace has no clock): '
                 'from the first allocation of an object to its free; a realloc continues its '
                 'object.</p>')

    # -- sites
    parts.append('<h2 id="sites">Top allocation sites</h2>')
    if not a["sites_recorded"]:
        parts.append('<p class="note">This trace has no allocation sites (capture it with '
                     '<code>KITE_TRACE_SITES=1</code>, as <code>advise</code> does).</p>')
    else:
        parts.append(f'<p class="note">{n_sites:,} distinct sites; the top {len(sites)} by '
                     f'allocations. A site is the caller of malloc and the callers found by '
                     f'walking frame pointers (code built without them shows one frame); '
                     f'innermost first.</p>')
        parts.append('<table id="site-table"><tr><th class="num">allocations</th><th class="num">bytes</th>'
                     '<th>site (caller &larr; its callers)</th></tr>')
        for s in sites:
            count = f"{s['allocations']:,}"
            parts.append(f"<tr>{_num_td(s['allocations'], count)}"
                         f"{_num_td(s['bytes'], fmt_bytes(s['bytes']))}"
                         f"<td class=\"site\">{' &larr; '.join(e(f) for f in s['frames'])}</td></tr>")
        parts.append("</table>")

    # -- leaks
    parts.append('<h2 id="leaks">Leaks at exit</h2>')
    total_leak = sum(s for _, s, _ in a["leaked"])
    parts.append(f'<p class="note">{len(a["leaked"]):,} blocks ({fmt_bytes(total_leak)}) were never '
                 f'freed before the process ended. The trace cannot tell a lost block from one still '
                 f'reachable that the program simply does not free at exit (many do not).</p>')
    if leaks:
        parts.append('<table id="leak-table"><tr><th class="num">blocks</th><th class="num">bytes</th>'
                     '<th>common sizes</th><th>allocated at</th></tr>')
        for s in leaks:
            parts.append(f"<tr>{_num_td(s['blocks'])}{_num_td(s['bytes'], fmt_bytes(s['bytes']))}"
                         f"<td>{', '.join(str(z) for z in s['sizes'])}</td>"
                         f"<td class=\"site\">{' &larr; '.join(e(f) for f in s['frames'])}</td></tr>")
        parts.append("</table>")
        if n_leaks > len(leaks):
            parts.append(f'<p class="note">({n_leaks - len(leaks)} more sites not shown.)</p>')

    # -- method
    parts.append('<h2 id="method">Method</h2><ul class="note">')
    parts.append(f"<li>Capture: <code>tools/kite-trace</code> with <code>KITE_TRACE_SITES=1</code> "
                 f"(the <code>LD_PRELOAD</code> shim <code>libkite-trace.so</code>): every "
                 f"malloc-family call of the main process in order, with its thread id and call "
                 f"site.</li>")
    parts.append("<li>Replay: <code>build/kite-replay --json</code>, one process per run; real "
                 "mallocs through <code>LD_PRELOAD</code> (glibc: none), lab policies in a reserved "
                 "region. Every block is touched once a page, as the program would.</li>")
    if len(a["tids"]) > 1:
        parts.append(f"<li>The program used {len(a['tids'])} threads "
                     f"({', '.join(f'{n:,}' for _, n in a['tids'].most_common(4))} requests on the "
                     f"busiest); the replay runs them all on one thread.</li>")
    skipped = [x for x in allocs if x["status"] == "skipped"]
    if skipped:
        parts.append("<li>Not installed: " + "; ".join(f"{e(x['name'])} ({e(x['reason'])})"
                                                       for x in skipped) + ".</li>")
    if a["foreign_frees"] or a["foreign_reallocs"]:
        parts.append(f"<li>{a['foreign_frees']} frees and {a['foreign_reallocs']} reallocs of blocks "
                     f"allocated before tracing began are skipped / replayed as mallocs.</li>")
    parts.append("</ul>")

    data = dict(command=a["command"], ops=a["ops"], kinds=dict(a["kinds"]), threads=len(a["tids"]),
                peak_live=a["peak_live"], peak_at=a["peak_at"], end_live=a["end_live"],
                leaked_blocks=len(a["leaked"]), leaked_bytes=total_leak, repeats=repeats,
                sizes={str(k): v for k, v in sorted(a["sizes"].items())},
                lifetimes={str(k): v for k, v in sorted(a["lifetimes"].items())},
                charts=meta["charts"], sites=sites, leaks=leaks,
                program=meta["program"], budget_s=meta["budget"], replay_s=meta["replay_s"],
                window={k: win[k] for k in ("start", "end", "ops", "scale", "distance", "whole")},
                verdict=figures,
                allocators=[{k: x.get(k) for k in ("name", "kind", "status", "reason", "time_med",
                                                    "time_min", "time_max", "fp_med", "fp_min",
                                                    "fp_max", "util", "footprint_kind")}
                            for x in allocs])
    blob = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    parts.append(f'<script type="application/json" id="kite-advise-data">{blob}</script>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def git_describe():
    try:
        q = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=10)
        return q.stdout.strip() if q.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------
def capture(cmd, out_trace, sites, log, build_dir):
    env = dict(os.environ)
    if sites:
        env["KITE_TRACE_SITES"] = "1"
    log(f"capturing: {' '.join(cmd)}")
    shim = os.path.join(build_dir, "libkite-trace.so")  # the build the caller named
    r = subprocess.run([sys.executable, os.path.join(HERE, "kite-trace"), "-o", out_trace,
                        "--lib", shim, "--"] + cmd, env=env)
    if not os.path.exists(out_trace):
        raise AdviseError(f"no trace captured from {cmd[0]} (exit {r.returncode})")
    return r.returncode


def time_program(cmd, log):
    """Runs cmd once as it is (its output discarded): wall seconds, peak RSS, exit status."""
    log(f"timing: {' '.join(cmd)} (once, without the capture)")
    t = time.monotonic()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as e:
        raise AdviseError(f"cannot run {cmd[0]}: {e.strerror}")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return dict(wall_s=time.monotonic() - t, maxrss_kib=ru.ru_maxrss, rc=p.returncode)


CALIBRATION_REQUESTS = 100_000


def plan_window(a, trace, tmp, build, allocs, args, log):
    """The requests to replay within the budget: dict(start, end, ops, scale, distance, file,
    range, whole, calibration_s). A calibration replay (glibc, the trace's first
    CALIBRATION_REQUESTS requests) gives a cost per request; the window is what 60% of the
    rest of the budget buys at that cost for every replay to come (the other 40% is left to
    slower allocators and the lab policies, which the deadline then cuts). The calibration
    counts against the budget; writing the window's trace, like reading the trace, does not
    (both take a time proportional to the trace, before any replay)."""
    n = a["ops"]
    whole = dict(start=0, end=n, ops=n, scale=1.0, distance=0.0, file=trace, range=None,
                 whole=True, calibration_s=0.0)
    if not args.budget or a["format"] != "kite" or n <= CALIBRATION_REQUESTS:
        return whole
    runs = sum(1 for x in allocs if x["status"] == "ok") * args.repeats
    cal = os.path.join(tmp, "calibrate.trace")
    first, last, _ = kitewindow.write_window(trace, cal, 0, CALIBRATION_REQUESTS)
    t = time.monotonic()
    res, fail = replay_once(build, dict(args=["--malloc"], preload=None), cal,
                            args.budget, (first, last))
    spent = time.monotonic() - t
    cost = spent / CALIBRATION_REQUESTS
    os.unlink(cal)
    if fail:
        raise AdviseError(f"the calibration replay failed: {fail}")
    k = int(0.6 * max(args.budget - spent, 0) / (max(runs, 1) * cost))
    if k >= n:
        return dict(whole, calibration_s=spent)
    k = max(k, min(n, 10_000))
    start, end, dist = kitewindow.choose_window(a["codes"], k, a["peak_at"])
    path = os.path.join(tmp, "window.trace")
    log(f"budget: {args.budget:g} s for {runs} replays at about {cost * 1e9:.0f} ns a request: "
        f"replaying requests {start + 1:,}..{end:,} of {n:,} (mix distance {dist:.3f})")
    first, last, warm = kitewindow.write_window(trace, path, start, end)
    return dict(start=start, end=end, ops=end - start, scale=n / (end - start), distance=dist,
                file=path, range=(first, last), whole=False, warm=warm, calibration_s=spent)


def run(args):
    """args: the parsed options of `kite-lab advise`. Returns the exit status."""
    def log(msg):
        if not args.quiet:
            print(f"advise: {msg}", file=sys.stderr)

    if args.trace and not args.profile and kiteprof.looks_like_profile(args.trace):
        args.profile, args.trace = args.trace, None
    if args.profile:
        return run_profile(args, log)
    build = os.path.abspath(args.build_dir)
    for need in ("kite-replay",) + (() if args.trace else ("libkite-trace.so",)):
        if not os.path.exists(os.path.join(build, need)):
            print(f"advise: {os.path.join(build, need)} not found (run make)", file=sys.stderr)
            return 2
    tmp = tempfile.mkdtemp(prefix="kite-advise-")

    def stop(signum, frame):       # so that finally removes the trace on kill too
        raise SystemExit(128 + signum)
    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        program_rc, prog = None, None
        if args.trace:
            trace = args.trace
        else:
            if args.save_trace:
                trace = os.path.abspath(args.save_trace)
            elif args.keep_trace:
                trace = os.path.abspath(os.path.splitext(args.output)[0] + ".trace")
            else:
                trace = os.path.join(tmp, "program.trace")
            prog = time_program(args.command, log)
            program_rc = capture(args.command, trace, not args.no_sites, log, build)
        a = analyze(trace, log)
        log(f"trace: {a['ops']:,} requests, {len(a['tids'])} threads, peak {fmt_bytes(a['peak_live'])} live")
        allocs = find_allocators(build, want_policies=not args.no_policies)
        if args.allocators:
            want = [w.strip() for w in args.allocators.split(",") if w.strip()]
            unknown = [w for w in want if w not in {x["name"] for x in allocs}]
            if unknown:
                print(f"advise: unknown allocator(s) {', '.join(unknown)}; known: "
                      f"{', '.join(x['name'] for x in allocs)}", file=sys.stderr)
                return 2
            allocs = [x for x in allocs if x["name"] in want]
        win = plan_window(a, trace, tmp, build, allocs, args, log)
        t_start = time.monotonic()
        deadline = t_start + args.budget - win["calibration_s"] if args.budget else None
        replay_all(build, allocs, win["file"], args.repeats, args.timeout, log,
                   win["range"], deadline)
        replay_s = time.monotonic() - t_start + win["calibration_s"]
        sites, n_sites, leaks, n_leaks = symbolize_sites(a, top=args.top)
        meta = dict(date=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
                    machine=machine_info(), git=git_describe(), program_rc=program_rc, charts=[],
                    program=prog, window=win, budget=args.budget,
                    replay_s=replay_s, cmd=args.command or None,
                    runtime=python_runtime(args.command, os.environ) if args.command else None)
        page = render(a, allocs, sites, n_sites, leaks, n_leaks, args.repeats, meta)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(page)
        log(f"report -> {args.output}")
        if not args.trace and (args.keep_trace or args.save_trace):
            log(f"trace kept: {trace}")
        return 0
    except AdviseError as e:
        print(f"advise: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for sig, h in old.items():
            signal.signal(sig, h)


def default_build_dir():
    """The source tree's build/, or, installed, lib/kite/ (kite-replay and libkite.so are
    linked there beside libkite-trace.so)."""
    if os.path.exists(os.path.join(HERE, "kite-replay")):
        return HERE
    return os.path.join(ROOT, "build")


def add_arguments(ap):
    ap.add_argument("-o", "--output", default="advise-report.html", metavar="FILE",
                    help="the HTML report to write (default: %(default)s)")
    ap.add_argument("--trace", metavar="FILE",
                    help="analyse this kite trace (or .script) instead of running a program")
    ap.add_argument("--profile", metavar="FILE",
                    help="report on this heap profile (KITE_PROF's file, pprof's format) instead: "
                         "its top sites by bytes allocated and live, no replays; for programs too "
                         "big to trace (a --trace FILE that is a profile is read as one)")
    ap.add_argument("--save-trace", metavar="FILE", help="keep the captured trace here")
    ap.add_argument("--keep-trace", action="store_true",
                    help="keep the captured trace beside the report (REPORT minus .html, plus "
                         ".trace); without it, or --save-trace, the trace is deleted, also when "
                         "advise is interrupted")
    ap.add_argument("--budget", type=float, default=180, metavar="SECONDS",
                    help="time for the replays, their calibration included (default: "
                         "%(default)g). A trace too big for it is replayed over a window of "
                         "consecutive requests whose mix is nearest the whole trace's, and the "
                         "times are scaled to the whole (docs/advise.md); 0: the whole trace, "
                         "no limit")
    ap.add_argument("-n", "--repeats", type=int, default=3, metavar="N",
                    help="replays per allocator, round robin (default: %(default)s)")
    ap.add_argument("--allocators", metavar="LIST",
                    help="comma-separated subset (names as in the report: kite, glibc, jemalloc, "
                         "tcmalloc, mimalloc, tbbmalloc, mimalloc3, and the lab policies)")
    ap.add_argument("--no-policies", action="store_true", help="replay the real mallocs only")
    ap.add_argument("--no-sites", action="store_true", help="capture without allocation sites")
    ap.add_argument("--top", type=int, default=15, metavar="N",
                    help="rows in the sites and leaks tables (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=300, metavar="S",
                    help="seconds one replay may take before it is reported as TIMEOUT "
                         "(default: %(default)s)")
    ap.add_argument("--build-dir", default=default_build_dir(), metavar="DIR",
                    help="where kite-replay, libkite.so and libkite-trace.so are (default: the "
                         "source tree's build/, or installed, the directory of kite-lab)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("command", nargs="*", metavar="-- PROGRAM ARGS",
                    help="the program to capture, after --")


def check_arguments(ap, args):
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.top < 1:
        ap.error("--top must be at least 1")
    if args.timeout <= 0:
        ap.error("--timeout must be positive")
    if args.budget < 0:
        ap.error("--budget must be 0 (no limit) or a number of seconds")
    if (bool(args.trace) + bool(args.command) + bool(args.profile)) != 1:
        ap.error("give one of -- PROGRAM ARGS..., --trace FILE or --profile FILE")


# ---------------------------------------------------------------------------------------
# A heap profile instead of a trace
# ---------------------------------------------------------------------------------------
PROFILE_TYPES = ("alloc_objects", "alloc_space", "inuse_objects", "inuse_space")


def analyze_profile(path):
    """The sites of heap profile path: dict(program, period, samples, totals {type: value},
    sites [{frames, alloc_objects, alloc_space, inuse_objects, inuse_space}]), one site per
    distinct stack of function names (innermost first), kite's own frames pruned."""
    try:
        prof = kiteprof.load(path)
        cols = {t: prof.index(t) for t in PROFILE_TYPES}
    except kiteprof.ProfileError as ex:
        raise AdviseError(f"{path}: {ex}")
    by = defaultdict(lambda: dict.fromkeys(PROFILE_TYPES, 0))
    for frames, vals in prof.named_samples():
        e = by[tuple(frames) or ("(no stack recorded)",)]
        for t, k in cols.items():
            e[t] += vals[k]
    sites = [dict(frames=list(k), **v) for k, v in by.items()]
    totals = {t: sum(x[t] for x in sites) for t in PROFILE_TYPES}
    return dict(path=path, program=prof.program(), period=prof.period, samples=len(prof.samples),
                totals=totals, sites=sites)


def render_profile(p, top, meta):
    """The report of a heap profile: summary, top sites by bytes allocated, sites by bytes
    live (at the dump; at exit with KITE_PROF_LEAKS, the leaks), method, JSON block."""
    e = html.escape
    t = p["totals"]
    by_alloc = sorted(p["sites"], key=lambda x: (-x["alloc_space"], -x["alloc_objects"], x["frames"]))
    by_live = sorted((x for x in p["sites"] if x["inuse_space"] > 0),
                     key=lambda x: (-x["inuse_space"], -x["inuse_objects"], x["frames"]))
    title = p["program"] or os.path.basename(p["path"])
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>kite advise: {e(title[:80])} (heap profile)</title><style>{CSS}</style></head><body>",
             f"<h1>Where does <code>{e(os.path.basename(title)[:160])}</code> allocate?</h1>"]
    mi = meta["machine"]
    parts.append(f'<p class="meta">Report by <code>tools/kite-lab advise --profile</code>, {e(meta["date"])}; '
                 f'{e(mi["cpu"])}, Linux {e(mi["kernel"])}; kite at <code>{e(meta["git"] or "?")}</code>. '
                 f'Profile: <code>{e(p["path"])}</code> of <code>{e(title)}</code>, {p["samples"]:,} sampled '
                 f'stacks, one sample per {fmt_bytes(p["period"])} allocated on average.</p>')
    parts.append('<h2 id="verdict">Summary</h2><div class="verdict">')
    lines = [f"The program allocated about <b>{fmt_bytes(t['alloc_space'])}</b> in "
             f"{t['alloc_objects']:,} blocks since it started, from {len(p['sites']):,} sampled sites; "
             f"<b>{fmt_bytes(t['inuse_space'])}</b> in {t['inuse_objects']:,} blocks were live when the "
             f"profile was written."]
    if by_alloc and t["alloc_space"]:
        x = by_alloc[0]
        lines.append(f"The site that allocated most, <code>{e(x['frames'][0])}</code>, made "
                     f"{x['alloc_space'] * 100 / t['alloc_space']:.0f}% of those bytes.")
    if by_live and t["inuse_space"]:
        x = by_live[0]
        lines.append(f"The site that holds most, <code>{e(x['frames'][0])}</code>, holds "
                     f"{x['inuse_space'] * 100 / t['inuse_space']:.0f}% of the live bytes.")
    lines.append("A profile has the sites and sizes of a sample of the allocations, not the order "
                 "of the requests: the allocators are not replayed from it. To compare them, run "
                 "advise on the program (or a smaller run of it) to capture a trace.")
    parts += [f"<p>{x}</p>" for x in lines] + ["</div>"]

    def table(tid, rows, first):
        order = (first, "alloc_space", "alloc_objects", "inuse_space", "inuse_objects")
        order = tuple(dict.fromkeys(order))
        head = dict(alloc_space="bytes allocated", alloc_objects="blocks allocated",
                    inuse_space="bytes live", inuse_objects="blocks live")
        out = [f'<table id="{tid}"><tr>' + "".join(f'<th class="num">{head[c]}</th>' for c in order)
               + '<th>site (caller &larr; its callers)</th></tr>']
        for x in rows[:top]:
            cells = "".join(_num_td(x[c], fmt_bytes(x[c]) if c.endswith("space") else f"{x[c]:,}") for c in order)
            out.append(f"<tr>{cells}<td class=\"site\">{' &larr; '.join(e(f) for f in x['frames'])}</td></tr>")
        out.append("</table>")
        if len(rows) > top:
            out.append(f'<p class="note">({len(rows) - top} more sites not shown.)</p>')
        return out

    parts.append('<h2 id="sites">Top allocation sites</h2>')
    parts.append(f'<p class="note">By bytes allocated since start; the top {min(top, len(by_alloc))} of '
                 f'{len(by_alloc):,}. Each figure is the sum of its samples\' weights: an estimate '
                 f'whose error shrinks as the site\'s bytes grow (docs/profiling.md).</p>')
    parts += table("site-table", by_alloc, "alloc_space")
    parts.append('<h2 id="live">Live at the profile</h2>')
    parts.append('<p class="note">By bytes still allocated when the profile was written (at exit with '
                 '<code>KITE_PROF_LEAKS=1</code>: what the program never freed).</p>')
    parts += table("live-table", by_live, "inuse_space") if by_live else ['<p class="note">Nothing live.</p>']
    parts.append('<h2 id="method">Method</h2><ul class="note">')
    parts.append("<li>The heap profiler (<code>KITE_PROF</code>, docs/profiling.md) samples one allocation "
                 "per random gap of bytes and weighs it by the inverse of its chance; the profile is "
                 "pprof's format, its addresses named here with the program's files (binutils), as "
                 "pprof does: read it on the machine that wrote it.</li>")
    parts.append("<li>A site is a distinct stack of functions, the allocating call first; kite's own "
                 "frames are left out.</li></ul>")
    data = dict(kind="profile", program=p["program"], profile=p["path"], period=p["period"],
                samples=p["samples"], totals=t, sites=by_alloc[:top], live=by_live[:top])
    blob = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    parts.append(f'<script type="application/json" id="kite-advise-data">{blob}</script>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def run_profile(args, log):
    """advise --profile: the report of a heap profile. Returns the exit status."""
    try:
        p = analyze_profile(args.profile)
    except AdviseError as ex:
        print(f"advise: {ex}", file=sys.stderr)
        return 2
    log(f"profile: {p['samples']:,} samples, {len(p['sites']):,} sites, "
        f"{fmt_bytes(p['totals']['alloc_space'])} allocated, {fmt_bytes(p['totals']['inuse_space'])} live")
    meta = dict(date=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
                machine=machine_info(), git=git_describe())
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(render_profile(p, args.top, meta))
    log(f"report -> {args.output}")
    return 0
