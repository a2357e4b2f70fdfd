#!/usr/bin/env python3
"""tests/tools/test_layers.py -- tools/layers.py: the real tree passes --check; copies of src/
with an upward include, a cycle, an unclaimed file, or a stale picture fail with exit 1 and
name what is wrong; bad usage exits 2.

    test_layers.py REPO_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, eq, run_tests  # noqa: E402

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "layers.py")


def run(*args):
    p = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def copy_tree():
    d = tempfile.mkdtemp(prefix="kite-layers-")
    shutil.copytree(os.path.join(ROOT, "src"), os.path.join(d, "src"))
    os.makedirs(os.path.join(d, "docs"))
    shutil.copy(os.path.join(ROOT, "docs", "design.md"), os.path.join(d, "docs", "design.md"))
    return d


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_real_tree_is_sound():
    rc, out, err = run("--check", "--root", ROOT)
    eq(rc, 0, "exit status of --check on the repository: " + err)
    check("no cycle" in out, "--check says what it checked")


def test_upward_include_fails():
    d = copy_tree()
    try:
        append(os.path.join(d, "src", "arena.c"), '#include "heap.h"\n')
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status")
        check("src/arena.c:" in err and "arena (layer arena) -> heap (layer heap) goes upward" in err, "names the edge: " + err)
    finally:
        shutil.rmtree(d)


def test_cycle_fails():
    d = copy_tree()
    try:
        # message -> stats -> sizeclass -> message (all in the bottom layer)
        append(os.path.join(d, "src", "message.c"), '#include "stats.h"\n')
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("include cycle between modules: " in err and "message" in err and "stats" in err, "names the cycle: " + err)
    finally:
        shutil.rmtree(d)


def test_unclaimed_file_fails():
    d = copy_tree()
    try:
        with open(os.path.join(d, "src", "segment.c"), "w") as f:
            f.write('#include "types.h"\n')
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("src/segment.c: no module claims this file" in err, err)
    finally:
        shutil.rmtree(d)


def test_stale_picture_fails_and_write_fixes_it():
    d = copy_tree()
    try:
        append(os.path.join(d, "src", "free.c"), '#include "os.h"\n')  # allowed, but a new arrow
        rc, _, err = run("--check", "--root", d)
        eq(rc, 1, "exit status with a stale picture")
        check("stale" in err, err)
        eq(run("--write", "--root", d)[0], 0, "--write")
        eq(run("--check", "--root", d)[0], 0, "--check after --write")
    finally:
        shutil.rmtree(d)


def test_bad_usage():
    rc, _, err = run("--frobnicate")
    eq(rc, 2, "exit status of an unknown option")
    check("usage:" in err, "prints usage")


sys.exit(run_tests([test_real_tree_is_sound, test_upward_include_fails, test_cycle_fails,
                    test_unclaimed_file_fails, test_stale_picture_fails_and_write_fixes_it,
                    test_bad_usage], strip_prefix="test_"))
