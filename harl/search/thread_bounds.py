"""Whether a GPU sketch's state binds an allowed number of threads, known from its decisions.

MetaSchedule's GPU multi-level tiling fuses one level of each spatial tile into the loop it binds
to threadIdx, and annotates the block with the thread extents it allows (32 to 1024 by default).
A postproc rejects the schedules outside them, but only after the whole trace and the
cooperative-fetch rewrite have run: about 28 of a CUDA conv's 33 ms per sample on one thread
here, and four of five random samples of the example CNN's convs fall outside. The bound extent
is the product of some tile decisions, so a state is judged from its decisions alone, and a
fresh sample from the start of its trace that draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm.s_tir.schedule import Trace

from harl.agents.tile_tuner import State
from harl.search.trace_sites import tunable_insts

WARP_KEY = "warp_execution"
LOW_KEY = "meta_schedule.thread_extent_low_inclusive"
HIGH_KEY = "meta_schedule.thread_extent_high_inclusive"


@dataclass(frozen=True)
class ThreadBound:
    """One loop bound to threadIdx: its extent is the product of some tile decisions."""

    factors: tuple[tuple[int, int], ...]
    """(site index, tile level) of each factor fused into the loop"""
    low: int
    high: int

    def allows(self, state: State) -> bool:
        extent = math.prod(state[site][level] for site, level in self.factors)
        return self.low <= extent <= self.high


@dataclass(frozen=True)
class ThreadBounds:
    """The thread bounds of one sketch (see `of`)."""

    bounds: tuple[ThreadBound, ...]
    prefix: int
    """how many of the trace's first instructions draw every factor of the bounds"""

    @staticmethod
    def of(trace) -> ThreadBounds | None:
        """The bounds of `trace`'s threadIdx.x loops whose extents its tile decisions set and
        whose block is annotated with the extents allowed; None where it has none (CPU sketches)
        or binds threads another way."""
        try:
            return _bounds_of(trace)
        except Exception:  # noqa: BLE001  (a trace of an unforeseen form: replayed in full)
            return None

    def allows(self, state: State) -> bool:
        """Whether `state` (all of a trace's sites, or the first ones a prefix draws) binds
        allowed thread extents."""
        return all(bound.allows(state) for bound in self.bounds)

    def prefix_trace(self, trace) -> Trace:
        """The start of `trace` that draws every factor of the bounds, undecided: replayed with
        a seed, it draws them as the whole trace would with that seed."""
        return Trace(list(trace.insts)[: self.prefix], {})


def _bounds_of(trace) -> ThreadBounds | None:
    """See `ThreadBounds.of`.

    TVM's check multiplies the threadIdx.x, .y and .z extents around a block, and counts x as a
    warp in a block annotated for warp execution (the tensor-core rules bind warps to
    threadIdx.y): the bound loop's extent is the block's thread count only where it is the one
    threadIdx loop, bound to x, and no block executes by warps."""
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == WARP_KEY:
            return None
        if (inst.kind.name == "Bind" and str(inst.attrs[0]).startswith("threadIdx")
                and str(inst.attrs[0]) != "threadIdx.x"):
            return None
    producer: dict = {}  # random variable -> (instruction index, output position)
    for index, inst in enumerate(trace.insts):
        for position, output in enumerate(inst.outputs):
            producer[output] = (index, position)
    sites = {}  # instruction index -> site index
    tunables = tunable_insts(trace)
    for index, inst in enumerate(trace.insts):
        for site_index, tunable in enumerate(tunables):
            if inst.same_as(tunable):
                sites[index] = site_index
    bounds, prefix = [], 0
    for inst in trace.insts:
        if inst.kind.name != "Bind" or str(inst.attrs[0]) != "threadIdx.x":
            continue
        found = _bound_factors(trace.insts, producer, sites, inst.inputs[0])
        if found is None:
            continue
        factors, block, last = found
        low, high = (_annotation(trace.insts, block, key) for key in (LOW_KEY, HIGH_KEY))
        if low is None or high is None:
            continue
        bounds.append(ThreadBound(factors, low, high))
        prefix = max(prefix, last + 1)
    return ThreadBounds(tuple(bounds), prefix) if bounds else None


def _bound_factors(insts, producer, sites, loop):
    """The (site, level) factors of a bound loop, the block they tile and the index of the last
    instruction drawing one; None unless each fused loop is a level of a split whose factors a
    SamplePerfectTile of one block drew."""
    if loop not in producer:
        return None
    index, _ = producer[loop]
    parts = list(insts[index].inputs) if insts[index].kind.name == "Fuse" else [loop]
    factors, blocks, last = [], [], 0
    for part in parts:
        if part not in producer:
            return None
        split_index, level = producer[part]
        split = insts[split_index]
        if split.kind.name != "Split" or split.inputs[1 + level] not in producer:
            return None
        sample_index, sample_level = producer[split.inputs[1 + level]]
        if sample_index not in sites or insts[sample_index].kind.name != "SamplePerfectTile":
            return None
        split_loop = split.inputs[0]
        if split_loop not in producer or insts[producer[split_loop][0]].kind.name != "GetLoops":
            return None
        blocks.append(insts[producer[split_loop][0]].inputs[0])
        factors.append((sites[sample_index], sample_level))
        last = max(last, sample_index)
    if not blocks or any(not block.same_as(blocks[0]) for block in blocks):
        return None
    return tuple(factors), blocks[0], last


def _annotation(insts, block, key: str) -> int | None:
    """The integer `block` is annotated with under `key` in the trace, if any."""
    for inst in insts:
        if (inst.kind.name == "Annotate" and str(inst.attrs[0]) == key
                and inst.inputs[0].same_as(block)):
            return int(inst.inputs[1])
    return None
