"""Graph search with GO's policy (harl.graph.rl.go_policy) on harl's rules: a pass decides for
every rule match of the graph at once whether to take it, applies the taken ones and prices
the graph once (harl.graph.rl.go_env). Zero-shot, the starting policy's greedy episode (each
match taken where its probability is above one half) is played first; then, where
`finetune_episodes` asks for them, sampled episodes fine-tune it with PPO, and one more greedy
episode is played. All within `max_evals` real estimates; the result is the cheapest graph
really costed. The starting policy is the one tools/train_graph_go.py trained across a corpus
of graphs (harl/data/graph_go_policy.npz) where harl ships it, else a fresh one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harl.graph.rl.config import GoConfig
from harl.graph.rule import Rule
from harl.graph.search.common import (
    Cost,
    CostMemo,
    LearnedSearchResult,
    configured_policy_path,
    policy_source,
)

log = logging.getLogger(__name__)

SHIPPED_GO_POLICY = Path(__file__).resolve().parents[2] / "data" / "graph_go_policy.npz"
"""the pretrained GO policy harl ships, where it ships one (with its .json manifest)"""


@dataclass
class GoResult(LearnedSearchResult):
    """The cheapest graph really costed (`evals` counts the start) and how it was found;
    `path_costs` is the cost after each pass of `passes`."""

    episodes: int = 0
    """episodes played: the zero-shot one, the sampled ones, the last greedy one"""
    policy: str = "fresh"
    """where the starting policy came from: shipped, fresh, or its path"""
    passes: list[list[str]] = field(default_factory=list)
    """the rewrites each pass of the cheapest graph's episode applied"""
    zero_shot_cost: float = float("nan")
    """the cost the zero-shot (first greedy) episode ended at"""
    skipped: int = 0
    """taken matches skipped over all passes: an earlier rewrite of their pass changed them"""


def starting_go_policy(config: GoConfig, rule_names: tuple[str, ...], *, node_dim: int,
                       edge_dim: int):
    """(policy, its PPO config, where it came from): the configured file where its features
    are these and its rules include these (the others' embeddings dropped), else a fresh one
    (with one line saying why)."""
    from harl.graph.rl.go_policy import GoPolicy, make_go_policy, restrict_rules
    from harl.graph.rl.saving import load_policy

    path = configured_policy_path(config.policy, SHIPPED_GO_POLICY, "GO policy")
    if path is not None:
        policy, saved, manifest = load_policy(path, GoPolicy)
        if (set(rule_names) <= set(manifest["rules"])
                and (manifest["node_dim"], manifest["edge_dim"]) == (node_dim, edge_dim)):
            source = policy_source(path, SHIPPED_GO_POLICY)
            policy = restrict_rules(policy, manifest["rules"], rule_names)
            return policy, replace(config.ppo, hidden=saved.hidden, layers=saved.layers), source
        log.info("harl: graph: the GO policy in %s was trained on other rules or features; "
                 "starting from a fresh one", path)
    policy = make_go_policy(node_dim=node_dim, edge_dim=edge_dim, rules=len(rule_names),
                            config=config.ppo, heads=config.heads, segment=config.segment,
                            seed=config.seed)
    return policy, config.ppo, "fresh"


def go_search(mod, cost: Cost, *, config: GoConfig | None = None,
              rules: Sequence[Rule] | None = None) -> GoResult:
    """The starting policy's greedy episode on `mod`, then `config.finetune_episodes` sampled
    ones with PPO updates and a last greedy one, while real estimates are left; the cheapest
    graph reached, by `cost`, which is called at most `config.max_evals` times."""
    import torch

    from harl.graph.rl.go_env import GoEnv
    from harl.graph.rl.ppo import Trainer
    from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph
    from harl.graph.rules import ALL_RULES

    config = config or GoConfig()
    start, memo = time.perf_counter(), CostMemo(cost)
    graph = RelaxGraph(mod, ALL_RULES if rules is None else rules)
    env = GoEnv(graph, lambda g: memo(g.mod), passes=config.passes,
                max_actions=config.max_actions,
                affordable=lambda g: memo.evals < config.max_evals or memo.known(g.mod))
    policy, ppo, source = starting_go_policy(config, graph.rule_names, node_dim=NODE_DIM,
                                             edge_dim=EDGE_DIM)
    trainer, steps, metrics = Trainer(policy, ppo, seed=config.seed), [], {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small graphs: threads cost more than they give
    try:
        trainer.episode(env, greedy=True)  # zero-shot
        zero_shot = env.current_cost
        tuned = 0
        while tuned < config.finetune_episodes and memo.evals < config.max_evals:
            steps += trainer.episode(env)
            tuned += 1
            if tuned % ppo.episodes_per_update == 0:
                metrics = trainer.update(steps)
                steps = []
        if tuned and memo.evals < config.max_evals:
            trainer.episode(env, greedy=True)
    finally:
        torch.set_num_threads(threads)
    best = env.best
    log.info("go: %d episodes, %d updates, %d estimates, best %.6g (from %.6g, zero-shot "
             "%.6g) by %s", trainer.episodes, trainer.updates, memo.evals, best.cost,
             env.initial_cost, zero_shot, ", ".join(best.applied) or "no rewrite")
    return GoResult(best.graph.mod, best.applied, env.initial_cost, best.cost,
                    evals=memo.evals, episodes=trainer.episodes, updates=trainer.updates,
                    policy=source, passes=[list(p) for p in best.passes],
                    path_costs=list(best.pass_costs), zero_shot_cost=zero_shot,
                    skipped=env.skipped, metrics=metrics, seconds=time.perf_counter() - start)
