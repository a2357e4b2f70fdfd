#!/usr/bin/env python3
"""tests/tools/test_gen_tables.py -- tools/gen_tables.py: the real docs pass --check; a copy
of the docs with one table row changed, or with a table left out, fails --check (exit 1,
naming the file), and --write brings it back to what --check accepts; a missing marker exits
2; kite-tables prints every option and every statistics field. The lock table: a hand-edited
row is stale; a copy of src/ with a kite_lock_t that lacks its `lock:` comment, has no place
in types.h's order or is not taken by fork_prepare, a taking of an unknown lock, or a
fork_prepare that takes the chain out of order fails --check (exit 1) and --write writes
nothing.

    test_gen_tables.py REPO_ROOT KITE_TABLES
"""
import contextlib
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


@contextlib.contextmanager
def copy_docs():
    """A scratch tree with src/ (the lock table's source) and the docs, removed after."""
    d = tempfile.mkdtemp(prefix="kite-tables-")
    try:
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(d, "src"))
        for rel in DOCS:
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            shutil.copy(os.path.join(ROOT, rel), os.path.join(d, rel))
        yield d
    finally:
        shutil.rmtree(d)


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
    with copy_docs() as d:
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


def test_missing_marker():
    with copy_docs() as d:
        edit(os.path.join(d, "man/kite.3"), '.\\" tables:options-man:end', "")
        rc, out, err = run(d, "--check")
        eq(rc, 2, "a missing marker: exit 2")
        check("man/kite.3: no" in err, f"names the file: {err}")


def test_lock_row_edited_by_hand_is_stale():
    with copy_docs() as d:
        edit(os.path.join(d, "docs/design.md"), "| 1 | `_kite_heap_lock` |", "| 2 | `_kite_heap_lock` |")
        rc, out, err = run(d, "--check")
        eq(rc, 1, "an edited lock row fails --check")
        check("docs/design.md: the locks-md table is stale" in err, f"names the table: {err}")
        eq(run(d, "--write")[0], 0, "--write")
        eq(run(d, "--check")[0], 0, "--check after --write")


DUMMY = "static kite_lock_t dummy_lock = KITE_LOCK_INIT;"


def lock_problem(d, want):
    """--check and --write on copy d both exit 1 naming want, and the docs stay as they were."""
    with open(os.path.join(d, "docs/design.md")) as f:
        before = f.read()
    for mode in ("--check", "--write"):
        rc, out, err = run(d, mode)
        eq(rc, 1, f"{mode} fails")
        check(want in err, f"{mode} says {want!r}: {err}")
    with open(os.path.join(d, "docs/design.md")) as f:
        check(f.read() == before, "nothing written")


def test_lock_without_comment():
    with copy_docs() as d:
        edit(os.path.join(d, "src/huge.c"), "static size_t huge_cache_bytes;", DUMMY + "\nstatic size_t huge_cache_bytes;")
        lock_problem(d, "src/huge.c:56: kite_lock_t dummy_lock has no `/* lock: what it guards */` comment")


def test_lock_outside_order_and_fork():
    with copy_docs() as d:
        edit(os.path.join(d, "src/huge.c"), "static size_t huge_cache_bytes;",
             DUMMY + " /* lock: nothing */\nstatic size_t huge_cache_bytes;\n"
             "void dummy(void) { _kite_lock(&dummy_lock); _kite_unlock(&dummy_lock); }")
        lock_problem(d, "src/huge.c: dummy_lock has no place in src/types.h's lock order")
        edit(os.path.join(d, "src/types.h"), "lock-alone: huge_lock", "lock-alone: dummy_lock huge_lock")
        lock_problem(d, "src/init.c: fork_prepare does not take dummy_lock")
        edit(os.path.join(d, "src/huge.c"), "void _kite_huge_fork_prepare(void) { _kite_lock(&huge_lock); }",
             "void _kite_huge_fork_prepare(void) { _kite_lock(&huge_lock); _kite_lock(&dummy_lock); }")
        eq(run(d, "--check")[0], 1, "the table lacks the new lock: stale")
        eq(run(d, "--write")[0], 0, "--write")
        with open(os.path.join(d, "docs/design.md")) as f:
            check("| alone | `dummy_lock` | `huge.c` | nothing | `huge.c` |" in f.read(), "the new lock's row")


def test_unknown_lock_taken():
    with copy_docs() as d:
        edit(os.path.join(d, "src/links.c"), "void _kite_links_fork_parent(void)",
             "void mystery(pthread_mutex_t *m) { _kite_lock(&m[0]); }\nvoid _kite_links_fork_parent(void)")
        lock_problem(d, "takes 'm[0]', which is no kite_lock_t the table knows")


def test_fork_prepare_out_of_order():
    with copy_docs() as d:
        edit(os.path.join(d, "src/init.c"), "  _kite_heap_fork_prepare();\n", "")
        edit(os.path.join(d, "src/init.c"), "  _kite_arena_fork_prepare();\n", "  _kite_arena_fork_prepare();\n  _kite_heap_fork_prepare();\n")
        lock_problem(d, "src/init.c: fork_prepare takes the chain's locks out of its order")


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
                        test_lock_row_edited_by_hand_is_stale, test_lock_without_comment,
                        test_lock_outside_order_and_fork, test_unknown_lock_taken, test_fork_prepare_out_of_order,
                        test_every_entry_printed], strip_prefix="test_"))
