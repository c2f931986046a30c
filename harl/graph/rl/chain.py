"""A tiny synthetic rewrite graph: a chain of operators rewritten like a string, priced by a
table of per-operator costs. It stands in for a Relax graph where the agent and PPO are tested
without TVM: its rules are patterns of consecutive operators, its matches bind the nodes they
cover, and its costs can make the best rewrite sequence pass through a costlier graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harl.graph.rl.env import Action


@dataclass(frozen=True)
class ChainRule:
    """Replace the consecutive operators `lhs` by `rhs`."""

    name: str
    lhs: tuple[str, ...]
    rhs: tuple[str, ...]


class ChainGraph:
    """A chain of operators (node i feeds node i + 1) over a fixed operator vocabulary."""

    def __init__(self, ops: Sequence[str], rules: Sequence[ChainRule], vocab: Sequence[str]):
        self.ops, self.rules, self.vocab = tuple(ops), tuple(rules), tuple(vocab)
        self.rule_names = tuple(rule.name for rule in self.rules)
        self._actions: list[Action] | None = None

    def node_features(self) -> np.ndarray:
        """One-hot operator kind, and the node's position in the chain (0 to 1)."""
        out = np.zeros((len(self.ops), len(self.vocab) + 1), dtype=np.float32)
        for i, op in enumerate(self.ops):
            out[i, self.vocab.index(op)] = 1.0
            out[i, -1] = i / max(1, len(self.ops) - 1)
        return out

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        count = max(0, len(self.ops) - 1)
        links = np.stack([np.arange(count), np.arange(1, count + 1)], axis=1).astype(np.int64)
        return links.reshape(count, 2), np.ones((count, 1), dtype=np.float32)

    def actions(self) -> list[Action]:
        if self._actions is None:
            self._actions = [
                Action(r, tuple(range(i, i + len(rule.lhs))), f"{rule.name}@{i}")
                for r, rule in enumerate(self.rules)
                for i in range(len(self.ops) - len(rule.lhs) + 1)
                if self.ops[i: i + len(rule.lhs)] == rule.lhs]
        return self._actions

    def apply(self, action: Action) -> ChainGraph:
        rule, start = self.rules[action.rule], action.nodes[0]
        ops = self.ops[:start] + rule.rhs + self.ops[start + len(rule.lhs):]
        return ChainGraph(ops, self.rules, self.vocab)

    def key(self) -> tuple[str, ...]:
        return self.ops


def chain_cost(table: Mapping[str, float]):
    """A cost: the sum of the operators' costs in `table`."""
    return lambda graph: float(sum(table[op] for op in graph.ops))


def detour_chain() -> tuple[ChainGraph, dict[str, float], float]:
    """A chain whose best rewrites pass through a costlier graph, with its cost table and the
    best cost reachable: `split` turns an `a` into two `b`s (cost up by 1) and only two `b`s
    before a `c` `fuse` into a cheap `d`; `shrink` (a -> e) is the greedy bait. From a x a c
    (7) the best is e x d (3): shrink the first a, split the second, fuse; greedy reaches 6."""
    rules = (ChainRule("split", ("a",), ("b", "b")), ChainRule("fuse", ("b", "b", "c"), ("d",)),
             ChainRule("shrink", ("a",), ("e",)))
    table = {"a": 2.0, "b": 1.5, "c": 2.0, "d": 0.5, "e": 1.5, "x": 1.0}
    return ChainGraph(("a", "x", "a", "c"), rules, tuple(table)), table, 3.0
