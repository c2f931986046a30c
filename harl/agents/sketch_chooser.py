"""Middle level: spread a task's batch across its design-space sketches.

A bandit over sketches. Every sketch first gets `min_trials` candidates (never starved before it
has been tried); then slots go by softmax over each sketch's value: how close its best measured
latency is to the task's best, lifted where the cost model predicts the sketch holds better
schedules than it has measured (weighed by the model's trust), plus an exploration bonus that
decays with its trials. They go out in lots, so that a batch fills few sketches: filling a
sketch has a fixed search cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SKETCH_METHODS = ("chooser", "uniform")
"""how a batch spreads over a task's sketches: this bandit, or evenly (an ablation arm)"""


@dataclass(frozen=True)
class SketchConfig:
    """Hyperparameters of the sketch chooser."""

    method: str = "chooser"
    """chooser | uniform: slots go by the bandit's values, or evenly over the sketches, the
    least tried first (an ablation arm: what choosing sketches contributes)"""
    min_trials: int = 2
    """candidates each sketch gets before it is judged"""
    temperature: float = 0.15
    """softmax temperature over sketch values (lower: greedier)"""
    exploration: float = 0.5
    """bonus scale for rarely measured sketches (/ sqrt(trials))"""
    prediction_weight: float = 1.0
    """how far a sketch's predicted outlook (see `SketchChooser.predict`) lifts its value above
    its measured quality, times the cost model's trust: two poor samples need not decide a
    sketch the model rates well (0: measured latencies alone)"""
    slots_per_pick: int = 4
    """once every sketch has been tried, a batch's slots go out in lots of this many: each sketch
    a batch fills costs a fixed search (a pool of fresh samples, a trajectory from each of its
    starts) however few candidates it supplies, so a batch spreads over fewer sketches, and
    over batches each still gets its share"""

    def __post_init__(self) -> None:
        if self.method not in SKETCH_METHODS:
            raise ValueError(f"sketch.method must be one of {', '.join(SKETCH_METHODS)}, "
                             f"not {self.method!r}")


class SketchChooser:
    """Learns which sketches of one task deserve the measurements."""

    def __init__(self, n_sketches: int, config: SketchConfig, seed: int = 0) -> None:
        self.config = config
        self.trials = np.zeros(n_sketches, dtype=int)
        self.best_s = np.full(n_sketches, math.inf)
        self.failures = np.zeros(n_sketches, dtype=int)
        self.outlook = np.full(n_sketches, np.nan)
        self.trust = 0.0
        self.rng = np.random.default_rng(seed)

    def quality(self) -> np.ndarray:
        """Each sketch's best measured throughput over the task's best, in [0, 1]."""
        best = self.best_s.min()
        if not math.isfinite(best):
            return np.zeros_like(self.best_s)
        return np.where(np.isfinite(self.best_s), best / self.best_s, 0.0)

    def values(self) -> np.ndarray:
        """Each sketch's measured quality, lifted towards its predicted outlook where that is
        higher, plus its exploration bonus."""
        quality = self.quality()
        headroom = np.nan_to_num(np.maximum(self.outlook - quality, 0.0))
        lift = self.config.prediction_weight * self.trust * headroom
        bonus = self.config.exploration / np.sqrt(np.maximum(self.trials, 1))
        return quality + lift + bonus

    def predict(self, outlook: np.ndarray, trust: float) -> None:
        """The cost model's outlook per sketch: the best quality (throughput over the task's best
        measured) it predicts among the sketch's unmeasured schedules, NaN where it has none, and
        how far the model is trusted, in [0, 1]."""
        self.outlook = np.asarray(outlook, dtype=float)
        self.trust = float(np.clip(trust, 0.0, 1.0))

    def allocate(self, n: int) -> np.ndarray:
        """How many of the next `n` candidates each sketch gets."""
        if self.config.method == "uniform":
            return self._even(n)
        counts = np.zeros(len(self.trials), dtype=int)
        for i in np.argsort(self.trials, kind="stable"):  # untried sketches first
            need = max(0, self.config.min_trials - self.trials[i])
            take = min(need, n - counts.sum())
            counts[i] += take
        remaining = n - counts.sum()
        if remaining > 0:
            logits = self.values() / self.config.temperature
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            lots = -(-remaining // self.config.slots_per_pick)
            for sketch in self.rng.choice(len(probs), size=lots, p=probs):
                counts[sketch] += min(self.config.slots_per_pick, n - counts.sum())
        return counts

    def _even(self, n: int) -> np.ndarray:
        """`n` slots spread evenly, the remainder to the least tried sketches."""
        counts = np.full(len(self.trials), n // len(self.trials), dtype=int)
        order = np.argsort(self.trials + counts, kind="stable")
        counts[order[: n - counts.sum()]] += 1
        return counts

    def update(self, sketch: int, latency_s: float) -> None:
        """One measured candidate of `sketch` (inf when it failed)."""
        self.trials[sketch] += 1
        if math.isfinite(latency_s):
            self.best_s[sketch] = min(self.best_s[sketch], latency_s)
        else:
            self.failures[sketch] += 1
