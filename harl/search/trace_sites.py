"""The tunable decisions of a sketch's trace, as the tile tuner sees them, and back.

Sites: SamplePerfectTile (factors), SampleCategorical (index), SampleComputeLocation (loop index)
and the parallel extent a sketch annotates (`meta_schedule.parallel`, what MetaSchedule's
MutateParallel changes). Everything else in the trace stays as the design space made it.

Replaying traces is most of a search's time; `schedules_of` spreads it over threads (TVM's calls
release the GIL), as MetaSchedule's evolutionary search does. The threads share the task's module,
whose statements are held (`FreshSchedules`) so that a schedule copies what it changes of it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cache, lru_cache

from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Instruction, Trace
from tvm.tirx import IntImm

from harl import tvm_adapter
from harl.agents.tile_tuner import Site, State
from harl.search.location_shortcut import Shortcut

PARALLEL_ANN = "meta_schedule.parallel"
SAMPLED_KINDS = {"SamplePerfectTile": "tile", "SampleCategorical": "categorical",
                 "SampleComputeLocation": "compute_location"}


def site_kind(inst) -> str | None:
    """The tuner's kind of site for `inst`, None if it is not tunable."""
    name = inst.kind.name
    if name in SAMPLED_KINDS:
        return SAMPLED_KINDS[name]
    if name == "Annotate" and str(inst.attrs[0]) == PARALLEL_ANN:
        return "parallel"
    return None


def serial_variant(trace) -> Trace | None:
    """`trace` without its parallel annotation: the same schedule on one thread (None when it has
    none). MetaSchedule's CPU rules always annotate one, and its postproc then parallelises at
    least the outermost loop whatever the extent, so no schedule of its space is serial."""
    insts = [inst for inst in trace.insts if site_kind(inst) != "parallel"]
    if len(insts) == len(trace.insts):
        return None
    return Trace(insts, {inst: value for inst, value in trace.decisions.items()
                         if site_kind(inst) != "parallel"})


def all_samples_are_sites(trace) -> bool:
    """Whether a state of `trace` decides every sample it draws (no other kind of sampling
    instruction is left to the seed)."""
    return all(inst.kind.name in SAMPLED_KINDS for inst in trace.insts
               if inst.kind.name.startswith("Sample"))


def tunable_insts(trace) -> list:
    return [inst for inst in trace.insts if site_kind(inst) is not None]


def site_of(inst) -> Site:
    kind = site_kind(inst)
    if kind == "tile":
        return Site("tile", int(inst.attrs[0]), int(inst.attrs[1]))
    if kind == "categorical":
        return Site("categorical", len(inst.attrs[0]))
    return Site(kind, 0)


def parallel_options(max_extent: int) -> list[int]:
    """Parallel extents worth trying: powers of two up to the sketch's, and the sketch's own."""
    options, value = [], 1
    while value < max_extent:
        options.append(value)
        value *= 2
    return [*options, max_extent]


def initial_options(trace) -> list[list[int]]:
    """Known options of each choice site (empty for tiles and categories)."""
    options = []
    for inst in tunable_insts(trace):
        kind = site_kind(inst)
        if kind == "parallel":
            options.append(parallel_options(int(inst.inputs[1])))
        elif kind == "compute_location" and inst in trace.decisions:
            options.append([int(trace.decisions[inst])])
        else:
            options.append([])
    return options


def state_of(trace) -> State:
    """The decisions of `trace` (after it ran: sampled values are in its decisions)."""
    decisions = []
    for inst in tunable_insts(trace):
        kind = site_kind(inst)
        if kind == "parallel":
            decisions.append(int(inst.inputs[1]))
        elif kind == "tile":
            decisions.append(tuple(int(v) for v in trace.decisions[inst]))
        else:
            decisions.append(int(trace.decisions[inst]))
    return tuple(decisions)


def with_state(trace, state: State | None) -> Trace:
    """`trace` with its decisions set to `state` (None: every decision left to sampling)."""
    if state is None:
        return Trace(trace.insts, {})
    insts = list(trace.insts)
    decisions = {inst: value for inst, value in trace.decisions.items()}
    tunables = tunable_insts(trace)
    for inst, decision in zip(tunables, state, strict=True):
        if site_kind(inst) == "parallel":
            index = next(i for i, x in enumerate(insts) if x.same_as(inst))
            insts[index] = Instruction(inst.kind, [inst.inputs[0],
                                                   IntImm("int32", int(decision))],
                                       inst.attrs, inst.outputs)
        else:
            decisions[inst] = list(decision) if isinstance(decision, tuple) else int(decision)
    return Trace(insts, decisions)


def structure_of(insts) -> list[tuple]:
    """Per instruction: its kind, attributes and which earlier output each input is.

    Two traces of one sketch share it whatever their decisions; sketches whose instruction kinds
    agree (e.g. a cache write attached at different loops) differ in it. Constant inputs are left
    out: the parallel extent is one, and harl tunes it.
    """
    producer: dict = {}
    structure = []
    for index, inst in enumerate(insts):
        inputs = tuple(producer.get(x, "const") for x in inst.inputs)
        structure.append((inst.kind.name, str(list(inst.attrs)), inputs))
        for position, output in enumerate(inst.outputs):
            producer[output] = (index, position)
    return structure


class FreshSchedules:
    """Unscheduled schedules of one module, copied from a prepared one: a copy costs 0.016 ms
    where a new Schedule costs 0.55 ms (the CNN's convs), paid for every replayed state.

    TVM's `copy()` advances the source's random state, so copies are taken under a lock; each
    is then seeded, which makes it the Schedule that `Schedule(mod, seed=...)` would be. The
    module's statements are held meanwhile, or TVM would write some of them in place (see
    `tvm_adapter.pinned_statements`).
    """

    def __init__(self, mod) -> None:
        self._pinned = tvm_adapter.pinned_statements(mod)
        # errors are dropped, not rendered
        self._source = Schedule(mod, seed=1, debug_mask=0, error_render_level="none")
        self._lock = threading.Lock()

    def new(self, seed: int):
        with self._lock:
            sch = self._source.copy()
        tvm_adapter.seed(sch, max(1, seed))  # TVM takes seeds from 1 (0 raises)
        return sch


@lru_cache(maxsize=64)
def fresh_schedules(mod) -> FreshSchedules:
    """The source of `mod`'s schedules (modules compare and hash by identity)."""
    return FreshSchedules(mod)


def replayed(mod, trace: Trace | Shortcut, seed: int):
    """A new schedule of `mod` with `trace` applied (undecided samples drawn with `seed`); a
    shortcut that does not apply falls back to its original trace."""
    if isinstance(trace, Shortcut):
        sch = fresh_schedules(mod).new(seed)
        if trace.replay(sch, seed):
            return sch
        trace = trace.original
    sch = fresh_schedules(mod).new(seed)
    trace.apply_to_schedule(sch, remove_postproc=True)
    return sch


def schedule_of(mod, trace: Trace | Shortcut, postprocs, seed: int):
    """`trace` applied to `mod` (undecided samples drawn with `seed`), then the postprocs; None
    when it is illegal or a postproc rejects it."""
    try:
        sch = replayed(mod, trace, seed)
        if not all(postproc.apply(sch) for postproc in postprocs):
            return None
    except Exception:  # noqa: BLE001  (an illegal schedule is just a dead end)
        return None
    return sch


@cache
def _thread_pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size for the whole run: the search calls for a few states at a time."""
    return ThreadPoolExecutor(workers, thread_name_prefix="harl-replay")


def schedules_of(mod, traces, postprocs, seeds, *, workers: int = 1) -> list:
    """`schedule_of` for each trace with its seed, on up to `workers` threads; the results are
    those of the serial loop, in order (each schedule's randomness comes from its own seed)."""
    traces, seeds = list(traces), list(seeds)
    if len(traces) != len(seeds):
        raise ValueError(f"{len(traces)} traces but {len(seeds)} seeds")
    return on_threads(lambda t, s: schedule_of(mod, t, postprocs, s), traces, seeds,
                      workers=workers)


def on_threads(work, *columns, workers: int = 1) -> list:
    """`work` on each row of the columns, on up to `workers` threads, results in order (TVM's
    schedule calls release the GIL)."""
    if workers <= 1 or len(columns[0]) <= 1:
        return list(map(work, *columns))
    return list(_thread_pool(workers).map(work, *columns))
