"""Graph search with a world model (RLFlow on harl's rules): the graph policy of the `rl` search
is trained by PPO in a learned model of the rewards (an MDN-RNN fitted on the real episodes'
transitions), so that most of its episodes cost no real estimate; real episodes are played only
to log transitions for the model, within a budget of real cost estimates
(`harl.graph.rl.dream`). The result is the cheapest graph really costed. It starts from a fresh
controller and world model, or from a pair pretrained across a corpus of graphs by
tools/train_graph_worldmodel.py (`[graph.worldmodel] pretrained`), fine-tuned on the model's
graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harl.graph.rl.config import WorldModelConfig
from harl.graph.rule import Rule
from harl.graph.search.common import (
    Cost,
    LearnedSearchResult,
    configured_policy_path,
    policy_source,
)

log = logging.getLogger(__name__)

SHIPPED_WORLD_MODEL = Path(__file__).resolve().parents[2] / "data" / "graph_worldmodel.npz"


def controller_path(world_model: Path) -> Path:
    """Where the controller trained with the world model saved at `world_model` is saved."""
    return world_model.with_name(world_model.stem + "_controller.npz")


@dataclass
class WorldModelResult(LearnedSearchResult):
    """The cheapest graph really costed and how it was found (`metrics`: the last refit's
    losses and the last PPO update's diagnostics)."""

    real_episodes: int = 0
    dream_episodes: int = 0
    rounds: int = 0
    quality: dict = field(default_factory=dict)
    """the world model's scores on real transitions it had not been fitted on"""
    pretrained: str = "fresh"
    """where the world model and controller came from: shipped, fresh, or the model's path"""


def starting_agents(config: WorldModelConfig, rule_names: tuple[str, ...], *, node_dim: int,
                    edge_dim: int):
    """(world model, controller, the config with the controller's width and depth, where they
    came from): the configured pretrained pair where its rules and features are these, else
    (None, None, `config`, "fresh"), with one line saying why."""
    from harl.graph.rl.policy import GraphPolicy
    from harl.graph.rl.saving import load_policy
    from harl.graph.rl.world_model import load_world_model

    path = configured_policy_path(config.pretrained, SHIPPED_WORLD_MODEL,
                                  "pretrained world model")
    if path is None:
        return None, None, config, "fresh"
    if not controller_path(path).is_file():
        log.info("harl: graph: no controller beside the world model in %s (%s); starting from "
                 "a fresh pair", path, controller_path(path).name)
        return None, None, config, "fresh"
    model, manifest = load_world_model(path)
    policy, saved, policy_manifest = load_policy(controller_path(path), GraphPolicy)
    wanted = (list(rule_names), node_dim, edge_dim)
    if all((m["rules"], m["node_dim"], m["edge_dim"]) == wanted
           for m in (manifest, policy_manifest)):
        source = policy_source(path, SHIPPED_WORLD_MODEL)
        ppo = replace(config.ppo, hidden=saved.hidden, layers=saved.layers)
        return model, policy, replace(config, ppo=ppo, model=model.config), source
    log.info("harl: graph: the world model and controller in %s were trained on other rules "
             "or features; starting from a fresh pair", path)
    return None, None, config, "fresh"


def worldmodel_search(mod, cost: Cost, *, config: WorldModelConfig | None = None,
                      rules: Sequence[Rule] | None = None) -> WorldModelResult:
    """Rounds of real episodes, world-model refits and dream training on `mod`, then the
    controller's most likely episode; the cheapest graph reached, by `cost`, which is called
    at most `config.max_evals` times."""
    import torch

    from harl.graph.rl.dream import train_in_dream
    from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph
    from harl.graph.rules import ALL_RULES

    config = config or WorldModelConfig()
    start = time.perf_counter()
    graph = RelaxGraph(mod, ALL_RULES if rules is None else rules)
    model, policy, config, source = starting_agents(config, graph.rule_names,
                                                    node_dim=NODE_DIM, edge_dim=EDGE_DIM)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small graphs: threads cost more than they give
    try:
        found = train_in_dream(graph, lambda g: cost(g.mod), config=config, model=model,
                               policy=policy)
    finally:
        torch.set_num_threads(threads)
    best = found.best
    log.info("worldmodel: %d real estimates, %d real and %d dream episodes, best %.6g "
             "(from %.6g) by %s", found.evals, found.real_episodes, found.dream_episodes,
             best.cost, found.initial_cost, ", ".join(best.path) or "no rewrite")
    return WorldModelResult(best.graph.mod, list(best.path), found.initial_cost, best.cost,
                            evals=found.evals, real_episodes=found.real_episodes,
                            dream_episodes=found.dream_episodes, updates=found.updates,
                            rounds=found.rounds, quality=found.quality, pretrained=source,
                            metrics=found.metrics,
                            seconds=time.perf_counter() - start,
                            path_costs=list(best.path_costs))
