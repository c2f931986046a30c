"""tools/train_graph_go.py's bookkeeping on the synthetic chains: the held-out evaluation's
cuts and estimates (by hand for taking every match), the random baseline's spread, and the
training loop's log and counts."""

import json
import sys

import pytest
import torch
from conftest import ROOT

from harl.graph.rl.chain import ChainGraph, chain_cost, detour_chain
from harl.graph.rl.config import PPOConfig
from harl.graph.rl.go_env import GoEnv
from harl.graph.rl.go_policy import make_go_policy
from harl.graph.rl.ppo import Trainer
from harl.graph.search.common import CostMemo

sys.path.insert(0, str(ROOT / "tools"))

import train_graph_go  # noqa: E402

torch.set_num_threads(1)


def _envs() -> dict[str, GoEnv]:
    graph, table, _ = detour_chain()
    envs = {}
    for name, ops in (("detour", graph.ops), ("longer", tuple("axacxaac"))):
        memo = CostMemo(chain_cost(table), key=lambda g: g.key())
        envs[name] = GoEnv(ChainGraph(ops, graph.rules, graph.vocab),
                           train_graph_go.Priced(memo), passes=3)
    return envs


def _policy(envs):
    graph = envs["detour"].start
    config = PPOConfig(hidden=16, layers=1, episodes_per_update=4)
    return make_go_policy(node_dim=graph.node_features().shape[1], edge_dim=1,
                          rules=len(graph.rules), config=config, heads=2, segment=4), config


def test_the_evaluation_counts_estimates_and_compares_with_random():
    envs = _envs()
    policy, _ = _policy(envs)
    result = train_graph_go.evaluate(envs, policy, k=6, seed=0)
    detour = result["per_graph"]["detour"]
    # untrained, the greedy episode takes nothing: no cut, no estimate
    assert detour["policy_zero_shot"] == 0.0 and detour["policy_zero_shot_estimates"] == 0
    # every match taken: a x a c -> b b x a c (8) -> b b x b b c (9) -> b b x d (4.5)
    assert detour["take_all"] == pytest.approx(100 * (7 - 4.5) / 7)
    assert detour["take_all_estimates"] == 3
    for row in result["per_graph"].values():
        assert row["random_mean"] <= row["random_best_of_k"]
        assert 0 < row["random_estimates_per_episode"] <= 3
    assert result["mean"]["take_all"] == pytest.approx(
        (detour["take_all"] + result["per_graph"]["longer"]["take_all"]) / 2)


def test_training_mixes_graphs_and_logs_every_update(tmp_path):
    envs = _envs()
    policy, config = _policy(envs)
    log = tmp_path / "train.jsonl"
    run = train_graph_go.train(envs, Trainer(policy, config), updates=3, minutes=5.0, seed=0,
                               log_path=log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert run["updates"] == 3 == len(lines) and run["episodes"] == 12
    assert run["passes_played"] == lines[-1]["steps"] and "losses/approx_kl" in lines[-1]
    assert run["estimates"] == sum(env.cost.memo.evals for env in envs.values()) >= 2
