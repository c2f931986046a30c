"""The sketch chooser and tile tuner plugged into MetaSchedule as a search strategy."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy
from tvm.s_tir.schedule import Trace

from harl.agents.sketch_chooser import SketchChooser, SketchConfig
from harl.agents.tile_tuner import Site, State, TileTuner, TileTunerConfig
from harl.report.history import trial_latency_s

TUNABLE_KINDS = {"SamplePerfectTile": "tile", "SampleCategorical": "categorical"}


@dataclass(frozen=True)
class HarlSearchConfig:
    """Hyperparameters of the per-task search (middle and low levels)."""

    sketch: SketchConfig = field(default_factory=SketchConfig)
    tile: TileTunerConfig = field(default_factory=TileTunerConfig)
    elites_per_sketch: int = 4
    """best measured states each sketch keeps as trajectory starts"""
    fresh_samples: int = 4
    """fresh random samples drawn per sketch and batch as trajectory starts"""


def tunable_insts(trace) -> list:
    return [inst for inst in trace.insts if inst.kind.name in TUNABLE_KINDS]


def site_of(inst) -> Site:
    kind = TUNABLE_KINDS[inst.kind.name]
    if kind == "tile":
        return Site("tile", int(inst.attrs[0]), int(inst.attrs[1]))
    return Site("categorical", len(inst.attrs[0]))


def state_of(trace) -> State:
    decisions = []
    for inst in tunable_insts(trace):
        value = trace.decisions[inst]
        decisions.append(tuple(int(v) for v in value) if TUNABLE_KINDS[inst.kind.name] == "tile"
                         else int(value))
    return tuple(decisions)


@dataclass
class Sketch:
    """One design space: its trace, the tuner of its decisions, and its best measured states."""

    trace: object
    tuner: TileTuner
    elites: list[tuple[float, State]] = field(default_factory=list)


@derived_object
class HarlSearchStrategy(PySearchStrategy):
    """Each batch: the chooser splits slots across sketches; the tuner fills each sketch's share."""

    def __init__(self, config: HarlSearchConfig | None = None, seed: int = 0) -> None:
        super().__init__()
        self.config = config or HarlSearchConfig()
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def _initialize_with_tune_context(self, context) -> None:
        self.mod = context.mod
        self.postprocs = list(context.space_generator.postprocs)
        self.context = context

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database,
                   cost_model) -> None:
        self.max_trials, self.batch_size = int(max_trials), int(num_trials_per_iter)
        self.cost_model = cost_model
        self.trials = 0
        self.measured: set[int] = set()
        self.pending: list[tuple[int, State]] = []
        self.sketches = []
        for index, space in enumerate(design_spaces):
            trace = space.trace.simplified(remove_postproc=True)
            sites = [site_of(inst) for inst in tunable_insts(trace)]
            tuner = TileTuner(sites, self.config.tile, seed=self.seed * 1009 + index)
            self.sketches.append(Sketch(trace, tuner))
        self.chooser = SketchChooser(len(self.sketches), self.config.sketch, seed=self.seed)

    def post_tuning(self) -> None:
        self.pending = []

    def clone(self):
        return HarlSearchStrategy(self.config, self.seed)

    # -- candidates -------------------------------------------------------------------------

    def _materialize(self, sketch_id: int, state: State | None):
        """Schedule for `state` (None: a fresh random sample) after postprocs, or None."""
        sketch = self.sketches[sketch_id]
        if state is None:
            trace = Trace(sketch.trace.insts, {})
        else:
            trace = sketch.trace
            for inst, decision in zip(tunable_insts(trace), state, strict=True):
                trace = trace.with_decision(inst, decision, remove_postproc=True)
        sch = Schedule(self.mod, seed=int(self.rng.integers(1 << 30)), debug_mask=0)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
            if not all(postproc.apply(sch) for postproc in self.postprocs):
                return None
        except Exception:  # noqa: BLE001  (an illegal schedule is just a dead end)
            return None
        return sch

    def _scorer(self, sketch_id: int, cache: dict):
        def score(states: list[State]) -> np.ndarray:
            scores = np.full(len(states), -np.inf)
            todo = []
            for i, state in enumerate(states):
                if state not in cache:
                    cache[state] = self._materialize(sketch_id, state)
                if cache[state] is not None:
                    todo.append(i)
            if todo:
                candidates = [self._candidate(cache[states[i]]) for i in todo]
                scores[todo] = self.cost_model.predict(self.context, candidates)
            return scores
        return score

    @staticmethod
    def _candidate(sch) -> MeasureCandidate:
        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _fill_sketch(self, sketch_id: int, count: int) -> list[tuple[int, State, object]]:
        sketch = self.sketches[sketch_id]
        cache: dict[State, object] = {}
        fresh: list[State] = []
        for _ in range(self.config.fresh_samples + count):
            sch = self._materialize(sketch_id, None)
            if sch is not None:
                state = state_of(sch.trace)
                cache.setdefault(state, sch)
                fresh.append(state)
        elites = [state for _, state in sketch.elites]
        starts = list(dict.fromkeys(elites + fresh[: self.config.fresh_samples]))
        visited = sketch.tuner.search(starts, self._scorer(sketch_id, cache))
        n_fresh = count if not elites else int(round(count * sketch.tuner.fresh_share))
        picks: list[tuple[int, State, object]] = []
        ranked = [s for s, v in sorted(visited.items(), key=lambda kv: -kv[1]) if v > -np.inf]
        for state in fresh[:n_fresh] + ranked + fresh[n_fresh:]:
            if len(picks) >= count:
                break
            sch = cache.get(state)
            if sch is None:
                continue
            key = tvm_ffi.structural_hash(sch.mod)
            if key in self.measured:
                continue
            self.measured.add(key)
            picks.append((sketch_id, state_of(sch.trace), sch))
        return picks

    def generate_measure_candidates(self):
        remaining = self.max_trials - self.trials
        if remaining <= 0 or not self.sketches:
            return None
        counts = self.chooser.allocate(min(self.batch_size, remaining))
        picks = []
        for sketch_id, count in enumerate(counts):
            if count > 0:
                picks.extend(self._fill_sketch(sketch_id, int(count)))
        if not picks:
            return None
        self.pending = [(sketch_id, state) for sketch_id, state, _ in picks]
        return [self._candidate(sch) for _, _, sch in picks]

    def notify_runner_results(self, measure_candidates, results) -> None:
        best_per_sketch: dict[int, float] = {}
        for (sketch_id, state), result in zip(self.pending, results, strict=True):
            latency, _ = trial_latency_s(None, result)
            self.chooser.update(sketch_id, latency)
            sketch = self.sketches[sketch_id]
            if math.isfinite(latency):
                sketch.elites = sorted(sketch.elites + [(latency, state)])[
                    : self.config.elites_per_sketch]
            best_per_sketch[sketch_id] = min(best_per_sketch.get(sketch_id, math.inf), latency)
        for sketch_id, best in best_per_sketch.items():
            self.sketches[sketch_id].tuner.observe_batch(best)
        self.trials += len(self.pending)
        self.pending = []
