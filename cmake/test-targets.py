#!/usr/bin/env python3
"""cmake/test-targets.py BUILD_DIR [CTEST SELECTION...] -- the build outputs that the tests
CTest would select with these arguments (-L, -E, -R ...) run: every path inside BUILD_DIR
named in a test's command, its ENVIRONMENT (an LD_PRELOAD) or its REQUIRED_FILES (what a
script runs), printed as Ninja targets, one a line.

The cross stages (Makefile: test-cross-quick) build these alone: the aarch64 and musl
builds run a part of their tests, and the rest of their targets (the lab, the benchmarks,
the library variants no selected test links) is compiled, with -Werror, by the normal and
clang builds of make test. A test that ran an output it does not name would find it
missing there (core_programs names the programs its script runs in REQUIRED_FILES). Prints
nothing when BUILD_DIR is not a Ninja build (the caller then builds everything)."""
import json
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    bd = os.path.realpath(sys.argv[1])
    if not os.path.exists(os.path.join(bd, "build.ninja")):
        return 0
    shown = subprocess.run(["ctest", "--show-only=json-v1", *sys.argv[2:]], cwd=bd,
                           capture_output=True, text=True, check=True).stdout
    outputs = set(subprocess.run(["ninja", "-t", "targets", "all"], cwd=bd, capture_output=True,
                                 text=True, check=True).stdout.split())
    outputs = {o[:-1] for o in outputs if o.endswith(":")}
    # CTest names a test's command only once its program exists: before the build, the
    # command comes from the test file CMake wrote (add_test(NAME "ARG" ...))
    written = {}
    with open(os.path.join(bd, "CTestTestfile.cmake")) as f:
        for line in f:
            m = re.match(r"add_test\((\S+) (.*)\)$", line.strip())
            if m:
                written[m.group(1)] = [re.sub(r"\\(.)", r"\1", a)
                                       for a in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))]
    want = set()
    for test in json.loads(shown)["tests"]:
        words = list(test.get("command") or written.get(test["name"], []))
        for prop in test.get("properties", []):
            if prop["name"] in ("ENVIRONMENT", "REQUIRED_FILES"):
                for v in prop["value"]:
                    words += v.split("=", 1)[-1].split(":")
        for w in words:
            if not os.path.isabs(w):
                continue
            # the path as named (libkite.so, a link the library's target makes), else where
            # it leads
            for p in (os.path.abspath(w), os.path.realpath(w)):
                rel = os.path.relpath(p, bd)
                if p.startswith(bd + os.sep) and rel in outputs:
                    want.add(rel)
                    break
    print("\n".join(sorted(want)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
