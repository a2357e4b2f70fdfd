#!/usr/bin/env python3
"""tests/tools/test_structure.py -- tools/structure.py: the real tree passes; copies of src/
with a file above 700 lines, a function above 60 lines (written plainly, in #if variants that
each open a brace, or after an attribute), or a stale allow-list entry fail with exit 1 and
name what is wrong; a long function whose comment says "Why longer:" passes; bad usage exits 2.

    test_structure.py REPO_ROOT
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, eq, run_tests, run_tool  # noqa: E402
from testlib import tree_copy  # noqa: E402

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "structure.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import structure  # noqa: E402


def run(*args):
    return run_tool(TOOL, *args)


def copied_tree():
    return tree_copy(ROOT, "src", prefix="kite-structure-")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def body(n):
    """A function of exactly n lines (header and closing brace included)."""
    return "static int f%d(int x) {\n" % n + "  x++;\n" * (n - 3) + "  return x;\n}\n"


def test_real_tree_is_sound():
    rc, out, err = run("--root", ROOT)
    eq(rc, 0, "exit status on the repository: " + err)
    check("no file above 700 lines" in out, "says what it checked: " + out)


def test_long_file_fails():
    with copied_tree() as d:
        write(os.path.join(d, "src", "bloated.c"), "int bloated_x;\n" * 701)
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("src/bloated.c: 701 lines, above 700" in err, "names the file and its length: " + err)
        write(os.path.join(d, "src", "bloated.c"), "int bloated_x;\n" * 700)
        eq(run("--root", d)[0], 0, "700 lines are allowed")


def test_long_function_fails():
    with copied_tree() as d:
        write(os.path.join(d, "src", "longfn.c"), "/* a helper */\n" + body(61))
        rc, _, err = run("--root", d)
        eq(rc, 1, "exit status")
        check("src/longfn.c:2: f61() is 61 lines, above 60" in err, "names the function, line and length: " + err)
        write(os.path.join(d, "src", "longfn.c"), "/* a helper */\n" + body(60))
        eq(run("--root", d)[0], 0, "60 lines are allowed")


def test_why_longer_comment_allows_it():
    with copied_tree() as d:
        write(os.path.join(d, "src", "longfn.c"),
              "/* One table walk. Why longer: the cases share their locals. */\n" + body(80))
        rc, _, err = run("--root", d)
        eq(rc, 0, "exit status: " + err)
        # the reason must be above this function, not above an earlier one
        write(os.path.join(d, "src", "longfn.c"),
              "/* Why longer: a reason for g. */\nstatic int g(void) { return 0; }\n" + body(80))
        rc, _, err = run("--root", d)
        eq(rc, 1, "a reason above another function does not count: " + err)


def test_reader_counts_variants_strings_and_attributes():
    text = ('static const char *s = "{{{";\n'
            "__attribute__((cold)) static void cold_one(void) {\n"
            "#if A\n  if (1) {\n#else\n  {\n#endif\n    (void)'}';\n  }\n}\n"
            'extern "C" {\nvoid inside(void) {\n}\n}\n'
            "struct st { int (*fp)(void); };\n"
            "int arr[] = {(1), 2};\n")
    fns = [(name, first, last) for name, first, last, _ in structure.functions(text)]
    eq(fns, [("cold_one", 2, 10), ("inside", 12, 13)], "definitions found, with their lines")


def test_stale_allow_list_entry_fails():
    """A copy of the tool whose allow-lists name page.c (short) and a short function of it:
    both entries are stale, and each is named (the real lists may be empty)."""
    with copied_tree() as d:
        with open(TOOL) as f:
            text = f.read()
        check("ALLOW_FILES = {" in text and "ALLOW_FUNCS = {" in text, "the tool's allow-lists")
        text = text.replace("ALLOW_FILES = {", 'ALLOW_FILES = {"page.c": "a test entry", ', 1)
        text = text.replace("ALLOW_FUNCS = {", 'ALLOW_FUNCS = {("page.c", "short_fn"): "a test entry", ', 1)
        tool = os.path.join(d, "structure.py")
        write(tool, text)
        with open(os.path.join(d, "src", "page.c"), "a") as f:
            f.write("int short_fn(void) { return 0; }\n")
        p = subprocess.run([sys.executable, tool, "--root", d], capture_output=True, text=True)
        eq(p.returncode, 1, "exit status: " + p.stderr)
        check("ALLOW_FILES lists src/page.c" in p.stderr, "names the stale file entry: " + p.stderr)
        check("ALLOW_FUNCS lists short_fn()" in p.stderr, "names the stale function entry: " + p.stderr)


def test_bad_usage():
    rc, _, err = run("--frobnicate")
    eq(rc, 2, "exit status of an unknown option")
    check("usage:" in err, "prints usage")
    with tempfile.TemporaryDirectory(prefix="kite-structure-") as d:
        eq(run("--root", d)[0], 2, "a root without src/")


sys.exit(run_tests([test_real_tree_is_sound, test_long_file_fails, test_long_function_fails,
                    test_why_longer_comment_allows_it, test_reader_counts_variants_strings_and_attributes,
                    test_stale_allow_list_entry_fails, test_bad_usage], strip_prefix="test_"))
