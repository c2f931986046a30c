"""Graph search by reinforcement learning (X-RLflow on harl's rules): a graph neural network
policy rewrites the graph one (rule, match) at a time, or stops, and is fine-tuned online with
PPO on the episodes it plays on this graph; the result is the cheapest graph any episode
reached. It starts from the policy harl ships (`harl/data/graph_rl_policy.npz`, trained by
`tools/train_graph_rl.py` across a corpus of small graphs, whose held-out graphs it rewrote
zero-shot as well as greedy search) and plays that policy's most likely episode first; a fresh
policy or another file written by the tool can be the start instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harl.graph.rl.config import RlConfig
from harl.graph.rl.policy import GraphPolicy
from harl.graph.rl.ppo import Trainer, make_policy
from harl.graph.rl.saving import load_policy
from harl.graph.rule import Rule
from harl.graph.search.common import (
    Cost,
    CostMemo,
    LearnedSearchResult,
    configured_policy_path,
    policy_source,
)

log = logging.getLogger(__name__)

SHIPPED_POLICY = Path(__file__).resolve().parents[2] / "data" / "graph_rl_policy.npz"
"""the pretrained policy harl ships, where it ships one (with its .json manifest)"""


@dataclass
class RlResult(LearnedSearchResult):
    """The cheapest graph reached and how it was found."""

    episodes: int = 0
    policy: str = "fresh"
    """where the starting policy came from: shipped, fresh, or its path"""


def starting_policy(config: RlConfig, rule_names: tuple[str, ...], *, node_dim: int,
                    edge_dim: int):
    """(policy, its PPO config, where it came from): the configured file where its rules and
    features are these, else a fresh one (with one line saying why)."""
    path = configured_policy_path(config.policy, SHIPPED_POLICY, "graph policy")
    if path is not None:
        policy, saved, manifest = load_policy(path, GraphPolicy)
        if (tuple(manifest["rules"]), manifest["node_dim"], manifest["edge_dim"]) == (
                rule_names, node_dim, edge_dim):
            source = policy_source(path, SHIPPED_POLICY)
            return policy, replace(config.ppo, hidden=saved.hidden, layers=saved.layers), source
        log.info("harl: graph: the policy in %s was trained on other rules or features; "
                 "starting from a fresh one", path)
    policy = make_policy(node_dim=node_dim, edge_dim=edge_dim, rules=len(rule_names),
                         config=config.ppo, seed=config.seed)
    return policy, config.ppo, "fresh"


def rl_search(mod, cost: Cost, *, config: RlConfig | None = None,
              rules: Sequence[Rule] | None = None) -> RlResult:
    """Play `config.episodes` episodes on `mod` (a PPO update after every
    `ppo.episodes_per_update`), then one with the policy's most likely actions; from a trained
    policy, one with its most likely actions first too (its zero-shot answer); the cheapest
    graph reached in any of them, by `cost`."""
    import torch

    from harl.graph.rl.env import GraphRewriteEnv
    from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph
    from harl.graph.rules import ALL_RULES

    config = config or RlConfig()
    start, memo = time.perf_counter(), CostMemo(cost)
    graph = RelaxGraph(mod, ALL_RULES if rules is None else rules)
    env = GraphRewriteEnv(graph, lambda g: memo(g.mod), horizon=config.horizon,
                          max_actions=config.max_actions)
    policy, ppo, source = starting_policy(config, graph.rule_names, node_dim=NODE_DIM,
                                          edge_dim=EDGE_DIM)
    trainer, steps, metrics = Trainer(policy, ppo, seed=config.seed), [], {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small graphs: threads cost more than they give
    zero_shot = int(source != "fresh")  # a trained policy's own answer, played first
    try:
        if zero_shot:
            trainer.episode(env, greedy=True)
        while (trainer.episodes - zero_shot < config.episodes
               and memo.evals < config.max_evals):
            steps += trainer.episode(env)
            if (config.fine_tune
                    and (trainer.episodes - zero_shot) % ppo.episodes_per_update == 0):
                metrics = trainer.update(steps)
                steps = []
        if memo.evals < config.max_evals:
            trainer.episode(env, greedy=True)
    finally:
        torch.set_num_threads(threads)
    best = env.best
    log.info("rl: %d episodes, %d updates, best %.6g (from %.6g) by %s", trainer.episodes,
             trainer.updates, best.cost, env.initial_cost, ", ".join(best.path) or "no rewrite")
    return RlResult(best.graph.mod, list(best.path), env.initial_cost, best.cost,
                    evals=memo.evals, episodes=trainer.episodes, updates=trainer.updates,
                    policy=source, metrics=metrics, seconds=time.perf_counter() - start,
                    path_costs=list(best.path_costs))
