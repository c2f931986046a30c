"""The cost model's outlook of each measured sketch, for the sketch chooser.

A sketch's outlook is the quality (`SketchChooser.quality`) of the best measured schedule of its
kind plus the margin by which the best of a few fresh samples of the sketch outscores that
schedule, all scored in one call of the model (its scores are throughputs relative to the task's
best, the chooser's scale). The kinds are TVM's sketches and their serial variants: the prior was
trained on one thread, so it cannot know what waking the thread pool costs (on the MLP it pulled
batches to serial variants that then lost), and within a kind such a bias cancels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harl.agents.tile_tuner import State


@dataclass(frozen=True)
class Probe:
    """A fresh sample scored for the outlook; the pool of a sketch the batch fills reuses it
    (the model is the same until the batch is measured)."""

    state: State
    schedule: object
    score: float
    features: np.ndarray | None


def sketch_outlook(sketches: list, measured: list[int], quality: np.ndarray, *, replay, score,
                   is_measured, samples: int) -> tuple[np.ndarray, dict[int, list[Probe]]]:
    """Each sketch's outlook (NaN where it has none: not in `measured`, or nothing left to
    sample), clipped to [0, 2], and the probes scored per sketch.

    `score(schedules)` is the cost model's Evaluation of schedules; `is_measured(schedule)`
    tells the programs measured before, which are not probes; a deterministic sketch gets one
    sample, the others `samples`.
    """
    outlook = np.full(len(sketches), np.nan)
    references: dict[bool, int] = {}  # kind (serial) -> its sketch with the best measured
    for kind in {sketches[i].serial for i in measured}:
        references[kind] = min((i for i in measured if sketches[i].serial == kind),
                               key=lambda i: sketches[i].elites[0][0])
    drawn = []  # (sketch, state, schedule); state None: its kind's reference
    for sketch_id in references.values():
        best = replay.states(sketches[sketch_id], [sketches[sketch_id].elites[0][1]])[0]
        if best is not None:
            drawn.append((sketch_id, None, best))
    for sketch_id in measured:
        sketch = sketches[sketch_id]
        count = 1 if sketch.deterministic else samples
        drawn += [(sketch_id, state, sch) for state, sch in replay.fresh(sketch, count)
                  if not is_measured(sch)]
    if all(state is None for _, state, _ in drawn):  # no fresh sample to judge
        return outlook, {}
    scored = score([sch for _, _, sch in drawn])
    reference_score = {sketches[sketch_id].serial: float(scored.scores[i])
                       for i, (sketch_id, state, _) in enumerate(drawn) if state is None}
    probes: dict[int, list[Probe]] = {}
    for i, (sketch_id, state, sch) in enumerate(drawn):
        kind = sketches[sketch_id].serial
        if state is None or kind not in reference_score:
            continue
        probe = Probe(state, sch, float(scored.scores[i]),
                      scored.features[i] if scored.features is not None else None)
        predicted = quality[references[kind]] + probe.score - reference_score[kind]
        outlook[sketch_id] = np.nanmax([outlook[sketch_id], predicted])
        probes.setdefault(sketch_id, []).append(probe)
    return np.clip(outlook, 0.0, 2.0), probes
