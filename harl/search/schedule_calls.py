"""The few schedule primitives the search calls per replayed state, without TVM's type checks.

TVM's Python `Schedule` methods check every argument against its annotation (`type_checked`)
before calling the same FFI function: `sch.get(loop)` costs 0.03 ms, its FFI call 0.0015 ms.
The check runs under the GIL, so on the replay threads it also holds up the other thread; a
CNN conv's 22 loop extents took longer to read than its trace took to apply. The arguments here
come from traces and schedules, never from a user, so the checks have nothing to catch.
"""

from __future__ import annotations

from tvm.s_tir.schedule import _ffi_api
from tvm.tirx import IntImm


def loop_extents(sch, loops) -> list[int | None]:
    """The extent of each loop (None where it is not a constant)."""
    extents = [_ffi_api.ScheduleGet(sch, loop).extent for loop in loops]
    return [int(e) if isinstance(e, IntImm) else None for e in extents]


def get_consumers(sch, block) -> list:
    return list(_ffi_api.ScheduleGetConsumers(sch, block))


def get_loops(sch, block) -> list:
    return list(_ffi_api.ScheduleGetLoops(sch, block))


def compute_at(sch, block, loop) -> None:
    """Compute-at preserving unit loops, at the end of the loop's body (MetaSchedule's form)."""
    _ffi_api.ScheduleComputeAt(sch, block, loop, True, -1)


def compute_inline(sch, block) -> None:
    _ffi_api.ScheduleComputeInline(sch, block)


def seed(sch, value: int) -> None:
    _ffi_api.ScheduleSeed(sch, value)
