"""Helpers shared by kite's Python tools (bench/run.py, bench/seed_tables.py, tools/lab.py,
tools/plot.py ...): one description of the machine, one median, one spread.

Import it with the tools/ folder on sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tools")); import kitecommon
"""
import os
import platform
import statistics


def machine_info():
    """The machine a measurement ran on: cpu model, cores, kernel, libc, load at start."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        libc = "libc ?"
    try:
        load = "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "?"
    return dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(), libc=libc,
                load_at_start=load)


def median(values):
    """The median of a non-empty sequence of numbers (None for an empty one)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values):
    """(min, max) of a non-empty sequence of numbers (None for an empty one)."""
    values = [v for v in values if v is not None]
    return (min(values), max(values)) if values else None
