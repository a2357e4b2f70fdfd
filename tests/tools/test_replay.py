#!/usr/bin/env python3
"""tests/tools/test_replay.py BUILD_DIR [SOURCE_DIR] -- end-to-end tests of the lab's trace
tools: kite-replay (ranges, counts, utilization, check mode on every allocator, malformed
traces, out of memory), the capture shim and tools/kite-trace on real programs, .script
import/export, the ltrace converter and the generators.

Prints one line per test and ends with "N passed, N failed" (counting checks), like test.h.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
SRC = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
REPLAY = os.path.join(BUILD, "kite-replay")
SHIM = os.path.join(BUILD, "libkite-trace.so")
TOOLS = os.path.join(SRC, "tools")
DATA = os.path.join(SRC, "tests", "data", "traces")
PY = sys.executable
TMP = tempfile.mkdtemp(prefix="kite-replay-test-")
sys.path.insert(0, os.path.join(SRC, "tests"))
from testlib import check, eq, run_tests  # noqa: E402

def limit(seconds, load=None, cores=None):
    """A command's wall-clock limit: SECONDS on an idle machine, stretched by the load per core
    when that is above 1. The limits are there to turn a hang into a failure with a message,
    not to time anything, and a command's wall time grows with the machine's load: the lab
    smoke's lab.py needs about 12 s of CPU, so with 25 runnable processes on 2 cores (about
    a twelfth of a core each) it overran a fixed 120 s. 1-minute load average at the
    command's start; CTest's TIMEOUT for the whole test (cmake/lab-tools.cmake) stays the
    outer bound."""
    load = os.getloadavg()[0] if load is None else load
    cores = (os.cpu_count() or 1) if cores is None else cores
    return seconds * max(1.0, load / cores)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=limit(120), **kw)


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def replay_json(args):
    r = run([REPLAY, "--json"] + args)
    if not check(r.returncode == 0, f"kite-replay {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}"):
        return None
    return json.loads(r.stdout)


def allocators():
    out = run([REPLAY, "--list"]).stdout.split()
    return out


def alloc_args(name):
    if name == "malloc":
        return ["--malloc"]
    if name == "kite":
        return ["--kite"]
    return ["--policy", name]


# ---------------------------------------------------------------------------------------

def test_list():
    names = allocators()
    check("malloc" in names, f"--list lacks malloc: {names}")
    eq(len(names), len(set(names)), "--list names are unique")
    for n in names:
        check(re.fullmatch(r"[a-z0-9_]+", n) is not None, f"odd policy name {n!r}")


SIX = "a 0 100\na 1 200\nf 0\nr 1 400\na 2 50\nf 1\n"
# live after each line: 100, 300, 200, 400, 450, 50 -> peak 450


def test_six_line_ranges():
    path = write("six.script", SIX)
    for name in allocators():
        j = replay_json(alloc_args(name) + ["-r", "2", "3", "-r", "5", path])
        if not j:
            continue
        eq(j["ops"], 6, f"{name} ops")
        eq(j["lines"], 6, f"{name} lines")
        eq(j["peak_live_bytes"], 450, f"{name} peak live")
        eq(len(j["ranges"]), 2, f"{name} ranges")
        r1, r2 = j["ranges"]
        eq((r1["start"], r1["end"], r1["requests"], r1["malloc"], r1["free"], r1["realloc"]),
           (2, 3, 2, 1, 1, 0), f"{name} range 2-3")
        eq((r2["start"], r2["end"], r2["requests"], r2["malloc"], r2["free"], r2["realloc"]),
           (5, 6, 2, 1, 1, 0), f"{name} unterminated range 5-")
        for r in (r1, r2):
            check(r["p50_ns"] <= r["p90_ns"] <= r["p99_ns"] <= r["max_ns"], f"{name} percentiles ordered {r}")
            check(r["max_ns"] <= r["avg_ns"] * r["samples"] + 0.5, f"{name} max <= sum of samples")
            check(abs(r["avg_ns"] * r["requests"] - r["total_ns"]) <= 0.5, f"{name} total = avg x requests")
            check(r["samples"] + r["preempted"] == r["requests"], f"{name} samples + preempted")
        if name not in ("malloc", "kite"):
            # a lab policy's footprint: at least the payloads, at most payloads plus per-block
            # overhead for the 3 blocks ever alive at once (+ a generous 64 B each for headers,
            # alignment and the end of the heap)
            fp = j["footprint_bytes"]
            check(450 <= fp <= 450 + 400 + 3 * 64 + 512, f"{name} footprint {fp}")
            check(abs(j["utilization"] - 450 / fp) < 1e-5, f"{name} utilization {j['utilization']}")
    # default: the whole trace is one range; a one-line range
    j = replay_json(["--malloc", path])
    if j:
        eq([(r["start"], r["end"], r["requests"]) for r in j["ranges"]], [(1, 6, 6)], "default range")
    j = replay_json(["--malloc", "-r", "4", "4", path])
    if j:
        eq((j["ranges"][0]["requests"], j["ranges"][0]["realloc"]), (1, 1), "range 4-4")
    # options may follow the file
    j = replay_json(["--malloc", path, "-r", "2", "3"])
    if j:
        eq([(r["start"], r["end"], r["requests"]) for r in j["ranges"]], [(2, 3, 2)], "-r after FILE")
    # text output names the same numbers
    r = run([REPLAY, "--malloc", "-r", "2", "3", path])
    check("range 2-3: 2 requests (malloc 1, calloc 0, aligned 0, realloc 0, free 1)" in r.stdout, r.stdout)
    check("peak live 450 B" in r.stdout, r.stdout)


def test_range_errors():
    path = write("six.script", SIX)
    for args, what in ((["-r", "2", "4", "-r", "4", "5"], "overlap"), (["-r", "5", "2"], "reversed"),
                       (["-r", "0", "2"], "line 0"), (["-r", "7"], "past the end"), (["-r"], "no number")):
        r = run([REPLAY, "--malloc"] + args + [path])
        eq(r.returncode, 2, f"range {what} exit code")
        check(r.stderr.startswith("kite-replay: "), f"range {what} message: {r.stderr!r}")
    r = run([REPLAY, "--policy", "no_such_policy", path])
    eq(r.returncode, 2, "unknown policy exit code")
    check("unknown policy 'no_such_policy'" in r.stderr, r.stderr)


def test_kite_trace_ops_and_foreign():
    path = write("k.trace", "# kite-trace v1\nm 0 24 1\nc 1 4 8 1\na 2 4096 100 2\nf - 1\n"
                 "r 0 3 48 1\nr - 4 16 2\nf 3 1\nf 1 1\nf 2 2\nf 4 2\n")
    for name in allocators():
        r = run([REPLAY, "--check"] + alloc_args(name) + [path])
        eq(r.returncode, 0, f"{name} --check kite trace: {r.stderr.strip()}")
    j = replay_json(["--malloc", path])
    if j:
        r0 = j["ranges"][0]
        eq((r0["malloc"], r0["calloc"], r0["aligned"], r0["realloc"], r0["free"]), (1, 1, 1, 2, 4),
           "op counts (the foreign free is skipped)")
        eq(j["peak_live_bytes"], 24 + 32 + 100 - 24 + 48 + 16, "peak live with calloc, aligned, realloc")


MALFORMED = [
    ("bad_op", "a 0 10\nx 0 10\n", 2, "unknown op 'x' (a .script has a, r, f)"),
    ("missing_id", "a 0 10\nf\n", 2, "missing id"),
    ("non_numeric_size", "a 0 ten\n", 1, "size 'ten' is not a non-negative decimal number"),
    ("negative_size", "a 0 10\na 1 -5\n", 2, "size '-5' is not a non-negative decimal number"),
    ("trailing", "a 0 10 99\n", 1, "unexpected trailing text '99'"),
]
SCRIPTS = os.path.join(SRC, "tests", "data", "scripts")
# The workshop's slot semantics: file -> (malloc, realloc, free counts, peak live bytes)
WORKSHOP_CASES = {
    "double-free.script": ((2, 0, 4), 72),
    "free-never-used.script": ((1, 0, 2), 16),
    "realloc-null.script": ((0, 3, 2), 200),
    "alloc-live.script": ((3, 1, 2), 440),
    "realloc-zero.script": ((1, 2, 2), 64),
}


def test_workshop_script_semantics():
    for f, (counts, peak) in sorted(WORKSHOP_CASES.items()):
        path = os.path.join(SCRIPTS, f)
        for name in allocators():
            r = run([REPLAY, "--check"] + alloc_args(name) + [path])
            eq(r.returncode, 0, f"{name} --check {f}: {r.stderr.strip()[:300]}")
        j = replay_json(["--malloc", path])
        if j:
            r0 = j["ranges"][0]
            eq((r0["malloc"], r0["realloc"], r0["free"]), counts, f"{f}: op counts")
            eq(j["peak_live_bytes"], peak, f"{f}: peak live bytes")
    # alloc-live's leaked block stays allocated (--check's final heap walk of a policy must
    # find it), and the kite trace converted from it keeps the leak
    conv = os.path.join(TOOLS, "trace-convert")
    kt = os.path.join(TMP, "alloc-live.trace")
    eq(run([conv, os.path.join(SCRIPTS, "alloc-live.script"), kt]).returncode, 0, "convert alloc-live")
    eq(open(kt).read(), "# kite-trace v1\nm 0 100 0\nm 1 40 0\nm 1000000000001 200 0\n"
       "r 1000000000001 1000000000001 300 0\nf 1000000000001 0\nf 1 0\n", "alloc-live as a kite trace")
    kt2 = os.path.join(TMP, "dfree.trace")
    eq(run([conv, os.path.join(SCRIPTS, "double-free.script"), kt2]).returncode, 0, "convert double-free")
    eq(open(kt2).read(), "# kite-trace v1\nm 0 24 0\nm 1 48 0\nf 0 0\nf 1 0\n",
       "free(NULL) is not a kite trace op")


def test_free_at():
    # two freed 100-byte blocks (capacity 104 in rbtree_linked's 8-byte granule) kept apart by
    # allocated ones, and the heap's free tail: 3 free blocks, 2 distinct capacities
    path = write("peak.script", "a 0 100\na 1 10\na 2 100\na 3 10\nf 0\nf 2\na 4 10\n")
    r = run([REPLAY, "--policy", "rbtree_linked", "--free-at", "6", path])
    eq(r.returncode, 0, f"--free-at: {r.stderr}")
    lines = r.stderr.strip().splitlines()
    eq(lines[0], "free-at 6: 3 free blocks, 2 distinct capacities", "--free-at header")
    eq(lines[1], "104 2", "the two freed blocks")
    eq(len(lines), 3, "and the tail")
    r = run([REPLAY, "--policy", "rbtree_linked", "--free-at", "x", path])
    eq(r.returncode, 2, "bad --free-at")


def test_malformed():
    for name, text, line, msg in MALFORMED:
        path = write(f"bad_{name}.script", text)
        for who in ("malloc", allocators()[0]):
            r = run([REPLAY, "--check"] + alloc_args(who) + [path])
            eq(r.returncode, 2, f"{name} ({who}) exit code")
            eq(r.stderr.strip(), f"kite-replay: {path}:{line}: {msg}", f"{name} message")
    kt = write("bad.trace", "# kite-trace v1\nm 0 10 1\nm 1 10\n")
    r = run([REPLAY, kt])
    eq(r.returncode, 2, "kite trace missing tid")
    eq(r.stderr.strip(), f"kite-replay: {kt}:3: missing thread id", "kite trace message")
    r = run([REPLAY, os.path.join(TMP, "does-not-exist.script")])
    eq(r.returncode, 2, "missing file exit code")
    check("cannot open" in r.stderr, r.stderr)
    # garbage bytes: an error, not a crash
    binp = os.path.join(TMP, "garbage.bin")
    with open(binp, "wb") as f:
        f.write(bytes(range(256)) * 8)
    r = run([REPLAY, binp])
    eq(r.returncode, 2, "binary garbage exit code")


def test_out_of_memory():
    pols = [n for n in allocators() if n not in ("malloc", "kite")]
    path = write("oom.script", "a 0 1000\na 1 2000\na 2 100000\nf 0\n")
    for p in pols:
        r = run([REPLAY, "--policy", p, "--heap-size", "64K", path])
        eq(r.returncode, 3, f"{p} out of memory exit code")
        check(r.stderr.startswith(f"{path}:3: out of memory: {p} could not malloc 100000 bytes"), f"{p}: {r.stderr!r}")
    path = write("oom2.script", "a 0 10\na 1 1152921504606846976\n")
    r = run([REPLAY, "--malloc", path])
    eq(r.returncode, 3, "malloc out of memory exit code")
    # (a sanitizer's allocator may print its own warning first)
    check(any(l.startswith(f"{path}:2: out of memory: malloc could not malloc 1152921504606846976 bytes")
              for l in r.stderr.splitlines()), r.stderr)


def gen(kind, *args, out, seed=1):
    r = run([PY, os.path.join(TOOLS, "gen_trace.py"), kind, *map(str, args), "-o", out, "--seed", str(seed)])
    check(r.returncode == 0, f"gen_trace {kind}: {r.stderr}")
    return r.stderr.strip()


def test_generators():
    out = os.path.join(TMP, "id3.script")
    eq(gen("insert-delete", 3, out=out), "-r 7 12", "insert-delete range")
    lines = open(out).read().split("\n")[:-1]
    eq(len(lines), 18, "insert-delete 3 has 6N lines")
    eq([l.split()[:2] for l in lines[:6]], [["a", str(i)] for i in range(6)], "2N mallocs")
    eq(lines[6:9], ["f 0", "f 2", "f 4"], "every other id freed")
    eq([l.split()[:2] for l in lines[9:12]], [["a", "6"], ["a", "7"], ["a", "8"]], "N new mallocs")
    check(all(1 <= int(l.split()[2]) <= 500 for l in lines if l[0] == "a"), "sizes 1-500")
    eq(sorted(lines[12:]), sorted(["f 1", "f 3", "f 5", "f 6", "f 7", "f 8"]), "every live id freed")
    out = os.path.join(TMP, "re2.script")
    eq(gen("realloc", 2, out=out), "-r 7 8", "realloc range")
    lines = open(out).read().split("\n")[:-1]
    eq([l.split()[:2] for l in lines[6:8]], [["r", "1"], ["r", "3"]], "reallocs of the kept ids")
    check(all(200 <= int(l.split()[2]) <= 1000 for l in lines[6:8]), "realloc sizes 200-1000")
    eq(lines[8:], ["f 1", "f 3"], "realloc trace frees all")
    # --near: the same mallocs (same seed), each realloc -25% .. +33% of its block's size
    out_near = os.path.join(TMP, "re-near.script")
    gen("realloc", 400, "--near", out=out_near)
    gen("realloc", 400, out=os.path.join(TMP, "re400.script"))
    near = open(out_near).read().split("\n")[:-1]
    far = open(os.path.join(TMP, "re400.script")).read().split("\n")[:-1]
    eq(near[:1200], far[:1200], "--near keeps the mallocs and frees")
    size = {l.split()[1]: int(l.split()[2]) for l in near if l[0] == "a"}
    rs = [(size[l.split()[1]], int(l.split()[2])) for l in near if l[0] == "r"]
    eq(len(rs), 400, "N reallocs")
    check(all(max(1, old - old // 4) <= new <= old + old // 3 for old, new in rs), "sizes near the old")
    check(len({new - old for old, new in rs}) > 50, "the sizes vary")
    a, b, c = (os.path.join(TMP, f"rnd{i}.script") for i in range(3))
    gen("random", 3000, out=a, seed=5)
    gen("random", 3000, out=b, seed=5)
    gen("random", 3000, out=c, seed=6)
    eq(open(a).read(), open(b).read(), "same seed, same trace")
    check(open(a).read() != open(c).read(), "another seed, another trace")
    kt = os.path.join(TMP, "rnd.trace")
    eq(gen("random", 500, out=kt), "-r 2 501", "a kite trace's range skips the header")
    check(open(kt).readline() == "# kite-trace v1\n", "kite header")
    src = os.path.join(DATA, "python3-json.trace")
    fd = os.path.join(TMP, "fd.script")
    gen("from-dist", src, 4000, out=fd)
    sizes = {int(l.split()[2]) for l in open(fd) if l[0] in "ar"}
    srcsizes = set()
    for l in open(src):
        t = l.split()
        if t and t[0] == "m":
            srcsizes.add(int(t[2]))
        elif t and t[0] == "r":
            srcsizes.add(int(t[3]))
        elif t and t[0] == "c":
            srcsizes.add(int(t[2]) * int(t[3]))
        elif t and t[0] == "a":
            srcsizes.add(int(t[3]))
    check(sizes <= srcsizes, "from-dist sizes come from the source trace")
    for p in (a, kt, fd):
        r = run([REPLAY, "--check", "--malloc", p])
        eq(r.returncode, 0, f"generated {os.path.basename(p)} replays: {r.stderr}")


def test_check_every_allocator():
    traces = [os.path.join(TMP, "rnd0.script"), os.path.join(TMP, "id3.script")]
    traces += sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".trace") or f.endswith(".script"))
    traces += sorted(os.path.join(SCRIPTS, f) for f in os.listdir(SCRIPTS) if f.endswith(".script"))
    for name in allocators():
        for t in traces:
            if not os.path.exists(t):
                continue
            r = run([REPLAY, "--check"] + alloc_args(name) + [t])
            eq(r.returncode, 0, f"{name} --check {os.path.basename(t)}: {r.stderr.strip()[:300]}")
            check("check: passed" in r.stdout, f"{name} {t} says passed")


def test_script_roundtrip():
    conv = os.path.join(TOOLS, "trace-convert")
    src = os.path.join(TMP, "rnd0.script")
    kt = os.path.join(TMP, "rt.trace")
    back = os.path.join(TMP, "rt.script")
    eq(run([conv, src, kt]).returncode, 0, "script -> kite")
    eq(run([conv, kt, back]).returncode, 0, "kite -> script")
    eq(open(back).read(), open(src).read(), "a .script round-trips exactly")
    # comments and blank lines are dropped, everything else is kept as written
    s = write("c.script", "# seed-style header comment\na 5 0\n\na 2 17\nr 5 33\nf 2\n  # x\nf 5\n")
    eq(run([conv, s, kt]).returncode, 0, "commented script -> kite")
    eq(open(kt).read(), "# kite-trace v1\nm 5 0 0\nm 2 17 0\nr 5 5 33 0\nf 2 0\nf 5 0\n", "kite form of a script")
    eq(run([conv, kt, back]).returncode, 0, "back")
    eq(open(back).read(), "a 5 0\na 2 17\nr 5 33\nf 2\nf 5\n", "script form")
    # a captured trace exports to a .script that replays with the same peak live bytes
    cap = os.path.join(DATA, "python3-json.trace")
    sc = os.path.join(TMP, "cap.script")
    eq(run([conv, cap, sc]).returncode, 0, "captured trace -> script")
    j1, j2 = replay_json(["--malloc", cap]), replay_json(["--malloc", sc])
    if j1 and j2:
        eq(j2["peak_live_bytes"], j1["peak_live_bytes"], "exported script has the same peak live bytes")
    r = run([conv, write("bad.script", "a 1 2\nf 9 9\n"), kt])
    eq(r.returncode, 2, "convert a malformed trace")
    check(":2: unexpected trailing text '9'" in r.stderr, r.stderr)


LTRACE = """\
12345 sort->malloc(24)                              = 0x55d0c0a2b2a0
12345 sort->calloc(2, 16)                           = 0x55d0c0a2b2c0
12345 sort->malloc(32 <unfinished ...>
12345 <... malloc resumed> )                        = 0x55d0c0a2b300
12345 sort->realloc(0x55d0c0a2b2a0, 100)            = 0x55d0c0a2b400
12345 libc.so.6->realloc(0, 8)                      = 0x55d0c0a2b500
12345 sort->free(0x7f0000001000)                    = <void>
12345 sort->free(0x55d0c0a2b400)                    = <void>
12345 sort->free(0)                                 = <void>
12345 sort->realloc(0x55d0c0a2b500, 0)              = 0
12345 --- SIGCHLD (Child exited) ---
12345 sort->free(0x55d0c0a2b2c0)                    = <void>
12345 sort->free(0x55d0c0a2b300)                    = <void>
12345 +++ exited (status 0) +++
"""


def test_ltrace_converter():
    src = write("sort.ltrace", LTRACE)
    out = os.path.join(TMP, "lt.trace")
    r = run([os.path.join(TOOLS, "trace-convert"), src, out])
    eq(r.returncode, 0, f"ltrace convert: {r.stderr}")
    eq(open(out).read(),
       "# kite-trace v1\n# converted from ltrace output sort.ltrace\n"
       "m 0 24 12345\nc 1 2 16 12345\nm 2 32 12345\nr 0 3 100 12345\nm 4 8 12345\n"
       "f - 12345\nf 3 12345\nf 4 12345\nf 1 12345\nf 2 12345\n", "converted ltrace")
    r = run([REPLAY, "--check", "--malloc", out])
    eq(r.returncode, 0, "converted ltrace replays")
    # ltrace -f's "[pid N]" prefix: each process has its own pointers (the same address in two
    # processes is two blocks)
    src = write("f.ltrace", "[pid 7] a.out->malloc(16) = 0x1000\n[pid 8] a.out->malloc(32) = 0x1000\n"
                "[pid 8] a.out->free(0x1000) = <void>\n[pid 7] a.out->free(0x1000) = <void>\n")
    out = os.path.join(TMP, "f.script")
    eq(run([os.path.join(TOOLS, "trace-convert"), src, out]).returncode, 0, "ltrace -f convert")
    eq(open(out).read(), "a 0 16\na 1 32\nf 1\nf 0\n", "per-process pointers")
    # impossible records are refused with their line number, exit 2, nothing written
    conv = os.path.join(TOOLS, "trace-convert")
    for text, line, msg in [
            ("1 a->malloc(8) = 0x10\n1 a->malloc(179012345678) = 0x20\n", 2,
             "malloc of 179012345678 bytes (over 64 GiB): not a possible request"),
            ("1 a->calloc(100000000, 100000) = 0x20\n", 1, "calloc of 10000000000000 bytes"),
            ("1 a->malloc(8) = 0x10\n1 a->free(0x30) = <void>\n1 a->malloc(16) = 0x10\n", 3,
             "address 0x10 returned again while still live (block 0)"),
            ("1 a->malloc(8) = 0x10\n1 a->realloc(0x40, 99) = 0x10\n", 2,
             "address 0x10 returned again while still live"),
            ("1 a->realloc(0, 99999999999999) = 0x10\n", 1, "realloc of 99999999999999 bytes")]:
        src = write("bad.ltrace", text)
        bad_out = os.path.join(TMP, "bad-lt.trace")
        if os.path.exists(bad_out):
            os.unlink(bad_out)
        r = run([conv, "--from", "ltrace", src, bad_out])
        eq(r.returncode, 2, f"impossible ltrace record refused: {text!r}")
        check(r.stderr.startswith(f"trace-convert: {src}:{line}: ") and msg in r.stderr, r.stderr)
        check(not os.path.exists(bad_out), "nothing written for a refused input")
    # the same address again after its free is fine
    src = write("ok.ltrace", "1 a->malloc(8) = 0x10\n1 a->free(0x10) = <void>\n1 a->malloc(16) = 0x10\n")
    eq(run([conv, "--from", "ltrace", src, os.path.join(TMP, "ok-lt.trace")]).returncode, 0, "address reuse after free")


def capture(out, cmd, extra=()):
    env = dict(os.environ, KITE_TRACE_LIB=SHIM)
    return subprocess.run([os.path.join(TOOLS, "kite-trace"), *extra, "-o", out, "--", *cmd],
                          capture_output=True, text=True, timeout=limit(120), env=env)


def ops_of(path):
    return [l.split() for l in open(path) if l.strip() and not l.startswith("#")]


def test_capture_python():
    out = os.path.join(TMP, "py.trace")
    code = "import json; print(len(json.dumps({str(i): list(range(i)) for i in range(200)})))"
    r = capture(out, [sys.executable, "-c", code])
    want = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    eq(r.returncode, 0, f"kite-trace python3: {r.stderr}")
    eq(r.stdout, want, "python3 output unchanged under the shim")
    lines = open(out).read().split("\n")
    eq(lines[0], "# kite-trace v1", "header")
    ops = ops_of(out)
    check(len(ops) > 1000, f"python3 makes many calls ({len(ops)})")
    check(not os.path.exists(out + ".raw." + str(os.getpid())) and not [f for f in os.listdir(TMP) if ".raw." in f],
          "raw files removed")
    names = allocators()
    for name in ["malloc", names[0]]:
        r = run([REPLAY, "--check"] + alloc_args(name) + [out])
        eq(r.returncode, 0, f"captured python3 trace --check {name}: {r.stderr.strip()}")


def test_capture_sort():
    inp = write("words.txt", "".join(f"{(i * 7919) % 10007} line {i}\n" for i in range(3000)))
    out = os.path.join(TMP, "sort.script")
    r = capture(out, ["sort", inp])
    want = subprocess.run(["sort", inp], capture_output=True, text=True).stdout
    eq(r.returncode, 0, "kite-trace sort")
    eq(r.stdout, want, "sort output unchanged")
    first = open(out).readline()
    check(re.fullmatch(r"[arf] \d+( \d+)?\n", first) is not None, f"-o x.script writes a .script: {first!r}")
    for name in ["malloc", allocators()[0]]:
        r = run([REPLAY, "--check"] + alloc_args(name) + [out])
        eq(r.returncode, 0, f"captured sort --check {name}: {r.stderr.strip()}")


def test_capture_threads_and_fork():
    prog = os.path.join(BUILD, "trace_mt")
    out = os.path.join(TMP, "mt.trace")
    r = capture(out, [prog], ["--all"])
    eq(r.returncode, 0, f"kite-trace trace_mt: {r.stderr}")
    eq(r.stdout, "trace_mt ok\n", "trace_mt output")
    ops = ops_of(out)
    by = {}
    for o in ops:
        by.setdefault(o[0], []).append(o)
    big = [o for o in by.get("m", []) if 7000 <= int(o[2]) < 7500]
    eq(len(big), 2000, "4 x 500 distinctive mallocs")
    eq(len({o[-1] for o in big}), 4, "from 4 threads")
    eq(sum(1 for o in by.get("c", []) if o[2:4] == ["3", "333"]), 4, "callocs")
    eq(sum(1 for o in by.get("a", []) if o[2:4] == ["64", "777"]), 4, "posix_memalign")
    eq(sum(1 for o in by.get("a", []) if o[2:4] == ["128", "1280"]), 4, "aligned_alloc")
    eq(sum(1 for o in by.get("a", []) if o[2:4] == ["256", "2560"]), 4, "memalign")
    eq(sum(1 for o in by.get("r", []) if o[3] == "9999"), 4, "reallocs")
    freed = {o[1] for o in by.get("f", [])}
    check(all(o[1] in freed for o in big), "every distinctive block is freed")
    main_tid = {o[-1] for o in ops if o[0] == "m" and o[2] == "4343"}
    eq(len(main_tid), 1, "the inherited block comes from the main thread")
    cross = [o for o in by.get("f", []) if o[1] in {b[1] for b in big} and o[-1] in main_tid]
    eq(len(cross), 1000, "1000 cross-thread frees by the main thread")
    r = run([REPLAY, "--check", "--malloc", out])
    eq(r.returncode, 0, f"multi-threaded trace replays in sequence order: {r.stderr}")
    kids = [f for f in os.listdir(TMP) if f.startswith("mt.trace.") and ".raw" not in f]
    eq(len(kids), 1, f"--all keeps the forked child's trace {kids}")
    if kids:
        kops = ops_of(os.path.join(TMP, kids[0]))
        eq(sum(1 for o in kops if o[0] == "m" and o[2] == "4242"), 10, "child's mallocs")
        eq(sum(1 for o in kops if o[0] == "f" and o[1] == "-"), 1, "the inherited block is foreign in the child")
        r = run([REPLAY, "--check", "--malloc", os.path.join(TMP, kids[0])])
        eq(r.returncode, 0, "child's trace replays")


def test_unfinalized_raw():
    env = dict(os.environ, LD_PRELOAD=SHIM, KITE_TRACE_FILE=os.path.join(TMP, "manual.%p"))
    p = subprocess.run(["true"], env=env)
    raws = [f for f in os.listdir(TMP) if f.startswith("manual.")]
    eq(len(raws), 1, "KITE_TRACE_FILE with %p: one raw file")
    if raws:
        raw = os.path.join(TMP, raws[0])
        r = run([REPLAY, raw])
        eq(r.returncode, 2, "a raw capture is refused")
        check("finalize it with tools/kite-trace --finalize" in r.stderr, r.stderr)
        fin = os.path.join(TMP, "manual.trace")
        r = run([os.path.join(TOOLS, "kite-trace"), "--finalize", raw, fin])
        eq(r.returncode, 0, "--finalize")
        eq(run([REPLAY, "--check", fin]).returncode, 0, "finalized trace replays")
    eq(p.returncode, 0, "true under the shim")


def test_limits():
    eq(limit(120, load=0.3, cores=2), 120, "an idle machine: the base limit")
    eq(limit(120, load=25, cores=2), 1500, "load 25 on 2 cores: 12.5 times the base")
    eq(limit(120, load=4, cores=4), 120, "one runnable process per core: the base limit")
    check(limit(120) >= 120, "the live load never shortens a limit")


def test_lab_smoke():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("  (skipped: no matplotlib for this python; make venv provides it)", file=sys.stderr)
        return
    out = os.path.join(TMP, "doc")
    big = os.path.join(TMP, "big")  # stands in for build/lab-traces (make lab-traces)
    os.makedirs(big, exist_ok=True)
    shutil.copy(os.path.join(DATA, "sort.trace"), os.path.join(big, "sort-big.trace"))
    r = run([PY, os.path.join(TOOLS, "lab.py"), "--build", BUILD, "--out", out, "--ns", "300,600",
             "--repeats", "1", "--no-peers", "--big-traces", big])
    eq(r.returncode, 0, f"lab.py: {r.stderr[-500:]}")
    md = open(os.path.join(out, "lab.md")).read()
    check("## The seed's four questions" in md, "lab.md has the questions")
    eq(md.count("*Is there any cost") + md.count("*Does storing") + md.count("*When we abandon")
       + md.count("*Does a top-down"), 4, "four questions answered")
    for png in ("insert-delete-time.png", "insert-delete-response.png", "realloc-time.png",
                "realloc-response.png", "traces-response.png", "traces-utilization.png"):
        p = os.path.join(out, "lab", png)
        check(os.path.exists(p) and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"{png} is a PNG")
        check(f"(lab/{png})" in md, f"lab.md shows {png}")
    sys.path.insert(0, TOOLS)
    import plot
    res = plot.load_results(os.path.join(out, "lab", "results.json"))
    n_alloc = len(allocators())
    eq(len(res["synthetic"]), 2 * 2 * n_alloc, "2 N x 2 experiments x every allocator")
    # the large traces: every allocator replays each whole; the section lists its size
    eq(len(res["big_traces"]), n_alloc, "one large trace x every allocator")
    ops = sum(1 for x in open(os.path.join(big, "sort-big.trace")) if not x.startswith("#"))
    eq(res["big_info"]["sort-big.trace"]["ops"], ops, "the large trace's op count")
    for row in res["big_traces"]:
        check(row["runs"] and row["runs"][0]["requests"] == ops, f"{row['allocator']} replayed it whole")
    check("### Why realloc utilization" in md and "--near" in md, "lab.md takes realloc utilization apart")
    b = res["realloc_breakdown"]
    check(b and b["peak_live"] < b["live_blocks"] < b["span"] and 0 < b["cannot_stay"] < b["n"], str(b))
    check(b and b["near_utilization"] > b["utilization"], "reallocs near the old size leave fewer holes")
    check("## Large program traces" in md and f"| sort-big.trace | {ops:,} |" in md,
          "lab.md has the large-trace section and its size")
    r = run([PY, os.path.join(TOOLS, "kite-lab-traces"), "-o", os.path.join(TMP, "cap"), "--only", "gcc-O2,nosuch"])
    eq(r.returncode, 2, "kite-lab-traces --only with an unknown name")
    check("no program nosuch" in r.stderr and "usage:" in r.stderr, r.stderr)
    r = run([PY, os.path.join(TOOLS, "kite-lab-traces"), "-o", os.path.join(TMP, "cap"), "--list"])
    eq(r.stdout.split(), ["gcc-O2", "python3", "perl", "sqlite3"], "kite-lab-traces --list")
    for row in res["synthetic"]:
        if row["runs"]:
            eq(row["runs"][0]["requests"], 2 * row["n"] if row["experiment"] == "insert-delete" else row["n"],
               f"{row['allocator']} {row['experiment']} {row['n']} timed requests")


TESTS = [test_list, test_six_line_ranges, test_range_errors, test_kite_trace_ops_and_foreign,
         test_malformed, test_workshop_script_semantics, test_free_at, test_out_of_memory, test_generators, test_check_every_allocator,
         test_script_roundtrip, test_ltrace_converter, test_limits, test_lab_smoke]
CAPTURE_TESTS = [test_capture_python, test_capture_sort, test_capture_threads_and_fork,
                 test_unfinalized_raw]


def main():
    tests = TESTS + (CAPTURE_TESTS if os.path.exists(SHIM) else [])
    rc = run_tests(tests, strip_prefix="test_")
    shutil.rmtree(TMP, ignore_errors=True)
    return rc

if __name__ == "__main__":
    sys.exit(main())
