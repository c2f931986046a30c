"""How many threads TVM's CPU runtime runs kernels on, here and in the runner's workers.

TVM's thread pool, unless TVM_NUM_THREADS (or OMP_NUM_THREADS) says otherwise, takes half of
`std::thread::hardware_concurrency()` on x86, assuming every core runs two hyper-threads. On a
machine without them (most cloud VMs, this project's 2-core machines) that is half the cores:
every parallel kernel, measured or deployed, ran on one of two cores.
"""

from __future__ import annotations

import os
from pathlib import Path

from harl.target import local_cpu_count

#: The variables TVM's runtime reads for its thread count (src/runtime/threading_backend.cc).
THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")

_CPU_SYSFS = Path("/sys/devices/system/cpu")


def physical_core_count(cpus: set[int] | None = None, sysfs: Path = _CPU_SYSFS) -> int:
    """Distinct physical cores among `cpus` (default: the CPUs this process may run on).

    Hyper-threads of one core count once; without topology files each CPU counts as a core.
    """
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return local_cpu_count()
    cores = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


def use_physical_cores(environ=os.environ) -> tuple[int, bool]:
    """Make TVM's runtime use one thread per physical core, unless the user chose a count.

    Must run before the process's first parallel kernel (TVM sizes its pool once); the runner's
    and builder's worker processes inherit the setting. Returns (threads, whether harl set it).
    """
    for name in THREAD_VARIABLES:
        chosen = environ.get(name, "").strip()
        if chosen.isdigit() and int(chosen) > 0:
            return int(chosen), False
    threads = physical_core_count()
    environ["TVM_NUM_THREADS"] = str(threads)
    return threads, True
