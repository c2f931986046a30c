"""Replaying a sampled compute location without TVM checking every location it could take.

Given its decision, TVM's SampleComputeLocation still collects every location its block could go
to (a check-only compute-at under each candidate loop of its consumer) and keeps the decision
only if it is one of them: on the CNN's convs, 5 of the 7 ms that replaying a state takes on one
thread. `LocationShortcut` replays the same schedule another way: GetConsumers, GetLoops of the
consumer and ComputeAt under the decided loop (whose own check is the one TVM runs for each
candidate). TVM's other rules for its candidates (no unit loop, no data-parallel loop inside a
reduction loop) are checked on the consumer's loops afterwards; where TVM would not keep the
decision (it would sample another location), the original trace is replayed instead
(`ShortcutTrace`). Where the location is the last thing a sketch samples (`TailShortcut`),
fresh samples draw it themselves, and so do states whose location TVM would re-sample, each as
likely as from TVM.

Only the search's scoring replays shortcuts: the candidates it measures are replayed from the
original trace, so a database holds TVM's own form of each trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm.s_tir.schedule import Instruction, InstructionKind, LoopRV, SBlockRV, Trace
from tvm.tirx import ForKind, IterVar
from tvm.tirx.analysis import undefined_vars

from harl import tvm_adapter

ROOT, INLINE = -1, -2  # TVM's decisions for "at the root" and "inlined"
PLAIN_LOOP_KINDS = (ForKind.SERIAL, ForKind.THREAD_BINDING)


def _kind(name: str) -> InstructionKind:
    return InstructionKind.get(name)


def _same(x, y) -> bool:
    """Whether two instruction inputs or outputs are the same object (inputs may be plain
    Python values)."""
    return hasattr(x, "same_as") and x.same_as(y)


def _sampled_locations(insts) -> int:
    return sum(inst.kind.name == "SampleComputeLocation" for inst in insts)


def _blocks_under(stmt) -> list:
    """The block realizes directly under `stmt` (not inside other blocks); None if `stmt` holds
    a statement this walk does not know (the shortcut is then not used)."""
    if hasattr(stmt, "iter_values") and hasattr(stmt, "block"):
        return [stmt]
    if hasattr(stmt, "loop_var"):
        return _blocks_under(stmt.body)
    if hasattr(stmt, "seq"):
        found = []
        for child in stmt.seq:
            blocks = _blocks_under(child)
            if blocks is None:
                return None
            found += blocks
        return found
    return None


def _is_data_parallel(loop) -> bool | None:
    """TVM's GetLoopIterType(loop) == kDataPar: the loop's variable binds only spatial block
    variables of the blocks under it (or none). None where the walk cannot tell."""
    blocks = _blocks_under(loop.body)
    if blocks is None:
        return None
    spatial = reduce = other = False
    for realize in blocks:
        for iter_var, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
            if not any(var.same_as(loop.loop_var) for var in undefined_vars(value)):
                continue
            if iter_var.iter_type == IterVar.DataPar:
                spatial = True
            elif iter_var.iter_type == IterVar.CommReduce:
                reduce = True
            else:
                other = True
    return not other and not (spatial and reduce) and not reduce


def candidate_loops(extents: list[int | None], data_parallel: tuple[bool, ...]) -> list[int]:
    """The consumer's loops TVM would offer as locations (CollectComputeLocation, less its
    legality check): unit loops are skipped, and the candidates end at the first data-parallel
    loop after a reduction loop, or at a reduction loop after the last data-parallel one."""
    last_data_parallel = max((j for j, d in enumerate(data_parallel) if d), default=-1)
    inside_reduction, candidates = False, []
    for j, (extent, is_data_parallel) in enumerate(zip(extents, data_parallel, strict=True)):
        if extent == 1:
            continue
        if is_data_parallel:
            if inside_reduction:
                break
        else:
            inside_reduction = True
            if j > last_data_parallel:
                break
        candidates.append(j)
    return candidates


class Shortcut:
    """A way to replay a trace that may not apply: then `original` is replayed instead."""

    original: Trace

    def replay(self, sch, seed: int) -> bool:
        """Apply the shortcut to `sch` (fresh, seeded with `seed`); False where it does not
        apply: `sch` is then spoilt and the original must be replayed on a fresh schedule."""
        raise NotImplementedError


@dataclass(frozen=True)
class ShortcutTrace(Shortcut):
    """A trace whose decided compute location is looked up, not re-checked against every
    other; it does not apply where TVM would not keep the decision (it would sample another)."""

    trace: Trace
    original: Trace
    decision: int
    loops_at: int  # position of the GetLoops instruction in `trace` (-1: none)
    data_parallel: tuple[bool, ...]

    def replay(self, sch, seed: int) -> bool:
        try:
            self.trace.apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # noqa: BLE001  (an illegal location: TVM would sample another)
            return False
        if self.decision < 0:
            return True
        loops = sch.trace.insts[self.loops_at].outputs
        extents = tvm_adapter.loop_extents(sch, loops)
        return self.decision in candidate_loops(extents, self.data_parallel)


@dataclass
class TailShortcut(Shortcut):
    """A state or fresh sample of a sketch whose compute location is sampled last. TVM replays
    (or samples) the rest. The state's location is kept where TVM would keep it; otherwise, and
    for a fresh sample, the location is drawn uniformly among the root, inlining and the
    consumer's candidate loops, and kept where it is legal. Where it is not, TVM replays the
    original trace from the same seed: the same other decisions, and a location uniform over
    the legal ones. So each legal location comes out with probability 1/|legal|, as from TVM's
    own sampling, or its re-sampling of a location it would not keep."""

    prefix: Trace  # the sketch up to the sampled location (undecided for a fresh sample)
    original: Trace
    block_at: tuple[int, int]  # the located block: (instruction, output) in `prefix`
    data_parallel: tuple[bool, ...]
    decision: int | None = None  # the state's location (None: a fresh sample)
    location: int | None = None  # the one applied, once replayed

    def replay(self, sch, seed: int) -> bool:
        try:
            self.prefix.apply_to_schedule(sch, remove_postproc=True)
            instruction, output = self.block_at
            block = sch.trace.insts[instruction].outputs[output]
            consumers = tvm_adapter.get_consumers(sch, block)
            loops = tvm_adapter.get_loops(sch, consumers[0]) if len(consumers) == 1 else []
            if len(loops) != len(self.data_parallel):
                return False
            candidates = candidate_loops(tvm_adapter.loop_extents(sch, loops), self.data_parallel)
            location = self.decision
            if location is None or (location >= 0 and location not in candidates):
                choices = [ROOT, INLINE, *candidates]
                location = choices[int(np.random.default_rng(seed).integers(len(choices)))]
            if location == INLINE:
                tvm_adapter.compute_inline(sch, block)
            elif location != ROOT:
                tvm_adapter.compute_at(sch, block, loops[location])
        except Exception:  # noqa: BLE001  (not legal here: TVM samples a legal one)
            return False
        self.location = location
        return True


class LocationShortcut:
    """The shortcut for the first SampleComputeLocation of one sketch's trace, where it applies:
    the sampled loop feeds one ComputeAt (preserving unit loops, at the end), and the block has
    one consumer, whose loops are plain and analysable when the location is sampled. No location
    is sampled before, so how many loops the consumer has, and which are data-parallel, is the
    same in every state of the sketch (the tile sizes change only their extents).
    """

    def __init__(self, insts: list, sample_at: int, compute_at: int,
                 data_parallel: tuple[bool, ...], block_at: tuple[int, int]) -> None:
        self.sample_at, self.compute_at = sample_at, compute_at
        self.data_parallel, self.block_at = data_parallel, block_at
        n_loops = len(data_parallel)
        # fresh samples: where the location is the last thing sampled and placed
        samples_last = (sample_at, compute_at) == (len(insts) - 2, len(insts) - 1)
        self.prefix = Trace(insts[:sample_at], {}) if samples_last else None
        self.sample = insts[sample_at]
        block = self.sample.inputs[0]
        consumer, self.loops = SBlockRV(), [LoopRV() for _ in range(n_loops)]
        self.lookup = [Instruction(_kind("GetConsumers"), [block], [], [consumer]),
                       Instruction(_kind("GetLoops"), [consumer], [], self.loops)]
        self.inline = Instruction(_kind("ComputeInline"), [block], [], [])
        self.moves = [Instruction(_kind("ComputeAt"), [block, loop], insts[compute_at].attrs, [])
                      for loop in self.loops]  # the block under each loop of the consumer
        self.sampled_locations = _sampled_locations(insts)

    @classmethod
    def of(cls, mod, trace, new_schedule) -> LocationShortcut | None:
        """The shortcut of `trace` (a sketch of `mod`), None where it does not apply.
        `new_schedule()` gives a fresh schedule of `mod`."""
        insts = list(trace.insts)
        sample_at = next((k for k, inst in enumerate(insts)
                          if inst.kind.name == "SampleComputeLocation"), None)
        if sample_at is None:
            return None
        loop = insts[sample_at].outputs[0]
        users = [k for k, inst in enumerate(insts)
                 if any(_same(x, loop) for x in inst.inputs)]
        if len(users) != 1:
            return None
        compute_at = users[0]
        inst = insts[compute_at]
        if (inst.kind.name != "ComputeAt" or not _same(inst.inputs[1], loop)
                or not _same(inst.inputs[0], insts[sample_at].inputs[0])
                or [int(x) for x in inst.attrs] != [1, -1]):
            return None
        analysis = cls._consumer_loops(insts, sample_at, trace, new_schedule())
        if analysis is None:
            return None
        return cls(insts, sample_at, compute_at, *analysis)

    @staticmethod
    def _consumer_loops(insts, sample_at, trace, sch) -> tuple | None:
        """Whether each loop of the block's single consumer is data-parallel where the location
        is sampled, and where the block is defined; None where the shortcut does not apply."""
        prefix = insts[:sample_at]
        decisions = {inst: value for inst, value in trace.decisions.items()
                     if any(inst.same_as(x) for x in prefix)}
        try:
            Trace(prefix, decisions).apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # noqa: BLE001  (a sketch whose own decisions fail: left alone)
            return None
        applied = list(sch.trace.insts)
        if len(applied) != len(prefix):
            return None
        block = insts[sample_at].inputs[0]
        found = [(k, p) for k, inst in enumerate(prefix)
                 for p, out in enumerate(inst.outputs) if _same(out, block)]
        if len(found) != 1:
            return None
        k, p = found[0]
        consumers = sch.get_consumers(applied[k].outputs[p])
        if len(consumers) != 1:
            return None
        loops = sch.get_loops(consumers[0])
        if not loops or not sch.get_sref(consumers[0]).parent.same_as(sch.get_sref(loops[-1])):
            return None
        kinds = []
        for rv in loops:
            loop = sch.get(rv)
            data_parallel = _is_data_parallel(loop)
            if loop.kind not in PLAIN_LOOP_KINDS or data_parallel is None:
                return None
            kinds.append(data_parallel)
        return tuple(kinds), (k, p)

    def is_original(self, sch) -> bool:
        """Whether `sch` was replayed from the original trace, not the shortcut."""
        return _sampled_locations(sch.trace.insts) == self.sampled_locations

    def measured_state(self, state: tuple, sch) -> tuple:
        """`state` with the location the shortcut applied in `sch` (a `TailShortcut` may have
        drawn another): replayed from the original trace, it gives the same program."""
        if self.prefix is None or self.is_original(sch):
            return state
        insts = sch.trace.insts
        lookup, loops = insts[self.sample_at], insts[self.sample_at + 1].outputs
        location = ROOT
        if len(insts) > self.sample_at + 2:
            placed = insts[self.sample_at + 2]  # else a postproc's, for a block at the root
            kind = placed.kind.name
            if kind in ("ComputeInline", "ComputeAt") and _same(placed.inputs[0],
                                                                lookup.inputs[0]):
                location = INLINE if kind == "ComputeInline" else next(
                    j for j, loop in enumerate(loops) if _same(loop, placed.inputs[1]))
        return (*state[:-1], location)

    def sample_plan(self, trace: Trace) -> TailShortcut | Trace:
        """A fresh sample of `trace` (this sketch, undecided) by the shortcut where it
        applies."""
        if self.prefix is None:
            return trace
        return TailShortcut(self.prefix, trace, self.block_at, self.data_parallel)

    def plan(self, trace: Trace) -> TailShortcut | ShortcutTrace | Trace:
        """`trace` (this sketch with a state) as a shortcut, or itself where its location is
        not decided, or lies beyond the consumer's loops of a sketch that places it before
        its last instructions."""
        decision = trace.decisions.get(self.sample)
        if decision is None:
            return trace
        decision = int(decision)
        insts = list(trace.insts)
        decisions = {inst: value for inst, value in trace.decisions.items()
                     if not inst.same_as(self.sample)}
        if self.prefix is not None:
            return TailShortcut(Trace(insts[: self.sample_at], decisions), trace, self.block_at,
                                self.data_parallel, decision)
        if decision >= len(self.loops):
            return trace
        before = insts[: self.sample_at]
        between = insts[self.sample_at + 1: self.compute_at]
        after = insts[self.compute_at + 1:]
        if decision == ROOT:  # TVM's compute-at at the root does nothing
            shortcut, loops_at = before + between + after, -1
        elif decision == INLINE:
            shortcut, loops_at = before + between + [self.inline] + after, -1
        else:
            shortcut = before + self.lookup + between + [self.moves[decision]] + after
            loops_at = len(before) + 1
        return ShortcutTrace(Trace(shortcut, decisions), trace, decision, loops_at,
                             self.data_parallel)
