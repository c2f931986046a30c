"""Candidates timed again while a reference kernel timed beside them says the machine runs slow.

On a shared cloud host a kernel can time up to twice as slow for a second or two at a time (the
host's other tenants; no CPU counter shows it), so one slow timing can bury a good schedule. A
fixed parallel kernel timed right before and after a candidate, in the runner's worker, slows
down with it; where it runs more than SLOW_FACTOR above the lower quartile of its recent timings,
the candidate is timed again. CPU only: a GPU's timings are TVM's.
"""

from __future__ import annotations

import collections
import functools
import time

REFERENCE_MIN_MS = 10
"""each timing of the reference averages its runs over at least this long"""
SLOW_FACTOR = 1.15
"""a reference timing this far above the lower quartile of the recent ones marks a slow phase"""
MAX_ATTEMPTS = 3
"""timings of a candidate at most, the first included"""
RECENT_TIMINGS = 64
"""reference timings the lower quartile is taken over"""
LONG_TIMING_S = 1.0
"""a candidate's timing that lasts this long is kept whatever the reference says"""


@functools.cache
def _reference_timer():
    """A time_evaluator of the reference kernel (a parallel, vectorised 256^3 matmul), built
    once per process, with its arguments."""
    import numpy as np
    import tvm
    from tvm import te

    n = 256
    a = te.placeholder((n, n), "float32", name="a")
    b = te.placeholder((n, n), "float32", name="b")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    i, j, kk = sch.get_loops(sch.get_sblock("c"))
    j_outer, j_inner = sch.split(j, [None, 8])
    sch.reorder(i, j_outer, kk, j_inner)
    sch.parallel(i)
    sch.vectorize(j_inner)
    lib = tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm"}))
    device = tvm.cpu(0)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal((n, n)).astype("float32"), device)
            for _ in range(2)] + [tvm.runtime.empty((n, n), "float32", device)]
    timer = lib.mod.time_evaluator(lib.mod.entry_name, device, number=1, repeat=1,
                                   min_repeat_ms=REFERENCE_MIN_MS)
    return lambda: float(timer(*args).mean)


def reference_seconds() -> float:
    """One timing of the reference kernel in this process, in seconds."""
    return _reference_timer()()


class SlowPhases:
    """Tells a slow phase from the reference timings of one process."""

    def __init__(self) -> None:
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_TIMINGS)

    def slow(self, before_s: float, after_s: float) -> bool:
        """Whether a candidate timed between these two reference timings ran in a slow phase:
        one of them is more than SLOW_FACTOR above the lower quartile of the recent ones
        (theirs included; slow phases only add time, so the fast end is the machine's speed)."""
        self.recent.extend((before_s, after_s))
        floor = sorted(self.recent)[len(self.recent) // 4]
        return max(before_s, after_s) > SLOW_FACTOR * floor


_PHASES = SlowPhases()  # the runner worker's


def steady_run_evaluator(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """LocalRunner's `f_run_evaluator` (runs in its worker): TVM's timings of the candidate,
    taken again, up to MAX_ATTEMPTS in all, while the reference around them runs slow; the last
    are kept. A timing that lasted LONG_TIMING_S or more is not taken again: it spans the slow
    phases already, and the attempts share the run timeout. On a GPU, TVM's timings as they
    are."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    if device.dlpack_device_type() != tvm_ffi.DLDeviceType.kDLCPU:
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
    for _ in range(MAX_ATTEMPTS):  # each attempt between two references of its own
        before = reference_seconds()
        start = time.perf_counter()
        costs = run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
        long = time.perf_counter() - start >= LONG_TIMING_S
        if not _PHASES.slow(before, reference_seconds()) or long:
            break
    return costs
