"""tests/testlib.py -- the harness of kite's Python tests, the counterpart of tests/test.h.

check(cond, what) records a passed or failed check and goes on (a failure is printed to
stderr); eq(a, b, what) compares and prints both values. run_tests(tests) runs each test
function (an exception in one is a failed check, the suite goes on), prints one line per
test, then the closing "N passed, N failed" line (counting checks), and returns the exit
status.

run_tool(script, *args) runs a Python script of the tree and returns (exit status, stdout,
stderr); copy_tree(root, *paths) copies root's paths (directories whole, files with their
directories) into a new temporary directory, for a test that breaks a copy of the tree;
`with tree_copy(root, *paths) as d:` does the same and removes the copy afterwards.
"""
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

_passed = _failed = 0
_current_failed = False


def check(cond, what):
    global _passed, _failed, _current_failed
    if cond:
        _passed += 1
    else:
        _failed += 1
        _current_failed = True
        print(f"  FAIL: {what}", file=sys.stderr)
    return cond


def eq(a, b, what):
    return check(a == b, f"{what}: {a!r} != {b!r}")


def run_tests(tests, strip_prefix=""):
    global _current_failed
    for t in tests:
        _current_failed = False
        try:
            t()
        except Exception as e:  # a crash in a test is a failed check, not the end of the suite
            check(False, f"{t.__name__} raised {type(e).__name__}: {e}")
        name = t.__name__
        if strip_prefix and name.startswith(strip_prefix):
            name = name[len(strip_prefix):]
        print(f"{'FAIL' if _current_failed else 'ok  '} {name}", file=sys.stderr)
    print(f"{_passed} passed, {_failed} failed")
    return 1 if _failed else 0


def run_tool(script, *args):
    p = subprocess.run([sys.executable, script] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def copy_tree(root, *paths, prefix="kite-tree-"):
    d = tempfile.mkdtemp(prefix=prefix)
    for rel in paths:
        src, dst = os.path.join(root, rel), os.path.join(d, rel)
        if os.path.isdir(src):
            shutil.copytree(src, dst)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(src, dst)
    return d


@contextlib.contextmanager
def tree_copy(root, *paths, prefix="kite-tree-"):
    d = copy_tree(root, *paths, prefix=prefix)
    try:
        yield d
    finally:
        shutil.rmtree(d)
