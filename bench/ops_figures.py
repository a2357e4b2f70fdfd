#!/usr/bin/env python3
"""bench/ops_figures.py -- the operations figures of docs/benchmarks.md, regenerated.

    bench/ops_figures.py exit-rss [--reps 5] [--docs]     (make bench-rss runs it with --docs)
    bench/ops_figures.py hugepages [--reps 5] [--docs]    (make bench-hugepages)

exit-rss: build/kite-wl-exit-rss (32 threads of cross-thread churn, then every thread exits
and the main thread frees what they left; bench/workloads/exit-rss.c) once per allocator
and repetition, under LD_PRELOAD (glibc: none), the allocators found as bench/run.py finds
them, the order rotated at each repetition. The program reports its own VmHWM (peak), VmRSS
right after the last free and VmRSS after --idle-ms more of idling.

hugepages: build/kite-wl-tlb (a random pointer chase over --mib MiB of 64-byte nodes;
bench/workloads/tlb.c) under kite with KITE_HUGEPAGES=0 and KITE_HUGEPAGES=1 (and under
glibc for reference), interleaved, the order alternated at each repetition. The program
reports the build and chase times, Rss and AnonHugePages (/proc/self/smaps_rollup); the
kernel's transparent huge page modes are recorded with the figures.

The KITE_* variables of the calling environment are not passed on (only what a variant
sets). Every figure is the median over the repetitions, with the min..max beside it. A run that
crashes, exits non-zero or fails its self-check is reported as such and gets no figure, and
a line on stderr names it; exit-rss exits 1 when a build of kite failed, 0 when only peers
did (a peer that cannot run the program is a finding about it, not a failed run).
Output, in --out (default bench/results/<what>-<UTC timestamp>/): results.csv (first line:
the exact command; one row per run with every figure it printed), results.json, table.md.
With --docs the raw files go to bench/results/<what>-run/ and the table replaces the
<!-- exit-rss --> or <!-- hugepages --> section of docs/benchmarks.md.
"""
import argparse
import csv
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import run as runner  # noqa: E402  (the runner's allocator discovery)
from kitecommon import machine_info, median, spread  # noqa: E402

THP = "/sys/kernel/mm/transparent_hugepage/"


def thp_modes():
    """The kernel's THP settings: {'enabled': 'madvise', 'defrag': 'madvise'} (the
    bracketed choice of each file), '?' where unreadable."""
    out = {}
    for k in ("enabled", "defrag"):
        try:
            with open(THP + k) as f:
                text = f.read()
            out[k] = text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()
        except (OSError, ValueError):
            out[k] = "?"
    return out


def parse_figures(text):
    """{key: float} of the `key: number` lines a workload printed (`time: 1.2 s` too)."""
    figs = {}
    for line in text.splitlines():
        k, sep, v = line.partition(": ")
        if sep and k.replace("_", "").isalnum() and k != "checksum":
            try:
                figs[k] = float(v.split()[0])
            except (ValueError, IndexError):
                pass
    return figs


def run_once(argv, preload, env_extra, timeout):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("KITE_"):
            env.pop(k)  # only what the variant asks for
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(env_extra)
    try:
        p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(status="TIMEOUT", figures={}, output="")
    text = p.stdout.decode("utf-8", "replace")
    if p.returncode < 0:
        status = f"CRASH sig {-p.returncode}"
    else:
        status = runner.classify_exit(p.returncode, text)
    return dict(status=status, figures=parse_figures(text) if status == "ok" else {},
                output=text[-2000:])


def fmt(values, digits=1):
    """'median (min..max)' of the values, '-' for none."""
    m = median(values)
    if m is None:
        return "-"
    lo, hi = spread(values)
    if len(values) == 1 or lo == hi:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ({lo:.{digits}f}..{hi:.{digits}f})"


def write_docs(marker, body_lines):
    page = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(page) as f:
        text = f.read()
    a, b = text.find(f"<!-- {marker} -->"), text.find(f"<!-- /{marker} -->")
    if a < 0 or b < a:
        print(f"{page}: no <!-- {marker} --> section; not written", file=sys.stderr)
        return False
    body = "\n".join([f"<!-- {marker} -->"] + body_lines + [f"<!-- /{marker} -->"])
    with open(page, "w") as f:
        f.write(text[:a] + body + text[b + len(f"<!-- /{marker} -->"):])
    print(f"wrote {os.path.relpath(page)}")
    return True


def save(outdir, command, meta, variants, runs, md):
    os.makedirs(outdir, exist_ok=True)
    keys = sorted({k for v in variants for r in runs[v] for k in r["figures"]})
    path = os.path.join(outdir, "results.csv")
    with open(path, "w", newline="") as f:
        f.write("# command: " + command + "\n")
        w = csv.writer(f)
        w.writerow(["variant", "rep", "status"] + keys)
        for v in variants:
            for i, r in enumerate(runs[v]):
                w.writerow([v, i + 1, r["status"]] + [r["figures"].get(k, "") for k in keys])
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(dict(command=command, meta=meta, runs=runs), f, indent=1)
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write(f"Command: `{command}`\n\n{md}\n")
    return path


def run_matrix(variants, argv, reps, timeout, rotate):
    """variants: [(name, preload, env)]. Runs every variant once per repetition, the order
    rotated (rotate=True) or reversed every other repetition. Returns {name: [run]}."""
    runs = {v[0]: [] for v in variants}
    for rep in range(reps):
        if rotate:
            k = rep % len(variants)
            order = variants[k:] + variants[:k]
        else:
            order = variants if rep % 2 == 0 else variants[::-1]
        for name, preload, env in order:
            print(f"rep {rep + 1}/{reps} [{name}]", file=sys.stderr, flush=True)
            runs[name].append(run_once(argv, preload, env, timeout))
    return runs


def status_of(rs):
    return next((r["status"] for r in rs if r["status"] != "ok"), "ok")


def vals(rs, key):
    return [r["figures"][key] for r in rs if r["status"] == "ok" and key in r["figures"]]


def cmd_exit_rss(args, command):
    build = os.path.abspath(args.build_dir)
    exe = os.path.join(build, "kite-wl-exit-rss")
    if not os.path.exists(exe):
        print(f"{exe} not found: build first (make)", file=sys.stderr)
        return 1
    allocs = runner.discover_allocators(build, args.alloc, False)
    if args.allocs != "all":
        want = [a.strip() for a in args.allocs.split(",") if a.strip()]
        known = {a["name"] for a in allocs}
        bad = [w for w in want if w not in known]
        if bad:
            print(f"bench/ops_figures.py: unknown allocator {bad[0]!r} (known: "
                  f"{', '.join(sorted(known))})", file=sys.stderr)
            return 2
        allocs = [a for a in allocs if a["name"] in want]
    for a in allocs:
        if a["status"] != "ok":
            print(f"skipped allocator {a['name']}: {a['reason']}", file=sys.stderr)
    variants = [(a["name"], a["path"], {}) for a in allocs if a["status"] == "ok"]
    if not variants:
        print("no allocator to run", file=sys.stderr)
        return 1
    wl_args = f"{args.args} -i {args.idle_ms}".strip()
    argv = [exe] + shlex.split(wl_args)
    meta = dict(command=command, date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), machine=machine_info(), args=wl_args, reps=args.reps,
        kite_commit=runner.git_describe())
    runs = run_matrix(variants, argv, args.reps, args.timeout, rotate=True)
    names = [v[0] for v in variants]
    out = ["| allocator | peak (VmHWM), MiB | RSS after the last free, MiB | "
           f"RSS {args.idle_ms} ms later, MiB | run time, s | status |",
           "|---|---:|---:|---:|---:|---|"]
    for n in names:
        rs, st = runs[n], status_of(runs[n])
        if st != "ok":
            out.append(f"| {n} | - | - | - | - | **{st}** |")
            continue
        out.append(f"| {n} | {fmt(vals(rs, 'rss_peak_mib'))} | {fmt(vals(rs, 'rss_exit_mib'))} | "
                   f"{fmt(vals(rs, 'rss_idle_mib'))} | {fmt(vals(rs, 'time'), 2)} | ok |")
    md = "\n".join(out)
    outdir = finish_out(args, "exit-rss")
    csv_path = save(outdir, command, meta, names, runs, md)
    if args.docs:
        m = meta["machine"]
        write_docs("exit-rss", [
            f"`{command}` ({m['cpu']}, {m['cores']} cores, {meta['date']}, kite at "
            f"`{meta['kite_commit']}`; load average before the run {m['load_at_start']}): "
            f"`kite-wl-exit-rss {wl_args}`, {args.reps} run(s) per allocator, the order "
            "rotated each time; median (min..max). The program's own VmHWM and VmRSS "
            "(`/proc/self/status`). Raw results: "
            f"`{os.path.relpath(csv_path, ROOT)}`.",
            "", md, ""])
    print(md)
    print(f"results in {os.path.relpath(outdir)}/")
    # a peer that fails is shown as such and does not fail the command; kite failing does
    return runner.failures_exit([
        (n, status_of(runs[n]), runner.why_failed(
            next(r["output"] for r in runs[n] if r["status"] != "ok")))
        for n in names if status_of(runs[n]) != "ok"])


def cmd_hugepages(args, command):
    build = os.path.abspath(args.build_dir)
    exe = os.path.join(build, "kite-wl-tlb")
    kite = os.path.join(build, "libkite.so")
    for p in (exe, kite):
        if not os.path.exists(p):
            print(f"{p} not found: build first (make)", file=sys.stderr)
            return 1
    variants = [("kite, KITE_HUGEPAGES=0", kite, {"KITE_HUGEPAGES": "0"}),
                ("kite, KITE_HUGEPAGES=1", kite, {"KITE_HUGEPAGES": "1"})]
    if not args.no_glibc:
        variants.append(("glibc (reference)", None, {}))
    wl_args = f"-n {args.mib} -r {args.steps}"
    argv = [exe] + shlex.split(wl_args)
    meta = dict(command=command, date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), machine=machine_info(), args=wl_args, reps=args.reps,
        kite_commit=runner.git_describe(), thp=thp_modes())
    runs = run_matrix(variants, argv, args.reps, args.timeout, rotate=False)
    names = [v[0] for v in variants]
    out = ["| variant | chase, s | build, s | Rss, MiB | AnonHugePages, MiB | status |",
           "|---|---:|---:|---:|---:|---|"]
    for n in names:
        rs, st = runs[n], status_of(runs[n])
        if st != "ok":
            out.append(f"| {n} | - | - | - | - | **{st}** |")
            continue
        out.append(f"| {n} | {fmt(vals(rs, 'chase'), 3)} | {fmt(vals(rs, 'build'), 3)} | "
                   f"{fmt(vals(rs, 'rss_mib'))} | {fmt(vals(rs, 'anon_huge_mib'))} | ok |")
    a, b = runs[names[1]], runs[names[0]]
    ratios = [x["figures"]["chase"] / y["figures"]["chase"] for x, y in zip(a, b)
              if x["status"] == "ok" and y["status"] == "ok" and y["figures"].get("chase")]
    bratios = [x["figures"]["build"] / y["figures"]["build"] for x, y in zip(a, b)
               if x["status"] == "ok" and y["status"] == "ok" and y["figures"].get("build")]
    md = "\n".join(out)
    if ratios:
        md += (f"\n\nKITE_HUGEPAGES=1 / =0, run by run: chase {fmt(ratios, 3)}, "
               f"build {fmt(bratios, 3)} (median (min..max) of {len(ratios)} pairs).")
    outdir = finish_out(args, "hugepages")
    csv_path = save(outdir, command, meta, names, runs, md)
    if args.docs:
        m, t = meta["machine"], meta["thp"]
        write_docs("hugepages", [
            f"`{command}` ({m['cpu']}, {m['cores']} cores, {meta['date']}, kite at "
            f"`{meta['kite_commit']}`; load average before the run {m['load_at_start']}; "
            f"transparent huge pages: enabled `{t['enabled']}`, defrag `{t['defrag']}`): "
            f"`kite-wl-tlb {wl_args}`, {args.reps} run(s) per variant, the order alternated; "
            "median (min..max). Chase: the timed walk alone; build: allocating and linking "
            "the nodes; Rss and AnonHugePages from `/proc/self/smaps_rollup` after the walk. "
            f"Raw results: `{os.path.relpath(csv_path, ROOT)}`.",
            "", md, ""])
    print(md)
    print(f"results in {os.path.relpath(outdir)}/")
    return 0 if all(status_of(runs[n]) == "ok" for n in names) else 1


def finish_out(args, what):
    if args.docs and not args.out:
        return os.path.join(ROOT, "bench", "results", f"{what}-run")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return os.path.abspath(args.out or os.path.join(ROOT, "bench", "results", f"{what}-{stamp}"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/ops_figures.py",
                                 description="Operations figures: RSS after threads exit "
                                             "(exit-rss), KITE_HUGEPAGES (hugepages).")
    sub = ap.add_subparsers(dest="what", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--reps", type=int, default=5, help="runs per variant (default 5)")
    common.add_argument("--timeout", type=float, default=300.0,
                        help="seconds before a run is killed (default 300)")
    common.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    common.add_argument("--out", default=None, help="output directory")
    common.add_argument("--docs", action="store_true",
                        help="write the table into docs/benchmarks.md")
    e = sub.add_parser("exit-rss", parents=[common],
                       help="RSS after 32 threads of cross-thread churn exit, per allocator")
    e.add_argument("--args", default="", help="more kite-wl-exit-rss arguments, e.g. '-t 8'")
    e.add_argument("--idle-ms", type=int, default=1000,
                   help="idle time before the last RSS reading (default 1000)")
    e.add_argument("--allocs", default="all", help="comma-separated allocators (default all)")
    e.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                   help="add a preloadable .so as allocator NAME (repeatable)")
    h = sub.add_parser("hugepages", parents=[common],
                       help="kite-wl-tlb under KITE_HUGEPAGES=0 and 1")
    h.add_argument("--mib", type=int, default=1024, help="heap size in MiB (default 1024)")
    h.add_argument("--steps", type=int, default=20, help="millions of steps (default 20)")
    h.add_argument("--no-glibc", action="store_true", help="leave out the glibc reference")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if getattr(args, "idle_ms", 0) < 0 or getattr(args, "mib", 1) < 1 or \
            getattr(args, "steps", 1) < 1:
        ap.error("--idle-ms must be >= 0, --mib and --steps >= 1")
    command = " ".join(shlex.quote(a) for a in ["bench/ops_figures.py"] + (
        argv if argv is not None else sys.argv[1:]))
    return (cmd_exit_rss if args.what == "exit-rss" else cmd_hugepages)(args, command)


if __name__ == "__main__":
    sys.exit(main())
