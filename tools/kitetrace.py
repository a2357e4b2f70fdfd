#!/usr/bin/env python3
"""kitetrace -- read, write and convert allocation traces (docs/trace-format.md).

Used by tools/kite-trace (finalizing raw captures), tools/trace-convert (ltrace output,
.script import/export) and tools/gen_trace.py. Standard library only.

An op is a tuple in the kite trace's own terms (TID last; ids are ints, None = "-"):
    ('m', ID, SIZE, TID)          malloc
    ('c', ID, N, SIZE, TID)       calloc(N, SIZE)
    ('a', ID, ALIGN, SIZE, TID)   aligned allocation
    ('r', OLD, NEW, SIZE, TID)    realloc; OLD None = a pointer never seen allocated
    ('f', ID, TID)                free; ID None = a pointer never seen allocated
A .script reads as ops with TID 0: "a ID SIZE" -> m, "r ID SIZE" -> r ID ID, "f ID" -> f,
with the workshop's slot semantics (docs/trace-format.md): "f" of a NULL slot is dropped,
"r" of one is an m, "a" of a live id gives the new block a fresh kite id.
Parsing checks what kite-replay checks (well-formed lines, ids live when freed, not live when
allocated) and raises TraceError("FILE:LINE: message").

Run as a program, it checks traces: `tools/kitetrace.py FILE...` parses each (a kite trace
or a .script), prints "FILE: FORMAT, N ops, peak L live ids" and exits 0, or names the first
malformed line and exits 2.
"""
import re

HEADER = "# kite-trace v1"
# A .script's "a ID" on a live ID leaves the old block unreachable; the new block gets the
# kite id REBIND_BASE + n (n = 1, 2 ...), far above any id a script uses.
REBIND_BASE = 10 ** 12
RAW_HEADER = "# kite-trace v1 raw"


class TraceError(Exception):
    pass


def _num(tok, what, where, dash=False):
    if dash and tok == "-":
        return None
    if not tok.isdigit() or not tok.isascii():
        raise TraceError(f"{where}: {what} '{tok[:40]}' is not a non-negative decimal number")
    return int(tok)


_KITE_FIELDS = {
    "m": ("id", "size", "thread id"),
    "c": ("id", "count", "size", "thread id"),
    "a": ("id", "alignment", "size", "thread id"),
    "r": ("old id", "new id", "size", "thread id"),
    "f": ("id", "thread id"),
}
_SCRIPT_FIELDS = {"a": ("id", "size"), "r": ("id", "size"), "f": ("id",)}


def sniff_format(path, first_lines):
    """'kite' or 'script' (a .script suffix forces script)."""
    if str(path).endswith(".script"):
        return "script"
    for line in first_lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("# kite-trace v"):
            return "kite"
        if s.startswith("#"):
            continue
        return "script"
    return "script"


def parse_lines(lines, name="(trace)", fmt=None):
    """Parse an iterable of text lines. Returns (fmt, ops, comments) where comments are the
    '#' lines of a kite trace other than the header. Raises TraceError."""
    ops = []
    comments = []
    live = {}  # id -> line that allocated it
    slot = {}  # .script: script id -> kite id of the block its slot holds (absent: NULL)
    rebinds = 0
    for lineno, raw in enumerate(lines, 1):
        toks = raw.split()
        where = f"{name}:{lineno}"
        if not toks:
            continue
        if toks[0].startswith("#"):
            text = raw.strip()
            if fmt is None and text.startswith("# kite-trace v"):
                if text == RAW_HEADER:
                    raise TraceError(f"{where}: a raw capture; finalize it with tools/kite-trace --finalize")
                if text.split()[2] != "v1":
                    raise TraceError(f"{where}: unsupported trace version '{text}'")
                fmt = "kite"
            elif fmt == "kite":
                comments.append(text)
            continue
        if fmt is None:
            fmt = "script"
        op = toks[0]
        table = _KITE_FIELDS if fmt == "kite" else _SCRIPT_FIELDS
        if op not in table:
            have = "m, c, a, r, f" if fmt == "kite" else "a, r, f"
            raise TraceError(f"{where}: unknown op '{op[:40]}' (a {'kite trace' if fmt == 'kite' else '.script'} has {have})")
        names = table[op]
        vals = []
        for i, what in enumerate(names):
            if 1 + i >= len(toks):
                raise TraceError(f"{where}: missing {what}")
            dash = fmt == "kite" and i == 0 and op in "rf"
            vals.append(_num(toks[1 + i], what, where, dash))
        if len(toks) > 1 + len(names):
            raise TraceError(f"{where}: unexpected trailing text '{toks[1 + len(names)][:40]}'")

        def alloc(i):
            if i in live:
                raise TraceError(f"{where}: id {i} allocated while still live (allocated at line {live[i]})")
            live[i] = lineno

        def release(i, verb):
            if i not in live:
                raise TraceError(f"{where}: {verb} of unknown id {i}")
            del live[i]

        if fmt == "script":
            # The workshop's semantics: an id is a slot holding a pointer. "a" on a live id
            # leaves the old block allocated and unreachable (the new block gets a kite id of
            # its own); "f" on a NULL slot is free(NULL), which a kite trace does not record;
            # "r" on a NULL slot is realloc(NULL, n), a malloc.
            sid = vals[0]
            if op == "a":
                if sid in slot or sid in live:  # live: a block this id once leaked
                    rebinds += 1
                    kid = REBIND_BASE + rebinds
                else:
                    kid = sid
                slot[sid] = kid
                live[kid] = lineno
                ops.append(("m", kid, vals[1], 0))
            elif op == "f":
                kid = slot.pop(sid, None)
                if kid is not None:
                    del live[kid]
                    ops.append(("f", kid, 0))
            else:
                kid = slot.get(sid)
                if kid is None:
                    slot[sid] = kid = sid if sid not in live else REBIND_BASE + rebinds + 1
                    rebinds += kid != sid
                    live[kid] = lineno
                    ops.append(("m", kid, vals[1], 0))
                else:
                    ops.append(("r", kid, kid, vals[1], 0))
            continue
        if op in "mca":
            if op == "a" and (vals[1] == 0 or vals[1] & (vals[1] - 1)):
                raise TraceError(f"{where}: alignment {vals[1]} is not a power of two")
            alloc(vals[0])
        elif op == "f":
            if vals[0] is not None:
                release(vals[0], "free")
        else:
            if vals[0] is not None:
                release(vals[0], "realloc")
            alloc(vals[1])
        ops.append((op, *vals))
    return fmt or "script", ops, comments


def read_trace(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    fmt = "script" if str(path).endswith(".script") else None
    return parse_lines(lines, str(path), fmt)


def _fmt_id(i):
    return "-" if i is None else str(i)


def kite_lines(ops, comments=()):
    yield HEADER
    for c in comments:
        yield c
    for op in ops:
        yield " ".join([op[0]] + [_fmt_id(v) for v in op[1:]])


def script_lines(ops):
    """Export to the seed's .script. Calloc becomes a of N*SIZE, an aligned allocation a plain
    a, a realloc of OLD into NEW keeps OLD's script id, frees of unknown pointers are dropped
    and a realloc of one becomes an a. Script ids keep the trace's ids where they are free,
    so a .script read and written back is identical (comments and blank lines aside)."""
    sid = {}          # kite id -> script id
    used = set()      # live script ids
    top = -1

    def fresh(k):
        nonlocal top
        s = k if k not in used else top + 1
        top = max(top, s)
        used.add(s)
        sid[k] = s
        return s

    for op in ops:
        k = op[0]
        if k == "m":
            yield f"a {fresh(op[1])} {op[2]}"
        elif k == "c":
            yield f"a {fresh(op[1])} {op[2] * op[3]}"
        elif k == "a":
            yield f"a {fresh(op[1])} {op[3]}"
        elif k == "f":
            if op[1] is None:
                continue
            s = sid.pop(op[1])
            used.discard(s)
            yield f"f {s}"
        else:
            old, new, size = op[1], op[2], op[3]
            if old is None:
                yield f"a {fresh(new)} {size}"
                continue
            s = sid.pop(old)
            sid[new] = s
            yield f"r {s} {size}"


def write_trace(path, ops, fmt=None, comments=()):
    fmt = fmt or ("script" if str(path).endswith(".script") else "kite")
    gen = script_lines(ops) if fmt == "script" else kite_lines(ops, comments)
    with open(path, "w") as f:
        for line in gen:
            f.write(line)
            f.write("\n")


def finalize_raw(raw_path, out_path):
    """Sort a raw capture (lines "SEQ OP ...") by sequence number into a kite trace.
    Returns the number of ops. Incomplete last lines (a killed process) are dropped. A line's
    allocation site (" @ PC..." after the op) becomes a "#@ ID PC..." line after it."""
    header = []
    body = []
    with open(raw_path, encoding="utf-8", errors="replace") as f:
        data = f.read()
    lines = data.split("\n")
    if lines and lines[-1] != "":
        lines.pop()  # a partial line
    for line in lines:
        if not line:
            continue
        if line.startswith("#"):
            if line.strip() != RAW_HEADER:
                header.append(line)
            continue
        seq, _, rest = line.partition(" ")
        if not seq.isdigit() or not rest:
            continue
        body.append((int(seq), rest))
    body.sort()
    with open(out_path, "w") as f:
        f.write(HEADER + "\n")
        for h in header:
            f.write(h + "\n")
        for _, rest in body:
            op, at, site = rest.partition(" @ ")
            f.write(op + "\n")
            if at:  # an allocation site (KITE_TRACE_SITES=1): "#@ ID PC..." after the op
                t = op.split()
                f.write(f"#@ {t[2] if t[0] == 'r' else t[1]} {site}\n")
    return len(body)


# ---- ltrace output ----

_LT_PREFIX = r"^(?:\[pid (?P<pid>\d+)\]\s+|(?P<pid2>\d+)\s+)?"
_LT_CALL = re.compile(_LT_PREFIX + r"(?:\S+->)?(?P<fn>malloc|calloc|realloc|free)\((?P<args>[^)]*?)"
                      r"(?:\)\s*=\s*(?P<ret>\S+)|\s*<unfinished \.\.\.>)\s*$")
_LT_RESUMED = re.compile(_LT_PREFIX + r"<\.\.\. (?P<fn>malloc|calloc|realloc|free) resumed>.*?=\s*(?P<ret>\S+)\s*$")


def _lt_ptr(s):
    s = s.strip()
    if s in ("0", "nil", "NULL", "(nil)", "0x0"):
        return 0
    return int(s, 16) if s.startswith("0x") else int(s)


# A request above this many bytes is not one a program made but an argument ltrace misread
# (it has printed a 179 GB malloc from a 64-bit register it decoded wrongly).
LTRACE_MAX_SIZE = 1 << 36


def ltrace_to_ops(lines, name="(ltrace)"):
    """Convert `ltrace -e malloc+free+realloc+calloc` output (with or without -f) into ops.
    Lines that are not malloc-family calls are ignored; calls split into <unfinished ...> and
    <... resumed> are joined per process. Each traced process has its own pointer map.
    Impossible records raise TraceError("NAME:LINE: ..."): a size above LTRACE_MAX_SIZE, an
    address returned while the same process still holds it live."""
    ops = []
    ptr_id = {}       # (pid, pointer) -> id
    pending = {}      # (pid, fn) -> (args, line of the call)
    next_id = 0
    where = name

    def new_id(pid, p):
        nonlocal next_id
        if (pid, p) in ptr_id:
            raise TraceError(f"{where}: address {p:#x} returned again while still live "
                             f"(block {ptr_id[(pid, p)]}): not a possible record")
        i = next_id
        next_id += 1
        ptr_id[(pid, p)] = i
        return i

    def size(fn, n):
        if n > LTRACE_MAX_SIZE:
            raise TraceError(f"{where}: {fn} of {n} bytes (over {LTRACE_MAX_SIZE >> 30} GiB): "
                             "not a possible request (a misread argument?)")
        return n

    def emit(pid, fn, args, ret):
        if fn == "free":
            p = _lt_ptr(args[0])
            if p:
                ops.append(("f", ptr_id.pop((pid, p), None), pid))
            return
        r = _lt_ptr(ret)
        if fn == "malloc":
            if r:
                ops.append(("m", new_id(pid, r), size(fn, int(args[0], 0)), pid))
        elif fn == "calloc":
            if r:
                c, n = int(args[0], 0), int(args[1], 0)
                size(fn, c * n)
                ops.append(("c", new_id(pid, r), c, n, pid))
        else:
            p, n = _lt_ptr(args[0]), size(fn, int(args[1], 0))
            if not p:
                if r:
                    ops.append(("m", new_id(pid, r), n, pid))
            elif not r:
                if n == 0:
                    ops.append(("f", ptr_id.pop((pid, p), None), pid))
            else:
                old = ptr_id.pop((pid, p), None)
                ops.append(("r", old, new_id(pid, r), n, pid))

    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        where = f"{name}:{lineno}"
        m = _LT_CALL.match(line)
        if m:
            pid = int(m.group("pid") or m.group("pid2") or 0)
            args = [a.strip() for a in m.group("args").split(",")] if m.group("args").strip() else []
            fn = m.group("fn")
            want = {"malloc": 1, "free": 1, "calloc": 2, "realloc": 2}[fn]
            if len(args) != want:
                raise TraceError(f"{name}:{lineno}: {fn} with {len(args)} arguments")
            try:
                if m.group("ret") is None:
                    pending[(pid, fn)] = args
                else:
                    emit(pid, fn, args, m.group("ret"))
            except ValueError:
                raise TraceError(f"{name}:{lineno}: cannot read the numbers in '{line[:80]}'")
            continue
        m = _LT_RESUMED.match(line)
        if m:
            pid = int(m.group("pid") or m.group("pid2") or 0)
            args = pending.pop((pid, m.group("fn")), None)
            if args is None:
                continue  # resumed without its start (the trace began mid-call)
            try:
                emit(pid, m.group("fn"), args, m.group("ret"))
            except ValueError:
                raise TraceError(f"{name}:{lineno}: cannot read the numbers in '{line[:80]}'")
    return ops


def main(argv):
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="kitetrace.py", description=__doc__.split("\n\n", 1)[0],
                                 epilog="Parses each FILE as kite-replay would and reports it; "
                                        "exit 0 when all are well-formed, 2 otherwise.")
    ap.add_argument("files", nargs="+", metavar="FILE", help="a kite trace or a .script")
    a = ap.parse_args(argv)
    rc = 0
    for path in a.files:
        try:
            fmt, ops, _ = read_trace(path)
        except TraceError as e:
            print(f"kitetrace.py: {e}", file=sys.stderr)
            rc = 2
            continue
        except OSError as e:
            print(f"kitetrace.py: {path}: {e.strerror}", file=sys.stderr)
            rc = 2
            continue
        live = peak = 0
        for op in ops:
            if op[0] in "mca":
                live += 1
            elif op[0] == "f" and op[1] is not None:
                live -= 1
            elif op[0] == "r" and op[1] is None:
                live += 1
            peak = max(peak, live)
        print(f"{path}: {fmt}, {len(ops)} ops, peak {peak} live ids")
    return rc


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
