#!/usr/bin/env python3
"""tests/tools/test_flame.py -- tools/flame.py and the profile reader it shares with advise
(tools/kiteprof.py).

A profile written here field by field (pprof's profile.proto numbers, symbolized: functions
given) with known stacks and values: the SVG names exactly the frames with a value of the
chosen sample type, drops the frames drop_frames names, and draws each box with a width
proportional to its value (the root spans the image less its margins); the gzip'd file
draws the same picture; a bad file is refused. Then a real profile: prof_sites (the heap
profiler's accuracy workload) dumps one, and its flame graph by alloc_space has boxes
site_a, site_b and site_c whose widths keep the 6:3:1 of the bytes each allocated (within
the sampling's 10%), named from the program's symbols.

usage: test_flame.py [BUILD_DIR]   (the real profile needs BUILD_DIR/prof_sites)
"""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import check, eq, run_tests  # noqa: E402

FLAME = os.path.join(ROOT, "tools", "flame.py")
BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
TMP = tempfile.mkdtemp(prefix="kite-flame-")
NS = "{http://www.w3.org/2000/svg}"


# ---- a profile.proto writer for the test (field numbers from profile.proto) ----
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(num, v):
    if isinstance(v, int):
        return varint(num << 3) + varint(v)
    return varint(num << 3 | 2) + varint(len(v)) + v


def packed(vals):
    return b"".join(varint(x) for x in vals)


FUNCS = ["main", "work", "site_a", "site_b", "site_c", "malloc"]
# (stack innermost first, alloc_space, inuse_space)
STACKS = [(["malloc", "site_a", "work", "main"], 600000, 300000),
          (["malloc", "site_b", "work", "main"], 300000, 0),
          (["malloc", "site_c", "main"], 100000, 100000)]


def synthetic():
    strings = ["", "alloc_space", "bytes", "inuse_space", "malloc"] + FUNCS[:-1]
    sid = {s: i for i, s in enumerate(strings)}
    b = b"".join(field(6, s.encode()) for s in strings)
    b += field(1, field(1, sid["alloc_space"]) + field(2, sid["bytes"]))
    b += field(1, field(1, sid["inuse_space"]) + field(2, sid["bytes"]))
    for i, f in enumerate(FUNCS, 1):
        b += field(5, field(1, i) + field(2, sid[f]))
        b += field(4, field(1, i) + field(3, 0x1000 + i) + field(4, field(1, i) + field(2, 10 * i)))
    for frames, alloc, inuse in STACKS:
        ids = [FUNCS.index(f) + 1 for f in frames]
        b += field(2, field(1, packed(ids)) + field(2, packed([alloc, inuse])))
    b += field(7, sid["malloc"]) + field(14, sid["inuse_space"])
    return b


def flame(profile, *args):
    out = os.path.join(TMP, os.path.basename(profile) + "".join(args) + ".svg")
    r = subprocess.run([sys.executable, FLAME, profile, "-o", out] + list(args),
                       capture_output=True, text=True, timeout=300)
    return r, out


def boxes(svg_path):
    """{frame name: (width px, value)} of the SVG's boxes (a name drawn twice: summed)."""
    root = ET.parse(svg_path).getroot()
    out = {}
    for g in root.iter(NS + "g"):
        if g.get("class") != "frame":
            continue
        w = float(g.find(NS + "rect").get("width"))
        v = int(g.get("data-value"))
        pw, pv = out.get(g.get("data-name"), (0.0, 0))
        out[g.get("data-name")] = (pw + w, pv + v)
    return out, float(root.get("width"))


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_synthetic_widths():
    path = write("synthetic.pb", synthetic())
    for sample, want in (("inuse_space", {"all": 400000, "main": 400000, "work": 300000,
                                          "site_a": 300000, "site_c": 100000}),
                         ("alloc_space", {"all": 1000000, "main": 1000000, "work": 900000,
                                          "site_a": 600000, "site_b": 300000, "site_c": 100000})):
        r, out = flame(path, "--sample", sample)
        if not check(r.returncode == 0, f"flame.py --sample {sample}: {r.stderr}"):
            continue
        got, width = boxes(out)
        eq({k: v for k, (_, v) in got.items()}, want, f"{sample}: the frames and their values (malloc dropped)")
        total_w = got["all"][0]
        check(abs(total_w - (width - 20)) < 0.01, f"{sample}: the root spans the image less its margins ({total_w})")
        for name, (w, v) in got.items():
            check(abs(w - total_w * v / want["all"]) < 0.02, f"{sample}: {name}'s width {w} is its share of {total_w}")


def test_default_sample_and_gzip():
    plain = write("plain.pb", synthetic())
    gz = write("zipped.pb.gz", gzip.compress(synthetic()))
    r1, o1 = flame(plain)
    r2, o2 = flame(gz)
    check(r1.returncode == 0 and r2.returncode == 0, f"flame.py: {r1.stderr} {r2.stderr}")
    got, _ = boxes(o1)
    eq(got["all"][1], 400000, "the default sample type is the profile's (inuse_space)")
    eq(boxes(o2)[0], got, "the gzip'd profile draws the same boxes")


def test_refusals():
    bad = write("bad.pb", b"\x0a\xff\xff")
    r, _ = flame(bad)
    check(r.returncode == 2 and "flame.py:" in r.stderr, f"a truncated profile is refused: {r.returncode} {r.stderr}")
    r, _ = flame(write("ok.pb", synthetic()), "--sample", "cpu")
    check(r.returncode == 2 and "no sample type 'cpu'" in r.stderr, f"an unknown sample type is refused: {r.stderr}")


def test_real_profile():
    prog = os.path.join(BUILD, "prof_sites")
    if not check(os.access(prog, os.X_OK), f"{prog} is built (make build)"):
        return
    if not check(shutil.which("addr2line") is not None, "binutils' addr2line is installed (names the frames)"):
        return
    path = os.path.join(TMP, "prof_sites.pb")
    r = subprocess.run([prog, "mixed", path], env=dict(os.environ, KITE_PROF=""),
                       capture_output=True, text=True, timeout=600)
    if not check(r.returncode == 0, f"prof_sites: {r.stderr[-300:]}"):
        return
    truth = {f[0]: int(f[2]) for f in (ln.split() for ln in r.stdout.splitlines()) if len(f) == 7}
    r, out = flame(path, "--sample", "alloc_space")
    if not check(r.returncode == 0, f"flame.py: {r.stderr}"):
        return
    got, _ = boxes(out)
    check("main" in got and not any(n.startswith(("kite_", "_kite_", "malloc")) for n in got),
          f"frames named from the program's symbols, kite's own left out: {sorted(got)}")
    total = sum(truth.values())
    drawn = sum(got.get(s, (0, 0))[1] for s in truth)
    for site, want in truth.items():
        w, v = got.get(site, (0, 0))
        share, true_share = v / drawn if drawn else 0, want / total
        check(abs(share - true_share) <= 0.1 * true_share,
              f"{site}: {share:.3f} of the sites' bytes drawn, truly {true_share:.3f}")
        if v:
            check(abs(w / got["all"][0] - v / got["all"][1]) < 1e-3, f"{site}: width proportional to its value")


if __name__ == "__main__":
    code = run_tests([test_synthetic_widths, test_default_sample_and_gzip, test_refusals, test_real_profile], "test_")
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(code)
