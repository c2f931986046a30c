"""Pure arithmetic on tuning histories: estimate curves, time to reach a target, seed statistics.

A curve point is (trials measured, tuning seconds, end-to-end estimate in ms). The estimate is
defined only once every task has a measured schedule: before that, history.csv's running estimate
sums the measured tasks only and would look better than it is. Rows with an empty trial column
are TVM's unscheduled nests, measured outside the budget (harl.naive_nests): they count towards a
task's best, not as trials.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CurvePoint:
    trials: int
    seconds: float
    estimate_ms: float


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum of some values (over seeds); n counts them."""

    median: float
    low: float
    high: float
    n: int


def estimate_curve(rows: Iterable[dict], weights: Sequence[float]) -> list[CurvePoint]:
    """Best weighted end-to-end estimate after each row of a history.csv, once complete: a
    nest's row (measured outside the budget) adds a point at the trials counted so far, so a
    run whose nests cover every task untried starts at 0 trials."""
    best = [math.inf] * len(weights)
    curve, trials = [], 0
    for row in rows:
        trials += is_trial(row)
        if row.get("latency_ms"):
            task = int(row["task_id"])
            best[task] = min(best[task], float(row["latency_ms"]))
        if all(math.isfinite(b) for b in best):
            estimate = sum(w * b for w, b in zip(weights, best, strict=True))
            curve.append(CurvePoint(trials, float(row["time_s"]), estimate))
    return curve


def is_trial(row: dict) -> bool:
    """Whether a history.csv row is a trial (not an unscheduled nest's measurement)."""
    return row.get("trial", "1") != ""


def first_reaching(curve: Sequence[CurvePoint], target_ms: float,
                   rel_tol: float = 1e-9) -> CurvePoint | None:
    """The first point whose estimate is at or below `target_ms` (None if never)."""
    for point in curve:
        if point.estimate_ms <= target_ms * (1 + rel_tol):
            return point
    return None


def spread(values: Iterable[float | None]) -> Spread | None:
    """Median / min / max of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return None
    return Spread(statistics.median(present), min(present), max(present), len(present))


def step_values(curve: Sequence[CurvePoint], grid: Sequence[float], by: str) -> list[float]:
    """The curve's estimate at each grid x (`by` = "trials" or "seconds"), NaN before it starts."""
    values, index, current = [], 0, math.nan
    for x in grid:
        while index < len(curve) and getattr(curve[index], by) <= x:
            current = curve[index].estimate_ms
            index += 1
        values.append(current)
    return values


def band(curves: Sequence[Sequence[CurvePoint]], grid: Sequence[float],
         by: str) -> tuple[list[float], list[float], list[float]]:
    """Per grid x: median, min and max over the curves defined there (NaN where none is)."""
    columns = [step_values(curve, grid, by) for curve in curves]
    medians, lows, highs = [], [], []
    for i in range(len(grid)):
        here = [col[i] for col in columns if not math.isnan(col[i])]
        medians.append(statistics.median(here) if here else math.nan)
        lows.append(min(here) if here else math.nan)
        highs.append(max(here) if here else math.nan)
    return medians, lows, highs


@dataclass(frozen=True)
class TrialCost:
    """Mean seconds per measured trial, split by loop stage (from history.csv's batch columns)."""

    wall_s: float
    build_s: float
    run_s: float

    @property
    def search_s(self) -> float:
        """What is left: the strategy's agents or evolutionary search, cost model, scheduler."""
        return self.wall_s - self.build_s - self.run_s


def trial_cost(rows: Sequence[dict]) -> TrialCost | None:
    """Per-trial cost of a run; None for histories written before the batch columns existed."""
    if not rows or not any(row.get("build_s") for row in rows):
        return None

    def total(column: str) -> float:
        return sum(float(row[column]) for row in rows if row.get(column))

    n = sum(is_trial(row) for row in rows)
    return TrialCost(total("batch_wall_s") / n, total("build_s") / n, total("run_s") / n)
