"""How the tile tuner's trajectories score a sketch's states: by the cost model, or at random
where no model ranks the task yet (the trajectories are then random mutations)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from harl.agents.tile_policy import FEATURE_DIM
from harl.agents.tile_tuner import Evaluation, State
from harl.search.sketch_outlook import Probe

Evaluate = Callable[[list[State]], Evaluation]


def measure_candidate(sch) -> MeasureCandidate:
    """`sch` as MetaSchedule measures (and its cost models score) it."""
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def model_scores(*, schedules_of: Callable[[list[State]], list], score: Callable[[list], object],
                 cache: dict, known: Sequence[Probe] = ()) -> Evaluate:
    """Scores of states by the cost model (`score` of their measure candidates), -inf where
    illegal. `schedules_of` replays states into schedules (None where illegal) and `cache`
    keeps them; within one fill the model does not change, so a state the trajectories come
    back to is scored once, and the `known` probes were scored already this batch."""
    scores: dict[State, float] = {probe.state: probe.score for probe in known}
    features: dict[State, np.ndarray] = {probe.state: probe.features for probe in known
                                         if probe.features is not None}

    def evaluate(states: list[State]) -> Evaluation:
        distinct = list(dict.fromkeys(states))
        new = [state for state in distinct if state not in cache]
        cache.update(zip(new, schedules_of(new), strict=True))
        todo = [state for state in distinct if state not in scores and cache[state] is not None]
        if todo:
            scored = score([measure_candidate(cache[s]) for s in todo])
            for i, state in enumerate(todo):
                scores[state] = float(scored.scores[i])
                if scored.features is not None:
                    features[state] = scored.features[i]
        result = Evaluation(np.full(len(states), -np.inf),
                            np.zeros((len(states), FEATURE_DIM), dtype=np.float32))
        for i, state in enumerate(states):
            if state in scores:
                result.scores[i] = scores[state]
            if state in features:
                result.features[i] = features[state]
        return result
    return evaluate


def random_scores(legal: Evaluate, rng: np.random.Generator) -> Evaluate:
    """Uniform random scores for the states `legal` finds legal (-inf for the others); the
    features stay zero (not extracted)."""

    def evaluate(states: list[State]) -> Evaluation:
        result = legal(states)
        alive = np.isfinite(result.scores)
        result.scores[alive] = rng.uniform(size=int(alive.sum()))
        return result
    return evaluate
