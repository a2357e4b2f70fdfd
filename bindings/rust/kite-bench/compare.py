#!/usr/bin/env python3
"""Run the Rust churn benchmark with each allocator, interleaved, and print a markdown table.

Builds the four binaries (cargo build --release -p kite-bench), then runs them RUNS times in
rotating order (round i starts with a different allocator, so drift in the machine's speed
touches all of them alike). Each run reports the workload's own seconds; the process's peak
RSS comes from wait4. The table gives the median with the min..max spread, and the median
of the per-round ratios to the system allocator. Every run must print the same checksum.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ALLOCATORS = ["system", "kite", "mimalloc", "jemalloc"]
HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.dirname(HERE)


def run_one(binary, args):
    """Run binary once; returns (seconds, checksum, peak RSS in MiB)."""
    proc = subprocess.Popen([binary] + args, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"compare.py: {binary} {' '.join(args)} failed (exit {proc.returncode})")
    fields = dict(f.split("=", 1) for f in out.split()[1:])
    return float(fields["seconds"]), fields["checksum"], usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per allocator (default 5)")
    ap.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    ap.add_argument("--rounds", type=int, default=200, help="rounds per thread (default 200)")
    ap.add_argument("--keys", type=int, default=2000, help="map entries per round (default 2000)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", os.path.join(WORKSPACE, "target")),
                    help="cargo target directory (default: $CARGO_TARGET_DIR or bindings/rust/target)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    opts = ap.parse_args()
    if min(opts.runs, opts.threads, opts.rounds, opts.keys) < 1:
        ap.error("--runs, --threads, --rounds and --keys must be positive")

    if not opts.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kite-bench",
                        "--manifest-path", os.path.join(WORKSPACE, "Cargo.toml"), "--target-dir", opts.target_dir],
                       check=True)
    binaries = {a: os.path.join(opts.target_dir, "release", f"churn-{a}") for a in ALLOCATORS}
    args = [str(opts.threads), str(opts.rounds), str(opts.keys)]

    secs = {a: [] for a in ALLOCATORS}
    rss = {a: [] for a in ALLOCATORS}
    ratio = {a: [] for a in ALLOCATORS}
    checksums = set()
    for r in range(opts.runs):
        order = ALLOCATORS[r % len(ALLOCATORS):] + ALLOCATORS[:r % len(ALLOCATORS)]
        this_round = {}
        for a in order:
            s, c, m = run_one(binaries[a], args)
            this_round[a] = s
            secs[a].append(s)
            rss[a].append(m)
            checksums.add(c)
            print(f"round {r + 1}/{opts.runs} {a:9s} {s:.3f} s  {m:.0f} MiB", file=sys.stderr)
        for a in ALLOCATORS:
            ratio[a].append(this_round[a] / this_round["system"])
    if len(checksums) != 1:
        sys.exit(f"compare.py: the allocators disagree on the checksum: {sorted(checksums)}")

    print(f"`churn-* {' '.join(args)}` (threads rounds keys), {opts.runs} interleaved runs each, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} CPUs\n")
    print("| allocator | seconds, median | min .. max | time / system (median of pairs) | peak RSS MiB, median |")
    print("|---|---:|---:|---:|---:|")
    for a in ALLOCATORS:
        print(f"| {a} | {statistics.median(secs[a]):.3f} | {min(secs[a]):.3f} .. {max(secs[a]):.3f} | "
              f"{statistics.median(ratio[a]):.2f} | {statistics.median(rss[a]):.0f} |")


if __name__ == "__main__":
    main()
