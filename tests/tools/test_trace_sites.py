#!/usr/bin/env python3
"""tests/tools/test_trace_sites.py BUILD_DIR [SOURCE_DIR] -- allocation sites in kite traces
(KITE_TRACE_SITES=1, docs/trace-format.md): the "#@" and "# map" lines round-trip through the
shim, tools/kite-trace's finalize and tools/kitesites.py; traces with them still parse in every
old reader (kite-replay, tools/kitetrace.py) as the same ops; traces without them are unchanged;
the sites of a program built with frame pointers symbolize to its own functions.

Prints one line per test and ends with "N passed, N failed" (counting checks).
"""
import os
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
SRC = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
REPLAY = os.path.join(BUILD, "kite-replay")
SHIM = os.path.join(BUILD, "libkite-trace.so")
TOOLS = os.path.join(SRC, "tools")
TMP = tempfile.mkdtemp(prefix="kite-sites-test-")
sys.path.insert(0, os.path.join(SRC, "tests"))
sys.path.insert(0, TOOLS)
from testlib import check, eq, run_tests  # noqa: E402
import kitesites  # noqa: E402
import kitetrace  # noqa: E402
import advise  # noqa: E402


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def capture(out, cmd, sites=True, extra=()):
    env = dict(os.environ, KITE_TRACE_LIB=SHIM)
    env.pop("KITE_TRACE_SITES", None)
    if sites:
        env["KITE_TRACE_SITES"] = "1"
    return run([os.path.join(TOOLS, "kite-trace"), *extra, "-o", out, "--", *cmd], env=env)


def op_lines(path):
    return [l for l in open(path).read().split("\n") if l.strip() and not l.startswith("#")]


def strip_sites(src, dst):
    with open(src) as f, open(dst, "w") as g:
        for line in f:
            if not line.startswith(("#@", "# map ", "# sites ")):
                g.write(line)


def requests(lines):
    """A Counter of the requests' kinds and sizes (ids and thread ids left out)."""
    from collections import Counter
    sig = {"m": (2,), "c": (2, 3), "a": (2, 3), "r": (3,), "f": ()}
    return Counter((t[0],) + tuple(t[i] for i in sig[t[0]]) for t in (l.split() for l in lines))


def replay_json(args):
    import json
    r = run([REPLAY, "--json"] + args)
    return json.loads(r.stdout) if r.returncode == 0 else r.stderr


# ---------------------------------------------------------------------------------------

def test_site_line_roundtrip():
    for bid, pcs in [(0, (0x1,)), (42, (0x55d0c0a01234, 0x7f359a85824a)),
                     (2 ** 40, tuple(range(0x1000, 0x1004)))]:
        line = kitesites.format_site_line(bid, pcs)
        eq(kitesites.parse_site_line(line), (bid, pcs), f"site line {line!r}")
    eq(kitesites.format_site_line(7, (0xabc, 0x10)), "#@ 7 abc 10", "site line text")
    for bad in ["#@ 7", "#@ x 12", "#@ 7 zz"]:
        try:
            kitesites.parse_site_line(bad)
            check(False, f"{bad!r} refused")
        except ValueError:
            pass
    m = kitesites.parse_map_line("# map 55ad6eb72000-55ad6eb73000 r-xp 00001000 fe:00 9986374   /tmp/a b/t")
    eq(m, kitesites.Map(0x55ad6eb72000, 0x55ad6eb73000, 0x1000, "/tmp/a b/t"), "map line, path with a space")
    eq(kitesites.parse_map_line("# map 7ffd-7ffe r-xp 00000000 00:00 0 [vdso]"), None, "no file: no map")


def test_finalize_writes_site_lines():
    raw = os.path.join(TMP, "synthetic.raw")
    with open(raw, "w") as f:
        f.write("# kite-trace v1 raw\n# pid 9\n# command: x\n# sites 4\n"
                "3 f 1 9\n"
                "1 r 0 1 64 9 @ 4011aa 4012bb\n"
                "0 m 0 16 9 @ 401000 401100 401200 401300\n"
                "2 c 2 3 8 9 @ 401000\n"
                "4 a 3 64 100 9\n"
                "# map 400000-402000 r-xp 00000000 fe:00 1 /bin/x\n")
    out = os.path.join(TMP, "synthetic.trace")
    eq(kitetrace.finalize_raw(raw, out), 5, "five ops")
    eq(open(out).read(),
       "# kite-trace v1\n# pid 9\n# command: x\n# sites 4\n"
       "# map 400000-402000 r-xp 00000000 fe:00 1 /bin/x\n"
       "m 0 16 9\n#@ 0 401000 401100 401200 401300\n"
       "r 0 1 64 9\n#@ 1 4011aa 4012bb\n"
       "c 2 3 8 9\n#@ 2 401000\n"
       "f 1 9\n"
       "a 3 64 100 9\n", "finalized text: the site follows its op, under the NEW id of a realloc")
    # every old reader takes it as the same ops as without the site lines
    plain = os.path.join(TMP, "synthetic-plain.trace")
    strip_sites(out, plain)
    eq(kitetrace.read_trace(out)[1], kitetrace.read_trace(plain)[1], "kitetrace reads the same ops")
    a, b = replay_json(["--malloc", out]), replay_json(["--malloc", plain])
    check(isinstance(a, dict) and isinstance(b, dict), f"kite-replay reads both: {a!r} {b!r}")
    if isinstance(a, dict) and isinstance(b, dict):
        eq((a["ops"], a["peak_live_bytes"]), (b["ops"], b["peak_live_bytes"]), "kite-replay: same ops")
    eq(run([REPLAY, "--check", "--malloc", out]).returncode, 0, "kite-replay --check with site lines")
    an = advise.analyze(out)
    eq(an["site_stats"], {(0x401000, 0x401100, 0x401200, 0x401300): [1, 16],
                          (0x4011aa, 0x4012bb): [1, 64], (0x401000,): [1, 24]}, "advise reads the sites")
    eq(sorted((bid, size, pcs) for bid, size, pcs in an["leaked"]),
       [(2, 24, (0x401000,)), (3, 100, None)], "leaks carry their sites")


def test_old_traces_unchanged():
    data = os.path.join(SRC, "tests", "data", "traces")
    for name in sorted(os.listdir(data)):
        if not name.endswith(".trace"):
            continue
        p = os.path.join(data, name)
        an = advise.analyze(p)
        eq(an["ops"], len(op_lines(p)), f"advise reads {name}")
        check(not an["sites_recorded"] and not an["site_stats"], f"{name} has no sites")
        eq(len(kitetrace.read_trace(p)[1]), an["ops"], f"kitetrace reads {name}")


def test_capture_with_sites():
    prog = os.path.join(BUILD, "advise_leaky")
    out = os.path.join(TMP, "leaky.trace")
    r = capture(out, [prog])
    eq(r.returncode, 0, f"kite-trace advise_leaky: {r.stderr}")
    lines = open(out).read().split("\n")[:-1]
    check("# sites 4" in lines, "the header says sites are recorded")
    maps = [kitesites.parse_map_line(l) for l in lines if l.startswith("# map ")]
    check(any(m and m.path == os.path.realpath(prog) for m in maps), "the program's mapping is recorded")
    # every allocation is followed by its site, under the block's id
    missing = 0
    for i, l in enumerate(lines):
        t = l.split()
        if t and t[0] in "mcar":
            bid = t[2] if t[0] == "r" else t[1]
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not nxt.startswith(f"#@ {bid} "):
                missing += 1
    eq(missing, 0, "a site line after every allocation")
    an = advise.analyze(out)
    sites, _, leaks, _ = advise.symbolize_sites(an)
    leak = [s for s in leaks if s["frames"][0].startswith("advise_leak_site ")]
    eq(len(leak), 1, f"one leak site in advise_leak_site: {leaks}")
    if leak:
        eq((leak[0]["blocks"], leak[0]["bytes"]), (7, 7 * 48), "7 leaked blocks of 48 bytes")
        fr = leak[0]["frames"]
        check(len(fr) >= 3 and fr[1].startswith("leak_caller ") and fr[2].startswith("main "),
              f"frame-pointer walk: advise_leak_site <- leak_caller <- main: {fr}")
        check("advise_leaky.c:" in fr[0], f"source line of the site: {fr[0]}")
    node = [s for s in sites if s["frames"][0].startswith("make_node ")]
    eq([s["allocations"] for s in node], [3000], "3000 nodes from make_node")
    work = [s for s in sites if s["frames"][0].startswith("worker ")]
    eq([s["allocations"] for s in work], [500], "500 blocks from the second thread's worker")
    # the same program without sites: the trace has none, and the same ops
    plain = os.path.join(TMP, "leaky-plain.trace")
    eq(capture(plain, [prog], sites=False).returncode, 0, "capture without sites")
    text = open(plain).read()
    check("#@" not in text and "# map" not in text and "# sites" not in text, "no site lines unless asked")
    a, b = requests(op_lines(plain)), requests(op_lines(out))
    check(a == b, f"same requests with and without sites ({sum(a.values())} and {sum(b.values())} ops, "
                  f"differing in {sorted((a - b) + (b - a))[:5]})")


def test_sites_all_functions_threads_fork():
    """trace_mt: every malloc-family function, 4 threads, a fork; with sites nothing changes
    but the site lines."""
    out = os.path.join(TMP, "mt.trace")
    r = capture(out, [os.path.join(BUILD, "trace_mt")], extra=["--all"])
    eq(r.returncode, 0, f"trace_mt with sites: {r.stderr}")
    eq(r.stdout, "trace_mt ok\n", "trace_mt output unchanged")
    lines = open(out).read().split("\n")
    kinds = {}
    for i, l in enumerate(lines):
        t = l.split()
        if t and t[0] in "mcar":
            ok = lines[i + 1].startswith(f"#@ {t[2] if t[0] == 'r' else t[1]} ")
            kinds.setdefault(t[0], [0, 0])[ok] += 1
    eq(sorted(kinds), ["a", "c", "m", "r"], "every kind of allocation seen")
    eq([kinds[k][0] for k in sorted(kinds)], [0, 0, 0, 0], f"every allocation has its site line {kinds}")
    eq(run([REPLAY, "--check", "--malloc", out]).returncode, 0, "replays with site lines")
    kids = [f for f in os.listdir(TMP) if f.startswith("mt.trace.") and ".raw" not in f]
    eq(len(kids), 1, "the forked child's trace")
    if kids:
        kt = open(os.path.join(TMP, kids[0])).read()
        check("#@ " in kt and "# map " in kt, "the child records sites and its mappings too")


def test_capture_without_frame_pointers():
    """Debian's sort is built without frame pointers: the walk must stop, never fault."""
    inp = os.path.join(TMP, "words.txt")
    with open(inp, "w") as f:
        f.write("".join(f"{(i * 7919) % 10007} line {i}\n" for i in range(3000)))
    out = os.path.join(TMP, "sort.trace")
    r = capture(out, ["sort", inp])
    want = run(["sort", inp]).stdout
    eq(r.returncode, 0, "sort with sites")
    eq(r.stdout, want, "sort output unchanged")
    an = advise.analyze(out)
    check(an["sites_recorded"], "sort's sites are recorded")
    sites, _, _, _ = advise.symbolize_sites(an)
    check(sites and all(s["frames"] for s in sites), "every site has at least its first frame")
    eq(run([REPLAY, "--check", "--malloc", out]).returncode, 0, "sort trace with sites replays")


def main():
    tests = [v for k, v in globals().items() if k.startswith("test_")]
    return run_tests(tests, "test_")


if __name__ == "__main__":
    sys.exit(main())
