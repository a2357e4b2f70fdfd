#!/usr/bin/env python3
"""gen_trace.py -- synthetic allocation traces, built the way the seed builds its timing scripts.

    tools/gen_trace.py insert-delete N [-o OUT] [--seed S]
    tools/gen_trace.py realloc N       [-o OUT] [--seed S] [--near]
    tools/gen_trace.py random N        [-o OUT] [--seed S] [--max-live L] [--max-size B]
    tools/gen_trace.py from-dist TRACE N [-o OUT] [--seed S]

insert-delete N: 2N mallocs of 1-500 bytes (ids 0..2N-1), free every other id (0, 2, 4 ...:
  N inserts into a free structure, no coalescing since the neighbours stay allocated), then N
  mallocs of 1-500 bytes (removals); the timed part is lines 2N+1 .. 4N.
realloc N: the same 2N mallocs and N frees, then N reallocs of the remaining ids to 200-1000
  bytes (each coalesces with its free neighbours); the timed part is lines 3N+1 .. 4N.
  --near: each realloc asks for its block's size -25% .. +33% instead (more or less space,
  skewed towards more, as the seed describes its script), so nearly every one stays in place.
random N: N ops, a seeded mix of malloc (sizes log-uniform 1..max-size), free and realloc of
  random live ids, at most max-live ids live.
from-dist TRACE N: N ops whose sizes are drawn from the allocation sizes of TRACE (any format
  tools/trace-convert reads) and whose mix of malloc/free/realloc and peak live count follow it.
Every trace ends by freeing every live id. OUT ending in .script (the default: stdout as a
.script) gets the seed's format, anything else a kite trace. The suggested timing range is
printed on stderr as "-r START END". Same seed, same trace.
"""
import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitetrace  # noqa: E402


def insert_delete(n, rng):
    ops = [("m", i, rng.randint(1, 500), 0) for i in range(2 * n)]
    ops += [("f", i, 0) for i in range(0, 2 * n, 2)]
    ops += [("m", 2 * n + j, rng.randint(1, 500), 0) for j in range(n)]
    ops += [("f", i, 0) for i in range(1, 2 * n, 2)]
    ops += [("f", 2 * n + j, 0) for j in range(n)]
    return ops, (2 * n + 1, 4 * n)


def realloc_n(n, rng, near=False):
    ops = [("m", i, rng.randint(1, 500), 0) for i in range(2 * n)]
    ops += [("f", i, 0) for i in range(0, 2 * n, 2)]
    if near:
        ops += [("r", i, i, max(1, ops[i][2] + rng.randint(-(ops[i][2] // 4), ops[i][2] // 3)), 0)
                for i in range(1, 2 * n, 2)]
    else:
        ops += [("r", i, i, rng.randint(200, 1000), 0) for i in range(1, 2 * n, 2)]
    ops += [("f", i, 0) for i in range(1, 2 * n, 2)]
    return ops, (3 * n + 1, 4 * n)


def _mix(n, rng, size_of, p_malloc, p_realloc, max_live):
    """n ops: malloc with probability p_malloc (always when nothing is live), realloc with
    p_realloc, else free; then free what is live."""
    ops = []
    live = []          # ids, for O(1) random pick
    next_id = 0
    for _ in range(n):
        x = rng.random()
        if not live or (x < p_malloc and len(live) < max_live):
            ops.append(("m", next_id, size_of(), 0))
            live.append(next_id)
            next_id += 1
        elif x < p_malloc + p_realloc:
            i = live[rng.randrange(len(live))]
            ops.append(("r", i, i, size_of(), 0))
        else:
            k = rng.randrange(len(live))
            live[k], live[-1] = live[-1], live[k]
            ops.append(("f", live.pop(), 0))
    ops += [("f", i, 0) for i in sorted(live)]
    return ops


def random_trace(n, rng, max_live=1000, max_size=4096):
    lmax = math.log(max_size)
    return _mix(n, rng, lambda: int(math.exp(rng.random() * lmax)), 0.5, 0.15, max_live), (1, n)


def from_dist(path, n, rng):
    _, src, _ = kitetrace.read_trace(path)
    sizes = []
    counts = {"alloc": 0, "r": 0, "f": 0}
    live = peak = 0
    for op in src:
        k = op[0]
        if k == "m":
            sizes.append(op[2])
        elif k in "ca":
            sizes.append(op[2] * op[3] if k == "c" else op[3])
        elif k == "r":
            sizes.append(op[3])
        if k in "mca" or (k == "r" and op[1] is None):
            counts["alloc"] += 1
            live += 1
        elif k == "r":
            counts["r"] += 1
        elif op[1] is not None:
            counts["f"] += 1
            live -= 1
        peak = max(peak, live)
    if not sizes:
        raise kitetrace.TraceError(f"{path}: no allocations to take sizes from")
    total = sum(counts.values())
    return _mix(n, rng, lambda: sizes[rng.randrange(len(sizes))], counts["alloc"] / total,
                counts["r"] / total, max(peak, 1)), (1, n)


def main(argv):
    ap = argparse.ArgumentParser(
        prog="gen_trace.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [-h] {insert-delete,realloc,random} N [options]\n"
              "       %(prog)s [-h] from-dist TRACE N [options]",
        description=__doc__.split("\n\n", 1)[1])
    ap.add_argument("kind", choices=("insert-delete", "realloc", "random", "from-dist"),
                    help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("-o", dest="out", metavar="OUT", help="output file (default: stdout, .script)")
    ap.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (default 1)")
    ap.add_argument("--max-live", type=int, default=1000, metavar="L",
                    help="random: most ids live at once (default 1000)")
    ap.add_argument("--near", action="store_true",
                    help="realloc: resize each block by -25%% .. +33%% of its size")
    ap.add_argument("--max-size", type=int, default=4096, metavar="B",
                    help="random: largest malloc size (default 4096)")
    a = ap.parse_args(argv)
    out, seed, max_live, max_size = a.out, a.seed, a.max_live, a.max_size
    pos = [a.kind] + a.args
    rng = random.Random(seed)
    try:
        kind = pos[0]
        if kind == "from-dist":
            ops, rng_range = from_dist(pos[1], int(pos[2]), rng)
        else:
            n = int(pos[1])
            if n < 1:
                raise ValueError
            if kind == "insert-delete":
                ops, rng_range = insert_delete(n, rng)
            elif kind == "realloc":
                ops, rng_range = realloc_n(n, rng, a.near)
            elif kind == "random":
                ops, rng_range = random_trace(n, rng, max_live, max_size)
            else:
                raise ValueError
    except (IndexError, ValueError):
        ap.print_usage(sys.stderr)
        print(f"gen_trace.py: bad arguments for {pos[0]}: {' '.join(pos[1:])}", file=sys.stderr)
        return 2
    except (kitetrace.TraceError, OSError) as e:
        print(f"gen_trace: {e}", file=sys.stderr)
        return 2
    fmt = "script" if out is None or out.endswith(".script") else "kite"
    if fmt == "kite":  # the header moves every op one line down
        rng_range = (rng_range[0] + 1, rng_range[1] + 1)
    gen = kitetrace.script_lines(ops) if fmt == "script" else kitetrace.kite_lines(ops)
    f = open(out, "w") if out else sys.stdout
    f.write("\n".join(gen))
    f.write("\n")
    if out:
        f.close()
    print(f"-r {rng_range[0]} {rng_range[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
