"""What every graph search shares: its actions (a rule at one match), applying them without
letting a failing rule end the search, and a cost memo keyed by the graph's structure."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harl.graph.rule import Match, Rule

log = logging.getLogger(__name__)

Cost = Callable[[object], float]
"""a graph's estimated latency in ms (lower is better): IRModule -> float"""

MIN_GAIN = 1e-9
"""the relative drop below which a graph is not cheaper: summing the same tasks' costs in
another order moves a total by about 1e-16, and a rewrite that buys nothing is not taken"""


def cheaper(value: float, than: float, min_gain: float = MIN_GAIN) -> bool:
    """Whether cost `value` is below `than` by more than `min_gain` of it."""
    return value < than * (1.0 - min_gain)


def configured_policy_path(setting: str, shipped: Path, what: str) -> Path | None:
    """The file a `policy` setting names: `shipped` for "shipped" (None, said in one line,
    where harl ships none), None for "fresh", else the setting as a path."""
    if setting == "shipped":
        if shipped.is_file():
            return shipped
        log.info("harl: graph: harl ships no %s; starting from a fresh one", what)
        return None
    return None if setting == "fresh" else Path(setting)


def policy_source(path: Path, shipped: Path) -> str:
    """How graph.json names where a loaded policy came from: "shipped" or its path."""
    return "shipped" if path == shipped else str(path)


def actions(mod, rules: Sequence[Rule]) -> list[tuple[Rule, Match]]:
    """Every (rule, match) applicable to `mod`; a rule whose matching fails is skipped with
    one warning."""
    out = []
    for rule in rules:
        try:
            out.extend((rule, match) for match in rule.matches(mod))
        except Exception as err:  # noqa: BLE001  (a broken rule must not end the search)
            log.warning("graph rule %s: matching failed (%s); skipped", rule.name,
                        first_line(err))
    return out


def try_apply(rule: Rule, match: Match, mod):
    """`mod` rewritten by `rule` at `match`, or None (with one warning) when it fails."""
    try:
        return rule.apply(mod, match)
    except Exception as err:  # noqa: BLE001
        log.warning("graph rewrite %s failed (%s); skipped", match, first_line(err))
        return None


def first_line(err: Exception) -> str:
    """An exception's message cut to its first line (TVM's run to pages)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class CostMemo:
    """`cost` cached by `key` (default: the structure of a module's main function); counts
    evaluations. A graph whose cost cannot be computed costs infinity (with one warning).
    The searches over Relax modules and the world model's episodes over rewrite graphs
    (`key=lambda graph: graph.key()`) share it."""

    def __init__(self, cost: Callable, key: Callable | None = None):
        self.cost, self.cache, self.evals = cost, {}, 0
        self.key = key if key is not None else main_structure

    def __call__(self, item) -> float:
        key = self.key(item)
        if key not in self.cache:
            self.evals += 1
            try:
                self.cache[key] = float(self.cost(item))
            except Exception as err:  # noqa: BLE001
                log.warning("graph cost failed (%s); graph skipped", first_line(err))
                self.cache[key] = float("inf")
        return self.cache[key]

    def known(self, item) -> bool:
        """Whether costing `item` needs no new evaluation (None: a failed rewrite, never
        costed)."""
        return item is None or self.key(item) in self.cache


def main_structure(mod) -> int:
    """The structural hash of a module's main function (free variables mapped)."""
    import tvm_ffi

    return tvm_ffi.structural_hash(mod["main"], map_free_vars=True)


@dataclass
class LearnedSearchResult:
    """What a learned graph search (rl, worldmodel, go) returns: the cheapest graph it costed
    and how it got there; each search adds its own counts."""

    mod: object
    applied: list[str]
    initial_cost: float
    cost: float
    evals: int = 0
    """real cost estimates (distinct graphs costed)"""
    updates: int = 0
    """PPO updates of the policy"""
    metrics: dict = field(default_factory=dict)
    """the last update's diagnostics"""
    seconds: float = 0.0
    path_costs: list[float] = field(default_factory=list)
    """the cost after each step of `applied` (go: each pass); one above `initial_cost` is a
    detour"""
