#!/usr/bin/env python3
"""tools/structure.py -- the size rules of src/: no file above MAX_FILE_LINES lines, no
function above MAX_FUNC_LINES lines unless the comment right above it says why.

A file past ~700 lines is usually doing two jobs, and a function past 60 lines usually holds
a second function (docs/design.md, "Layers"). A function may be longer when splitting it
would hide what it does: the comment block above it (between the previous definition or
declaration and the function) then holds the words "Why longer:" followed by the reason.

A function is counted from its first header line (return type, name, parameters) to its
closing brace. The reader strips comments, string and character literals and preprocessor
lines, then finds definitions at file scope (or inside extern "C" / namespace blocks): a `{`
whose statement holds a `(` with no `=` before it.

ALLOW_FILES and ALLOW_FUNCS below list what is over the limit today in files still to be
split: each entry is a known debt, printed as such on every run, and an entry that is no
longer over the limit fails the check (so the list only shrinks).

    structure.py [--root DIR] [--list]

--list prints every function's length (longest first). Exit status: 0 sound, 1 a file or a
function over the limit (each named, with its length), or a stale allow-list entry; 2 bad
usage.
"""
import argparse
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FUNC_LINES = 60
WHY = "Why longer:"

# Known debts, to be emptied (each split in a change of its own): path under src/ -> why it
# is still over the limit.
ALLOW_FILES = {}
# (path under src/, function name) -> why it is still over the limit.
ALLOW_FUNCS = {
}


def _first_branches(text):
    """text with the #else/#elif branches of every conditional blanked (newlines kept): a
    function written in #if variants (each opening its own braces) is read as its first."""
    out, stack = [], []  # per open conditional: True while in a later branch
    for ln in text.split("\n"):
        d = re.match(r"\s*#\s*(\w+)", ln)
        word = d.group(1) if d else ""
        if word in ("if", "ifdef", "ifndef"):
            stack.append(False)
        elif word in ("else", "elif") and stack:
            stack[-1] = True
        elif word == "endif" and stack:
            stack.pop()
            out.append(ln)
            continue
        out.append("" if any(stack) and not word else ln)
    return "\n".join(out)


def _strip(text):
    """text with comments, literals, preprocessor lines and the later branches of
    conditionals blanked (newlines kept)."""
    text = _first_branches(text)
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        at_line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
            continue
        if c == "\n":
            at_line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def _name(head):
    """The defined function's name: the identifier before the last parenthesized group at
    depth 0 that is not an attribute's."""
    name, depth, start = "?", 0, None
    for i, c in enumerate(head):
        if c == "(":
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", head[:i])
                if m and m.group(1) not in ("__attribute__", "__asm__", "asm", "__declspec"):
                    name = m.group(1)
            depth += 1
        elif c == ")":
            depth -= 1
    return name


def functions(text):
    """[(name, first line, last line, comment text above it)] of the definitions in text."""
    code = _strip(text)
    lines = text.split("\n")
    found = []
    stack = []  # per open brace: "func", "ns" (extern "C", namespace) or "block"
    stmt_start = None  # offset where the current file-scope statement began
    prev_end_line = 0  # last line of the previous file-scope item
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
            continue
        at_scope = all(k[0] == "ns" for k in stack)
        if at_scope and c not in " \t{};" and stmt_start is None:
            stmt_start = (i, line)
        if c == "{":
            if at_scope:
                head = code[stmt_start[0]:i] if stmt_start else ""
                paren = head.find("(")
                if paren >= 0 and "=" not in head[:paren] and not head.lstrip().startswith(("struct", "union", "enum")):
                    name = _name(head)
                    stack.append(("func", name, stmt_start[1]))
                elif re.match(r"\s*(extern|namespace)\b", head):
                    stack.append(("ns",))
                    stmt_start = None
                    prev_end_line = line
                else:
                    stack.append(("block",))
            else:
                stack.append(("block",))
        elif c == "}":
            if not stack:
                continue
            top = stack.pop()
            if top[0] == "func" and all(k[0] == "ns" for k in stack):
                comment = "\n".join(lines[prev_end_line:top[2] - 1])
                found.append((top[1], top[2], line, comment))
                stmt_start = None
                prev_end_line = line
            elif top[0] == "ns":
                stmt_start = None
                prev_end_line = line
        elif c == ";" and all(k[0] == "ns" for k in stack):
            stmt_start = None
            prev_end_line = line
    return found


def source_files(src):
    out = []
    for d, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names):
            if name.endswith((".c", ".h", ".cpp")):
                out.append(os.path.relpath(os.path.join(d, name), src))
    return out


def check(root, listing=False):
    """(problems, notes, lengths)"""
    src = os.path.join(root, "src")
    problems, notes, lengths = [], [], []
    seen_files, seen_funcs = set(), set()
    for f in source_files(src):
        with open(os.path.join(src, f), encoding="utf-8") as fh:
            text = fh.read()
        n = text.count("\n")
        if n > MAX_FILE_LINES:
            if f in ALLOW_FILES:
                seen_files.add(f)
                notes.append("src/%s: %d lines (allowed for now: %s)" % (f, n, ALLOW_FILES[f]))
            else:
                problems.append("src/%s: %d lines, above %d: split it by job" % (f, n, MAX_FILE_LINES))
        for name, first, last, comment in functions(text):
            k = last - first + 1
            lengths.append((k, f, name, first))
            if k <= MAX_FUNC_LINES or WHY in comment:
                continue
            if (f, name) in ALLOW_FUNCS:
                seen_funcs.add((f, name))
                notes.append("src/%s:%d: %s() %d lines (allowed for now: %s)" % (f, first, name, k, ALLOW_FUNCS[(f, name)]))
            else:
                problems.append("src/%s:%d: %s() is %d lines, above %d, and the comment above it "
                                "has no \"%s\"" % (f, first, name, k, MAX_FUNC_LINES, WHY))
    for f in sorted(set(ALLOW_FILES) - seen_files):
        problems.append("tools/structure.py: ALLOW_FILES lists src/%s, which is not above %d lines: "
                        "take it off the list" % (f, MAX_FILE_LINES))
    for f, name in sorted(set(ALLOW_FUNCS) - seen_funcs):
        problems.append("tools/structure.py: ALLOW_FUNCS lists %s() in src/%s, which is not above %d "
                        "lines: take it off the list" % (name, f, MAX_FUNC_LINES))
    return problems, notes, sorted(lengths, reverse=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check src/'s file and function lengths.")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="repository root (default: this script's parent directory)")
    ap.add_argument("--list", action="store_true", help="print every function's length, longest first")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.root, "src")):
        print("structure.py: no src/ under %s" % args.root, file=sys.stderr)
        return 2
    problems, notes, lengths = check(args.root)
    if args.list:
        for k, f, name, first in lengths:
            print("%4d src/%s:%d %s" % (k, f, first, name))
    for n in notes:
        print("known: " + n)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print("src/: no file above %d lines, no function above %d lines without \"%s\" (%d functions)"
          % (MAX_FILE_LINES, MAX_FUNC_LINES, WHY, len(lengths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
