"""Low level: act on a sketch's sampling decisions, guided by a cost model.

A state is the tuple of a trace's tunable decisions: tile factors of each SamplePerfectTile
(their product is the loop extent, the innermost bounded by the instruction's limit) and the
index of each SampleCategorical (unroll depth and the like). An action moves one prime factor
between two levels of a tile, or changes one categorical index, so every state stays legal.

Trajectories start from the best measured states and from fresh samples; each step scores a few
proposed actions with the cost model and follows the best one, or a random one with probability
epsilon. Which decision sites to act on is a learned softmax policy, reinforced by the predicted
improvement its actions bought. Exploration adapts as the task converges: while measurements
keep improving, epsilon and trajectory length shrink (exploit); when they stall, both grow and
more fresh samples are measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Decision = tuple[int, ...] | int
State = tuple[Decision, ...]


@dataclass(frozen=True)
class Site:
    """One tunable sampling decision of a trace."""

    kind: str  # "tile" or "categorical"
    size: int  # tile levels, or number of categories
    max_innermost: int = 0  # tile only: bound on the innermost factor (0: none)


@dataclass(frozen=True)
class TileTunerConfig:
    """Hyperparameters of the tile tuner."""

    proposals_per_step: int = 8
    """actions scored by the cost model at each step of a trajectory"""
    trajectory_length: int = 6
    """steps per trajectory when the task is neither improving nor stalled"""
    epsilon: float = 0.15
    """initial probability of following a random action instead of the best-scored one"""
    epsilon_range: tuple[float, float] = (0.05, 0.5)
    """bounds within which epsilon adapts"""
    fresh_share: float = 0.25
    """initial share of a batch measured from fresh random samples (adapts like epsilon)"""
    policy_lr: float = 0.5
    """learning rate of the site-preference policy"""
    stall_batches: int = 2
    """batches without improvement after which exploration grows"""


def _prime_factors(n: int) -> list[int]:
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return factors


def is_legal(site: Site, decision: Decision, extent: int | None = None) -> bool:
    """A tile keeps its product (when known) and innermost bound; a category is in range."""
    if site.kind == "categorical":
        return isinstance(decision, int) and 0 <= decision < site.size
    factors = tuple(decision)
    if len(factors) != site.size or any(f < 1 for f in factors):
        return False
    if extent is not None and int(np.prod(factors)) != extent:
        return False
    return not (site.max_innermost > 0 and factors[-1] > site.max_innermost)


def propose(site: Site, decision: Decision, rng: np.random.Generator) -> Decision | None:
    """A random legal neighbour of `decision`, or None if the site has none."""
    if site.kind == "categorical":
        if site.size < 2:
            return None
        choice = int(rng.integers(site.size - 1))
        return choice if choice < decision else choice + 1
    factors = list(decision)
    sources = [i for i, f in enumerate(factors) if f > 1]
    if not sources or len(factors) < 2:
        return None
    for _ in range(8):
        src = int(rng.choice(sources))
        dst = int(rng.choice([i for i in range(len(factors)) if i != src]))
        prime = int(rng.choice(_prime_factors(factors[src])))
        moved = factors.copy()
        moved[src] //= prime
        moved[dst] *= prime
        if is_legal(site, tuple(moved)):
            return tuple(moved)
    return None


class TileTuner:
    """Cost-model-guided trajectories over decisions, with adaptive exploration."""

    def __init__(self, sites: Sequence[Site], config: TileTunerConfig, seed: int = 0) -> None:
        self.sites = list(sites)
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.site_logits = np.zeros(len(self.sites))
        self.epsilon = config.epsilon
        self.fresh_share = config.fresh_share
        self.trajectory_length = config.trajectory_length
        self.best_measured = np.inf
        self.stalled_batches = 0

    def site_probs(self) -> np.ndarray:
        logits = self.site_logits - self.site_logits.max()
        probs = np.exp(logits)
        return probs / probs.sum()

    def neighbour(self, state: State) -> tuple[int, State] | None:
        """Sample a site from the policy and a legal action on it."""
        if not self.sites:
            return None
        for _ in range(4):
            site_index = int(self.rng.choice(len(self.sites), p=self.site_probs()))
            moved = propose(self.sites[site_index], state[site_index], self.rng)
            if moved is not None:
                new_state = list(state)
                new_state[site_index] = moved
                return site_index, tuple(new_state)
        return None

    def search(self, starts: Sequence[State], score: Callable[[list[State]], np.ndarray]
               ) -> dict[State, float]:
        """Run one trajectory from each start; return every visited state with its score."""
        visited: dict[State, float] = {}
        start_scores = score(list(starts)) if starts else np.array([])
        for state, value in zip(starts, start_scores, strict=True):
            visited[state] = float(value)
        for state, value in zip(starts, start_scores, strict=True):
            current, current_score = state, float(value)
            for _ in range(self.trajectory_length):
                moves = [m for m in (self.neighbour(current)
                                     for _ in range(self.config.proposals_per_step)) if m]
                if not moves:
                    break
                scores = score([s for _, s in moves])
                for (site_index, new_state), new_score in zip(moves, scores, strict=True):
                    visited[new_state] = float(new_score)
                    self._reinforce(site_index, float(new_score) - current_score)
                pick = (int(self.rng.integers(len(moves))) if self.rng.random() < self.epsilon
                        else int(np.argmax(scores)))
                current, current_score = moves[pick][1], float(scores[pick])
        return visited

    def _reinforce(self, site_index: int, advantage: float) -> None:
        """Policy-gradient step on the softmax over sites (advantage = score change)."""
        probs = self.site_probs()
        grad = -probs
        grad[site_index] += 1.0
        self.site_logits += self.config.policy_lr * float(np.tanh(advantage)) * grad

    def observe_batch(self, best_latency_s: float) -> None:
        """Adapt exploration to whether the last measured batch improved the task."""
        low, high = self.config.epsilon_range
        if best_latency_s < self.best_measured * (1 - 1e-3):
            self.best_measured = best_latency_s
            self.stalled_batches = 0
            self.epsilon = max(low, self.epsilon * 0.8)
            self.fresh_share = max(low, self.fresh_share * 0.8)
            self.trajectory_length = max(2, self.trajectory_length - 1)
        else:
            self.stalled_batches += 1
            if self.stalled_batches >= self.config.stall_batches:
                self.epsilon = min(high, self.epsilon * 1.5)
                self.fresh_share = min(high, self.fresh_share * 1.5)
                self.trajectory_length = min(3 * self.config.trajectory_length,
                                             self.trajectory_length + 2)
