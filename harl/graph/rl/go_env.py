"""GO's environment over a rewrite graph: one step is one pass.

A pass takes a take/skip for every current match (an `Observation`'s actions, in order) and
applies the taken ones one by one in that order. After each rewrite the new graph's matches are
listed again and the next taken match is found by its label; a taken match that is gone (an
earlier rewrite consumed or changed what it bound) or whose rewrite fails is skipped. The graph
is then priced once, and the reward is X-RLflow's scale of the cost drop: 100 x (previous cost -
new cost) / initial cost. A graph without a finite cost leaves the graph as it was (reward 0).

An episode ends when a pass takes nothing, when no match is left, after `passes` passes, or
where `affordable` says a new graph may not be priced (that pass is not applied, reward 0).
The env keeps the cheapest graph priced in any episode, with the passes that made it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harl.graph.rl.env import REWARD_SCALE, Observation, RewriteGraph
from harl.graph.search.common import cheaper


@dataclass(frozen=True)
class GoBest:
    """The cheapest graph priced in any episode, and the passes that made it."""

    graph: RewriteGraph
    cost: float
    passes: tuple[tuple[str, ...], ...] = ()
    """the rewrites (labels) each pass applied, in order"""
    pass_costs: tuple[float, ...] = ()
    """the cost after each pass"""

    @property
    def applied(self) -> list[str]:
        """Every rewrite of every pass, in order."""
        return [label for labels in self.passes for label in labels]


@dataclass(frozen=True)
class PassResult:
    """What applying one pass's taken matches did."""

    graph: RewriteGraph
    applied: tuple[str, ...]
    skipped: int
    """taken matches gone by their turn (an earlier rewrite of the pass changed them)"""
    failed: int
    """taken matches whose rewrite failed"""


def apply_pass(graph: RewriteGraph, actions: Sequence, take: np.ndarray) -> PassResult:
    """`graph` with the taken `actions` (its own, in order) applied one by one, each found
    again by its label in the graph the rewrites before it made."""
    labels = [a.label for a, t in zip(actions, take, strict=True) if t]
    applied, skipped, failed = [], 0, 0
    for label in labels:
        current = next((a for a in graph.actions() if a.label == label), None)
        if current is None:
            skipped += 1
            continue
        new = graph.apply(current)
        if new is None:
            failed += 1
            continue
        graph = new
        applied.append(label)
    return PassResult(graph, tuple(applied), skipped, failed)


class GoEnv:
    """Passes over `start`, priced by `cost` (lower is better); gymnasium's reset/step, with a
    take mask over the observation's actions as the action."""

    def __init__(self, start: RewriteGraph, cost: Callable[[RewriteGraph], float], *,
                 passes: int = 3, max_actions: int = 400,
                 affordable: Callable[[RewriteGraph], bool] | None = None) -> None:
        self.start, self.cost, self.passes, self.max_actions = start, cost, passes, max_actions
        self.affordable = affordable or (lambda graph: True)
        self.initial_cost = float(cost(start))
        if not math.isfinite(self.initial_cost) or self.initial_cost <= 0:
            raise ValueError(f"the start graph's cost must be finite and positive, not "
                             f"{self.initial_cost}")
        self.best = GoBest(start, self.initial_cost)
        self.skipped = self.failed = 0  # over all passes played
        self._reset_episode()

    def _reset_episode(self) -> None:
        self.graph, self.current_cost, self.steps = self.start, self.initial_cost, 0
        self.path: list[tuple[str, ...]] = []  # this episode's passes (the rewrites of each)
        self.path_costs: list[float] = []
        self._obs: Observation | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._reset_episode()
        return self._observe(), {"cost": self.current_cost}

    def observe(self, graph: RewriteGraph) -> Observation:
        """What the policy reads in `graph`: its features and its matches."""
        links, edge_features = graph.edges()
        return Observation(graph.node_features(), links, edge_features,
                           tuple(graph.actions()[: self.max_actions]))

    def _observe(self) -> Observation:
        self._obs = self.observe(self.graph)
        return self._obs

    def step(self, take: np.ndarray):
        """One pass: apply the matches `take` marks (a bool per action of the observation)."""
        obs = self._obs
        assert obs is not None, "reset() first"
        take = np.asarray(take, dtype=bool)
        if take.shape != (len(obs.actions),):
            raise ValueError(f"a take mask of {len(obs.actions)} actions, not {take.shape}")
        self.steps += 1
        reward, ended = 0.0, not take.any()
        if not ended:
            done = apply_pass(self.graph, obs.actions, take)
            self.skipped += done.skipped
            self.failed += done.failed
            # nothing applied (every taken match conflicted or failed): the graph stands
            if done.applied and not self.affordable(done.graph):
                ended = True  # no estimate left for the new graph: the pass is not applied
            elif done.applied:
                cost = float(self.cost(done.graph))
                if math.isfinite(cost):
                    reward = REWARD_SCALE * (self.current_cost - cost) / self.initial_cost
                    self.graph, self.current_cost = done.graph, cost
                    self.path.append(done.applied)
                    self.path_costs.append(cost)
                    if cheaper(cost, self.best.cost):
                        self.best = GoBest(done.graph, cost, tuple(self.path),
                                           tuple(self.path_costs))
        obs = self._observe()
        terminated = ended or not obs.actions
        truncated = not terminated and self.steps >= self.passes
        return obs, reward, terminated, truncated, {"cost": self.current_cost}
