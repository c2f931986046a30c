"""How much CPU time other processes (or the hypervisor) took while harl timed.

On a machine of few cores, a timing that shares them with another job can be wildly off (a
2-core run timed a 0.17 ms model at 24 ms beside a test suite).
The kernel's per-CPU counters (/proc/stat) say how busy the CPUs this process may run on were;
what this process and its descendants used is subtracted, and the rest was someone else's,
the time the hypervisor gave to other guests (steal) included. Linux only, and only where the
answer means something: elsewhere, without the kernel's list of a process's children, or in a
container whose CPU quota (cgroup v1 or v2) is smaller than the CPUs it sees, a snapshot is
None and nothing is said.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
# /proc/stat per-CPU columns: user nice system idle iowait irq softirq steal [guest guest_nice].
# guest time is already inside user, so it is not added again.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)

MIN_WINDOW_S = 1.0
"""the shortest time over which a load is told: the counters tick every 10 ms, and a tick over
a few milliseconds of fake measuring read as two cores"""

OTHER_LOAD_WARN_CORES = 0.25
"""other processes' load, in cores, from which a run's timings are flagged as possibly off (an
idle development machine's background sits near 0.01)"""


def _allowed_cpus() -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return frozenset()


# Read once, at import: TVM's thread pool may later pin the calling thread to one core, and
# sched_getaffinity answers for the calling thread.
_CPUS = _allowed_cpus()


@dataclass(frozen=True)
class CpuSnapshot:
    """Busy seconds of this process's CPUs, this process's own CPU seconds, and the time."""

    busy_s: float
    own_s: float
    wall_s: float
    cores: int


def snapshot(proc: Path = _PROC, cpus: frozenset[int] | None = None,
             cgroup: Path = Path("/sys/fs/cgroup")) -> CpuSnapshot | None:
    """The counters now; None where they cannot be read or would not mean what they say."""
    cpus = _CPUS if cpus is None else cpus
    try:
        if not cpus or _quota_below(cpus, cgroup, proc):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        descendants = _living_descendants_s(ticks, proc)
        if descendants is None:
            return None
        busy = 0
        for line in (proc / "stat").read_text().splitlines():
            name, _, rest = line.partition(" ")
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                values = [int(v) for v in rest.split()]
                busy += sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system
        return CpuSnapshot(busy / ticks, own + descendants, time.monotonic(), len(cpus))
    except (OSError, ValueError, ZeroDivisionError):
        return None  # a counter that cannot be read says nothing; it never stops a run


def _quota_below(cpus: frozenset[int], cgroup: Path, proc: Path) -> bool:
    """A CPU quota smaller than the CPUs seen: the counters then hold other tenants' load on
    CPUs this container does not really have."""
    quota = _quota_cores(cgroup, proc)
    return quota is not None and quota < len(cpus) - 0.5


def _quota_cores(cgroup: Path, proc: Path) -> float | None:
    """The smallest CPU quota, in cores, on this process's cgroups and their ancestors: cgroup
    v2's cpu.max, v1's CFS quota; None where none is set or none can be read."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = ["0::/"]  # a cgroup namespace's view: the mount is this process's own cgroup
    quotas = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":
            mount, files = cgroup, ("cpu.max",)
        elif "cpu" in controllers.split(","):
            mount, files = cgroup / controllers, ("cpu.cfs_quota_us", "cpu.cfs_period_us")
            if not mount.is_dir():
                mount = cgroup / "cpu"
        else:
            continue
        # From the cgroup up to the mount: without a namespace a container's own cgroup is
        # mounted at the root, and the path /proc names does not exist under it.
        folder = mount / path.strip("/")
        for parent in (folder, *[p for p in folder.parents if p.is_relative_to(mount)]):
            try:
                values = " ".join((parent / f).read_text() for f in files).split()
            except OSError:
                continue
            if len(values) == 2 and values[0] not in ("max", "-1"):
                quotas.append(int(values[0]) / int(values[1]))
    return min(quotas, default=None)


def _living_descendants_s(ticks: int, proc: Path) -> float | None:
    """CPU seconds of this process's living descendants (the builder's and runner's workers)
    and of the children they reaped, as os.times counts a child only once it is reaped; None
    where the kernel keeps no list of a process's children (its workers could not be told from
    other processes)."""
    pid = os.getpid()
    if not (proc / str(pid) / "task" / str(pid) / "children").exists():
        return None
    total, pending, seen = 0.0, [pid], set()
    while pending:
        parent = pending.pop()
        try:
            threads = os.listdir(proc / str(parent) / "task")
        except OSError:
            continue  # it exited meanwhile
        for thread in threads:
            try:
                children = [int(c) for c in
                            (proc / str(parent) / "task" / thread / "children").read_text().split()]
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


def other_core_seconds(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """CPU seconds others took between two snapshots, signed: /proc/stat counts in clock ticks
    (10 ms), so over a short window it can come out a tick below this process's own time; sums
    over many windows cancel that out where clamping each would not."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    return (after.busy_s - before.busy_s) - (after.own_s - before.own_s)


def other_load_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """Cores' worth of CPU time others took, on average, between two snapshots (None if either
    is missing or they are less than MIN_WINDOW_S apart)."""
    seconds = other_core_seconds(before, after)
    if seconds is None or after.wall_s - before.wall_s < MIN_WINDOW_S:
        return None
    return max(0.0, seconds / (after.wall_s - before.wall_s))


def worth_saying(cores: float | None) -> bool:
    """Whether others' load, in cores (None: not known), may have put a timing off."""
    return cores is not None and cores >= OTHER_LOAD_WARN_CORES


def describe_other_load(cores: float, while_doing: str) -> str:
    """The line a run prints where others' load may have made its timings off."""
    return (f"on average {cores:.2f} cores were busy with other processes or the host while "
            f"{while_doing}")
