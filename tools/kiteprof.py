"""kiteprof -- heap profiles in pprof's format (the files KITE_PROF and kite_prof_dump write,
docs/profiling.md) read without pprof: the protobuf decoded here from the published schema
(github.com/google/pprof, proto/profile.proto), gzip'd or not, and its stacks named.

    prof = load(path)                 # Profile: sample types, samples, locations, mappings
    rows = prof.stacks("inuse_space") # [(frames root first, value)], kite's own frames pruned

kite writes locations as addresses in the process's mappings, without functions: they are
symbolized here with the mapped files (kitesites: binutils' addr2line, then nm), as pprof
does, so read a profile on the machine that wrote it. A profile pprof symbolized itself
(`pprof -proto`) carries its functions, and they are used as they are. Standard library only.
"""
import bisect
import gzip
import os
import re
import sys
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kitesites  # noqa: E402

Line = namedtuple("Line", "func file line")
Location = namedtuple("Location", "id mapping address lines")


class ProfileError(Exception):
    pass


# ---- protobuf wire format ----
def _varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise ProfileError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ProfileError("varint longer than 10 bytes")


def fields(b):
    """The fields of one message: [(number, wire type, value)], a varint's value as an int, a
    length-delimited one's as bytes; fixed 32/64-bit values as ints (little-endian)."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ProfileError(f"field {num}: {n} bytes past the end")
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif wt == 5:
            v, i = int.from_bytes(b[i:i + 4], "little"), i + 4
        else:
            raise ProfileError(f"field {num}: wire type {wt} unknown")
        out.append((num, wt, v))
    return out


def _ints(wt, v):
    """A repeated integer field's entries: packed (bytes of varints) or one plain varint."""
    if wt == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _int64(x):
    return x - (1 << 64) if x >= 1 << 63 else x


def _one(msg):
    return {num: v for num, _, v in fields(msg)}


class Profile:
    """A decoded profile.proto message (the fields a heap profile uses)."""

    def __init__(self, data):
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise ProfileError(f"bad gzip stream: {e}")
        strings, types, samples, maps, locs, funcs = [], [], [], {}, {}, {}
        drop = keep = default = 0
        self.period = 0
        for num, wt, v in fields(data):
            if num == 6:
                strings.append(v.decode("utf-8", "replace"))
            elif num == 1:
                m = _one(v)
                types.append((m.get(1, 0), m.get(2, 0)))
            elif num == 2:
                ids, vals = [], []
                for n2, w2, v2 in fields(v):
                    if n2 == 1:
                        ids += _ints(w2, v2)
                    elif n2 == 2:
                        vals += [_int64(x) for x in _ints(w2, v2)]
                samples.append((ids, vals))
            elif num == 3:
                m = _one(v)
                maps[m.get(1, 0)] = (m.get(2, 0), m.get(3, 0), m.get(4, 0), m.get(5, 0))
            elif num == 4:
                lid, mid, addr, lines = 0, 0, 0, []
                for n2, w2, v2 in fields(v):
                    if n2 == 1:
                        lid = v2
                    elif n2 == 2:
                        mid = v2
                    elif n2 == 3:
                        addr = v2
                    elif n2 == 4:
                        ln = _one(v2)
                        lines.append((ln.get(1, 0), ln.get(2, 0)))
                locs[lid] = (mid, addr, lines)
            elif num == 5:
                m = _one(v)
                funcs[m.get(1, 0)] = (m.get(2, 0), m.get(4, 0))
            elif num == 7:
                drop = v
            elif num == 8:
                keep = v
            elif num == 12:
                self.period = v
            elif num == 14:
                default = v

        def s(k):
            if not 0 <= k < len(strings):
                raise ProfileError(f"string index {k} past the table ({len(strings)} strings)")
            return strings[k]
        self.sample_types = [(s(t), s(u)) for t, u in types]
        self.samples = samples
        self.mappings = {i: kitesites.Map(lo, hi, off, s(f)) for i, (lo, hi, off, f) in maps.items()}
        self.locations = {}
        self._syms = {}  # path -> nm's sized symbols (_checked)
        for lid, (mid, addr, lines) in locs.items():
            named = [Line(s(funcs[f][0]) if f in funcs else "", s(funcs[f][1]) if f in funcs else "", n)
                     for f, n in lines]
            self.locations[lid] = Location(lid, mid, addr, named)
        self.drop_frames = s(drop) if drop else ""
        self.keep_frames = s(keep) if keep else ""
        self.default_sample_type = s(default) if default else ""
        for ids, vals in samples:
            if len(vals) != len(self.sample_types):
                raise ProfileError(f"a sample has {len(vals)} values for {len(self.sample_types)} types")
            if any(i not in self.locations for i in ids):
                raise ProfileError("a sample names a location the profile does not have")

    def index(self, name):
        """The position of sample type `name` ('' : the profile's default, else the last)."""
        names = [t for t, _ in self.sample_types]
        if not name:
            name = self.default_sample_type or (names[-1] if names else "")
        if name not in names:
            raise ProfileError(f"no sample type {name!r} (the profile has {', '.join(names) or 'none'})")
        return names.index(name)

    def _names(self):
        """{location id: [function names, innermost first]} for every location: its own
        functions, else the mapped file's symbols (the address is a return address less one,
        as kite and pprof write them), else '[object]' or the bare address."""
        sym = kitesites.Symbolizer(list(self.mappings.values()))
        bare = [loc for loc in self.locations.values() if not any(ln.func for ln in loc.lines)]
        sym.resolve(loc.address + 1 for loc in bare)
        out = {}
        for loc in self.locations.values():
            if any(ln.func for ln in loc.lines):
                out[loc.id] = [ln.func or "?" for ln in loc.lines]
                continue
            f = sym.cache.get(loc.address + 1)
            func = self._checked(sym, f) if f is not None else ""
            if func:
                out[loc.id] = [func]
            elif f is not None:
                out[loc.id] = [f"[{f.obj}]"]
            else:
                m = self.mappings.get(loc.mapping)
                out[loc.id] = [f"[{os.path.basename(m.path)}]" if m else f"0x{loc.address:x}"]
        return out

    def _checked(self, sym, f):
        """f's function name, or '' where it is a guess: without debug information addr2line
        names the nearest symbol before the address, however far; then the name stands only
        if the address lies inside that symbol's extent (nm -S), as pprof requires."""
        if not f.func or f.loc:
            return re.sub(r"\+0x[0-9a-f]+$", "", f.func)
        m = sym.find(f.pc)
        if m is None:
            return ""
        if m.path not in self._syms:
            self._syms[m.path] = kitesites._nm_symbols(m.path) if os.path.exists(m.path) else []
        syms, v = self._syms[m.path], f.addr - 1
        j = bisect.bisect_right(syms, (v, float("inf"), "")) - 1
        return syms[j][2] if j >= 0 and syms[j][0] <= v < syms[j][0] + max(syms[j][1], 1) else ""

    def named_samples(self):
        """[(frames, values)] one per sample: frames innermost first (the allocating call
        first), values one per sample type. Frames that match drop_frames are pruned with
        everything they call, as pprof does (kite's own frames, where kite is linked into
        the program)."""
        names = self._names()
        drop = re.compile(f"^(?:{self.drop_frames})$") if self.drop_frames else None
        out = []
        for ids, vals in self.samples:
            frames = [n for i in ids for n in names[i]]
            if drop:
                cut = max((j for j, f in enumerate(frames) if drop.match(f)), default=-1)
                frames = frames[cut + 1:]
            out.append((frames, vals))
        return out

    def stacks(self, sample_type=""):
        """[(frames, value)] for sample type sample_type, one row per sample with a value,
        frames from the outermost (main) to the innermost (the allocating call)."""
        k = self.index(sample_type)
        return [(frames[::-1], vals[k]) for frames, vals in self.named_samples() if vals[k]]

    def program(self):
        """The path of the profile's first mapping (the executable, as /proc/self/maps lists
        it first), or ''."""
        return self.mappings[min(self.mappings)].path if self.mappings else ""


def load(path):
    """The profile at path, decoded. Raises ProfileError (also for a file it cannot read)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror}")
    return Profile(data)


def looks_like_profile(path):
    """Is the file at path a profile (gzip'd, or a protobuf message opening as kite's and Go's
    do), rather than a kite trace (text)?"""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    # gzip, or field 1 (sample_type) / field 6 (string_table) of wire type 2 first
    return head[:2] == b"\x1f\x8b" or head[:1] in (b"\x0a", b"\x32")
