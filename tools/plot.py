#!/usr/bin/env python3
"""plot.py -- the lab's PNG charts, drawn from the raw results tools/lab.py writes.

    tools/plot.py [RESULTS_JSON] [OUT_DIR]      (defaults: docs/lab/results.json docs/lab)

Charts, as the seed draws them (one line or bar per allocator):
  insert-delete-time.png       time for the N frees + N mallocs, over N (log-log)
  insert-delete-response.png   average response time per request over N
  realloc-time.png             time for the N reallocs over N (log-log)
  realloc-response.png         average response time per request over N
  traces-response.png          average response time on each captured program trace
  traces-utilization.png       utilization on each captured program trace
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

MARKERS = "osD^v<>pP*Xh"


def color(i):
    return plt.cm.tab20(i % 20)  # 13+ allocators: the 10-colour default cycle would repeat


def style(i):
    return dict(marker=MARKERS[i % len(MARKERS)], markersize=4, linewidth=1.4, color=color(i))


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
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, a in enumerate(names):
        if a in hidden:
            continue
        pts = data[a]
        ax.plot([p[0] for p in pts], [p[col] for p in pts], label=a, **style(i))
    ax.set_xlabel("N")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    else:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bar_chart(results, key, ylabel, title, path, pct=False, log=False):
    rows = [r for r in results["traces"] if not r.get("error")]
    traces = sorted({r["trace"] for r in rows})
    allocs = order(results, {r["allocator"] for r in rows})
    if not traces or not allocs:
        return
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(traces) * len(allocs) / 4), 5))
    width = 0.8 / len(allocs)
    for i, a in enumerate(allocs):
        ys = []
        for t in traces:
            rr = [r for r in rows if r["trace"] == t and r["allocator"] == a]
            v = median_runs(rr[0]["runs"], key) if rr else None
            ys.append((v or 0) * (100 if pct else 1))
        ax.bar([k + i * width for k in range(len(traces))], ys, width, label=a, color=color(i))
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(traces))])
    ax.set_xticklabels(traces, fontsize=8)
    ax.set_ylabel(ylabel)
    if log:  # the traces differ by 100x: a log axis keeps each one readable
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
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
            if pts:
                vals[(e, a)] = (pts[-1][3] or 0) * 100
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
    ax.set_ylabel("utilization, % (peak live bytes / peak footprint)")
    ax.set_title("Utilization at the largest N")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_results(path):
    """results.json: a first line holding {"command": ...}, then the results object."""
    with open(path) as f:
        first, _, rest = f.read().partition("\n")
    return json.loads(rest) if rest.strip() else json.loads(first)


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
    utilization_chart(results, p("utilization.png"))
    return files


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
    results = load_results(res)
    for name in draw_all(results, out):
        print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
