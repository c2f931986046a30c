"""TASO-style greedy graph search: apply the single rewrite that lowers the cost most, until
none does."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harl.graph.rule import Rule
from harl.graph.search.common import MIN_GAIN, Cost, CostMemo, actions, cheaper, try_apply

log = logging.getLogger(__name__)


@dataclass
class GreedyResult:
    """The graph greedy search ends at, the rewrites it applied (in order) and the cost after
    each (the first entry is the original graph's)."""

    mod: object
    applied: list[str] = field(default_factory=list)
    trace: list[float] = field(default_factory=list)
    evals: int = 0
    seconds: float = 0.0

    @property
    def cost(self) -> float:
        return self.trace[-1]


def greedy(mod, cost: Cost, *, rules: Sequence[Rule] | None = None, max_evals: int = 200,
           min_gain: float = MIN_GAIN) -> GreedyResult:
    """Evaluate every match of every rule, apply the best one if it lowers `cost` by more
    than `min_gain` (relative), repeat; stop when none does or after `max_evals` distinct
    graphs have been costed."""
    from harl.graph.rules import ALL_RULES

    rules = ALL_RULES if rules is None else rules
    start, memo = time.perf_counter(), CostMemo(cost)
    result = GreedyResult(mod, trace=[memo(mod)])
    while memo.evals < max_evals:
        current = result.trace[-1]
        best = None
        for rule, match in actions(result.mod, rules):
            if memo.evals >= max_evals:
                break
            new = try_apply(rule, match, result.mod)
            if new is None:
                continue
            value = memo(new)
            if cheaper(value, current, min_gain) and (best is None or value < best[0]):
                best = (value, new, str(match))
        if best is None:
            break
        result.trace.append(best[0])
        result.mod = best[1]
        result.applied.append(best[2])
        log.info("greedy: %s -> %.6g", best[2], best[0])
    result.evals, result.seconds = memo.evals, time.perf_counter() - start
    return result
