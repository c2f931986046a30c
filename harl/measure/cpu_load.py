"""How much CPU time other processes (or the hypervisor) took while harl timed.

On a machine of few cores, a timing that shares them with another job can be wildly off (a
2-core run timed a 0.17 ms model at 24 ms beside a test suite; docs/benchmarks.md, session 41).
The kernel's per-CPU counters (/proc/stat) say how busy the CPUs this process may run on were;
what this process and its descendants used is subtracted, and the rest was someone else's,
the time the hypervisor gave to other guests (steal) included. Linux only: elsewhere the
snapshot is None and nothing is said.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
# /proc/stat per-CPU columns: user nice system idle iowait irq softirq steal [guest guest_nice].
# guest time is already inside user, so it is not added again.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)

OTHER_LOAD_WARN_CORES = 0.25
"""other processes' load, in cores, from which a run's timings are flagged as possibly off (an
idle development machine's background sits near 0.02)"""


@dataclass(frozen=True)
class CpuSnapshot:
    """Busy seconds of this process's CPUs, this process's own CPU seconds, and the time."""

    busy_s: float
    own_s: float
    wall_s: float
    cores: int


def snapshot(proc_stat: Path = _PROC_STAT) -> CpuSnapshot | None:
    """The counters now; None where /proc/stat cannot be read or parsed."""
    try:
        cpus = set(os.sched_getaffinity(0))
        text = proc_stat.read_text()
        ticks = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        return None
    busy = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        if int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in rest.split()]
        busy += sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
    times = os.times()
    own = times.user + times.system + times.children_user + times.children_system
    return CpuSnapshot(busy / ticks, own + _living_descendants_s(ticks), time.monotonic(),
                       len(cpus))


def _living_descendants_s(ticks: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds of this process's living descendants (the builder's and runner's workers)
    and of the children they reaped; os.times counts a child only once it is reaped."""
    total, pending, seen = 0.0, [os.getpid()], set()
    while pending:
        pid = pending.pop()
        for thread in (proc / str(pid) / "task").glob("*"):
            try:
                children = [int(c) for c in (thread / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child in seen:
                    continue
                seen.add(child)
                pending.append(child)
                try:  # fields after the command's ")": utime, stime, cutime, cstime at 11-14
                    fields = (proc / str(child) / "stat").read_text().rpartition(")")[2].split()
                    total += sum(int(v) for v in fields[11:15]) / ticks
                except (OSError, ValueError):
                    continue  # it exited meanwhile: its parent's reaped time has it
    return total


def other_load_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """Cores' worth of CPU time others took between two snapshots (None if either is missing
    or no time passed). /proc/stat counts in clock ticks (10 ms), so short windows are coarse."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / (after.wall_s - before.wall_s))
