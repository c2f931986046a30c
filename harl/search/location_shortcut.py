"""Replaying a decided compute location without TVM re-checking every other location.

Given its decision, TVM's SampleComputeLocation still collects every location its block could go
to (a check-only compute-at under each candidate loop of its consumer) and keeps the decision
only if it is one of them: on the CNN's convs, 5 of the 7 ms that replaying a state takes on one
thread. `LocationShortcut` replays the same schedule another way: GetConsumers, GetLoops of the
consumer and ComputeAt under the decided loop (whose own check is the one TVM runs for each
candidate). TVM's other rules for its candidates (no unit loop, no data-parallel loop inside a
reduction loop) are checked on the consumer's loops afterwards; where TVM would not keep the
decision (it would sample another location), the original trace is replayed instead.

Only the search's scoring replays shortcuts: the candidates it measures are replayed from the
original trace, so a database holds TVM's own form of each trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir.schedule import Instruction, InstructionKind, LoopRV, SBlockRV, Trace
from tvm.tirx import ForKind, IntImm, IterVar
from tvm.tirx.analysis import undefined_vars

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


def _is_kept(decision: int, extents: list[int | None], data_parallel: list[bool]) -> bool:
    """Whether loop `decision` is among TVM's candidate locations (CollectComputeLocation, less
    its legality check): unit loops are skipped, and the candidates end at the first
    data-parallel loop after a reduction loop, or at a reduction loop after the last
    data-parallel one."""
    last_data_parallel = max((j for j, d in enumerate(data_parallel) if d), default=-1)
    inside_reduction = False
    for j in range(decision + 1):
        if extents[j] == 1:
            if j == decision:
                return False
            continue
        if data_parallel[j]:
            if inside_reduction:
                return False
        else:
            inside_reduction = True
            if j > last_data_parallel:
                return False
    return True


@dataclass(frozen=True)
class ShortcutTrace:
    """A trace whose decided compute location is replayed by the shortcut, and the original."""

    trace: Trace
    original: Trace
    decision: int
    loops_at: int  # position of the GetLoops instruction in `trace` (-1: none)
    data_parallel: tuple[bool, ...]

    def replay(self, sch) -> bool:
        """Apply the shortcut to `sch` (fresh); False where TVM would not have kept the
        decision or the location is illegal: `sch` is then spoilt and the original must be
        replayed on a fresh schedule."""
        try:
            self.trace.apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # noqa: BLE001  (TVM would have sampled another location)
            return False
        if self.decision < 0:
            return True
        loops = sch.trace.insts[self.loops_at].outputs
        extents = []
        for loop in loops[: self.decision + 1]:
            extent = sch.get(loop).extent
            extents.append(int(extent) if isinstance(extent, IntImm) else None)
        return _is_kept(self.decision, extents, list(self.data_parallel))


class LocationShortcut:
    """The shortcut for the first SampleComputeLocation of one sketch's trace, where it applies:
    the sampled loop feeds one ComputeAt (preserving unit loops, at the end), and the block has
    one consumer, whose loops are plain and analysable when the location is sampled. No earlier
    location is sampled, so the consumer's loops are the same in every state of the sketch.
    """

    def __init__(self, insts: list, sample_at: int, compute_at: int, n_loops: int,
                 data_parallel: tuple[bool, ...]) -> None:
        self.insts = insts
        self.sample_at, self.compute_at = sample_at, compute_at
        self.data_parallel = data_parallel
        self.sample = insts[sample_at]
        block = self.sample.inputs[0]
        consumer, self.loops = SBlockRV(), [LoopRV() for _ in range(n_loops)]
        self.lookup = [Instruction(_kind("GetConsumers"), [block], [], [consumer]),
                       Instruction(_kind("GetLoops"), [consumer], [], self.loops)]
        self.inline = Instruction(_kind("ComputeInline"), [block], [], [])
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
        return cls(insts, sample_at, compute_at, len(analysis), analysis)

    @staticmethod
    def _consumer_loops(insts, sample_at, trace, sch) -> tuple[bool, ...] | None:
        """Whether each loop of the block's single consumer is data-parallel, where the
        location is sampled; None where the shortcut does not apply."""
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
        return tuple(kinds)

    def is_original(self, sch) -> bool:
        """Whether `sch` was replayed from the original trace, not the shortcut."""
        return _sampled_locations(sch.trace.insts) == self.sampled_locations

    def plan(self, trace: Trace) -> ShortcutTrace | Trace:
        """`trace` (this sketch with a state) as a shortcut, or itself where its location is
        not decided or lies beyond the consumer's loops."""
        decision = trace.decisions.get(self.sample)
        if decision is None or int(decision) >= len(self.loops):
            return trace
        decision = int(decision)
        insts = list(trace.insts)
        decisions = {inst: value for inst, value in trace.decisions.items()
                     if not inst.same_as(self.sample)}
        at, before, between = self.sample_at, insts[: self.sample_at], \
            insts[self.sample_at + 1: self.compute_at]
        after = insts[self.compute_at + 1:]
        if decision == ROOT:  # TVM's compute-at at the root does nothing
            shortcut, loops_at = before + between + after, -1
        elif decision == INLINE:
            shortcut, loops_at = before + between + [self.inline] + after, -1
        else:
            move = Instruction(_kind("ComputeAt"), [self.sample.inputs[0], self.loops[decision]],
                               self.insts[self.compute_at].attrs, [])
            shortcut, loops_at = before + self.lookup + between + [move] + after, at + 1
        return ShortcutTrace(Trace(shortcut, decisions), trace, decision, loops_at,
                             self.data_parallel)
