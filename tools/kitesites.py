"""kitesites -- allocation sites in kite traces: reading the "#@" and "# map" lines that a
capture with KITE_TRACE_SITES=1 writes (docs/trace-format.md), and symbolizing their return
addresses with the mappings the process had at exit (binutils' addr2line, then nm's symbol
tables for objects without debug information). Standard library and binutils only.

    maps = [parse_map_line(l) for l in lines starting with "# map "]
    sym = Symbolizer(maps)
    frames = sym.frames(pcs)   # [Frame(pc, obj, addr, func, loc)], cut at the first unmapped pc
"""
import bisect
import os
import shutil
import struct
import subprocess
from collections import namedtuple

Map = namedtuple("Map", "start end offset path")
Frame = namedtuple("Frame", "pc obj addr func loc")  # addr: in obj's numbering; func/loc may be ""

SITE_PREFIX = "#@ "
MAP_PREFIX = "# map "


def parse_site_line(line):
    """'#@ ID PC PC ...' -> (id, (pc, ...)); pcs in hex. Raises ValueError when malformed."""
    toks = line[len(SITE_PREFIX):].split()
    if len(toks) < 2:
        raise ValueError("a site line needs an id and at least one address")
    if not toks[0].isdigit():
        raise ValueError(f"site id '{toks[0][:40]}' is not a number")
    return int(toks[0]), tuple(int(t, 16) for t in toks[1:])


def format_site_line(block_id, pcs):
    return SITE_PREFIX + str(block_id) + " " + " ".join(f"{pc:x}" for pc in pcs)


def parse_map_line(line):
    """'# map START-END PERMS OFFSET DEV INODE PATH' -> Map, or None when not a file mapping."""
    toks = line[len(MAP_PREFIX):].split(None, 5)
    if len(toks) < 6 or not toks[5].startswith("/"):
        return None
    lo, _, hi = toks[0].partition("-")
    try:
        return Map(int(lo, 16), int(hi, 16), int(toks[2], 16), toks[5].strip())
    except ValueError:
        return None


def _elf_loads(path):
    """The PT_LOAD segments (p_offset, p_vaddr, p_filesz) of a 64-bit little-endian ELF, or []."""
    try:
        with open(path, "rb") as f:
            h = f.read(64)
            if len(h) < 64 or h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
                return []
            phoff, = struct.unpack_from("<Q", h, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", h, 0x36)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
    except OSError:
        return []
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", ph, i * phentsize)
        if p_type == 1:
            loads.append((p_offset, p_vaddr, p_filesz))
    return loads


def _nm_symbols(path):
    """Sorted [(start, size, name)] of the defined functions in path's symbol tables."""
    syms = {}
    if not shutil.which("nm"):
        return []
    for extra in ([], ["-D"]):
        try:
            r = subprocess.run(["nm", "-S", "-C", "--defined-only"] + extra + [path],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        for line in r.stdout.splitlines():
            t = line.split(None, 3)
            if len(t) == 4 and t[2] in "tTwWiI":
                try:
                    syms[int(t[0], 16)] = (int(t[1], 16), t[3])
                except ValueError:
                    pass
    return sorted((a, s, n) for a, (s, n) in syms.items())


class Symbolizer:
    def __init__(self, maps):
        self.maps = sorted(m for m in maps if m)
        self.starts = [m.start for m in self.maps]
        self.cache = {}

    def find(self, pc):
        i = bisect.bisect_right(self.starts, pc) - 1
        if i >= 0 and pc < self.maps[i].end:
            return self.maps[i]
        return None

    def _vaddr(self, m, pc):
        """pc as the address inside m.path's own numbering (what addr2line and nm use)."""
        off = pc - m.start + m.offset
        for p_offset, p_vaddr, p_filesz in _elf_loads(m.path):
            if p_offset <= off < p_offset + p_filesz:
                return off - p_offset + p_vaddr
        return off

    def resolve(self, pcs):
        """Symbolize every pc of pcs not yet known (one addr2line run per object)."""
        todo = {}
        for pc in set(pcs):
            if pc in self.cache:
                continue
            m = self.find(pc)
            if not m:
                self.cache[pc] = None
                continue
            # a return address points after the call: look up the call itself
            todo.setdefault(m.path, []).append((pc, self._vaddr(m, pc) - 1))
        for path, items in todo.items():
            obj = os.path.basename(path)
            names = {}
            if shutil.which("addr2line") and os.path.exists(path):
                try:
                    r = subprocess.run(["addr2line", "-f", "-C", "-e", path],
                                       input="".join(f"{v:x}\n" for _, v in items),
                                       capture_output=True, text=True, timeout=120)
                    out = r.stdout.splitlines()
                    if r.returncode == 0 and len(out) == 2 * len(items):
                        for k, (pc, _) in enumerate(items):
                            func, loc = out[2 * k], out[2 * k + 1]
                            loc = "" if loc.startswith("??") else loc.split(" (discriminator")[0]
                            names[pc] = ("" if func == "??" else func, loc)
                except (OSError, subprocess.SubprocessError):
                    pass
            syms = None
            for pc, v in items:
                func, loc = names.get(pc, ("", ""))
                if not func:
                    if syms is None:
                        syms = _nm_symbols(path) if os.path.exists(path) else []
                    j = bisect.bisect_right(syms, (v, float("inf"), "")) - 1
                    if j >= 0 and syms[j][0] <= v < syms[j][0] + max(syms[j][1], 1):
                        func = f"{syms[j][2]}+0x{v + 1 - syms[j][0]:x}"
                self.cache[pc] = Frame(pc, obj, v + 1, func, loc)

    def frames(self, pcs):
        """The frames of one site: symbolized, cut at the first pc outside every mapping (a
        frame-pointer walk through code built without frame pointers ends in such values)."""
        self.resolve(pcs)
        out = []
        for pc in pcs:
            f = self.cache.get(pc)
            if f is None:
                break
            out.append(f)
        return out


def frame_label(f, with_loc=True):
    """'func (file.c:12)', 'func (libfoo.so.1)' or 'libfoo.so.1+0x1234' (address in the object)."""
    if f.func:
        where = os.path.basename(f.loc) if with_loc and f.loc else f.obj
        return f"{f.func} ({where})"
    return f"{f.obj}+0x{f.addr:x}"
