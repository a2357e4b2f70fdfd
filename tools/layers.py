#!/usr/bin/env python3
"""tools/layers.py -- the core's layers, read from its #include lines and from its calls.

Maps every file of src/ (src/*.c, src/*.h, src/*.cpp, src/os/*.c) to its module and every
module to its layer (the table LAYERS below, bottom up), then reads two kinds of arrows:
  - includes: the #include lines of every file;
  - calls: compiles every source file (cc -O0, into a temporary directory) once for each
    build in BUILDS below and reads each object's symbols (nm): a symbol an object uses and
    another object defines is an arrow from the first file's module to the second's. It
    catches what the includes cannot show: an inline function of a low header that calls a
    function defined higher up is an arrow from every file that uses it. Reading a global
    counts as a call.
It fails (exit 1, naming the file and the edge) on an include or a call that goes upward,
on a cycle between modules (includes or calls), on a file or header that no module claims,
and on a source file that does not compile. It prints the picture of the layers (who
includes and who calls whom), or writes it into docs/design.md between the markers
<!-- layers:begin --> and <!-- layers:end --> (--write), or checks that the picture there is
the one the sources give (--check; what CTest runs).

--cache DIR keeps each object's symbol list under DIR, keyed by the compiler, its flags, the
source and every header, so a second run compiles only what changed.

Exit status: 0 sound (and, with --check, the picture is current), 1 a violation, a stale
picture or a failed compile, 2 bad usage.
"""
import argparse
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Bottom up. A module may include the headers of, and call, the modules of its own layer and
# of the layers below it; within a layer, neither the includes nor the calls between modules
# may form a cycle.
LAYERS = [
    ("base", {"types": ["types.h", "bits.h", "once.h"]}),  # once.h: fork-safe once-initialisation
    ("os", {"os": ["os.h", "os/linux.c"]}),
    ("bottom", {
        "message": ["message.h", "message.c"],
        "options": ["options.h", "options.c"],
        "stats": ["stats.h", "stats.c"],
        "sizeclass": ["sizeclass.h", "sizeclass.c"],
        "report": ["report.c"],  # declared in message.h
        "secret": ["secret.h", "secret.c"],
        "tool": ["tool.h"],  # memory-checker hooks (empty unless asked for)
        "secure_layout": ["secure_layout.h"],  # the secure build's constants, block format, layout hooks
        "stack": ["stack.h", "stack.c"],  # call stacks (guarded allocations, heap profiles)
    }),
    ("buddy", {"buddy": ["buddy.c", "buddy_range.c", "buddy_impl.h", "<kite/buddy.h>"]}),
    ("pagemap", {"pagemap": ["pagemap.h", "pagemap.c"]}),
    # the mechanism (arena.c), its validators, the purge policy and the huge-page modes: one
    # module, as they share the arena header and the slot table (arena_int.h)
    ("arena", {"arena": ["arena.h", "arena_int.h", "arena.c", "arena_check.c", "decay.c", "thp.c"]}),
    ("huge", {"huge": ["huge.h", "huge.c"]}),
    ("purger", {"purger": ["purger.h", "purger.c"]}),
    ("links", {"links": ["links.h", "links.c"]}),
    ("page", {"page": ["page.h", "page.c", "remote.h", "remote.c"]}),
    # one module in five files (heap_impl.h: what they share); their calls go both ways
    ("heap", {"heap": ["heap.h", "heap_impl.h", "heap.c", "heap_reclaim.c", "heap_abandon.c", "heap_pool.c"]}),
    ("guarded", {"guarded": ["guarded.h", "guarded.c"],
                 "prof": ["prof.h", "prof.c", "prof_write.c"]}),  # the heap profiler (beside guarded)
    # the entry points: the public API (<kite.h> is its contract, so nothing below may include
    # it) and what the runtime calls (init.c: constructor, destructor, fork handlers; the first
    # kite_heap_new runs its start-up too)
    ("entry", {
        "api": ["<kite.h>"],
        "classify": ["classify.h"],  # what a pointer is (page map, descriptor, block)
        "alloc": ["alloc.h", "alloc.c"],
        "entry": ["entry.h"],
        "free": ["free.c"],
        "introspect": ["introspect.c"],
        "override": ["override.c", "override_cxx.cpp"],
        "version": ["version.c", "<kite/version.h>"],
        "valgrind": ["valgrind.c"],
        "visit": ["visit.h", "visit.c"],
        "secure": ["secure.h", "secure.c", "secure_large.c"],  # the secure build's entry points (declared in <kite.h>)
        "init": ["init.c"],
    }),
]

# The builds whose calls are read (cmake/core.cmake and cmake/introspect.cmake make them):
# (name, compile definitions, source files it leaves out). Every call of any of them counts.
# The first is kite/kite-static and kite-noover-debug together (the override, the debug
# level that runs every validator, the test hooks); then libkite-secure.so and
# libkite-valgrind.so.
BUILDS = [
    ("default", ["-DKITE_OVERRIDE=1", "-DKITE_DEBUG=3", "-DKITE_TEST_HOOKS=1"], {"secure.c", "secure_large.c", "valgrind.c"}),
    ("secure", ["-DKITE_OVERRIDE=1", "-DKITE_DEBUG=3", "-DKITE_TEST_HOOKS=1", "-DKITE_SECURE=1"], {"valgrind.c"}),
    ("valgrind", ["-DKITE_OVERRIDE=0", "-DKITE_DEBUG=0", "-DKITE_VALGRIND=1"], {"secure.c", "secure_large.c", "override_cxx.cpp"}),
]
# Headers the compile needs that the source tree does not have: CMake generates
# <kite/version.h>; <valgrind/memcheck.h> may not be installed, and its client requests are
# no calls (they are special instruction sequences), so an empty stand-in serves.
STAND_INS = {
    "kite/version.h": "#define KITE_VERSION_MAJOR 0\n#define KITE_VERSION_MINOR 0\n"
                      "#define KITE_VERSION_PATCH 0\n#define KITE_VERSION_STRING \"0.0.0\"\n",
    "valgrind/memcheck.h": "".join("#define %s(...) ((void)0)\n" % m for m in (
        "VALGRIND_MALLOCLIKE_BLOCK", "VALGRIND_FREELIKE_BLOCK", "VALGRIND_MAKE_MEM_UNDEFINED"))
    + "#define VALGRIND_DISABLE_ERROR_REPORTING ((void)0)\n#define VALGRIND_ENABLE_ERROR_REPORTING ((void)0)\n",
}
# -O0: every call the source writes stays in the object (the optimizer may drop a call it
# proves dead; the calls of the release objects are a subset of these).
CFLAGS = ["-std=gnu11", "-O0", "-w", "-fvisibility=hidden"]
CXXFLAGS = ["-std=gnu++17", "-O0", "-w", "-fvisibility=hidden", "-fno-exceptions"]

BEGIN = "<!-- layers:begin (generated by tools/layers.py --write; do not edit) -->"
END = "<!-- layers:end -->"
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def module_table():
    """{name as included or as a path under src/: (module, layer index)}"""
    table = {}
    for li, (_, mods) in enumerate(LAYERS):
        for mod, files in mods.items():
            for f in files:
                table[f] = (mod, li)
    return table


def source_files(src):
    out = []
    for d in (src, os.path.join(src, "os")):
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h", ".cpp")):
                out.append(os.path.relpath(os.path.join(d, name), src))
    return out


def read_edges(src, files, table):
    """[(file, line number, target key)], [problems]"""
    edges, problems = [], []
    for f in files:
        with open(os.path.join(src, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                if kind == "<":
                    key = "<%s>" % name
                    if key not in table:
                        continue  # a system header
                else:
                    key = os.path.normpath(os.path.join(os.path.dirname(f), name))
                    if key == "kite/buddy.h":
                        key = "<kite/buddy.h>"
                    if key not in table:
                        problems.append("src/%s:%d: includes \"%s\", which no module claims (add it to LAYERS in tools/layers.py)" % (f, n, name))
                        continue
                edges.append((f, n, key))
    return edges, problems


# ---- calls ----

def _headers_digest(root):
    """One digest of every header a core file can include (src/, include/)."""
    h = hashlib.sha256()
    for top in (os.path.join(root, "src"), os.path.join(root, "include")):
        for d, dirs, names in sorted(os.walk(top)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".h", ".hpp")):
                    path = os.path.join(d, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as fh:
                        h.update(fh.read())
    return h.hexdigest()


def _symbols(nm_text):
    """nm -P output -> (set of symbols it uses, set of symbols it defines for the linker)"""
    used, defined = set(), set()
    for line in nm_text.splitlines():
        p = line.split()
        if len(p) < 2:
            continue
        name, kind = p[0], p[1]
        if kind in ("U", "w", "v") and len(p) == 2:
            used.add(name)  # undefined (weak ones too): defined by another object, or not ours
        elif kind.isupper() or kind in ("u", "i"):
            defined.add(name)
    return used, defined


def compile_symbols(root, sources, cc, cxx, cache):
    """{build name: {source (relative to src/): (used, defined)}}, [problems].
    Compiles each source once a build (in parallel), or takes its symbols from the cache."""
    src = os.path.join(root, "src")
    work = tempfile.mkdtemp(prefix="kite-layers-")
    try:
        inc = os.path.join(work, "include")
        for name, text in STAND_INS.items():
            os.makedirs(os.path.dirname(os.path.join(inc, name)), exist_ok=True)
            with open(os.path.join(inc, name), "w") as fh:
                fh.write(text)
        stand_in_digest = hashlib.sha256(repr(sorted(STAND_INS.items())).encode()).hexdigest()
        headers = _headers_digest(root)
        for c in (cc, cxx):
            try:  # the compiler's version is part of the cache key
                headers += subprocess.run([c, "--version"], capture_output=True, text=True).stdout
            except OSError:
                pass  # reported by the first compile
        jobs = []
        for build, defs, left_out in BUILDS:
            for f in sources:
                if os.path.basename(f) in left_out:
                    continue
                cpp = f.endswith(".cpp")
                obj = os.path.join(work, build, f.replace("/", "_") + ".o")
                cmd = [cxx if cpp else cc] + (CXXFLAGS if cpp else CFLAGS) + defs + [
                    "-I" + inc, "-I" + os.path.join(root, "include"), "-I" + src,
                    "-c", os.path.join(src, f), "-o", obj]
                jobs.append((build, f, cmd, obj))

        def one(job):
            build, f, cmd, obj = job
            key = None
            if cache:
                h = hashlib.sha256()
                h.update(repr([c for c in cmd if not c.startswith(("-I", work, root))]).encode())
                h.update(f.encode() + b"\0" + headers.encode() + stand_in_digest.encode())
                with open(os.path.join(src, f), "rb") as fh:
                    h.update(fh.read())
                key = os.path.join(cache, h.hexdigest() + ".nm")
                if os.path.exists(key):
                    with open(key) as fh:
                        return build, f, fh.read(), None
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:
                return build, f, None, "%s: %s" % (cmd[0], e)
            if p.returncode != 0:
                errors = [l for l in p.stderr.splitlines() if "error" in l] or p.stderr.splitlines() or ["(no message)"]
                return build, f, None, "src/%s does not compile (%s build): %s\n    %s" % (f, build, errors[0], " ".join(cmd))
            try:
                q = subprocess.run(["nm", "-P", obj], capture_output=True, text=True)
            except OSError as e:
                return build, f, None, "nm: %s" % e
            if q.returncode != 0:
                return build, f, None, "nm -P %s: %s" % (obj, q.stderr.strip())
            if key:
                os.makedirs(cache, exist_ok=True)
                tmp = "%s.%d.tmp" % (key, os.getpid())
                with open(tmp, "w") as fh:
                    fh.write(q.stdout)
                os.replace(tmp, key)
            return build, f, q.stdout, None

        out, problems = {}, []
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
            for build, f, text, err in ex.map(one, jobs):
                if err:
                    problems.append(err)
                else:
                    out.setdefault(build, {})[f] = _symbols(text)
        return out, problems
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_calls(symbols, table):
    """[(build, file, defining file, sorted symbols)]: each pair of files in different
    modules where the first uses what the second defines."""
    calls = []
    for build, _, _ in BUILDS:
        objs = symbols.get(build, {})
        where = {}
        for f, (_, defined) in objs.items():
            for s in defined:
                where.setdefault(s, f)
        for f in sorted(objs):
            targets = {}
            for s in objs[f][0]:
                g = where.get(s)
                if g is not None and g != f and f in table and g in table and table[f][0] != table[g][0]:
                    targets.setdefault(g, set()).add(s)
            for g in sorted(targets):
                calls.append((build, f, g, sorted(targets[g])))
    return calls


def find_cycle(graph):
    """A list of modules forming a cycle in graph {module: set(modules)}, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                c = visit(t)
                if c:
                    return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def analyse(root, calls=True, cc="cc", cxx="c++", cache=None):
    """(include graph, call graph {module: {module: set(builds)}}, problems)"""
    src = os.path.join(root, "src")
    table = module_table()
    files = source_files(src)
    problems = []
    for f in files:
        if f not in table:
            problems.append("src/%s: no module claims this file (add it to LAYERS in tools/layers.py)" % f)
    edges, p = read_edges(src, files, table)
    problems += p
    graph = {}
    for f, n, key in edges:
        if f not in table:
            continue
        (a, la), (b, lb) = table[f], table[key]
        if a == b:
            continue
        graph.setdefault(a, set()).add(b)
        if lb > la:
            problems.append("src/%s:%d: includes %s: %s (layer %s) -> %s (layer %s) goes upward"
                            % (f, n, key, a, LAYERS[la][0], b, LAYERS[lb][0]))
    cycle = find_cycle(graph)
    if cycle:
        problems.append("include cycle between modules: " + " -> ".join(cycle))
    cgraph = {}
    if calls:
        symbols, p = compile_symbols(root, [f for f in files if f.endswith((".c", ".cpp"))], cc, cxx, cache)
        problems += p
        upward = {}
        for build, f, g, syms in read_calls(symbols, table):
            (a, la), (b, lb) = table[f], table[g]
            cgraph.setdefault(a, {}).setdefault(b, set()).add(build)
            if lb > la:
                seen = upward.setdefault((f, g), ([], set()))
                seen[0].append(build)
                seen[1].update(syms)
        for (f, g), (builds, syms) in sorted(upward.items()):
            (a, la), (b, lb) = table[f], table[g]
            syms = sorted(syms)
            shown = ", ".join(syms[:4]) + (", ..." if len(syms) > 4 else "")
            problems.append("src/%s (%s build%s): calls %s of src/%s: %s (layer %s) -> %s (layer %s) goes upward"
                            " (the call is in src/%s or in an inline function of a header it includes)"
                            % (f, ", ".join(builds), "s" if len(builds) > 1 else "", shown, g,
                               a, LAYERS[la][0], b, LAYERS[lb][0], f))
        cycle = find_cycle({a: set(bs) for a, bs in cgraph.items()})
        if cycle:
            problems.append("call cycle between modules: " + " -> ".join(cycle))
    return graph, cgraph, problems


def picture(graph, cgraph):
    """The layers top down, each module with its files, the modules it includes and the
    modules it calls; a call the first build lacks is marked with the builds that make it."""
    table = module_table()
    layer_of = {m: l for (m, l) in table.values()}
    first = BUILDS[0][0]

    def order(mods):
        return sorted(mods, key=lambda m: (-layer_of[m], m))

    def only_in(mod, target):
        # secure.c, secure_large.c and valgrind.c are compiled only outside the first build: no mark there
        builds = cgraph[mod][target]
        srcs = [f for f in LAYERS[layer_of[mod]][1][mod] if not f.endswith(".h")]  # (headers make no objects)
        if first in builds or (srcs and all(os.path.basename(f) in BUILDS[0][2] for f in srcs)):
            return target
        return "%s(%s)" % (target, ",".join(b for b, _, _ in BUILDS if b in builds))

    lines = ["```", "layer      module         files                          arrows (down, or within a layer without a circle)"]
    for li in range(len(LAYERS) - 1, -1, -1):
        name, mods = LAYERS[li]
        lines.append("-" * 100)
        for k, (mod, files) in enumerate(mods.items()):
            label = "%2d %-7s" % (li, name) if k == 0 else ""
            inc = order(graph.get(mod, ()))
            called = [only_in(mod, m) for m in order(cgraph.get(mod, {}))]
            # the files column wraps at 30 characters (a module of many files takes more rows)
            cols = [""]
            for f in files:
                if cols[-1] and len(cols[-1]) + 1 + len(f) > 30:
                    cols.append("")
                cols[-1] = (cols[-1] + " " + f).strip()
            arrows = [("includes " + " ".join(inc)) if inc else ""]
            if called:
                arrows.append("calls    " + " ".join(called))
            for r in range(max(len(cols), len(arrows))):
                lines.append(("%-10s %-14s %-30s %s" % (label if r == 0 else "", mod if r == 0 else "",
                                                         cols[r] if r < len(cols) else "",
                                                         arrows[r] if r < len(arrows) else "")).rstrip())
    lines.append("```")
    return "\n".join(lines) + "\n"


def replace_block(text, block):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        return None
    return text[:b] + BEGIN + "\n" + block + text[e:]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check the core's layering (src/ includes and calls) and draw it into docs/design.md.")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="repository root (default: the one this script is in)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail if a rule is broken or docs/design.md's picture is stale")
    mode.add_argument("--write", action="store_true", help="write the picture into docs/design.md between the markers")
    ap.add_argument("--cache", metavar="DIR", help="keep each object's symbols under DIR (a second run compiles only what changed)")
    ap.add_argument("--cc", default=os.environ.get("CC") or "cc", help="C compiler (default: $CC, else cc)")
    ap.add_argument("--cxx", default=os.environ.get("CXX") or "c++", help="C++ compiler (default: $CXX, else c++)")
    args = ap.parse_args(argv)
    src = os.path.join(args.root, "src")
    doc = os.path.join(args.root, "docs", "design.md")
    if not os.path.isdir(src):
        print("layers.py: no src/ under %s" % args.root, file=sys.stderr)
        return 1
    graph, cgraph, problems = analyse(args.root, cc=args.cc, cxx=args.cxx, cache=args.cache)
    for p in problems:
        print("layers.py: " + p, file=sys.stderr)
    if problems:
        return 1
    block = picture(graph, cgraph)
    if not (args.check or args.write):
        sys.stdout.write(block)
        return 0
    try:
        with open(doc, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        print("layers.py: %s" % e, file=sys.stderr)
        return 1
    new = replace_block(text, block)
    if new is None:
        print("layers.py: %s has no markers %s ... %s" % (doc, BEGIN, END), file=sys.stderr)
        return 1
    if args.write:
        if new != text:
            with open(doc, "w", encoding="utf-8") as fh:
                fh.write(new)
        return 0
    if new != text:
        print("layers.py: the layer picture in docs/design.md is stale: run tools/layers.py --write", file=sys.stderr)
        return 1
    print("layers.py: %d modules in %d layers, every include and every call (%s builds) goes down, no cycle;"
          " docs/design.md is current" % (sum(len(m) for _, m in LAYERS), len(LAYERS), ", ".join(b for b, _, _ in BUILDS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
