#!/usr/bin/env python3
"""tests/tools/test_advise_profile.py -- `kite-lab advise --profile`: the report of a heap
profile (docs/advise.md, "From a heap profile").

prof_sites (the heap profiler's accuracy workload: site_a, site_b and site_c allocate 60%,
30% and 10% of 200 MiB; site_a keeps every other block, site_b none, site_c all) dumps a
profile; advise's report of it lists site_a, site_b, site_c first by bytes allocated, each
within 10% of what the program counted, and in its live table exactly site_a and site_c,
each within 10%. The same profile gzip'd and given as --trace gives the same sites. The exit
profile of KITE_PROF_LEAKS=1 (site_a frees all, site_b keeps one block in four) has live
sites exactly site_b and site_c. A file that is neither a trace nor a profile, and a
profile without a heap profile's sample types, are refused with exit 2.

usage: test_advise_profile.py BUILD_DIR [SOURCE_DIR]
"""
import gzip
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests"))
from testlib import check, eq, run_tests  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, "build"))
PROG = os.path.join(BUILD, "prof_sites")
LAB = os.path.join(SRC, "tools", "kite-lab")
TMP = tempfile.mkdtemp(prefix="kite-advise-prof-")
SITES = ("site_a", "site_b", "site_c")


def run_prog(mode, env):
    path = os.path.join(TMP, f"{mode}.pb")
    r = subprocess.run([PROG, mode, path], env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"prof_sites {mode}: exit {r.returncode}: {r.stderr[-300:]}")
    truth = {f[0]: dict(alloc=int(f[2]), live=int(f[5])) for f in (ln.split() for ln in r.stdout.splitlines())
             if len(f) == 7}
    return path, truth, r


def advise(*args):
    out = os.path.join(TMP, f"report{len(os.listdir(TMP))}.html")
    r = subprocess.run([sys.executable, LAB, "advise", "-q", "-o", out] + list(args),
                       capture_output=True, text=True, timeout=600)
    data = None
    if r.returncode == 0 and os.path.exists(out):
        text = open(out, encoding="utf-8").read()
        m = re.search(r'<script type="application/json" id="kite-advise-data">(.*?)</script>', text, re.S)
        data = json.loads(m.group(1)) if m else None
        data["html"] = text
    return r, data


def site_names(rows):
    return [x["frames"][0] for x in rows]


def near(got, want, what):
    err = abs(got - want) / want if want else abs(got)
    check(err <= 0.10, f"{what}: report {got}, truth {want} ({err:.1%} off)")


def need_prog():
    return check(os.access(PROG, os.X_OK), f"{PROG} is built (make build)")


def test_profile_sites():
    if not need_prog():
        return
    path, truth, _ = run_prog("mixed", {"KITE_PROF": ""})
    r, d = advise("--profile", path)
    if not check(r.returncode == 0 and d, f"advise --profile: exit {r.returncode}: {r.stderr[-500:]}"):
        return
    eq(d["kind"], "profile", "the JSON block says it is a profile's report")
    eq(site_names(d["sites"])[:3], list(SITES), "the top sites by bytes allocated")
    for x in d["sites"][:3]:
        near(x["alloc_space"], truth[x["frames"][0]]["alloc"], f"{x['frames'][0]} bytes allocated")
    # the program's own sites: run's live blocks are its arrays of kept pointers, and the C
    # library's (stdio's buffer, __GI__IO_file_doallocate) is live at exit too and sampled
    # now and then
    live = [x for x in d["live"] if x["frames"][0].startswith("site_")]
    eq(sorted(site_names(live)), ["site_a", "site_c"], "the live table: the sites that keep blocks")
    for x in live:
        near(x["inuse_space"], truth[x["frames"][0]]["live"], f"{x['frames'][0]} bytes live")
    check(all("main" in x["frames"] for x in d["sites"][:3]), "each site's stack reaches main")
    h = d["html"]
    for sec in ('id="site-table"', 'id="live-table"', 'id="verdict"', "<code>site_a</code>"):
        check(sec in h, f"the page has {sec}")
    check(not re.search(r'(src|href)="(https?:)?//', h), "no external asset")
    # the same profile, gzip'd, given as a trace: read by its content
    gz = path + ".gz"
    with open(path, "rb") as f, open(gz, "wb") as g:
        g.write(gzip.compress(f.read()))
    r, d2 = advise("--trace", gz)
    if check(r.returncode == 0 and d2, f"advise --trace PROFILE.gz: {r.stderr[-300:]}"):
        eq([(x["frames"], x["alloc_space"]) for x in d2["sites"]], [(x["frames"], x["alloc_space"]) for x in d["sites"]],
           "a gzip'd profile given as --trace: the same sites")


def test_profile_leaks():
    if not need_prog():
        return
    prefix = os.path.join(TMP, "leak")
    _, truth, r = run_prog("leak", {"KITE_PROF": prefix, "KITE_PROF_LEAKS": "1"})
    m = re.search(r"\(profile (\S+)\)", r.stderr)
    if not check(m is not None, f"the leak line names the exit profile: {r.stderr!r}"):
        return
    r, d = advise("--profile", m.group(1))
    if not check(r.returncode == 0 and d, f"advise --profile: {r.stderr[-300:]}"):
        return
    live = {x["frames"][0]: x["inuse_space"] for x in d["live"]}
    eq(sorted(k for k in live if k.startswith("site_")), ["site_b", "site_c"], "the leaks: site_b and site_c")
    for k in ("site_b", "site_c"):
        near(live.get(k, 0), truth[k]["live"], f"{k} leaked bytes")


def test_refusals():
    junk = os.path.join(TMP, "junk.pb")
    with open(junk, "wb") as f:
        f.write(b"\x0a\x05\x08\x01\x10")  # a field that runs past the end
    r, _ = advise("--profile", junk)
    check(r.returncode == 2 and "advise:" in r.stderr, f"a broken profile: exit 2 with a message: {r.returncode} {r.stderr}")
    cpu = os.path.join(TMP, "cpu.pb")
    with open(cpu, "wb") as f:  # string table "", "samples", "count"; one sample type samples/count
        f.write(b"\x32\x00\x32\x07samples\x32\x05count\x0a\x04\x08\x01\x10\x02")
    r, _ = advise("--profile", cpu)
    check(r.returncode == 2 and "no sample type 'alloc_objects'" in r.stderr,
          f"a profile that is no heap profile: exit 2: {r.stderr}")
    r, _ = advise("--profile", cpu, "--trace", cpu)
    eq(r.returncode, 2, "--profile with --trace: bad usage")


if __name__ == "__main__":
    code = run_tests([test_profile_sites, test_profile_leaks, test_refusals], "test_")
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(code)
