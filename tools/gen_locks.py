"""tools/gen_locks.py -- docs/design.md's lock table, from the sources (tools/gen_tables.py
writes and checks it).

The rules the sources keep, and what the table is made of:
  - every kite_lock_t (a global or static defined in src/, or a struct field) carries, on its
    declaration's line, a comment `/* lock: WHAT IT GUARDS */` (extern declarations do not);
  - src/types.h states the lock order once, in comment lines `lock-chain: A B ...` (a thread
    that holds one of them takes only those after it) and `lock-alone: ...` (taken with no
    other lock of kite's held, and taking none); every lock is named in exactly one of them,
    a field lock as STRUCT.FIELD;
  - every `_kite_lock(&X)` / `_kite_trylock(&X)` in src/ names a known lock: X a global's or
    (in its own file) a static's name, or an expression ending in .FIELD / ->FIELD;
  - init.c's fork_prepare takes every lock, those of the chain in its order (a lock it left
    out, held by another thread at a fork, would stay held in the child).
"""
import os
import re

DECL = re.compile(r"^(\s*)(static\s+)?kite_lock_t\s+(\w+)\s*(=\s*KITE_LOCK_INIT\s*)?;(.*)$")
NOTE = re.compile(r"/\*\s*lock:\s*(.*?)\s*\*/")
TAKE = re.compile(r"_kite_(?:try)?lock\(&([^;]*?)\);?")
ORDER = re.compile(r"\block-(chain|alone):\s*(.*?)\s*(?:\*/)?\s*$")
STRUCT_END = re.compile(r"^}.*?(\w+)\s*;")


class LockError(Exception):
    def __init__(self, problems):
        super().__init__("; ".join(problems))
        self.problems = problems


def sources(src):
    for d, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                path = os.path.join(d, f)
                with open(path) as fh:
                    yield os.path.relpath(path, src), fh.read().splitlines()


def declarations(files, problems):
    """{name: (file, guards, field)}: field is the field's name for a struct's lock, else None."""
    locks = {}
    for rel, lines in files:
        for i, line in enumerate(lines):
            m = DECL.match(line)
            if not m or line.lstrip().startswith(("extern", "typedef")):
                continue
            indent, static, name, _, rest = m.groups()
            field = None
            if indent:  # a struct's field: named after the struct
                ends = (STRUCT_END.match(l) for l in lines[i + 1:])
                end = next((e for e in ends if e), None)
                if not end:
                    problems.append(f"src/{rel}:{i + 1}: kite_lock_t field {name} outside a typedef'd struct")
                    continue
                field, name = name, f"{end.group(1)}.{name}"
            note = NOTE.search(rest)
            if not note or "|" in note.group(1):
                problems.append(f"src/{rel}:{i + 1}: kite_lock_t {name} has no `/* lock: what it guards */` comment"
                                + (" without a |" if note else ""))
                continue
            if name in locks:
                problems.append(f"src/{rel}:{i + 1}: a second kite_lock_t named {name} (also in {locks[name][0]})")
            locks[name] = (rel, note.group(1), field, bool(static))
    return locks


def resolve(expr, rel, locks):
    expr = expr.strip()
    for name, (where, _, field, static) in locks.items():
        if field and re.search(r"(\.|->)" + re.escape(field) + r"$", expr):
            return name
        if not field and expr == name and (not static or where == rel):
            return name
    return None


def takers(files, locks, problems):
    """{name: sorted files that take it}; a taking of an unknown lock is a problem."""
    by = {name: set() for name in locks}
    for rel, lines in files:
        for i, line in enumerate(lines):
            for m in TAKE.finditer(line):
                name = resolve(m.group(1), rel, locks)
                if name is None:
                    problems.append(f"src/{rel}:{i + 1}: takes {m.group(1)!r}, which is no kite_lock_t the table knows")
                else:
                    by[name].add(rel)
    return {name: sorted(fs) for name, fs in by.items()}


def order(files):
    chain, alone = [], []
    for rel, lines in files:
        if rel != "types.h":
            continue
        for line in lines:
            m = ORDER.search(line)
            if m:
                (chain if m.group(1) == "chain" else alone).extend(m.group(2).split())
    return chain, alone


def body_of(lines, fn):
    """The lines of function fn's body (from its definition to the closing brace at column 0)."""
    for i, line in enumerate(lines):
        if re.match(r"^(static\s+)?void\s+" + re.escape(fn) + r"\(void\)\s*{", line):
            if line.rstrip().endswith("}"):
                return [line]
            j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("}"))
            return lines[i:j + 1]
    return None


def fork_sequence(files, locks, problems):
    """The locks init.c's fork_prepare takes, in its order."""
    byname = dict(files)
    prepare = body_of(byname.get("init.c", []), "fork_prepare")
    if prepare is None:
        problems.append("src/init.c: no fork_prepare")
        return []
    seq = []
    for call in re.findall(r"\b(_kite_\w+_fork_prepare)\(\)", "\n".join(prepare)):
        body = next((b for rel, lines in files if (b := body_of(lines, call)) is not None), None)
        if body is None:
            problems.append(f"src/init.c: fork_prepare calls {call}, defined nowhere in src/")
            continue
        rel = next(rel for rel, lines in files if body_of(lines, call) is not None)
        for m in TAKE.finditer("\n".join(body)):
            name = resolve(m.group(1), rel, locks)
            if name and name not in seq:
                seq.append(name)
    return seq


def check_order(locks, chain, alone, fork, problems):
    named = chain + alone
    for name in sorted(set(n for n in named if named.count(n) > 1)):
        problems.append(f"src/types.h: {name} is named twice in the lock order")
    for name in named:
        if name not in locks:
            problems.append(f"src/types.h: the lock order names {name}, which is no kite_lock_t")
    for name in locks:
        if name not in named:
            problems.append(f"src/{locks[name][0]}: {name} has no place in src/types.h's lock order "
                            "(lock-chain: or lock-alone:)")
        if name not in fork:
            problems.append(f"src/init.c: fork_prepare does not take {name}")
    ranks = [chain.index(n) for n in fork if n in chain]
    if ranks != sorted(ranks):
        problems.append("src/init.c: fork_prepare takes the chain's locks out of its order: " + " ".join(n for n in fork if n in chain))


def table(src):
    """The markdown table (a string ending in a newline); LockError lists what breaks a rule."""
    files = list(sources(src))
    problems = []
    locks = declarations(files, problems)
    taken = takers(files, locks, problems)
    chain, alone = order(files)
    check_order(locks, chain, alone, fork_sequence(files, locks, problems), problems)
    for name, fs in taken.items():
        if not fs:
            problems.append(f"src/{locks[name][0]}: {name} is taken nowhere")
    if problems:
        raise LockError(problems)
    rows = ["| order | lock | defined in | guards | taken in |", "|---|---|---|---|---|"]
    for name in chain + alone:
        rel, guards, _, _ = locks[name]
        place = str(chain.index(name) + 1) if name in chain else "alone"
        rows.append(f"| {place} | `{name}` | `{rel}` | {guards} | {', '.join(f'`{f}`' for f in taken[name])} |")
    return "\n".join(rows) + "\n"
