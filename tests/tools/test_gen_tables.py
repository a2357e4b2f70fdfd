#!/usr/bin/env python3
"""tests/tools/test_gen_tables.py -- tools/gen_tables.py: the real docs pass --check; a copy
of the docs with one table row changed, or with a table left out, fails --check (exit 1,
naming the file), and --write brings it back to what --check accepts; a missing marker exits
2; kite-tables prints every option and every statistics field.

    test_gen_tables.py REPO_ROOT KITE_TABLES
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, eq, run_tests  # noqa: E402

ROOT = os.path.abspath(sys.argv[1])
TABLES = os.path.abspath(sys.argv[2])
TOOL = os.path.join(ROOT, "tools", "gen_tables.py")
DOCS = ["README.md", "docs/design.md", "docs/stats.md", "man/kite.3"]


def run(root, *args):
    p = subprocess.run([sys.executable, TOOL, "--root", root, "--tables", TABLES] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def copy_docs():
    d = tempfile.mkdtemp(prefix="kite-tables-")
    for rel in DOCS:
        os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(d, rel))
    return d


def edit(path, old, new):
    with open(path) as f:
        text = f.read()
    check(old in text, f"{path} has {old!r}")
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


def test_real_docs_are_current():
    rc, out, err = run(ROOT, "--check")
    eq(rc, 0, f"--check on the real docs: {err}")


def test_changed_row_is_stale_then_rewritten():
    d = copy_docs()
    try:
        edit(os.path.join(d, "README.md"), "| `KITE_PURGE_DELAY_MS` | 10 |", "| `KITE_PURGE_DELAY_MS` | 20 |")
        edit(os.path.join(d, "docs/stats.md"), "| `committed` |", "| `committed_bytes` |")
        rc, out, err = run(d, "--check")
        eq(rc, 1, "a changed row fails --check")
        check("README.md: the options-md table is stale" in err, f"names README.md: {err}")
        check("docs/stats.md: the stats-md table is stale" in err, f"names docs/stats.md: {err}")
        check("design.md" not in err, "an unchanged file is not named")
        rc, out, err = run(d, "--write")
        eq(rc, 0, "--write")
        rc, out, err = run(d, "--check")
        eq(rc, 0, f"--check after --write: {err}")
        for rel in DOCS:
            with open(os.path.join(d, rel)) as a, open(os.path.join(ROOT, rel)) as b:
                check(a.read() == b.read(), f"{rel} rewritten as the real one")
    finally:
        shutil.rmtree(d)


def test_missing_marker():
    d = copy_docs()
    try:
        edit(os.path.join(d, "man/kite.3"), '.\\" tables:options-man:end', "")
        rc, out, err = run(d, "--check")
        eq(rc, 2, "a missing marker: exit 2")
        check("man/kite.3: no" in err, f"names the file: {err}")
    finally:
        shutil.rmtree(d)


def test_every_entry_printed():
    opts = subprocess.run([TABLES, "options-md"], capture_output=True, text=True, check=True).stdout
    for name in ["KITE_SHOW_STATS", "KITE_VERBOSE", "KITE_ABORT_ON_ERROR", "KITE_PURGE_DELAY_MS",
                 "KITE_HUGEPAGES", "KITE_BACKGROUND"]:
        check(f"| `{name}` |" in opts, f"options-md has {name}")
    check("a whole number in -2147483648 .. 86400000" in opts, "options-md gives the purge delay's range")
    man = subprocess.run([TABLES, "options-man"], capture_output=True, text=True, check=True).stdout
    eq(man.count(".TP\n.B KITE_"), 10, "options-man: one entry an option")
    stats = subprocess.run([TABLES, "stats-md"], capture_output=True, text=True, check=True).stdout
    eq(len([l for l in stats.splitlines() if l.startswith("| `")]), 20, "stats-md: one row a field")
    r = subprocess.run([TABLES, "nonsense"], capture_output=True, text=True)
    eq(r.returncode, 2, "bad usage: exit 2")


if __name__ == "__main__":
    sys.exit(run_tests([test_real_docs_are_current, test_changed_row_is_stale_then_rewritten, test_missing_marker,
                        test_every_entry_printed], strip_prefix="test_"))
