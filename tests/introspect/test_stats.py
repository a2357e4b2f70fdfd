#!/usr/bin/env python3
"""tests/introspect/test_stats.py BUILD_DIR SOURCE_DIR -- kite's statistics as tools read them.

  - kite_stats_print_json: the snapshot parses (json) and adds up: per-class live blocks,
    bytes and pages sum to the small totals, live = small + large + huge, live bytes <=
    committed, and the blocks the program holds are all counted;
  - tools/kite-stats prints a snapshot, diffs two (exactly the blocks added between them),
    and rejects a malformed file naming its line (exit 1) and bad usage (exit 2);
  - malloc_info(0, FILE) is XML (xml.etree) whose totals agree with its size classes;
  - KITE_SHOW_STATS=json / =1 in a preloaded program: JSON and text at exit.
"""
import json
import re
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

build, src = sys.argv[1], sys.argv[2]
prog = os.path.join(build, "introspect_override")
tool = os.path.join(src, "tools", "kite-stats")
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails += 1


def snapshot(n):
    out = subprocess.run([prog, "json", str(n)], capture_output=True, text=True, check=True).stdout
    return out, json.loads(out)


def adds_up(s, label):
    cls = s["small"]["classes"]
    check(sum(c["live_blocks"] for c in cls) == s["small"]["live_blocks"], f"{label}: class live blocks sum to the small total")
    check(sum(c["live_bytes"] for c in cls) == s["small"]["live_bytes"], f"{label}: class live bytes sum to the small total")
    check(sum(c["pages"] for c in cls) == s["small"]["pages"], f"{label}: class pages sum to the small total")
    check(all(c["live_bytes"] == c["live_blocks"] * c["size"] for c in cls), f"{label}: live bytes = blocks x size per class")
    check(s["live"]["blocks"] == s["small"]["live_blocks"] + s["large"]["live_blocks"] + s["huge"]["live_blocks"],
          f"{label}: live blocks = small + large + huge")
    check(s["live"]["bytes"] == s["small"]["live_bytes"] + s["large"]["live_bytes"] + s["huge"]["live_bytes"],
          f"{label}: live bytes = small + large + huge")
    check(0 < s["live"]["bytes"] <= s["committed"] <= s["peak_committed"], f"{label}: 0 < live bytes <= committed <= peak")


text1, s1 = snapshot(1000)
text2, s2 = snapshot(3000)
check(s1["schema"] == 1 and isinstance(s1["version"], str), "schema 1 and a version")
adds_up(s1, "1000 blocks")
adds_up(s2, "3000 blocks")
c112 = {c["size"]: c for c in s1["small"]["classes"]}.get(112)
check(c112 is not None and c112["live_blocks"] >= 1000, "the 1000 blocks of 100 bytes are live in class 112")
check(s1["large"]["live_blocks"] >= 3 and s1["large"]["live_bytes"] >= 3 * 100 * 1024, "3 large blocks of 100 KiB live")
check(s1["huge"]["live_blocks"] == 1 and s1["huge"]["live_bytes"] >= 20 << 20, "1 huge block of 20 MiB live")
check(s1["live"]["bytes"] >= 1000 * 100 + 3 * 100 * 1024 + (20 << 20), "live bytes cover what the program holds")
check(s1["pages_abandoned"] >= 1, "the exited thread's page (one live block) was abandoned")
check(len(s1["threads"]) >= 1 and s1["threads"][0]["kind"] == "thread" and s1["threads"][0]["live_blocks"] >= 1000,
      "a thread line with the main thread's live blocks")
check(s2["small"]["live_blocks"] - s1["small"]["live_blocks"] == 2000, "2000 more live blocks in the second run")

with tempfile.TemporaryDirectory() as tmp:
    a, b, bad = (os.path.join(tmp, f) for f in ("a.json", "b.json", "bad.json"))
    # a snapshot inside other output (a program's stderr) is found
    open(a, "w").write("some program output\n" + text1 + "more\n")
    open(b, "w").write(text2)
    r = subprocess.run([sys.executable, tool, a], capture_output=True, text=True)
    check(r.returncode == 0 and "live blocks" in r.stdout and str(s1["live"]["blocks"]) in r.stdout,
          "kite-stats prints a snapshot")
    r = subprocess.run([sys.executable, tool, a, b], capture_output=True, text=True)
    row = [l for l in r.stdout.splitlines() if l.split()[:2] == [str(c112["class"]), "112"]]
    check(r.returncode == 0 and len(row) == 1 and row[0].split()[2] == "+2000",
          "kite-stats diff: class 112 gained exactly 2000 live blocks")
    live_row = [l for l in r.stdout.splitlines() if l.strip().startswith("small live blocks")]
    check(len(live_row) == 1 and live_row[0].split()[-1] == "+2000", "kite-stats diff: small live blocks +2000")
    lines = text1.splitlines()
    open(bad, "w").write("\n".join(lines[:3]) + "\n")
    r = subprocess.run([sys.executable, tool, bad], capture_output=True, text=True)
    check(r.returncode == 1 and f"{bad}:" in r.stderr and "malformed" in r.stderr, "truncated snapshot: exit 1, file:line named")
    open(bad, "w").write("nothing here\n")
    r = subprocess.run([sys.executable, tool, bad], capture_output=True, text=True)
    check(r.returncode == 1 and "no kite statistics snapshot" in r.stderr, "no snapshot: exit 1")
    r = subprocess.run([sys.executable, tool], capture_output=True, text=True)
    check(r.returncode == 2 and "usage" in r.stderr, "no argument: usage, exit 2")
    r = subprocess.run([sys.executable, tool, "-h"], capture_output=True, text=True)
    check(r.returncode == 0 and "usage" in r.stdout, "-h: usage, exit 0")

# malloc_info
out = subprocess.run([prog, "xml"], capture_output=True, text=True, check=True).stdout
root = ET.fromstring(out)
check(root.tag == "malloc" and root.get("version") == "kite-1", "malloc_info: <malloc version=\"kite-1\">")
sizes = root.findall("./sizes/size")
small = root.find("./total[@type='small']")
live = root.find("./total[@type='live']")
current = root.find("./system[@type='current']")
check(len(sizes) > 0 and small is not None and live is not None and current is not None, "malloc_info: sizes, totals, system")
check(sum(int(e.get("live_blocks")) for e in sizes) == int(small.get("count")), "malloc_info: class blocks sum to the small total")
check(any(int(e.get("size")) == 64 and int(e.get("live_blocks")) >= 100 for e in sizes), "malloc_info: the 100 blocks of 50 bytes")
check(0 < int(live.get("size")) <= int(current.get("size")), "malloc_info: live <= current")

# at exit, from a preloaded program
lib = os.path.join(build, "libkite.so")
env = dict(os.environ, LD_PRELOAD=lib, KITE_SHOW_STATS="json")
r = subprocess.run(["ls", "-l", "/"], capture_output=True, text=True, env=env)
try:
    s = json.loads(r.stderr[r.stderr.index('{"schema": '):])
    adds_up(s, "KITE_SHOW_STATS=json")
except ValueError as e:
    check(False, f"KITE_SHOW_STATS=json: {e}: {r.stderr[:200]!r}")
env["KITE_SHOW_STATS"] = "1"
r = subprocess.run(["ls", "-l", "/"], capture_output=True, text=True, env=env)
check(re.match(r"kite statistics \(pid \d+, program ls\)\n", r.stderr) is not None and "not malloc calls" in r.stderr
      and "\n  live blocks: " in r.stderr and "heap 1 (thread): live blocks" in r.stderr,
      "KITE_SHOW_STATS=1: the text, naming the process, saying what it counts")

print(f"{fails} failures")
sys.exit(1 if fails else 0)
