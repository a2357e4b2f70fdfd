#!/usr/bin/env python3
"""tests/tools/test_advise.py BUILD_DIR [SOURCE_DIR] -- `tools/kite-lab advise` end to end.

Runs advise on BUILD_DIR/advise_leaky (tests/tools/advise_leaky.c: known sizes, two threads,
7 blocks of 48 bytes leaked from advise_leak_site <- leak_caller <- main) and checks the HTML
report: every section, every allocator row with numbers that parse and order (min <= median
<= max), the known sites and the known leak with its callers, the size table's exact counts,
the verdict and the note on threads, no external asset. Then an old trace without sites, and
bad usage (exit 2). Last, when Debian's chromium is installed, a headless screenshot of the
report in which each chart must be found (by its frame colour) at its size and not blank;
without chromium that check is skipped and says so.

Prints one line per test and ends with "N passed, N failed" (counting checks).
"""
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
SRC = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
TOOLS = os.path.join(SRC, "tools")
KITE_LAB = os.path.join(TOOLS, "kite-lab")
TMP = tempfile.mkdtemp(prefix="kite-advise-test-")
sys.path.insert(0, os.path.join(SRC, "tests"))
sys.path.insert(0, TOOLS)
from testlib import check, eq, run_tests  # noqa: E402
import advise  # noqa: E402

REPORT = os.path.join(TMP, "leaky.html")
_state = {}


def run(args, timeout=300, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def advise_cmd(*args):
    return [sys.executable, KITE_LAB, "advise", "--build-dir", BUILD, *args]


def report_data(text):
    m = re.search(r'<script type="application/json" id="kite-advise-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1).replace("<\\/", "</")) if m else None


def table(text, table_id):
    """The rows of <table id=...> as lists of (data-value or text) cells."""
    m = re.search(rf'<table id="{table_id}">(.*?)</table>', text, re.S)
    if not m:
        return None
    rows = []
    for tr in re.findall(r"<tr[^>]*>.*?</tr>", m.group(1), re.S):
        cells = []
        for attrs, body in re.findall(r"<td([^>]*)>(.*?)</td>", tr, re.S):
            v = re.search(r'data-value="([^"]*)"', attrs)
            cells.append(v.group(1) if v else html.unescape(re.sub(r"<[^>]+>", "", body)))
        if cells:
            rows.append((tr, cells))
    return rows


# ---------------------------------------------------------------------------------------

def test_report_of_a_leaky_program():
    r = run(advise_cmd("-n", "2", "-o", REPORT, "--", os.path.join(BUILD, "advise_leaky")))
    eq(r.returncode, 0, f"advise exit status: {r.stderr[-800:]}")
    if not check(os.path.exists(REPORT), "the report is written"):
        return
    text = open(REPORT, encoding="utf-8").read()
    _state["text"] = text
    for sec in ("verdict", "allocators", "live", "sizes", "sites", "leaks", "method"):
        check(f'<h2 id="{sec}">' in text, f"section {sec}")
    data = report_data(text)
    if not check(data is not None, "the JSON data block parses"):
        return
    _state["data"] = data
    # allocators: kite and glibc always; every ok row's numbers parse and are ordered
    rows = table(text, "allocator-table")
    names = {re.search(r'data-allocator="([^"]+)"', tr).group(1): (tr, c) for tr, c in rows}
    check("kite" in names and 'class="kite"' in names["kite"][0], "kite's row, highlighted")
    check("glibc" in names, "glibc's row")
    policies = [x["name"] for x in data["allocators"] if x["kind"] == "policy"]
    check(len(policies) >= 5, f"the lab policies are replayed too: {policies}")
    for name, (tr, cells) in names.items():
        if not cells[-1].startswith("ok"):
            check(name not in ("kite", "glibc"), f"{name} failed: {cells[-1]}")
            continue
        eq(cells[-1], "ok (2 runs)", f"{name}: two repeats")
        try:
            t_med, t_min, t_max, avg, p99, f_med, f_min, f_max = map(float, cells[2:10])
            # utilization is a lab policy's figure (live payload over its heap's span); a
            # real malloc's footprint is its RSS growth, so it has none (an empty cell)
            util = float(cells[10]) if cells[1] == "lab policy" else None
        except ValueError:
            check(False, f"{name}: numbers parse: {cells}")
            continue
        check(0 < t_min <= t_med <= t_max, f"{name}: time min <= median <= max: {cells[2:5]}")
        check(0 < f_min <= f_med <= f_max, f"{name}: footprint min <= median <= max: {cells[7:10]}")
        check(avg > 0 and p99 >= 0, f"{name}: avg {avg}, p99 {p99}")
        if cells[1] == "lab policy":
            check(0 < util <= 1.5, f"{name}: utilization {util}")
        else:
            eq(cells[10], "", f"{name}: a real malloc has no utilization figure")
    # the known sites and the known leak, with their callers
    sites = table(text, "site-table")
    by = {c[2].split(" \u2190 ")[0].split(" (")[0]: c for _, c in sites} if sites else {}
    eq(by.get("make_node", [None])[0], "3000", "3000 allocations at make_node")
    eq(by.get("worker", [None])[0], "500", "500 allocations in the second thread's worker")
    leaks = table(text, "leak-table") or []
    mine = [c for _, c in leaks if c[3].startswith("advise_leak_site (")]
    eq(len(mine), 1, f"the known leak's row: {leaks}")
    if mine:
        eq(mine[0][:3], ["7", "336", "48"], "7 blocks, 336 bytes, of 48")
        fr = mine[0][3].split(" \u2190 ")
        check(len(fr) >= 3 and fr[1].startswith("leak_caller (") and fr[2].startswith("main ("),
              f"its callers: {fr}")
        check(re.search(r"advise_leaky\.c:\d+\)", fr[0]) is not None, f"its source line: {fr[0]}")
    check(data["leaked_blocks"] >= 7 and data["leaked_bytes"] >= 336, "leak totals")
    # the size table counts exactly what the program asked (make_node 24..88, 7 x 48, 500 x 200)
    sizes = {c[0]: int(c[1]) for _, c in table(text, "size-table")}
    eq([sizes.get(k) for k in ("\u226432B", "\u226464B", "\u2264128B", "\u2264256B")],
       [668, 1333 + 7, 999, 500], "allocations per size class (the 7 leaked blocks are 48 bytes)")
    check(data["kinds"].get("m", 0) >= 3507 and data["kinds"].get("f", 0) >= 3500, f"kinds {data['kinds']}")
    eq(data["threads"], 2, "two threads")
    # the verdict: sentences with numbers; the thread caveat
    v = re.search(r'<div class="verdict">(.*?)</div>', text, re.S)
    vt = re.sub(r"<[^>]+>", "", v.group(1)) if v else ""
    check("Fastest:" in vt and "Leanest" in vt, f"verdict names the fastest and the leanest: {vt[:300]}")
    check(re.search(r"\d+(\.\d+)? (ns|us|ms|s)\b", vt) is not None, "the verdict quotes times")
    check("single-threaded" in vt, "the verdict says the replay is single-threaded")
    check("undecided" in vt or "% less than the next" in vt, "a decided answer has its margin")
    # self-contained: no script but the data block, no external asset
    eq(len(re.findall(r"<script\b", text)), 1, "one script element (the JSON data)")
    check(not re.search(r"<(link|img|iframe)\b|\b(src|href)=\"(https?:)?//", text), "no external assets")
    eq(len(re.findall(r'<svg class="chart"', text)), len(data["charts"]), "every chart is an inline SVG")
    check(len(data["charts"]) == 7, f"seven charts: {data['charts']}")
    # each allocator once (bench/run.py's discovery and advise both knew mimalloc3)
    names = [x["name"] for x in data["allocators"]]
    eq(sorted(n for n in set(names) if names.count(n) > 1), [], f"no allocator twice: {names}")
    check("kite is" not in vt or re.search(r"kite is \w+ of (\d+)", vt) is None
          or int(re.search(r"kite is \w+ of (\d+)", vt).group(1))
          == sum(1 for x in data["allocators"] if x["kind"] == "real" and x["status"] == "ok"),
          "kite's rank counts each real malloc once")


def test_budget_on_a_busy_program():
    """advise_busy (about 2 s, 1.5 M allocations) under a 6 s budget: the replays fit it by
    replaying a window, the report says which and speaks in the program's terms, and the trace
    is gone afterwards."""
    out = os.path.join(TMP, "busy.html")
    tmpdir = os.path.join(TMP, "tmpdir")
    os.makedirs(tmpdir)
    env = dict(os.environ, TMPDIR=tmpdir)
    r = run(advise_cmd("--budget", "6", "-n", "2", "--no-policies", "--no-sites", "-o", out,
                       "--", os.path.join(BUILD, "advise_busy")), env=env, timeout=900)
    eq(r.returncode, 0, f"advise exit status: {r.stderr[-800:]}")
    eq(os.listdir(tmpdir), [], "the trace and every temporary file are deleted")
    check(not os.path.exists(os.path.join(TMP, "busy.trace")), "no trace kept without --keep-trace")
    text = open(out, encoding="utf-8").read() if os.path.exists(out) else ""
    data = report_data(text) or {}
    win = data.get("window") or {}
    check(3_000_000 <= data.get("ops", 0) <= 3_000_010, f"1.5 M mallocs and 1.5 M frees (and stdio's): {data.get('ops')}")
    check(win.get("whole") is False and 0 < win.get("ops", 0) < data.get("ops", 0),
          f"a window, not the whole trace: {win}")
    check(abs(win.get("scale", 0) - data.get("ops", 0) / max(win.get("ops", 1), 1)) < 1e-6,
          "times scaled by requests / window")
    check(data.get("replay_s", 1e9) <= data.get("budget_s", 0) + 2,
          f"the replays kept to the budget: {data.get('replay_s')} s of {data.get('budget_s')}")
    m = re.search(r'<span id="window">requests ([\d,]+)\.\.([\d,]+) of ([\d,]+)</span>', text)
    check(m is not None and int(m.group(2).replace(",", "")) - int(m.group(1).replace(",", "")) + 1
          == win.get("ops"), "the verdict names the window")
    # progress: one line per replay with the time spent and an estimate
    prog = re.findall(r"advise: replay (\d+)/(\d+) \(round \d/2\) (\S+): .*; (\d+) s elapsed, about (\d+) s left", r.stderr)
    check(len(prog) >= 2, f"a progress line per replay: {r.stderr[-600:]}")
    v = re.search(r'<div class="verdict">(.*?)</div>', text, re.S)
    vt = html.unescape(re.sub(r"<[^>]+>", "", v.group(1))) if v else ""
    first = vt.strip().split(". ")[0]
    check(first.startswith("The program ran ") and "peak RSS" in first, f"the verdict opens with the run: {vt[:200]}")
    check(re.search(r"take about [\d.]+ ms in glibc's malloc, the one it uses now: [\d.e+-]+% of its run time", vt)
          is not None, f"the allocator's share of the run: {vt[:400]}")
    fig = data.get("verdict", {})
    prog_data = data.get("program") or {}
    check(prog_data.get("rc") == 0 and prog_data.get("wall_s", 0) > 0 and prog_data.get("maxrss_kib", 0) > 0,
          f"the program's run: {prog_data}")
    if fig.get("best") not in (None, "glibc"):
        check(fig["switch"].endswith(" " + os.path.join(BUILD, "advise_busy")) and "LD_PRELOAD=" in fig["switch"],
              f"the line to switch: {fig}")
        check(f"To switch: {fig['switch']}" in vt, "the verdict gives it")
        check(abs(fig["save_s"] - (fig["glibc_s"] - fig["best_s"])) < 1e-9 and fig["save_s"] >= 0, f"the saving: {fig}")
    else:
        check("switching allocators would not save time" in vt, f"glibc best: says so: {vt[:400]}")


def test_trace_deleted_when_killed():
    """SIGTERM during the replays: advise exits 143 and its temporary directory, the captured
    trace in it, is gone. advise_leaky's trace is enough (the removal does not depend on the
    trace's size) and its 3 repeats of every allocator and policy outlast the kill, sent at
    the first replay's line; a run that ended first would exit 0 and fail."""
    tmpdir = os.path.join(TMP, "tmpkill")
    os.makedirs(tmpdir)
    env = dict(os.environ, TMPDIR=tmpdir)
    p = subprocess.Popen(advise_cmd("--budget", "60", "-o", os.path.join(TMP, "killed.html"), "--no-sites",
                                    "--", os.path.join(BUILD, "advise_leaky")),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    for line in p.stderr:            # kill it once it replays: the trace is then complete
        seen += line
        if "advise: replay " in line or "advise: budget" in line:
            break
    p.terminate()
    p.communicate(timeout=120)
    check("advise: replay " in seen or "advise: budget" in seen, f"it got to the replays: {seen[-300:]}")
    eq(p.returncode, 128 + 15, "exit status after SIGTERM")
    eq(os.listdir(tmpdir), [], "nothing left in the temporary directory")


def test_window_trace_replays_clean():
    """kitewindow's trace of a middle window passes kite-replay --check (every id it frees
    was allocated, first by the warm-up), and the window holds the requested requests."""
    sys.path.insert(0, TOOLS)
    import kitewindow
    src = os.path.join(SRC, "tests", "data", "traces", "sort.trace")
    a = advise.analyze(src)
    start, end, dist = kitewindow.choose_window(a["codes"], 100, a["peak_at"])
    eq(end - start, 100, f"100 requests: {start}..{end}")
    check(0 <= dist <= 1, f"distance {dist}")
    out = os.path.join(TMP, "window.trace")
    first, last, warm = kitewindow.write_window(src, out, start, end)
    lines = open(out).read().splitlines()
    eq(len(lines), last, "the last timed line is the file's last")
    eq(last - first + 1, 100, "100 timed lines")
    eq(first - 3, warm, "the warm-up lines come before them")
    r = run([os.path.join(BUILD, "kite-replay"), "--check", out])
    eq(r.returncode, 0, f"kite-replay --check: {r.stderr[-300:]}")
    r = run([os.path.join(BUILD, "kite-replay"), "--json", "-r", str(first), str(last), out])
    eq(json.loads(r.stdout)["ranges"][0]["requests"] if r.returncode == 0 else None, 100,
       "kite-replay times the 100 requests")


def test_old_trace_without_sites():
    out = os.path.join(TMP, "sort.html")
    r = run(advise_cmd("-q", "-n", "1", "--allocators", "glibc,kite", "-o", out,
                       "--trace", os.path.join(SRC, "tests", "data", "traces", "sort.trace")))
    eq(r.returncode, 0, f"advise --trace: {r.stderr}")
    eq(r.stderr, "", "-q prints nothing")
    text = open(out).read() if os.path.exists(out) else ""
    check("This trace has no allocation sites" in text, "says the trace has no sites")
    data = report_data(text) or {}
    eq(data.get("ops"), 290, "sort.trace's 290 requests")
    eq([x["name"] for x in data.get("allocators", [])], ["kite", "glibc"], "--allocators subset, in order")
    check("single-threaded" not in text.split('id="method"')[0], "no thread caveat for one thread")


def test_bad_usage():
    trace = os.path.join(SRC, "tests", "data", "traces", "sort.trace")
    for args, what in [([], "no program"), (["--repeats", "0", "--", "true"], "--repeats 0"),
                       (["--bogus", "--", "true"], "unknown option"),
                       (["--trace", trace, "--", "true"], "both a trace and a program"),
                       (["--allocators", "nosuch", "--trace", trace], "unknown allocator")]:
        r = run(advise_cmd(*args))
        eq(r.returncode, 2, f"{what}: exit 2")
        check("usage" in r.stderr or "unknown allocator" in r.stderr, f"{what}: says why: {r.stderr[-200:]}")
    bad = os.path.join(TMP, "bad.trace")
    with open(bad, "w") as f:
        f.write("# kite-trace v1\nm 0 10 1\nf 1 1\n")
    r = run(advise_cmd("--trace", bad, "-o", os.path.join(TMP, "bad.html")))
    eq(r.returncode, 2, "a malformed trace: exit 2")
    check(f"{bad}:3: free of unknown id 1" in r.stderr, f"names the line: {r.stderr}")
    check(not os.path.exists(os.path.join(TMP, "bad.html")), "no report from a malformed trace")
    eq(run([sys.executable, KITE_LAB, "advise", "-h"]).returncode, 0, "-h")


# ---- rendering ------------------------------------------------------------------------

def png_rgb(path):
    """(width, height, rows of RGB tuples): matplotlib's reader when the venv has it,
    otherwise a small pure-Python decoder (8-bit RGB/RGBA, non-interlaced, as chromium writes)."""
    try:
        import matplotlib.image as mpimg
        import numpy as np
        a = mpimg.imread(path)
        a = (a[:, :, :3] * 255 + 0.5).astype(np.uint8) if a.dtype != np.uint8 else a[:, :, :3]
        return a.shape[1], a.shape[0], a
    except ImportError:
        pass
    data = open(path, "rb").read()
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError("unsupported PNG")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ft == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ft == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif ft == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def find_color(img, w, h, rgb):
    """Bounding box (x0, y0, x1, y1) of the pixels of exactly this colour, or None; and count."""
    try:
        import numpy as np
        if isinstance(img, np.ndarray):
            ys, xs = np.nonzero(np.all(img == np.array(rgb, dtype=np.uint8), axis=2))
            if not len(xs):
                return None, 0
            return (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())), len(xs)
    except ImportError:
        pass
    pts = [(x, y) for y in range(h) for x, p in enumerate(img[y]) if p == rgb]
    if not pts:
        return None, 0
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return (min(xs), min(ys), max(xs), max(ys)), len(pts)


def region_stats(img, box):
    """(fraction of coloured pixels, number of distinct colours) inside box. Coloured: the
    channels differ by more than 20, which the grey axes, grid lines and labels never do and
    the data (bars, areas, kite's orange) always does: a chart with no data scores 0."""
    x0, y0, x1, y1 = box
    try:
        import numpy as np
        if isinstance(img, np.ndarray):
            sub = img[y0:y1 + 1, x0:x1 + 1].reshape(-1, 3).astype(int)
            coloured = ((sub.max(axis=1) - sub.min(axis=1)) > 20).mean()
            return float(coloured), len(np.unique(sub, axis=0))
    except ImportError:
        pass
    px = [p for row in img[y0:y1 + 1] for p in row[x0:x1 + 1]]
    return sum(1 for p in px if max(p) - min(p) > 20) / max(len(px), 1), len(set(px))


def hex_rgb(c):
    return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))


def test_rendering_in_chromium():
    text = _state.get("text")
    if not check(text is not None, "a report to render"):
        return
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("  skipped: chromium is not installed (Debian package chromium), so the report's "
              "rendering was not checked; its HTML was", file=sys.stderr)
        return
    shot = os.path.join(TMP, "shot.png")
    profile = tempfile.mkdtemp(prefix="chromium-", dir=TMP)
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={shot}",
           "--window-size=1200,4200", "file://" + REPORT]
    try:
        r = run(cmd, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, "chromium took over 120 s")
        return
    if not check(os.path.exists(shot), f"chromium wrote a screenshot (exit {r.returncode}): {r.stderr[-600:]}"):
        return
    w, h, img = png_rgb(shot)
    eq((w, h), (1200, 4200), "screenshot size")
    sizes = re.findall(r'<svg class="chart" data-chart="(\d+)" data-frame="(#[0-9a-f]{6})" width="(\d+)" height="(\d+)"', text)
    eq(len(sizes), len(_state["data"]["charts"]), "charts listed")
    for k, frame, cw, ch in sizes:
        name = _state["data"]["charts"][int(k)]
        box, n = find_color(img, w, h, hex_rgb(frame))
        if not check(box is not None, f"chart {name!r}: its frame is on the screenshot"):
            continue
        bw, bh = box[2] - box[0] + 1, box[3] - box[1] + 1
        check(abs(bw - int(cw)) <= 2 and abs(bh - int(ch)) <= 2,
              f"chart {name!r}: frame {bw}x{bh} at {box[:2]}, the SVG is {cw}x{ch}")
        check(n >= 2 * (bw + bh) - 8, f"chart {name!r}: the frame is whole ({n} pixels)")
        inner = (box[0] + 3, box[1] + 3, box[2] - 3, box[3] - 3)
        ink, colours = region_stats(img, inner)
        check(ink >= 0.03, f"chart {name!r}: not blank ({ink:.1%} of it is data)")
        check(colours >= 4, f"chart {name!r}: {colours} colours")
    # kite stands out in the first chart (real mallocs' time)
    if sizes:
        k, frame, cw, ch = sizes[0]
        box, _ = find_color(img, w, h, hex_rgb(frame))
        if box:
            try:
                import numpy as np
                sub = img[box[1]:box[3] + 1, box[0]:box[2] + 1] if isinstance(img, np.ndarray) else None
                kite = int(np.all(sub == np.array(hex_rgb(advise.KITE_COLOR), dtype=np.uint8), axis=2).sum()) \
                    if sub is not None else None
            except ImportError:
                kite = None
            if kite is None:
                kite = sum(1 for row in img[box[1]:box[3] + 1] for p in row[box[0]:box[2] + 1]
                           if p == hex_rgb(advise.KITE_COLOR))
            check(kite >= 100, f"kite's bar, in its own colour, in the first chart ({kite} pixels)")
    # below the last chart the page goes on (tables), above the first is the verdict's tint
    box, n = find_color(img, w, h, hex_rgb("#fff7f0"))
    check(n > 5000, "the verdict box is drawn")


def main():
    tests = [test_report_of_a_leaky_program, test_old_trace_without_sites, test_bad_usage,
             test_rendering_in_chromium, test_window_trace_replays_clean,
             test_budget_on_a_busy_program, test_trace_deleted_when_killed]
    rc = run_tests(tests, "test_")
    if rc == 0:
        shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
