"""The graph agents' training corpus and tools: the held-out rule, no benchmark model in the
corpus, and a short training, evaluation and save on two of its graphs (the rl policy, the
world model and its controller)."""

from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, ROOT

sys.path.insert(0, str(ROOT / "tools"))

import train_graph_rl  # noqa: E402
import train_graph_worldmodel  # noqa: E402
from benchlib.graph_corpus import specs, split  # noqa: E402
from benchlib.graph_training import product_setting  # noqa: E402

from harl.graph.rl.config import PPOConfig  # noqa: E402
from harl.graph.rl.policy import GraphPolicy  # noqa: E402
from harl.graph.rl.ppo import Trainer, make_policy  # noqa: E402
from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM  # noqa: E402
from harl.graph.rl.saving import load_policy, save_policy  # noqa: E402

torch.set_num_threads(1)


def test_every_third_graph_of_a_family_is_held_out_and_none_is_a_benchmark_model():
    all_specs = specs()
    train, held = split(all_specs)
    assert len({s.name for s in all_specs}) == len(all_specs)
    assert len(train) + len(held) == len(all_specs) and not {s.name for s in train} & {
        s.name for s in held}
    families = Counter(s.family for s in all_specs)
    held_by_family = Counter(s.family for s in held)
    assert set(families) == {"encoder", "gated-mlp", "branchy-cnn"}
    for family, count in families.items():
        assert held_by_family[family] == (count + 1) // 3  # the second, fifth, ...
    benchmark = {m["name"] for m in json.loads((ROOT / "tasks" / "corpus.json").read_text())[
        "models"]} | {p.stem for p in EXAMPLES.glob("*.onnx")}
    assert not benchmark & {s.name for s in all_specs}


def test_a_short_training_evaluates_and_saves(tmp_path):
    from harl.graph.cost import GraphCostModel
    from harl.target import parse_target

    chosen = [s for s in specs() if s.name in ("gated_mlp_w32x1", "fire_s24")]
    target = parse_target("llvm")
    cost_model = GraphCostModel(target, samples=0)
    rules, layout = product_setting(target, all_rules=False)
    envs = train_graph_rl.make_envs(chosen, tmp_path, cost_model, rules=rules, layout=layout)
    assert envs["fire_s24"].start.rule_names == tuple(rule.name for rule in rules)
    config = PPOConfig(episodes_per_update=2, hidden=16, layers=1)
    trainer = Trainer(make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                                  rules=len(envs["fire_s24"].start.rule_names), config=config),
                      config)
    run = train_graph_rl.train(envs, trainer, updates=2, minutes=5, seed=0,
                               log_path=tmp_path / "metrics.jsonl")
    assert run["updates"] == 2 and run["episodes"] == 4 and run["steps"] >= 4
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["update"] for line in lines] == [1, 2]
    assert "losses/clip_fraction" in lines[0]
    result = train_graph_rl.evaluate(envs, trainer, k=1, seed=0)
    for row in result["per_graph"].values():
        assert set(row) == {"policy_greedy", "policy_best_of_k", "random_mean",
                            "random_best_of_k", "random_no_stop_best_of_k", "greedy_search"}
        assert all(np.isfinite(list(row.values())))
        assert row["random_mean"] <= row["random_best_of_k"]
    assert result["mean_cut_percent"]["greedy_search"] >= 0.0  # greedy never takes a loss
    path = tmp_path / "policy.npz"
    save_policy(path, trainer.policy, config=config, node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                rule_names=envs["fire_s24"].start.rule_names)
    assert load_policy(path, GraphPolicy)[1] == config
    online = train_graph_rl.online({"gated_mlp_w32x1": envs["gated_mlp_w32x1"]}, str(path))
    row = online["per_graph"]["gated_mlp_w32x1"]
    assert online["mean_cut_percent"] == row["cut"] >= 0.0  # the start is among the graphs
    assert row["estimates_to_best"] >= 1


def test_a_short_world_model_pretraining_evaluates_and_saves_a_pair_the_search_loads(tmp_path):
    from harl.graph.cost import GraphCostModel
    from harl.graph.rl.config import MdnRnnConfig, WorldModelConfig
    from harl.graph.rules import search_rules
    from harl.graph.search.worldmodel import starting_agents
    from harl.target import parse_target

    cost_model = GraphCostModel(parse_target("llvm"), samples=0)
    rules = search_rules(blocked_convs=True)
    graphs = [train_graph_worldmodel.CorpusGraph(s, work=tmp_path, cost_model=cost_model,
                                                 rules=rules, layout=None)
              for s in specs() if s.name in ("gated_mlp_w32x1", "fire_s24")]
    config = WorldModelConfig(horizon=3, model=MdnRnnConfig(epochs=2),
                              ppo=PPOConfig(episodes_per_update=2, hidden=16, layers=1))
    model, trainer, run = train_graph_worldmodel.pretrain(
        graphs, config, rounds=1, real_episodes=1, dream_updates=2, minutes=5, seed=0,
        work=tmp_path)
    assert run["rounds"] == 1 and run["real_episodes"] == 2 and run["updates"] == 2
    assert run["estimates"] >= 2 and run["dream_episodes"] == 4
    quality = train_graph_worldmodel.held_out_quality(model, graphs[:1], config, episodes=1,
                                                      seed=0)
    assert "world/reward_mae" in quality
    path = tmp_path / "world.npz"
    train_graph_worldmodel.save_pair(path, model, trainer, config=config,
                                     rule_names=graphs[0].graph.rule_names,
                                     manifest={"run": run})
    search = WorldModelConfig(max_evals=5, rounds=1, real_episodes=1, dream_episodes=2,
                              horizon=3, model=MdnRnnConfig(epochs=2),
                              ppo=PPOConfig(episodes_per_update=2))
    result = train_graph_worldmodel.evaluate(graphs[1:], path, seeds=[0], search=search)
    for arm in ("pretrained", "fresh", "random"):
        row = result["per_graph"]["fire_s24"][arm]
        assert np.isfinite(row["cut"]) and 1 <= row["estimates"] <= 5
    assert result["pretrained_wins"] + result["pretrained_losses"] <= 1
    # a pair trained for other rules is refused, never compared as if it were pretrained
    other = tmp_path / "other.npz"
    train_graph_worldmodel.save_pair(other, model, trainer, config=config,
                                     rule_names=tuple(f"x{i}" for i in range(len(rules))),
                                     manifest={})
    with pytest.raises(SystemExit, match="other rules"):
        train_graph_worldmodel.evaluate(graphs[1:], other, seeds=[0], search=search)
    loaded, policy, used, source = starting_agents(
        WorldModelConfig(pretrained=str(path)), graphs[0].graph.rule_names,
        node_dim=NODE_DIM, edge_dim=EDGE_DIM)
    assert source == str(path) and used.ppo.hidden == 16 and policy.rules == len(rules)
