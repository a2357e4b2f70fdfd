#!/usr/bin/env python3
"""Run the Rust churn benchmark with each allocator, interleaved, and print a markdown table.

Builds the four binaries (cargo build --release -p kite-bench), then runs them RUNS times in
rotating order (round i starts with a different allocator, so drift in the machine's speed
touches all of them alike). Each run reports the workload's own seconds and its peak RSS
(VmHWM). The table gives the median with the min..max spread, and the median
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
    """Run binary once; returns (seconds, CPU seconds, checksum, peak RSS in MiB)."""
    proc = subprocess.Popen([binary] + args, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"compare.py: {binary} {' '.join(args)} failed (exit {proc.returncode})")
    fields = dict(f.split("=", 1) for f in out.split()[1:])
    return (float(fields["seconds"]), usage.ru_utime + usage.ru_stime, fields["checksum"],
            int(fields["peak_rss_kib"]) / 1024.0)


def callgrind(binaries, args):
    """Instructions of one run of each binary under callgrind (repeatable, unlike time)."""
    print(f"Instructions (callgrind, whole process) of `churn-* {' '.join(args)}`:\n")
    print("| allocator | instructions | / system |")
    print("|---|---:|---:|")
    counts = {}
    for a, binary in binaries.items():
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary] + args,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"compare.py: callgrind run of {binary} failed:\n{proc.stderr}")
        collected = [line.split()[-1] for line in proc.stderr.splitlines() if "Collected :" in line]
        counts[a] = int(collected[-1])
        print(f"| {a} | {counts[a]:,} | {counts[a] / counts['system']:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per allocator (default 5)")
    ap.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    ap.add_argument("--rounds", type=int, default=200, help="rounds per thread (default 200)")
    ap.add_argument("--keys", type=int, default=2000, help="map entries per round (default 2000)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", os.path.join(WORKSPACE, "target")),
                    help="cargo target directory (default: $CARGO_TARGET_DIR or bindings/rust/target)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--callgrind", action="store_true",
                    help="count instructions of one run each under valgrind's callgrind instead of timing")
    opts = ap.parse_args()
    if min(opts.runs, opts.threads, opts.rounds, opts.keys) < 1:
        ap.error("--runs, --threads, --rounds and --keys must be positive")

    if not opts.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kite-bench",
                        "--manifest-path", os.path.join(WORKSPACE, "Cargo.toml"), "--target-dir", opts.target_dir],
                       check=True)
    binaries = {a: os.path.join(opts.target_dir, "release", f"churn-{a}") for a in ALLOCATORS}
    args = [str(opts.threads), str(opts.rounds), str(opts.keys)]
    if opts.callgrind:
        callgrind(binaries, args)
        return

    secs = {a: [] for a in ALLOCATORS}
    cpu = {a: [] for a in ALLOCATORS}
    rss = {a: [] for a in ALLOCATORS}
    ratio = {a: [] for a in ALLOCATORS}
    checksums = set()
    for r in range(opts.runs):
        order = ALLOCATORS[r % len(ALLOCATORS):] + ALLOCATORS[:r % len(ALLOCATORS)]
        this_round = {}
        for a in order:
            s, u, c, m = run_one(binaries[a], args)
            this_round[a] = s
            secs[a].append(s)
            cpu[a].append(u)
            rss[a].append(m)
            checksums.add(c)
            print(f"round {r + 1}/{opts.runs} {a:9s} {s:.3f} s  cpu {u:.3f} s  {m:.0f} MiB", file=sys.stderr)
        for a in ALLOCATORS:
            ratio[a].append(this_round[a] / this_round["system"])
    if len(checksums) != 1:
        sys.exit(f"compare.py: the allocators disagree on the checksum: {sorted(checksums)}")

    print(f"`churn-* {' '.join(args)}` (threads rounds keys), {opts.runs} interleaved runs each, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} CPUs\n")
    print("| allocator | wall s, median | min .. max | wall / system (median of pairs) "
          "| CPU s (user+sys), median | min .. max | peak RSS MiB, median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for a in ALLOCATORS:
        print(f"| {a} | {statistics.median(secs[a]):.3f} | {min(secs[a]):.3f} .. {max(secs[a]):.3f} | "
              f"{statistics.median(ratio[a]):.2f} | {statistics.median(cpu[a]):.3f} | "
              f"{min(cpu[a]):.3f} .. {max(cpu[a]):.3f} | {statistics.median(rss[a]):.1f} |")


if __name__ == "__main__":
    main()
