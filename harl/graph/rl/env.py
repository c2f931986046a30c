"""The graph-rewriting environment (gymnasium's API), over an abstract rewrite graph.

The policy sees a `RewriteGraph` only through its node features, its edges with their features
and its list of actions, each a rule index with the node indices its match binds; so the agent
and PPO are tested on a tiny synthetic graph (`harl.graph.rl.chain`) without TVM, and run on
Relax graphs over harl's rules (`harl.graph.rl.relax_graph`) in the product.

One step applies one action (a rule at one match) or stops. The reward is X-RLflow's:
100 x (previous cost - new cost) / initial cost. An episode ends on stop, at the horizon, or
when no rewrite is left. A rewrite that fails, or whose graph has no finite cost, leaves the
graph as it was with reward 0 and is masked from then on in that graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from harl.graph.search.common import cheaper

REWARD_SCALE = 100.0
"""X-RLflow's reward: this many times the cost drop relative to the initial cost"""


@dataclass(frozen=True)
class Action:
    """One rewrite of a graph: the rule (its index in the graph's rule list), the nodes its
    match binds, and a label for people."""

    rule: int
    nodes: tuple[int, ...]
    label: str


class RewriteGraph(Protocol):
    """What the environment and the policy see of a graph."""

    rule_names: tuple[str, ...]
    """the rules of the action space, in order (the policy's rule head has one logit each)"""

    def node_features(self) -> np.ndarray:
        """(nodes, node_dim) float32."""

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(edges, 2) int64 source and destination node indices, (edges, edge_dim) float32."""

    def actions(self) -> list[Action]:
        """Every applicable rewrite, in a fixed order."""

    def apply(self, action: Action) -> RewriteGraph | None:
        """The graph rewritten by `action` (one of `actions()`), or None where it fails."""

    def key(self) -> object:
        """A hashable key, equal for structurally equal graphs."""


@dataclass(frozen=True)
class Best:
    """The cheapest graph an env has reached in any episode, and the rewrites that made it."""

    graph: RewriteGraph
    cost: float
    path: tuple[str, ...]
    path_costs: tuple[float, ...] = ()
    """the cost after each rewrite of `path`: one above the start's is a detour that paid"""


@dataclass(frozen=True)
class Observation:
    """What the policy reads at one step."""

    nodes: np.ndarray
    edge_links: np.ndarray
    edge_features: np.ndarray
    actions: tuple[Action, ...]
    """the legal rewrites (at most the env's `max_actions`); index len(actions) is stop"""


class GraphRewriteEnv(gym.Env):
    """Rewrite `start` one action at a time; `cost` prices a graph (lower is better).

    Actions are indices into the observation's `actions`; `len(actions)` stops the episode.
    `info["action_mask"]` marks which of `max_actions + 1` indices are legal: the rewrites,
    then the stop. `observation_space` describes the graph part of an `Observation` (its node
    and edge features); the list of actions it also carries has no gymnasium space."""

    metadata = {"render_modes": []}

    def __init__(self, start: RewriteGraph, cost: Callable[[RewriteGraph], float], *,
                 horizon: int = 8, max_actions: int = 200) -> None:
        self.start, self.cost = start, cost
        self.horizon, self.max_actions = horizon, max_actions
        self.action_space = spaces.Discrete(max_actions + 1)
        nodes = start.node_features()
        _, edge_features = start.edges()
        self.observation_space = spaces.Graph(
            node_space=spaces.Box(-np.inf, np.inf, shape=nodes.shape[1:], dtype=np.float32),
            edge_space=spaces.Box(-np.inf, np.inf, shape=edge_features.shape[1:],
                                  dtype=np.float32))
        self.initial_cost = float(cost(start))
        if not math.isfinite(self.initial_cost) or self.initial_cost <= 0:
            raise ValueError(f"the start graph's cost must be finite and positive, not "
                             f"{self.initial_cost}")
        self.graph, self.current_cost, self.steps = start, self.initial_cost, 0
        self.path: list[str] = []  # the labels of this episode's rewrites
        self.path_costs: list[float] = []  # the cost after each of them
        self.best = Best(start, self.initial_cost, ())
        self._failed: dict[object, set[Action]] = {}  # graph key -> actions that failed there
        self.failures = 0  # rewrites that failed or gave a graph without a finite cost
        self._next: dict[tuple[object, Action], RewriteGraph | None] = {}  # rewrites done
        self._obs: Observation | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.graph, self.current_cost, self.steps = self.start, self.initial_cost, 0
        self.path, self.path_costs = [], []
        return self._observe(), self._info()

    def step(self, action: int):
        obs = self._obs
        assert obs is not None, "reset() first"
        if not 0 <= action <= len(obs.actions):
            raise ValueError(f"action {action} outside 0..{len(obs.actions)}")
        self.steps += 1
        reward, stopped = 0.0, action == len(obs.actions)
        if not stopped:
            new = self.successor(self.graph, obs.actions[action])
            cost = float(self.cost(new)) if new is not None else math.inf
            if math.isfinite(cost):
                reward = REWARD_SCALE * (self.current_cost - cost) / self.initial_cost
                self.graph, self.current_cost = new, cost
                self.path.append(obs.actions[action].label)
                self.path_costs.append(cost)
                if cheaper(cost, self.best.cost):
                    self.best = Best(new, cost, tuple(self.path), tuple(self.path_costs))
            else:
                self.mark_failed(self.graph, obs.actions[action])
        obs = self._observe()
        terminated = stopped or not obs.actions
        truncated = not terminated and self.steps >= self.horizon
        return obs, reward, terminated, truncated, self._info()

    # --- the graph moves, which cost no estimate (a model-based agent shares them) ---------

    def successor(self, graph: RewriteGraph, action: Action) -> RewriteGraph | None:
        """`graph` rewritten by `action`, remembered: later episodes replay it for free."""
        key = (graph.key(), action)
        if key not in self._next:
            self._next[key] = graph.apply(action)
        return self._next[key]

    def mark_failed(self, graph: RewriteGraph, action: Action) -> None:
        """Mask `action` in `graph` from now on: its rewrite failed or has no finite cost."""
        self._failed.setdefault(graph.key(), set()).add(action)
        self.failures += 1

    def observe(self, graph: RewriteGraph) -> Observation:
        """What the policy reads in `graph`: its features and its legal rewrites."""
        links, edge_features = graph.edges()
        failed = self._failed.get(graph.key(), set())
        legal = tuple(a for a in graph.actions() if a not in failed)[: self.max_actions]
        return Observation(graph.node_features(), links, edge_features, legal)

    def _observe(self) -> Observation:
        self._obs = self.observe(self.graph)
        return self._obs

    def _info(self) -> dict:
        mask = np.zeros(self.max_actions + 1, dtype=bool)
        mask[: len(self._obs.actions) + 1] = True  # the rewrites, and the stop after them
        return {"action_mask": mask, "cost": self.current_cost}
