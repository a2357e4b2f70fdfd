"""The replay window of `kite-lab advise --budget`: which run of a big trace's requests to
replay when the whole trace does not fit the time budget, and the trace file that replays it.

    codes = array("B")   # one byte a request: its kind and its size bucket (advise.analyze)
    start, end, dist = choose_window(codes, k, peak_at)
    timed_first, timed_last, warm = write_window(trace, out, start, end)

The window is k consecutive requests (k from the budget). Among the windows that start on a
multiple of k/8, the chosen one has the mix of requests (kind x power-of-two size bucket)
nearest the whole trace's, by total variation distance (half the sum of the absolute
differences of the two distributions: 0 the same mix, 1 nothing in common). Among the windows
within 0.05 of the nearest, one that holds the peak of live bytes wins, so the footprint is
measured where the program's heap is largest.

The window's trace first allocates every block live at the window's start (same ids, sizes
and alignments, in id order: the heap holds the program's live bytes, not its
fragmentation), then has the window's requests; only those are timed (kite-replay -r).
Standard library only.
"""
from collections import Counter

KINDS = "mcarf"
PEAK_SLACK = 0.05


def request_code(kind, size_bucket):
    """The byte choose_window compares: the kind (m c a r f) and the size bucket (3 .. 34)."""
    return KINDS.index(kind) * 40 + min(size_bucket, 39)


def _distance(h, total_h, n_h, n_total):
    keys = set(h) | set(total_h)
    return 0.5 * sum(abs(h.get(c, 0) / n_h - total_h.get(c, 0) / n_total) for c in keys)


def choose_window(codes, k, peak_at=None):
    """(start, end, distance): requests [start, end) of the trace, k of them (all when k >=
    len(codes)); peak_at is the 1-based request after which live bytes peaked."""
    n = len(codes)
    if k >= n:
        return 0, n, 0.0
    step = max(1, k // 8)
    per = max(1, k // step)        # chunks a window spans
    data = codes.tobytes() if hasattr(codes, "tobytes") else bytes(codes)
    chunks = [Counter(data[i:i + step]) for i in range(0, n, step)]
    total = Counter()
    for c in chunks:
        total.update(c)
    cands = []
    win = Counter()
    for j in range(min(per, len(chunks))):
        win.update(chunks[j])
    for first in range(0, len(chunks) - per + 1):
        if first:
            win.subtract(chunks[first - 1])
            win.update(chunks[first + per - 1])
        start = min(first * step, n - k)   # the chunks approximate the window's mix
        cands.append((_distance(+win, total, max(sum(win.values()), 1), n), start, start + k))
    best = min(cands)
    if peak_at is not None:
        near = [c for c in cands if c[0] <= best[0] + PEAK_SLACK and c[1] < peak_at <= c[2]]
        if near:
            best = min(near)
    return best[1], best[2], best[0]


def write_window(src, dst, start, end):
    """Writes requests [start, end) of the kite trace src to dst, after a warm-up that
    allocates every block live before `start`. Returns (first timed line, last timed line,
    warm-up requests): the lines to give kite-replay -r."""
    live = {}     # id -> "m ID SIZE TID" or "a ID ALIGN SIZE TID"
    idx = 0
    with open(src, encoding="utf-8", errors="replace") as f, open(dst, "w", encoding="utf-8") as o:
        o.write("# kite-trace v1\n")
        o.write(f"# window: requests {start + 1}..{end} of {src}\n")
        line_no = 2
        for line in f:
            s = line.strip()
            if not s or s[0] == "#":
                continue
            if idx == start:
                for bid in sorted(live):
                    o.write(live[bid] + "\n")
                warm = len(live)
                line_no += warm
                first = line_no + 1
                live = None
            if idx >= start:
                if idx >= end:
                    break
                o.write(s + "\n")
                line_no += 1
                idx += 1
                continue
            t = s.split()
            op = t[0]
            if op == "m":
                live[int(t[1])] = s
            elif op == "c":
                live[int(t[1])] = f"m {t[1]} {int(t[2]) * int(t[3])} {t[4]}"
            elif op == "a":
                live[int(t[1])] = s
            elif op == "r":
                if t[1] != "-":
                    live.pop(int(t[1]), None)
                live[int(t[2])] = f"m {t[2]} {t[3]} {t[4]}"
            elif op == "f" and t[1] != "-":
                live.pop(int(t[1]), None)
            idx += 1
    if live is not None:
        raise ValueError(f"{src}: fewer than {start + 1} requests")
    return first, line_no, warm
