"""The world-model graph agent (RLFlow on harl's rules): the MDN-RNN fits a known transition
function, a controller trained only in the model improves the real environment's return, the
dream never asks for a real cost, the loop keeps to its budget of real estimates and fine-tunes
a pretrained pair, a pair starts the search only where its rules match, the model saves and
loads without pickle, and `--graph worldmodel` runs end to end on real TVM."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, harl_tune_here, tiny_graph_config, trial_record_lines

from harl.graph.rl.chain import ChainGraph, ChainRule, chain_cost, detour_chain
from harl.graph.rl.config import MdnRnnConfig, PPOConfig, WorldModelConfig
from harl.graph.rl.dream import DreamEnv, real_episode, train_in_dream
from harl.graph.rl.env import GraphRewriteEnv
from harl.graph.rl.ppo import Trainer, make_policy
from harl.graph.rl.world_model import (
    Transition,
    batch_episodes,
    load_world_model,
    make_world_model,
    save_world_model,
)
from harl.graph.search.common import CostMemo

torch.set_num_threads(1)


def _random_episodes(env: GraphRewriteEnv, count: int, seed: int) -> list[list[Transition]]:
    """`count` episodes of uniformly random legal actions (the stop among them)."""
    rng, episodes = np.random.default_rng(seed), []
    for _ in range(count):
        obs, _ = env.reset()
        steps, done = [], False
        while not done:
            action = int(rng.integers(len(obs.actions) + 1))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            steps.append(Transition(obs, action, reward, terminated, next_obs))
            done = terminated or truncated
            obs = next_obs
        episodes.append(steps)
    return episodes


def _model_for(graph, config: MdnRnnConfig, seed: int = 0):
    return make_world_model(node_dim=graph.node_features().shape[1], edge_dim=1,
                            rules=len(graph.rules), config=config, seed=seed)


def test_a_batch_of_episodes_lines_up_steps_actions_and_next_graphs():
    graph, table, _ = detour_chain()
    env = GraphRewriteEnv(graph, chain_cost(table), horizon=5)
    episodes = _random_episodes(env, 3, seed=1)
    batch = batch_episodes(episodes, len(graph.rules))
    assert batch.mask.sum() == sum(map(len, episodes))
    for b, episode in enumerate(episodes):
        for t, step in enumerate(episode):
            stop = step.action == len(step.obs.actions)
            assert int(batch.rule[b, t]) == (3 if stop else step.obs.actions[step.action].rule)
            assert (int(batch.action[b, t]) == -1) == stop
            assert batch.reward[b, t] == pytest.approx(step.reward)
            if t + 1 < len(episode):  # one step's next graph is the next step's own
                assert batch.next_obs[b, t] == batch.obs[b, t + 1]


def test_the_mdn_rnn_fits_the_chains_rewards_and_ends():
    """On the detour chain a step's reward is a function of its rule (100 x the rule's cost
    change / 7) and an episode ends at a stop or where no rewrite is left: after fitting on
    random episodes the model predicts held-out ones far better than the mean does."""
    graph, table, _ = detour_chain()
    env = GraphRewriteEnv(graph, chain_cost(table), horizon=5)
    fit_on, held_out = _random_episodes(env, 48, seed=0), _random_episodes(env, 16, seed=1)
    model = _model_for(graph, MdnRnnConfig())
    before = model.quality(held_out)
    losses = model.fit(fit_on, epochs=40)
    after = model.quality(held_out)
    assert set(losses) == {"world/fit_latent_loss", "world/fit_reward_loss",
                           "world/fit_done_loss"}
    assert after["world/reward_mae"] < 0.1 * after["world/reward_mae_of_mean"], after
    assert after["world/reward_explained_variance"] > 0.9, after
    assert after["world/done_accuracy"] >= 0.9, after
    assert after["world/next_latent_nll"] < before["world/next_latent_nll"] - 0.5, (before,
                                                                                    after)
    assert after["world/held_out_steps"] == sum(map(len, held_out))


def _folds_chain():
    """Scales that fold into the matmul after them (s m -> m, 1 off a cost of 5.5) and a
    `spread` rule (m -> m m) that only costs: the best folds both foldable scales and stops."""
    rules = (ChainRule("fold", ("s", "m"), ("m",)), ChainRule("spread", ("m",), ("m", "m")))
    table = {"s": 1.0, "m": 1.0, "x": 0.5}
    return ChainGraph(("s", "m", "s", "x", "s", "m"), rules, tuple(table)), table


def _mean_real_return(env, policy, episodes: int) -> float:
    trainer, total = Trainer(policy, PPOConfig(), seed=123), 0.0
    for _ in range(episodes):
        total += sum(step.reward for step in trainer.episode(env))
    return total / episodes


def test_a_controller_trained_only_in_the_dream_improves_the_real_return():
    graph, table = _folds_chain()
    real_calls, dreaming = [], False

    def cost(g) -> float:
        assert not dreaming, "the dream asked for a real cost"
        real_calls.append(g.key())
        return chain_cost(table)(g)

    env = GraphRewriteEnv(graph, cost, horizon=4)
    ppo = PPOConfig(episodes_per_update=8)
    untrained = make_policy(node_dim=graph.node_features().shape[1], edge_dim=1, rules=2,
                            config=ppo, seed=0)
    # --- a fixed handful of real transitions, from the untrained controller ---
    trainer = Trainer(untrained, ppo, seed=0)
    costs = CostMemo(cost, key=lambda g: g.key())
    logged = [real_episode(env, trainer.policy, costs, max_evals=100,
                           generator=trainer.generator) for _ in range(12)]
    model = _model_for(graph, MdnRnnConfig())
    model.fit(logged, epochs=40)
    # --- the controller trained in the model alone ---
    controller = make_policy(node_dim=graph.node_features().shape[1], edge_dim=1, rules=2,
                             config=ppo, seed=0)
    dreamer, dream, dreaming = Trainer(controller, ppo, seed=1), DreamEnv(env, model), True
    for _ in range(25):
        dreamer.update([s for _ in range(ppo.episodes_per_update)
                        for s in dreamer.episode(dream)])
    dreaming = False
    # --- both controllers in the real env ---
    before = _mean_real_return(env, untrained, 40)
    after = _mean_real_return(env, controller, 40)
    # a fold earns 100 / 5.5 = 18.2: the trained controller folds both scales most times
    assert after > max(before + 10.0, 25.0), (before, after)
    assert dreamer.episodes == 25 * ppo.episodes_per_update


def test_the_dream_moves_the_real_graph_and_ends_as_the_real_env_does():
    graph, table, _ = detour_chain()
    env = GraphRewriteEnv(graph, chain_cost(table), horizon=2)
    dream = DreamEnv(env, _model_for(graph, MdnRnnConfig(hidden=8, latent=4, recurrent=8)))
    obs, info = dream.reset()
    assert [a.label for a in obs.actions] == [a.label for a in env.reset()[0].actions]
    assert info["action_mask"].sum() == len(obs.actions) + 1
    split = [a.label for a in obs.actions].index("split@0")
    obs, reward, terminated, truncated, _ = dream.step(split)
    assert dream.graph.ops == ("b", "b", "x", "a", "c") and reward != 0.0
    assert not (terminated or truncated)
    obs, _, terminated, truncated, _ = dream.step(0)
    assert truncated and not terminated  # the horizon
    obs, _ = dream.reset()
    _, reward, terminated, _, _ = dream.step(len(obs.actions))
    assert terminated and reward == 0.0  # a stop earns nothing, as in the real env


def test_the_loop_keeps_to_its_budget_of_real_estimates():
    graph, table, _ = detour_chain()
    calls = []

    def cost(g) -> float:
        calls.append(g.key())
        return chain_cost(table)(g)

    config = WorldModelConfig(max_evals=9, rounds=3, real_episodes=2, dream_episodes=8,
                              horizon=5, model=MdnRnnConfig(epochs=5),
                              ppo=PPOConfig(episodes_per_update=4))
    result = train_in_dream(graph, cost, config=config)
    assert len(calls) == len(set(calls)) == result.evals <= 9
    # the cheapest graph really costed, and the rewrites that make it
    assert result.best.cost == min(sum(table[op] for op in ops) for ops in calls)
    assert result.best.cost == chain_cost(table)(_replay(graph, result.best.path))
    assert result.dream_episodes == 8 * result.rounds
    assert result.updates == 2 * result.rounds
    assert result.real_episodes == 2 * result.rounds + 1
    assert result.rounds == 1 or {"world/reward_mae", "world/next_latent_nll"} <= set(
        result.quality)


def _replay(graph, labels):
    for label in labels:
        graph = graph.apply(next(a for a in graph.actions() if a.label == label))
    return graph


def test_the_loop_fine_tunes_a_pretrained_model_and_controller():
    graph, table, _ = detour_chain()
    config = WorldModelConfig(max_evals=9, rounds=2, real_episodes=2, dream_episodes=4,
                              horizon=5, model=MdnRnnConfig(epochs=3),
                              ppo=PPOConfig(episodes_per_update=2))
    policy = make_policy(node_dim=graph.node_features().shape[1], edge_dim=1,
                         rules=len(graph.rules), config=config.ppo, seed=5)
    model = _model_for(graph, config.model, seed=6)
    policy_before = [p.detach().clone() for p in policy.parameters()]
    model_before = [p.detach().clone() for p in model.parameters()]
    result = train_in_dream(graph, chain_cost(table), config=config, model=model, policy=policy)
    assert result.updates == 2 * result.rounds and result.evals <= 9
    # the given networks are the ones trained, from their own weights
    assert any(not torch.equal(a, b) for a, b in zip(policy_before, policy.parameters(),
                                                         strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(model_before, model.parameters(),
                                                         strict=True))


def test_a_pretrained_pair_starts_the_search_only_where_its_rules_match(tmp_path):
    from harl.graph.rl.saving import save_policy
    from harl.graph.search.worldmodel import controller_path, starting_agents

    small = WorldModelConfig(ppo=PPOConfig(hidden=8, layers=1),
                             model=MdnRnnConfig(hidden=8, latent=4, mixtures=2))
    path = tmp_path / "world.npz"

    def save_pair(rule_names, controller_rules=None):
        model = make_world_model(node_dim=5, edge_dim=1, rules=len(rule_names),
                                 config=small.model)
        save_world_model(path, model, rule_names=rule_names)
        controller_rules = controller_rules or rule_names
        save_policy(controller_path(path), make_policy(
            node_dim=5, edge_dim=1, rules=len(controller_rules), config=small.ppo),
            config=small.ppo, node_dim=5, edge_dim=1, rule_names=controller_rules)

    names = ("a", "b", "c")
    wanted = WorldModelConfig(pretrained=str(path))
    assert starting_agents(wanted, names, node_dim=5, edge_dim=1)[3] == "fresh"  # no file
    for model_rules, controller_rules in ((("a", "b"), None), (names, ("a", "b"))):
        save_pair(model_rules, controller_rules)
        model, policy, used, source = starting_agents(wanted, names, node_dim=5, edge_dim=1)
        assert (model, policy, used, source) == (None, None, wanted, "fresh")
    save_pair(names)
    model, policy, used, source = starting_agents(wanted, names, node_dim=5, edge_dim=1)
    assert source == str(path) and model.config == small.model and policy.rules == 3
    assert used.model == small.model  # the config describes the loaded model
    assert used.ppo.hidden == 8 and used.ppo.layers == 1  # the controller keeps its sizes
    assert starting_agents(wanted, names, node_dim=6, edge_dim=1)[3] == "fresh"
    assert starting_agents(WorldModelConfig(), names, node_dim=5, edge_dim=1)[3] == "fresh"


def test_the_world_model_saves_and_loads_without_pickle(tmp_path):
    graph, table, _ = detour_chain()
    env = GraphRewriteEnv(graph, chain_cost(table), horizon=5)
    episodes = _random_episodes(env, 6, seed=2)
    model = _model_for(graph, MdnRnnConfig(hidden=16, latent=8, mixtures=2), seed=3)
    model.fit(episodes, epochs=2)
    path = tmp_path / "world.npz"
    save_world_model(path, model, rule_names=graph.rule_names, manifest={"episodes": 6})
    with np.load(path, allow_pickle=False) as arrays:
        assert {"reward_head.0.weight", "cell.weight_ih", "reward_mean"} <= set(arrays.files)
    loaded, manifest = load_world_model(path)
    assert manifest["episodes"] == 6 and manifest["rules"] == list(graph.rule_names)
    assert loaded.config == model.config and float(loaded.reward_mean) != 0.0
    assert json.loads(path.with_suffix(".json").read_text())["node_dim"] == model.node_dim
    assert loaded.quality(episodes) == model.quality(episodes)


def test_worldmodel_end_to_end(tmp_path):
    config = tiny_graph_config(tmp_path)
    work_dir = tmp_path / "run"
    proc = harl_tune_here(EXAMPLES / "transformer_block.onnx", "--graph", "worldmodel",
                          "--trials", 6, "--work-dir", work_dir, "--config", config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True
    graph = report["graph"]
    assert graph["method"] == "worldmodel" and graph.get("dropped") is None
    assert json.loads((work_dir / "graph.json").read_text())["applied"] == graph["applied"]
    for search in (graph, graph["second_search"]):
        assert 1 <= search["graphs_costed"] <= 10  # the budget of real estimates
        assert search["wm_dream_episodes"] == 8 and search["wm_real_episodes"] == 5
        assert search["wm_pretrained"] == "fresh"  # the default
        assert search["estimated_ms_after"] <= search["estimated_ms_before"]
        assert {"world/reward_mae", "world/next_latent_nll", "world/done_accuracy"} <= set(
            search["wm_quality"])
        assert "losses/approx_kl" in search["wm_metrics"]
    lines = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    searches = [line for line in lines if line.get("stage") == "graph"]
    assert [line["search"] for line in searches] == ["first", "second"]
    for line in searches:  # the model's quality on held-out real transitions, in the metrics
        assert line["graph/wm_quality/world/next_latent_nll"] is not None
        assert line["graph/graphs_costed"] >= 1 and "graph/wm_metrics/losses/approx_kl" in line
    assert graph["rewritten"] == bool(graph["applied"])
    assert len(graph["wm_path_estimated_ms"]) == len(graph["applied"])
    assert (work_dir / "model_rewritten.json").exists() == graph["rewritten"]
    assert report["trials_done"] == 6 and len(trial_record_lines(work_dir)) == 6
    assert "graph (worldmodel): " in proc.stdout
