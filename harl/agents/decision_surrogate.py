"""A cheap stand-in for the cost model on a sketch's decisions, to screen moves before scoring.

Scoring a state costs TVM a replay with its postprocs and a `PerStoreFeature` extraction (about
5 ms for a conv on this project's machines); the state itself is a short vector of decisions. A
small tree model, fit on the states the cost model has already scored in the same sketch, ranks
a trajectory's proposed moves, and only the best few are replayed and scored. States the replay
found illegal are learned too, as the worst scores, so moves into illegal regions are screened out
before they cost a replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harl.agents.model_trust import rank_correlation


@dataclass(frozen=True)
class SurrogateConfig:
    """Hyperparameters of the decision surrogate."""

    proposed: int = 16
    """moves proposed per trajectory and step once the surrogate screens them"""
    keep: int = 4
    """of those, the surrogate's best that the cost model scores; 0: no screening (the tuner
    proposes and scores `TileTunerConfig.proposals_per_step` moves)"""
    min_samples: int = 48
    """scored states of the sketch before the surrogate screens (a fill's pool of fresh samples
    alone is enough)"""
    window: int = 768
    """latest distinct scored states the surrogate is fit on: the cost model retrains during the
    run, so old scores age"""
    min_trust: float = 0.5
    """rank correlation its predictions must have reached on the sketch's latest pool of fresh
    samples (predicted before it learned from them) for the surrogate to screen; below it, or
    before it was judged, every proposal is scored"""
    trees: int = 16
    """boosted trees per fit"""
    depth: int = 4
    """depth of each tree"""


class DecisionSurrogate:
    """Boosted trees from a sketch's encoded decisions to the cost model's scores."""

    def __init__(self, site_kinds: Sequence[str], config: SurrogateConfig, seed: int = 0) -> None:
        self.site_kinds = list(site_kinds)
        self.config = config
        self.seed = seed
        self.rows: dict[tuple, tuple[np.ndarray, float]] = {}  # state -> (encoding, score)
        self.booster = None
        self.checks: list[tuple[float, float]] = []  # (predicted, scored) of screened moves
        self.trust: float | None = None

    def encode(self, states: Sequence[tuple]) -> np.ndarray:
        """One row per state: log2 of every tile factor, the index or value of every choice."""
        rows = []
        for state in states:
            row: list[float] = []
            for kind, decision in zip(self.site_kinds, state, strict=True):
                if kind == "tile":
                    row.extend(np.log2(np.asarray(decision, dtype=float)))
                else:
                    row.append(float(decision))
            rows.append(row)
        return np.asarray(rows, dtype=np.float32)

    def observe(self, states: Sequence[tuple], scores: Sequence[float]) -> None:
        """States the cost model scored (-inf: illegal). A state seen again keeps one row, with
        its latest score (a pool's best come back as trajectory starts, and trajectories revisit
        states): each state weighs alike in the fit, and the window holds distinct states."""
        if not states or not self.site_kinds:
            return
        for state, row, score in zip(states, self.encode(states), scores, strict=True):
            self.rows.pop(state, None)
            self.rows[state] = (row, float(score))
        for state in list(self.rows)[: max(0, len(self.rows) - self.config.window)]:
            del self.rows[state]

    def judge(self, states: Sequence[tuple], scores: Sequence[float]) -> None:
        """Its trust: how its predictions rank `states`, which it has not learned from, against
        the cost model's `scores` (a pool of fresh samples: a random, unscreened draw)."""
        scores = np.asarray(scores, dtype=float)
        legal = np.isfinite(scores)
        if self.booster is None or legal.sum() < 8:
            return
        predicted = self.predict([state for state, ok in zip(states, legal, strict=True) if ok])
        self.trust = rank_correlation(predicted, scores[legal])

    @property
    def trusted(self) -> bool:
        return self.trust is not None and self.trust >= self.config.min_trust

    def fit(self) -> bool:
        """Refit on the window; False (and no screening) while too few states were scored."""
        if self.config.keep <= 0 or len(self.rows) < self.config.min_samples:
            self.booster = None
            return False
        import xgboost as xgb

        targets = np.asarray([score for _, score in self.rows.values()], dtype=float)
        legal = np.isfinite(targets)
        if legal.sum() < 2:
            self.booster = None
            return False
        low, spread = targets[legal].min(), targets[legal].std()
        targets = np.where(legal, targets, low - max(spread, 1e-6))  # illegal: below all
        params = {"max_depth": self.config.depth, "eta": 0.3, "nthread": 2, "verbosity": 0,
                  "seed": self.seed, "objective": "reg:squarederror", "tree_method": "hist"}
        data = xgb.DMatrix(np.stack([row for row, _ in self.rows.values()]), label=targets)
        self.booster = xgb.train(params, data, self.config.trees)
        return True

    def predict(self, states: Sequence[tuple]) -> np.ndarray:
        return np.asarray(self.booster.inplace_predict(self.encode(states)), dtype=float)

    def check(self, predicted: Sequence[float], scored: Sequence[float]) -> None:
        """How the screened moves the cost model then scored compare with their predictions."""
        self.checks.extend((p, s) for p, s in zip(predicted, scored, strict=True)
                           if np.isfinite(s))

    def take_metrics(self) -> dict[str, float]:
        """Its trust, and the rank correlation of prediction and score over the moves checked
        since the last call (screened moves only, so a narrower range than a pool's)."""
        metrics = {} if self.trust is None else {"surrogate_trust": float(self.trust)}
        if len(self.checks) >= 3:
            predicted, scored = map(np.asarray, zip(*self.checks, strict=True))
            metrics["surrogate_rho"] = rank_correlation(predicted, scored)
        self.checks = []
        return metrics
