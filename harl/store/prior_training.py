"""Train a cost model on measured workloads as MetaSchedule trains its XGBModel, and judge it on
workloads it was not trained on."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from harl.agents.model_trust import rank_correlation
from harl.store.rows import MeasuredWorkload
from harl.tvm_adapter import xgb_predict, xgb_train, xgb_trainer

MIN_HELD_OUT = 8
"""workloads with fewer measured records are trained on but not judged"""


def train(workloads: list[MeasuredWorkload]):
    """TVM's XGBModel (Python side) trained on the workloads' records: features per store,
    labels best latency / latency per workload."""
    model = xgb_trainer(num_warmup_samples=0, verbose_eval=10**9)
    xgb_train(model, [x for w in workloads for x in w.features],
              np.concatenate([w.labels() for w in workloads]))
    return model


def fold_of(workloads: list[MeasuredWorkload], folds: int) -> dict[str, int]:
    """Each source's fold: sources round-robin over `folds` folds, or, with one source, each
    workload's (keyed by source + name) so that one model's tasks judge each other."""
    sources = sorted({w.source for w in workloads})
    if len(sources) > 1:
        return {source: i % folds for i, source in enumerate(sources)}
    names = sorted({w.name for w in workloads})
    return {f"{sources[0]}/{name}": i % folds for i, name in enumerate(names)}


def held_out_rhos(workloads: list[MeasuredWorkload], *, folds: int = 4,
                  others: dict[str, Callable] | None = None) -> dict[str, list[float]]:
    """Rank correlations, per judged workload, of a model trained without the workload's fold
    (nor any copy of its workloads from other sources) with the measured throughputs: under
    "trained", and under each name of `others` (models that never saw these workloads, each a
    function from feature matrices to scores) on the same workloads."""
    assignment = fold_of(workloads, folds)

    def fold(w: MeasuredWorkload) -> int:
        return assignment.get(w.source, assignment.get(f"{w.source}/{w.name}", 0))

    rhos: dict[str, list[float]] = {"trained": [], **{name: [] for name in others or {}}}
    for index in sorted(set(assignment.values())):
        held = [w for w in workloads if fold(w) == index]
        held_names = {w.name for w in held}
        rest = [w for w in workloads if w.name not in held_names]
        judged = [w for w in held if len(w.features) >= MIN_HELD_OUT]
        if not rest or not judged:
            continue
        model = train(rest)
        for w in judged:
            rhos["trained"].append(rank_correlation(xgb_predict(model, w.features),
                                                    w.throughputs()))
            for name, predict in (others or {}).items():
                rhos[name].append(rank_correlation(predict(w.features), w.throughputs()))
    return rhos


def median_or_none(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None
