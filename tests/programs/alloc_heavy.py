"""tests/programs/alloc_heavy.py -- an allocation-heavy Python workload with a deterministic
digest: dicts, lists, strings, tuples and sets built, mutated and dropped in a loop. The
printed lines do not depend on the allocator (no ids, no addresses), so a run under
LD_PRELOAD=libkite.so must print exactly what a run without it prints."""
import hashlib
import random
import sys

rng = random.Random(12345)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
h = hashlib.sha256()
keep = []
for r in range(rounds):
    d = {}
    for i in range(5000):
        k = "k%d-%d" % (r, rng.randrange(100000))
        d[k] = [rng.random() for _ in range(rng.randrange(8))]
    s = sorted(d.items(), key=lambda kv: (len(kv[1]), kv[0]))
    text = "|".join(k + ":" + ",".join("%.6f" % x for x in v) for k, v in s[:200])
    words = text.split(",")
    counts = {}
    for w in words:
        counts[w[:4]] = counts.get(w[:4], 0) + 1
    big = [tuple(range(i % 50)) for i in range(3000)]
    sets = {frozenset(t[:5]) for t in big}
    blob = ("x" * rng.randrange(1, 300000)).encode() + bytes(rng.randrange(256) for _ in range(100))
    h.update(text.encode())
    h.update(repr(sorted(counts.items())).encode())
    h.update(str(len(sets)).encode())
    h.update(hashlib.md5(blob).digest())
    keep.append(s[rng.randrange(len(s))])
    if len(keep) > 10:
        keep.pop(rng.randrange(len(keep)))
    if r % 10 == 9:
        print("round", r + 1, h.hexdigest()[:16], len(d), len(keep))
print("digest", h.hexdigest())
