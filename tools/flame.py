#!/usr/bin/env python3
"""flame.py -- a flame graph of a kite heap profile, as one self-contained SVG file.

    tools/flame.py PROFILE [-o OUT.svg] [--sample inuse_space|alloc_space|...] [--width PX]

PROFILE is what KITE_PROF or kite_prof_dump writes (pprof's profile.proto, gzip'd or not;
docs/profiling.md), read on the machine that wrote it (its addresses are named from the
mapped files with binutils, tools/kiteprof.py). Each box is a function; its width is the
share of the sample type's total (--sample, default the profile's own, inuse_space for
kite) held by the stacks through it; a box's callees stand on it, so the top edge shows
where the memory was allocated and the bottom what called it. Hovering a box shows its
name, bytes and share (an SVG <title>). No script, no external asset: it opens in any
browser and embeds in Markdown. Standard library only.
"""
import argparse
import hashlib
import html
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiteprof  # noqa: E402

ROW = 18          # box height, px
FONT = 12         # px; DejaVu Sans averages about 0.6 em a character
CHAR_W = FONT * 0.6
PAD = 10


class Node:
    __slots__ = ("name", "value", "kids")

    def __init__(self, name):
        self.name, self.value, self.kids = name, 0, {}


def build_tree(rows):
    """The call tree of rows [(frames root first, value)]: each node's value is the sum of
    the rows through it."""
    root = Node("all")
    for frames, v in rows:
        root.value += v
        n = root
        for f in frames:
            n = n.kids.setdefault(f, Node(f))
            n.value += v
    return root


def depth_of(n):
    return 1 + max((depth_of(k) for k in n.kids.values()), default=0)


def color(name):
    """A warm colour fixed by the name (the same function has the same colour in every
    graph): red to yellow, as flame graphs are drawn."""
    h = hashlib.md5(name.encode()).digest()
    return f"rgb({205 + h[0] % 50},{80 + h[1] % 130},{h[2] % 55})"


def fmt_value(v, unit):
    if unit == "bytes":
        for u, d in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if abs(v) >= d:
                return f"{v / d:.3g} {u}"
        return f"{v} B"
    return f"{v:,}"


def fit(name, width):
    """The label that fits a box of width px ('' when not even two characters do)."""
    n = int((width - 6) / CHAR_W)
    if n < 3:
        return ""
    return name if len(name) <= n else name[:n - 2] + ".."


def render(root, sample, unit, title, width):
    """The SVG text: root at the bottom, one row per call depth."""
    depth = depth_of(root)
    top = 2 * ROW + PAD
    height = top + depth * ROW + PAD + ROW
    scale = (width - 2 * PAD) / root.value if root.value else 0
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="{FONT}" data-sample="{e(sample)}" data-total="{root.value}">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fdfaf6"/>',
           f'<text x="{width / 2:.1f}" y="{PAD + FONT + 2}" text-anchor="middle" font-size="15">'
           f'{e(title)}</text>',
           f'<text x="{PAD}" y="{height - PAD}" fill="#555">{e(sample)}: '
           f'{e(fmt_value(root.value, unit))} in all; a box\'s width is its share, its callees '
           f'above it</text>']

    def box(n, x, level):
        w = n.value * scale
        y = top + (depth - 1 - level) * ROW
        share = n.value / root.value * 100 if root.value else 0
        tip = f"{n.name}: {fmt_value(n.value, unit)} ({share:.2f}%)"
        out.append(f'<g class="frame" data-name="{e(n.name)}" data-value="{n.value}">'
                   f'<title>{e(tip)}</title>'
                   f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW - 1}" rx="2" '
                   f'fill="{"#c8c8c8" if level == 0 else color(n.name)}"/>')
        label = fit(n.name, w)
        if label:
            out.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 5}">{e(label)}</text>')
        out.append("</g>")
        # callees left to right by value (ties by name), so the picture is the same each run
        for k in sorted(n.kids.values(), key=lambda c: (-c.value, c.name)):
            box(k, x, level + 1)
            x += k.value * scale

    if root.value:
        box(root, PAD, 0)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(prog="flame.py", description=__doc__.split("\n\n")[0].split("--", 1)[1].strip())
    ap.add_argument("profile", help="a kite heap profile (pprof's profile.proto, gzip'd or not)")
    ap.add_argument("-o", "--output", help="the SVG to write (default: PROFILE with .svg)")
    ap.add_argument("--sample", default="", metavar="TYPE",
                    help="the sample type whose values give the widths: inuse_space (live bytes), "
                         "alloc_space (bytes allocated since start), inuse_objects, alloc_objects "
                         "(default: the profile's default type, inuse_space for kite's)")
    ap.add_argument("--width", type=int, default=1200, metavar="PX", help="image width (default: %(default)s)")
    ap.add_argument("--title", help="the heading (default: the file name and sample type)")
    args = ap.parse_args(argv)
    if args.width < 200:
        ap.error("--width must be at least 200")
    try:
        prof = kiteprof.load(args.profile)
        k = prof.index(args.sample)
        sample, unit = prof.sample_types[k]
        rows = prof.stacks(sample)
    except kiteprof.ProfileError as ex:
        print(f"flame.py: {args.profile}: {ex}", file=sys.stderr)
        return 2
    root = build_tree(rows)
    if root.value <= 0:
        print(f"flame.py: {args.profile}: no {sample} in the profile (nothing to draw)", file=sys.stderr)
    out = args.output or os.path.splitext(args.profile)[0] + ".svg"
    title = args.title or f"{os.path.basename(args.profile)}: {sample}"
    with open(out, "w", encoding="utf-8") as f:
        f.write(render(root, sample, unit, title, args.width))
    print(f"flame.py: {out} ({len(rows)} stacks, {fmt_value(root.value, unit)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
