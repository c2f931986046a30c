"""Graph search with a world model (RLFlow on harl's rules): the graph policy of the `rl` search
is trained by PPO in a learned model of the rewards (an MDN-RNN fitted on the real episodes'
transitions), so that most of its episodes cost no real estimate; real episodes are played only
to log transitions for the model, within a budget of real cost estimates
(`harl.graph.rl.dream`). The result is the cheapest graph really costed. It starts from a fresh
controller and a fresh world model, both learned on the model's graph alone: harl ships no
pretrained world model or controller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harl.graph.rl.config import WorldModelConfig
from harl.graph.rule import Rule
from harl.graph.search.common import Cost, LearnedSearchResult

log = logging.getLogger(__name__)


@dataclass
class WorldModelResult(LearnedSearchResult):
    """The cheapest graph really costed and how it was found (`metrics`: the last refit's
    losses and the last PPO update's diagnostics)."""

    real_episodes: int = 0
    dream_episodes: int = 0
    rounds: int = 0
    quality: dict = field(default_factory=dict)
    """the world model's scores on real transitions it had not been fitted on"""


def worldmodel_search(mod, cost: Cost, *, config: WorldModelConfig | None = None,
                      rules: Sequence[Rule] | None = None) -> WorldModelResult:
    """Rounds of real episodes, world-model refits and dream training on `mod`, then the
    controller's most likely episode; the cheapest graph reached, by `cost`, which is called
    at most `config.max_evals` times."""
    import torch

    from harl.graph.rl.dream import train_in_dream
    from harl.graph.rl.relax_graph import RelaxGraph
    from harl.graph.rules import ALL_RULES

    config = config or WorldModelConfig()
    start = time.perf_counter()
    graph = RelaxGraph(mod, ALL_RULES if rules is None else rules)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small graphs: threads cost more than they give
    try:
        found = train_in_dream(graph, lambda g: cost(g.mod), config=config)
    finally:
        torch.set_num_threads(threads)
    best = found.best
    log.info("worldmodel: %d real estimates, %d real and %d dream episodes, best %.6g "
             "(from %.6g) by %s", found.evals, found.real_episodes, found.dream_episodes,
             best.cost, found.initial_cost, ", ".join(best.path) or "no rewrite")
    return WorldModelResult(best.graph.mod, list(best.path), found.initial_cost, best.cost,
                            evals=found.evals, real_episodes=found.real_episodes,
                            dream_episodes=found.dream_episodes, updates=found.updates,
                            rounds=found.rounds, quality=found.quality, metrics=found.metrics,
                            seconds=time.perf_counter() - start,
                            path_costs=list(best.path_costs))
