#!/usr/bin/env python3
"""tests/tools/test_layers.py -- tools/layers.py: the real tree passes --check; copies of src/
with an upward include, an upward call (written in a file, or in an inline function of a low
header), a cycle of includes or of calls, an unclaimed file, a file that does not compile, or
a stale picture fail with exit 1 and name what is wrong; bad usage exits 2.

    test_layers.py REPO_ROOT [CACHE_DIR]

CACHE_DIR (default: a temporary one) is passed to every run as --cache: the copies differ
from the tree in one file, so only that file is compiled again.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, eq, run_tests, run_tool  # noqa: E402
from testlib import tree_copy  # noqa: E402

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "layers.py")
CACHE = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="kite-layers-cache-")


def run(*args):
    cache = ["--cache", CACHE] if args and args[0] != "--frobnicate" else []
    return run_tool(TOOL, *args, *cache)


def copied_tree():
    # include/ for the compiles
    return tree_copy(ROOT, "src", "include", "docs/design.md", prefix="kite-layers-")


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_real_tree_is_sound():
    rc, out, err = run("--check", "--root", ROOT)
    eq(rc, 0, "exit status of --check on the repository: " + err)
    check("every include and every call" in out and "no cycle" in out, "--check says what it checked: " + out)


def test_picture_shows_calls():
    rc, out, err = run("--root", ROOT)
    eq(rc, 0, "exit status: " + err)
    # init.c's fork handlers call each layer's hooks; the page layer calls the link arrays
    check(any(l.split()[:1] == ["calls"] and "heap" in l.split() for l in out.splitlines()), "a calls line: " + out)
    lines = out.splitlines()
    page = [i for i, l in enumerate(lines) if l.split()[:3] == ["9", "page", "page"]]
    # the module's calls line (its files may wrap onto the lines below its first)
    calls = [l.split() for l in lines[page[0]:page[0] + 4] if "calls" in l.split()] if len(page) == 1 else []
    check(calls and calls[0][calls[0].index("calls") + 1] == "links", "page calls links first: " + out)


def test_upward_include_fails():
    with copied_tree() as d:
        append(os.path.join(d, "src", "arena.c"), '#include "heap.h"\n')
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status")
        check("src/arena.c:" in err and "arena (layer arena) -> heap (layer heap) goes upward" in err, "names the edge: " + err)


def test_upward_call_fails():
    with copied_tree() as d:
        # declared here, not through heap.h: the includes stay sound, only the call goes up
        append(os.path.join(d, "src", "arena.c"),
               "void _kite_heap_fork_prepare(void);\nvoid _kite_arena_probe(void) { _kite_heap_fork_prepare(); }\n")
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status")
        check("src/arena.c (default, secure, valgrind builds): calls _kite_heap_fork_prepare of src/heap_pool.c: "
              "arena (layer arena) -> heap (layer heap) goes upward" in err, "names the call: " + err)
        check(": includes" not in err, "no include is blamed: " + err)


def test_upward_call_in_low_header_fails():
    with copied_tree() as d:
        # an inline function of a bottom-layer header that calls the heap layer, used by huge.c
        # (in the secure build only): the arrow goes from huge, which uses it
        append(os.path.join(d, "src", "secret.h"),
               "void _kite_heap_fork_parent(void);\n"
               "static inline void _kite_secret_probe(void) { _kite_heap_fork_parent(); }\n")
        append(os.path.join(d, "src", "huge.c"),
               "#if KITE_SECURE\nvoid _kite_huge_probe(void) { _kite_secret_probe(); }\n#endif\n")
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status")
        check("src/huge.c (secure build): calls _kite_heap_fork_parent of src/heap_pool.c: huge (layer huge) -> heap "
              "(layer heap) goes upward (the call is in src/huge.c or in an inline function of a header it includes)"
              in err, "names the call and the build: " + err)


def test_call_cycle_fails():
    with copied_tree() as d:
        # options calls message (its output); message calling options closes a circle inside
        # the bottom layer, with no include added
        append(os.path.join(d, "src", "message.c"),
               "void _kite_options_read(void);\nvoid _kite_message_probe(void) { _kite_options_read(); }\n")
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("call cycle between modules: " in err and "message -> options -> message" in err, "names the cycle: " + err)
        check("goes upward" not in err, "no edge goes upward: " + err)


def test_compile_error_fails():
    with copied_tree() as d:
        append(os.path.join(d, "src", "buddy.c"), "this is not C;\n")
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("src/buddy.c does not compile (default build)" in err, err)


def test_cycle_fails():
    with copied_tree() as d:
        # message -> stats -> sizeclass -> message (all in the bottom layer)
        append(os.path.join(d, "src", "message.c"), '#include "stats.h"\n')
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("include cycle between modules: " in err and "message" in err and "stats" in err, "names the cycle: " + err)


def test_unclaimed_file_fails():
    with copied_tree() as d:
        with open(os.path.join(d, "src", "segment.c"), "w") as f:
            f.write('#include "types.h"\n')
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("src/segment.c: no module claims this file" in err, err)


def test_stale_picture_fails_and_write_fixes_it():
    with copied_tree() as d:
        append(os.path.join(d, "src", "free.c"), '#include "os.h"\n')  # allowed, but a new arrow
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status with a stale picture")
        check("stale" in err, err)
        eq(run("--write", "--root", d)[0], 0, "--write")
        eq(run("--check", "--root", d)[0], 0, "--check after --write")


def test_bad_usage():
    rc, _, err = run("--frobnicate")
    eq(rc, 2, "exit status of an unknown option")
    check("usage:" in err, "prints usage")


sys.exit(run_tests([test_real_tree_is_sound, test_picture_shows_calls, test_upward_include_fails,
                    test_upward_call_fails, test_upward_call_in_low_header_fails, test_call_cycle_fails,
                    test_compile_error_fails, test_cycle_fails, test_unclaimed_file_fails,
                    test_stale_picture_fails_and_write_fixes_it, test_bad_usage], strip_prefix="test_"))
