#!/usr/bin/env python3
"""plot.py -- the lab's PNG charts, drawn from the raw results tools/lab.py writes.

    tools/plot.py [RESULTS_JSON] [OUT_DIR]      (defaults: docs/lab/results.json docs/lab)

RESULTS_JSON is tools/lab.py's results.json, or bench/run.py's (make bench's): its charts
(time_ratio.png, peak_rss.png, scaling.png) are then drawn by bench/run.py's own code.
The charts need matplotlib: the project's .venv has it (`make venv`; .venv/bin/python
tools/plot.py), else `apt install python3-matplotlib`; without it plot.py says so in one line.

Charts, as the seed draws them (one line or bar per allocator; kite in thick black, the
others in 16 distinct colour/marker/dash combinations, legends right of the axes):
  insert-delete-time.png       time for the N frees + N mallocs, over N (log-log)
  insert-delete-response.png   average response time per request over N
  realloc-time.png             time for the N reallocs over N (log-log)
  realloc-response.png         average response time per request over N
  traces-response.png          average response time on each captured program trace
  traces-utilization.png       utilization (lab policies) on each captured program trace
  traces-rss.png               peak RSS growth (every allocator) on each captured program trace
  big-traces-*.png             the same three for the large traces of build/lab-traces/
  trace-intervals.png          average response per line interval of the longest trace
  peak-free.png                the free structure at the heap's peak (tree nodes and their
                               duplicates; the seglist's list lengths), as the seed's peaks tool
  utilization.png              utilization of the synthetic experiments at the largest N
Only this script filters or aggregates; results.json keeps every run.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitecommon  # noqa: E402

# matplotlib.pyplot, imported by draw_all: -h and load_results work without matplotlib
plt = None


def _load_pyplot():
    global plt
    if plt is None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot
        plt = matplotlib.pyplot

MARKERS = "osD^v<>pP*Xhd8H"
# 16 colours that stay apart from each other (saturated, light and dark alternating, no
# black: black is kite's), each paired with its own marker and, past the first 8, a dashed
# line, so 15+ series can be told apart in colour and in grey print alike.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#393b79"]
HIGHLIGHT = "kite"


def color(i, name=None):
    return "black" if name == HIGHLIGHT else PALETTE[i % len(PALETTE)]


def style(i, name=None):
    if name == HIGHLIGHT:  # kite stands out: black, thick, on top
        return dict(marker="o", markersize=6, linewidth=3.0, color="black", zorder=10)
    return dict(marker=MARKERS[i % len(MARKERS)], markersize=4, linewidth=1.3, color=color(i),
                linestyle="-" if i < 8 else "--")


def legend_outside(ax, fig, ncol=1):
    """The legend right of the axes, never over the data."""
    ax.legend(fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def median_runs(runs, key):
    return kitecommon.median(r.get(key) for r in runs)


def series(results, exp):
    """{allocator: [(N, median total_ms, median avg_ns, utilization)]} for one experiment."""
    out = {}
    for row in results["synthetic"]:
        if row["experiment"] != exp or row.get("error") or row.get("skipped") or not row["runs"]:
            continue
        out.setdefault(row["allocator"], []).append(
            (row["n"], median_runs(row["runs"], "total_ns") / 1e6, median_runs(row["runs"], "avg_ns"),
             median_runs(row["runs"], "utilization")))
    for v in out.values():
        v.sort()
    return out


def order(results, names):
    known = results.get("allocators", [])
    return [a for a in known if a in names] + sorted(a for a in names if a not in known)


def line_chart(results, exp, col, ylabel, title, path, log=True):
    data = series(results, exp)
    names = order(results, data)
    hidden = []
    if not log and len(names) > 2:
        # as the seed does, leave an outlier out of a linear chart so the others can be read
        peaks = sorted(max(p[col] for p in data[a]) for a in names)
        typical = peaks[len(peaks) // 2]
        hidden = [a for a in names if max(p[col] for p in data[a]) > 10 * typical]
        if hidden:
            title += f"\n(not shown, over 10x the others: {', '.join(hidden)})"
    fig, ax = plt.subplots(figsize=(10, 5))
    for i, a in enumerate(names):
        if a in hidden:
            continue
        pts = data[a]
        ax.plot([p[0] for p in pts], [p[col] for p in pts], label=a, **style(i, a))
    ax.set_xlabel("N")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    else:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax, fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bar_chart(results, key, ylabel, title, path, pct=False, log=False, which="traces"):
    rows = [r for r in results.get(which, []) if not r.get("error") and r.get("runs")]
    traces = sorted({r["trace"] for r in rows})
    # only the allocators that have this measure (utilization: the lab policies)
    allocs = order(results, {r["allocator"] for r in rows if median_runs(r["runs"], key) is not None})
    if not traces or not allocs:
        return
    fig, ax = plt.subplots(figsize=(max(10, 1.2 * len(traces) * len(allocs) / 4 + 2), 5))
    width = 0.8 / len(allocs)
    for i, a in enumerate(allocs):
        ys = []
        for t in traces:
            rr = [r for r in rows if r["trace"] == t and r["allocator"] == a]
            v = median_runs(rr[0]["runs"], key) if rr else None
            ys.append((v or 0) * (100 if pct else 1))
        hl = a == HIGHLIGHT
        ax.bar([k + i * width for k in range(len(traces))], ys, width, label=a, color=color(i, a),
               edgecolor="black" if hl else "none", linewidth=1.5 if hl else 0, zorder=3 if hl else 2)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(traces))])
    ax.set_xticklabels(traces, fontsize=8)
    ax.set_ylabel(ylabel)
    if log:  # the traces differ by 100x: a log axis keeps each one readable
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    legend_outside(ax, fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def utilization_chart(results, path):
    exps = ["insert-delete", "realloc"]
    allocs = []
    vals = {}
    for e in exps:
        data = series(results, e)
        for a, pts in data.items():
            if pts and pts[-1][3] is not None:  # utilization: lab policies only
                vals[(e, a)] = pts[-1][3] * 100
                if a not in allocs:
                    allocs.append(a)
    allocs = order(results, allocs)
    if not allocs:
        return
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.4
    for i, e in enumerate(exps):
        ax.bar([k + i * width for k in range(len(allocs))], [vals.get((e, a), 0) for a in allocs], width,
               label=f"{e} (largest N)", color=color(2 * i))
    ax.set_xticks([k + width / 2 for k in range(len(allocs))])
    ax.set_xticklabels(allocs, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("utilization, % (peak live bytes / heap span)")
    ax.set_title("Utilization of the lab policies at the largest N")
    ax.grid(True, axis="y", alpha=0.3)
    legend_outside(ax, fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class PlotError(Exception):
    pass


def load_results(path):
    """tools/lab.py's results.json (a first line holding {"command": ...}, then the results
    object) or bench/run.py's (one object with "meta" and "rows")."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}")
    try:
        return json.loads(text)
    except ValueError:
        pass
    first, _, rest = text.partition("\n")
    try:
        return json.loads(rest) if rest.strip() else json.loads(first)
    except ValueError as e:
        raise PlotError(f"{path} is not a results.json of tools/lab.py or bench/run.py ({e})")


def is_bench_results(results):
    return isinstance(results, dict) and "rows" in results and "meta" in results


def draw_bench(results, out_dir):
    """bench/run.py's charts of its own results.json, by its own chart code."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "run.py")
    spec = importlib.util.spec_from_file_location("kite_bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = results["rows"]
    cases, seen = [], set()
    for r in rows:
        if r["label"] not in seen:
            seen.add(r["label"])
            cases.append(dict(label=r["label"], workload=r["workload"], threads=r.get("threads")))
    os.makedirs(out_dir, exist_ok=True)
    return [os.path.basename(f) for f in
            mod.charts(os.path.abspath(out_dir), rows, results["allocators"], cases,
                       results["meta"].get("size"))]


def draw_all(results, out_dir):
    _load_pyplot()
    os.makedirs(out_dir, exist_ok=True)
    files = []

    def p(name):
        files.append(name)
        return os.path.join(out_dir, name)

    line_chart(results, "insert-delete", 1, "time for N frees + N mallocs (ms)",
               "Insert/delete: N inserts (free) and N removals (malloc)", p("insert-delete-time.png"))
    line_chart(results, "insert-delete", 2, "average response time (ns per request)",
               "Insert/delete: average response time", p("insert-delete-response.png"), log=False)
    line_chart(results, "realloc", 1, "time for N reallocs (ms)",
               "Realloc: N reallocs, each coalescing with free neighbours", p("realloc-time.png"))
    line_chart(results, "realloc", 2, "average response time (ns per request)",
               "Realloc: average response time", p("realloc-response.png"), log=False)
    bar_chart(results, "avg_ns", "average response time (ns per request)",
              "Captured programs: average response time (whole trace)", p("traces-response.png"), log=True)
    bar_chart(results, "utilization", "utilization, %", "Captured programs: utilization",
              p("traces-utilization.png"), pct=True)
    bar_chart(results, "rss_bytes", "peak RSS growth, bytes (log)",
              "Captured programs: peak RSS growth (every allocator)", p("traces-rss.png"), log=True)
    if results.get("big_traces"):
        bar_chart(results, "avg_ns", "average response time (ns per request)",
                  "Large program traces: average response time (whole trace)",
                  p("big-traces-response.png"), log=True, which="big_traces")
        bar_chart(results, "utilization", "utilization, %", "Large program traces: utilization",
                  p("big-traces-utilization.png"), pct=True, which="big_traces")
        bar_chart(results, "rss_bytes", "peak RSS growth, bytes (log)",
                  "Large program traces: peak RSS growth (every allocator)",
                  p("big-traces-rss.png"), log=True, which="big_traces")
    utilization_chart(results, p("utilization.png"))
    if results.get("intervals"):
        intervals_chart(results, p("trace-intervals.png"))
    if (results.get("peaks") or {}).get("policies"):
        peak_chart(results, p("peak-free.png"))
    return files


def seg_bucket(cap):
    """lab/seglist.c's bucket of a block of capacity cap (block size - 8)."""
    if cap <= 72:
        return (cap - 24) // 8
    if cap >= 65535:
        return 16
    lg = cap.bit_length() - 1
    return 7 if lg <= 7 else 7 + lg - 7


SEG_LABELS = ["24", "32", "40", "48", "56", "64", "72", "80-255", "256", "512", "1K", "2K", "4K",
              "8K", "16K", "32K", ">=65535"]


def peak_chart(results, path):
    pk = results["peaks"]
    pols = list(pk["policies"])
    fig, axes = plt.subplots(1, len(pols), figsize=(6 * len(pols), 4.5), squeeze=False)
    for ax, pol in zip(axes[0], pols):
        d = pk["policies"][pol]
        if pol == "seglist":
            counts = [0] * 17
            for cap, c in d["sizes"]:
                counts[seg_bucket(cap)] += c
            ax.bar(range(17), counts, color=PALETTE[0])
            ax.set_xticks(range(17))
            ax.set_xticklabels(SEG_LABELS, rotation=60, fontsize=7)
            ax.set_xlabel("bucket (payload capacity, bytes)")
            ax.set_ylabel("free blocks on the bucket's list")
            ax.set_title(f"seglist: {d['blocks']:,} free blocks in 17 lists", fontsize=9)
        else:
            caps = [c for c, _ in d["sizes"]]
            ax.bar(range(len(caps)), [n for _, n in d["sizes"]], color=PALETTE[3])
            step = max(1, len(caps) // 12)
            ax.set_xticks(range(0, len(caps), step))
            ax.set_xticklabels([str(caps[k]) for k in range(0, len(caps), step)], rotation=60, fontsize=7)
            ax.set_xlabel("tree node (free block capacity, bytes), in key order")
            ax.set_ylabel("blocks at the node (1 + its duplicate list)")
            ax.set_title(f"{pol}: {d['blocks']:,} free blocks, a tree of {len(caps)} nodes", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"The free structure at the heap's peak: insert-delete {pk['n']:,}, line {pk['line']:,}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def intervals_chart(results, path):
    iv = results["intervals"]
    names = order(results, iv["rows"])
    xs = [f"{a:,}-{b:,}" for a, b in iv["ranges"]]
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, a in enumerate(names):
        runs = iv["rows"][a]
        ys = [kitecommon.median(run[k] for run in runs) for k in range(len(xs))]
        ax.plot(range(len(xs)), ys, label=a, **style(i, a))
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=30, ha="right", fontsize=7)
    ax.set_xlabel(f"lines of {iv['trace']}")
    ax.set_ylabel("average response time (ns per request, log)")
    ax.set_yscale("log")
    ax.set_title(f"{iv['trace']}: average response per interval")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax, fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=os.path.join("docs", "lab", "results.json"),
                    metavar="RESULTS_JSON", help="tools/lab.py's raw results (default: %(default)s)")
    ap.add_argument("out", nargs="?", metavar="OUT_DIR",
                    help="where the PNGs go (default: the folder of RESULTS_JSON)")
    a = ap.parse_args(argv)
    res = a.results
    out = a.out or os.path.dirname(res) or "."
    try:
        results = load_results(res)
        import matplotlib  # noqa: F401  (checked here, so the message is one line)
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    except ImportError:
        print("plot.py: needs matplotlib: run it with the project's .venv/bin/python (`make venv` "
              "makes it) or `apt install python3-matplotlib`", file=sys.stderr)
        return 1
    names = draw_bench(results, out) if is_bench_results(results) else draw_all(results, out)
    for name in names:
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
