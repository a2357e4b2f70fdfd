#!/usr/bin/env python3
"""bench/rss_timeline.py -- resident memory over time, per allocator, on a phase-change program.

    make bench-rss                              # the default run, written into the docs
    bench/rss_timeline.py -h
    bench/rss_timeline.py --size tiny --allocs glibc,kite --out /tmp/rss

Runs <build>/kite-wl-phases (bench/workloads/phases.c: build a large working set, free 90%
of it, idle, rebuild with another size mix, many threads that allocate and exit, idle, tear
down, idle) once per allocator and repetition, under LD_PRELOAD (glibc: none), the
allocators found as bench/run.py finds them (kite, kite-secure when built, glibc, the Debian
peers, mimalloc3 from .venv), the order rotated at each repetition. While the program runs,
its VmRSS is read from /proc/PID/status every --interval-ms (default 10 ms, on a fixed
schedule, so a slow read does not shift the following ones).

Output, in --out (default bench/results/rss-<UTC timestamp>/): rss.csv (first line: the
exact command; then allocator, rep, t_s, rss_mib, one row per sample), rss.json (the
samples, the phase marks the program printed, per allocator peak and area), rss.md (a table
of peak RSS and area under the curve in MiB*s per allocator, median over repetitions, and
one of the RSS at the end of each phase, which says where an allocator's memory went), and
rss_timeline.png (one line per allocator, kite drawn thicker; unless --no-charts). With
--docs: the chart goes to docs/bench/, the raw files to bench/results/rss-run/, and the
table and chart replace the <!-- rss-timeline --> section of docs/benchmarks.md.

A run that crashes, exits non-zero or whose self-check fails is reported as such and its
samples are kept but it gets no peak or area; a line on stderr names the allocator and the
last line the program printed. Exit status 1 when a build of kite failed, 0 when only
peers did (a peer that cannot run the program is a finding about it, not a failed run).
"""
import argparse
import csv
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import run as runner  # noqa: E402  (the runner's allocator discovery)
from kitecommon import machine_info, median  # noqa: E402

SIZES = {"tiny": "-n 8 -t 4 -i 30", "small": "-n 256 -t 16 -i 300",
         "medium": "-n 768 -t 32 -i 300", "large": "-n 2048 -t 64 -i 500"}


MIN_SAMPLE_KIB = 256  # a running C program has more than this resident (libc alone)


def read_rss_kib(pid):
    """VmRSS of pid in KiB, or None once the process is gone (or a zombie: no VmRSS)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def sample_run(argv, preload, interval, timeout):
    """Runs argv under preload, sampling its RSS. Returns dict(status, samples [(t, kib)],
    phases [(name, t)], output)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    lines = []

    def reader():
        for raw in p.stdout:
            lines.append((time.perf_counter() - t0, raw.decode("utf-8", "replace")))
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    samples = []
    nxt = time.perf_counter()
    timed_out = False
    while p.poll() is None:
        now = time.perf_counter()
        if now - t0 > timeout:
            p.kill()
            timed_out = True
            break
        kib = read_rss_kib(p.pid)
        # below MIN_SAMPLE_KIB the process is being built by exec or torn down at its exit
        # (a loaded machine catches it there: 0 or a few KiB), not running: not a sample
        if kib and kib >= MIN_SAMPLE_KIB:
            samples.append((now - t0, kib))
        nxt += interval
        delay = nxt - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:  # fell behind (a loaded machine): keep the schedule, skip the missed slots
            nxt = time.perf_counter()
    p.wait()
    th.join(timeout=5)
    text = "".join(l for _, l in lines)
    phases = []
    for t, l in lines:  # the program's own clock is not ours: use the time we read the line
        if l.startswith("phase "):
            phases.append((l.split()[1], round(t, 4)))
    if timed_out:
        status = "TIMEOUT"
    elif p.returncode < 0:
        status = f"CRASH sig {-p.returncode}"
    else:
        status = runner.classify_exit(p.returncode, text)
    return dict(status=status, samples=samples, phases=phases, output=text[-2000:])


def area_mib_s(samples):
    """Area under the RSS curve, MiB*s (trapezoids between samples)."""
    a = 0.0
    for (t1, k1), (t2, k2) in zip(samples, samples[1:]):
        a += (t2 - t1) * (k1 + k2) / 2 / 1024
    return a


def chart(path, results, names, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"kite": "#d62728", "glibc": "#7f7f7f", "jemalloc": "#1f77b4",
              "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e", "tbbmalloc": "#9467bd",
              "mimalloc3": "#8c564b", "kite-secure": "#e377c2"}
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for i, n in enumerate(names):
        r = results[n][0]  # the first repetition of each allocator
        if not r["samples"]:  # failed at start: named in the legend with its status
            if r["status"] != "ok":
                ax.plot([], [], label=f"{n} ({r['status']})", color=colors.get(n, f"C{i}"))
            continue
        kite = n.startswith("kite")
        ax.plot([t for t, _ in r["samples"]], [k / 1024 for _, k in r["samples"]],
                label=n + ("" if r["status"] == "ok" else f" ({r['status']})"),
                color=colors.get(n, f"C{i}"), lw=2.6 if n == "kite" else 1.8 if kite else 1.0,
                zorder=3 if kite else 2)
    ref = results.get("kite", results[names[0]])[0]
    for name, t in ref["phases"]:
        ax.axvline(t, color="black", lw=0.5, ls=":")
        ax.text(t, ax.get_ylim()[1] * 0.98, " " + name, rotation=90, va="top", fontsize=7)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("RSS, MiB (VmRSS every 10 ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def phase_ends(run):
    """{phase: RSS in MiB at its end (the last sample before the next phase's mark, or
    before the process ended)} for one run."""
    marks = run["phases"] + [("exit", float("inf"))]
    out = {}
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        inside = [k for t, k in run["samples"] if t0 <= t < t1]
        if inside:
            out[name] = inside[-1] / 1024
    return out


def phase_table(results, names):
    """RSS at the end of each phase, MiB, median over the clean runs of each allocator."""
    order = []
    for n in names:
        for r in results[n]:
            for ph, _ in r["phases"]:
                if ph not in order and ph != "end":
                    order.append(ph)
    out = ["| allocator | " + " | ".join(order) + " |", "|---|" + "---:|" * len(order)]
    for n in names:
        ends = [phase_ends(r) for r in results[n] if r["status"] == "ok"]
        cells = []
        for ph in order:
            m = median(e.get(ph) for e in ends)
            cells.append("-" if m is None else f"{m:.0f}")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def table(summary, names):
    out = ["| allocator | peak RSS, MiB | area under the curve, MiB·s | run time, s | status |",
           "|---|---:|---:|---:|---|"]
    for n in names:
        s = summary[n]
        if s["status"] == "ok":
            out.append(f"| {n} | {s['peak_mib']:.1f} | {s['area_mib_s']:.1f} | "
                       f"{s['duration_s']:.2f} | ok |")
        else:
            out.append(f"| {n} | - | - | - | **{s['status']}** |")
    return "\n".join(out)


def write_docs(md_table, chart_path, csv_path, command, meta, phases_md=""):
    page = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(page) as f:
        text = f.read()
    a, b = text.find("<!-- rss-timeline -->"), text.find("<!-- /rss-timeline -->")
    if a < 0 or b < a:
        print(f"{page}: no <!-- rss-timeline --> section; not written", file=sys.stderr)
        return
    rel = lambda p: os.path.relpath(p, os.path.dirname(page))
    m = meta["machine"]
    body = [
        "<!-- rss-timeline -->",
        f"`{command}` ({m['cpu']}, {m['cores']} cores, {meta['date']}, kite at "
        f"`{meta['kite_commit']}`; load average before the run {m['load_at_start']}): "
        f"`kite-wl-phases {meta['args']}` sampled every {meta['interval_ms']} ms "
        "(`/proc/PID/status` VmRSS) under each allocator. The program builds a large working "
        "set of small blocks, frees 90% of it, idles, rebuilds with medium blocks, runs many "
        "threads that allocate and exit, idles, tears everything down and idles again "
        "(`bench/workloads/phases.c`). Peak and area are medians over "
        f"{meta['reps']} run(s); lower is better for both. Samples: "
        f"`{os.path.relpath(csv_path, ROOT)}`.",
        "",
        md_table,
        "",
    ]
    if phases_md:
        body += ["RSS at the end of each phase (MiB, median; the last sample before the next "
                 "phase begins, so a phase's own peak can be higher):", "", phases_md, ""]
    if chart_path:
        body += [f"![rss_timeline.png]({rel(chart_path)})", ""]
    body.append("<!-- /rss-timeline -->")
    with open(page, "w") as f:
        f.write(text[:a] + "\n".join(body) + text[b + len("<!-- /rss-timeline -->"):])
    print(f"wrote {os.path.relpath(page)}")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="bench/rss_timeline.py",
        description="Resident memory over time per allocator on a phase-change program "
                    "(kite-wl-phases), sampled from /proc/PID/status.")
    ap.add_argument("--size", choices=list(SIZES), default="small",
                    help="kite-wl-phases arguments: " + "; ".join(
                        f"{k}: {v}" for k, v in SIZES.items()) + " (default small)")
    ap.add_argument("--args", default=None,
                    help="kite-wl-phases arguments instead of --size's, e.g. '-n 64 -t 8'")
    ap.add_argument("--allocs", default="all", help="comma-separated allocators (default all)")
    ap.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                    help="add a preloadable .so as allocator NAME (repeatable)")
    ap.add_argument("--reps", type=int, default=1, help="runs per allocator (default 1)")
    ap.add_argument("--interval-ms", type=float, default=10.0,
                    help="sampling period in ms (default 10)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds before a run is killed (default 120)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None,
                    help="output directory (default bench/results/rss-<UTC timestamp>/)")
    ap.add_argument("--no-charts", action="store_true", help="no PNG (no matplotlib needed)")
    ap.add_argument("--docs", action="store_true",
                    help="write the table and chart into docs/benchmarks.md (chart in "
                         "docs/bench/, raw results in bench/results/rss-run/)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.interval_ms <= 0:
        ap.error("--interval-ms must be positive")
    command = " ".join(shlex.quote(a) for a in ["bench/rss_timeline.py"] + (
        argv if argv is not None else sys.argv[1:]))
    build = os.path.abspath(args.build_dir)
    exe = os.path.join(build, "kite-wl-phases")
    if not os.path.exists(exe):
        print(f"{exe} not found: build first (make)", file=sys.stderr)
        return 1
    allocs = runner.discover_allocators(build, args.alloc, False)
    if args.allocs != "all":
        want = [a.strip() for a in args.allocs.split(",") if a.strip()]
        known = {a["name"] for a in allocs}
        for w in want:
            if w not in known:
                ap.error(f"unknown allocator {w!r} (known: {', '.join(sorted(known))})")
        allocs = [a for a in allocs if a["name"] in want]
    for a in allocs:
        if a["status"] != "ok":
            print(f"skipped allocator {a['name']}: {a['reason']}", file=sys.stderr)
    active = [a for a in allocs if a["status"] == "ok"]
    if not active:
        print("no allocator to run", file=sys.stderr)
        return 1
    wl_args = args.args if args.args is not None else SIZES[args.size]
    argv_run = [exe] + shlex.split(wl_args)
    if args.docs:
        args.out = args.out or os.path.join(ROOT, "bench", "results", "rss-run")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join(ROOT, "bench", "results", "rss-" + stamp))
    os.makedirs(outdir, exist_ok=True)
    meta = dict(command=command, date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), machine=machine_info(), args=wl_args, reps=args.reps,
        interval_ms=args.interval_ms, kite_commit=runner.git_describe())
    results = {a["name"]: [] for a in active}
    for rep in range(args.reps):
        k = rep % len(active)
        for a in active[k:] + active[:k]:
            print(f"rep {rep + 1}/{args.reps} [{a['name']}]", file=sys.stderr, flush=True)
            results[a["name"]].append(sample_run(argv_run, a["path"], args.interval_ms / 1000,
                                                 args.timeout))
    names = [a["name"] for a in active]
    summary = {}
    for n in names:
        rs = results[n]
        bad = next((r["status"] for r in rs if r["status"] != "ok"), None)
        if bad or not all(r["samples"] for r in rs):
            summary[n] = dict(status=bad or "NO SAMPLES")
            continue
        summary[n] = dict(status="ok",
                          peak_mib=median(max(k for _, k in r["samples"]) / 1024 for r in rs),
                          area_mib_s=median(area_mib_s(r["samples"]) for r in rs),
                          duration_s=median(r["samples"][-1][0] for r in rs))
    csv_path = os.path.join(outdir, "rss.csv")
    with open(csv_path, "w", newline="") as f:
        f.write("# command: " + command + "\n")
        w = csv.writer(f)
        w.writerow(["allocator", "rep", "t_s", "rss_mib"])
        for n in names:
            for i, r in enumerate(results[n]):
                for t, kib in r["samples"]:
                    w.writerow([n, i + 1, f"{t:.4f}", f"{kib / 1024:.2f}"])
    with open(os.path.join(outdir, "rss.json"), "w") as f:
        json.dump(dict(command=command, meta=meta, allocators=allocs, summary=summary,
                       runs={n: [dict(status=r["status"], phases=r["phases"],
                                      samples=r["samples"], output=r["output"])
                                 for r in results[n]] for n in names}), f, indent=1)
    md = table(summary, names)
    phases_md = phase_table(results, names)
    with open(os.path.join(outdir, "rss.md"), "w") as f:
        f.write(f"Command: `{command}`\n\n{md}\n\n{phases_md}\n")
    chart_path = None
    if not args.no_charts:
        cdir = os.path.join(ROOT, "docs", "bench") if args.docs else outdir
        os.makedirs(cdir, exist_ok=True)
        chart_path = os.path.join(cdir, "rss_timeline.png")
        try:
            chart(chart_path, results, names,
                  f"Resident memory over time: kite-wl-phases {wl_args}")
        except ImportError as e:
            print(f"chart skipped: {e} (use the project's .venv, or --no-charts)",
                  file=sys.stderr)
            chart_path = None
    if args.docs:
        write_docs(md, chart_path, csv_path, command, meta, phases_md)
    print(md)
    print()
    print(phases_md)
    print(f"results in {os.path.relpath(outdir)}/")
    failed = [(n, summary[n]["status"],
               runner.why_failed(next((r["output"] for r in results[n] if r["status"] != "ok"),
                                      ""))) for n in names if summary[n]["status"] != "ok"]
    return runner.failures_exit(failed)


if __name__ == "__main__":
    sys.exit(main())
