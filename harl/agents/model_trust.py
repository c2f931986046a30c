"""How far the cost model's ranking can be trusted, judged on what was actually measured.

Every measured candidate leaves a pair: the score the cost model gave it before measurement and its
measured throughput (0 when it failed). The trust is the rank correlation of the recent pairs,
clipped at 0. The search spends its batch on the model's favourites in proportion to that trust and
measures fresh random samples with the rest: early on, and on tasks the model has not learned yet,
a few broad samples find better basins than a local search steered by a model that ranks at random.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.stats import spearmanr


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); 0 when either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size and (x.min() == x.max() or y.min() == y.max()):
        return 0.0
    return float(spearmanr(x, y).statistic)


class ModelTrust:
    """Rank correlation of predicted scores and measured throughputs over a sliding window."""

    def __init__(self, window: int, min_pairs: int = 4) -> None:
        self.pairs: deque[tuple[float, float]] = deque(maxlen=window)
        self.min_pairs = min_pairs

    def add(self, predicted_score: float, latency_s: float) -> None:
        """One measured candidate (latency inf when it failed)."""
        throughput = 1.0 / latency_s if np.isfinite(latency_s) and latency_s > 0 else 0.0
        self.pairs.append((float(predicted_score), throughput))

    @property
    def judged(self) -> bool:
        """Whether enough candidates were measured to judge the model on this task."""
        return len(self.pairs) >= self.min_pairs

    @property
    def value(self) -> float:
        """In [0, 1]; 0 until `min_pairs` candidates were measured."""
        if not self.judged:
            return 0.0
        predicted, measured = np.array(self.pairs).T
        return max(0.0, rank_correlation(predicted, measured))


class TrustBoard:
    """Every task's ModelTrust, and what a task not yet judged can borrow from the others.

    The cost model is shared by the tasks, so how well it ranks the tasks it has been measured on
    is the best guess for a task it has not (the subgraphs of one model are much alike). A task
    needs `min_pairs` measured predictions to be judged alone, but two already tell whether the
    model ordered them right, so the prior pools every such comparison of the other tasks: the
    first batches of a model with many tasks are screened by the model once it has proved itself
    on a few of them.
    """

    def __init__(self, window: int, min_pairs: int = 4, min_comparisons: int = 6) -> None:
        self.window, self.min_pairs = window, min_pairs
        self.min_comparisons = min_comparisons
        self.tasks: dict[int, ModelTrust] = {}

    def task(self, task_id: int) -> ModelTrust:
        """A fresh trust for the task, whose tuning starts."""
        self.tasks[task_id] = ModelTrust(self.window, self.min_pairs)
        return self.tasks[task_id]

    def prior(self, task_id: int) -> float | None:
        """The model's rank correlation judged on the other tasks' measured predictions.

        Kendall's tau over the pairs of candidates within each other task (never across tasks:
        their throughputs are not comparable), mapped to the scale of Spearman's rho that
        ModelTrust uses (Greiner's relation, sin(pi tau / 2)), clipped at 0. None with fewer than
        `min_comparisons` ordered pairs.
        """
        concordant = discordant = 0
        for other, trust in self.tasks.items():
            if other == task_id or len(trust.pairs) < 2:
                continue
            predicted, measured = np.array(trust.pairs).T
            signs = (np.sign(predicted[:, None] - predicted[None, :])
                     * np.sign(measured[:, None] - measured[None, :]))
            concordant += int((signs > 0).sum()) // 2
            discordant += int((signs < 0).sum()) // 2
        if concordant + discordant < self.min_comparisons:
            return None
        tau = (concordant - discordant) / (concordant + discordant)
        return max(0.0, float(np.sin(np.pi * tau / 2)))
