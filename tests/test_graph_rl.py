"""The graph agent (X-RLflow on harl's rules): GAE by hand, X-RLflow's reward, PPO finding a
rewrite sequence that passes through a costlier graph on the synthetic chain, the policy saved
and loaded without pickle, and sampled actions on real rules over real models always legal."""

from __future__ import annotations

import itertools
import json
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, BrokenRule, random_relax_inputs, run_relax

from harl.graph.rl.chain import ChainGraph, ChainRule, chain_cost, detour_chain
from harl.graph.rl.config import PPOConfig, RlConfig
from harl.graph.rl.env import GraphRewriteEnv
from harl.graph.rl.policy import GraphPolicy, batch_observations
from harl.graph.rl.ppo import Trainer, gae, make_policy
from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph
from harl.graph.rl.saving import load_policy, save_policy
from harl.graph.rules import ALL_RULES, rule_by_name

torch.set_num_threads(1)


def test_gae_by_hand():
    rewards, values = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5])
    # one episode of three steps: A2 = 3 - 1.5; A1 = 2 + .9 * 1.5 - 1 + .72 * A2; ...
    adv, ret = gae(rewards, values, np.array([False, False, True]), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [3.8696, 3.43, 1.5], rtol=1e-6)
    np.testing.assert_allclose(ret, [4.3696, 4.43, 3.0], rtol=1e-6)
    # the first step ends an episode; the last bootstraps from the value after it (2.0)
    adv, _ = gae(rewards, values, np.array([True, False, False]), gamma=0.9, lam=0.8,
                 last_value=2.0)
    np.testing.assert_allclose(adv, [0.5, 2.35 + 0.72 * 3.3, 3.3], rtol=1e-6)


def _best_reachable(graph: ChainGraph, cost, depth: int) -> float:
    """The cheapest chain within `depth` rewrites, by breadth-first search."""
    best, queue, seen = cost(graph), deque([(graph, 0)]), {graph.key()}
    while queue:
        g, d = queue.popleft()
        best = min(best, cost(g))
        for action in g.actions() if d < depth else ():
            new = g.apply(action)
            if new.key() not in seen:
                seen.add(new.key())
                queue.append((new, d + 1))
    return best


def test_the_reward_is_x_rlflows_and_sums_to_the_relative_drop():
    graph, table, best = detour_chain()
    cost = chain_cost(table)
    assert _best_reachable(graph, cost, 5) == best == 3.0
    env = GraphRewriteEnv(graph, cost, horizon=5)
    obs, info = env.reset()
    assert info["action_mask"][: len(obs.actions) + 1].all()
    assert not info["action_mask"][len(obs.actions) + 1:].any()
    labels = [a.label for a in obs.actions]
    total = 0.0
    for label in ("split@2", "fuse@2"):
        obs, reward, terminated, truncated, info = env.step(labels.index(label))
        total += reward
        labels = [a.label for a in obs.actions]
    assert env.current_cost == 3.5 and total == pytest.approx(100 * (7 - 3.5) / 7)
    _, reward, terminated, _, _ = env.step(len(obs.actions))  # stop
    assert terminated and reward == 0.0
    assert env.best.cost == 3.5 and env.best.path == ("split@2", "fuse@2")
    assert env.best.path_costs[0] > 7 and env.best.path_costs[1] == 3.5  # through a costlier one


def _folds_chain():
    """Two scales that fold into the matmuls after them (s m -> m), a third before an x that
    cannot, and a `spread` rule (m -> m m) that only costs: the best folds both and stops, at
    3.5 from 5.5."""
    rules = (ChainRule("fold", ("s", "m"), ("m",)), ChainRule("spread", ("m",), ("m", "m")))
    table = {"s": 1.0, "m": 1.0, "x": 0.5}
    return ChainGraph(("s", "m", "s", "x", "s", "m"), rules, tuple(table)), table, 3.5


def _learn(graph, cost, best, *, horizon: int):
    """PPO on one chain until its most likely episode reaches `best` (checked every 5 updates,
    at most 100); the env and the last update's metrics."""
    env = GraphRewriteEnv(graph, cost, horizon=horizon)
    config = PPOConfig(episodes_per_update=8)
    trainer = Trainer(make_policy(node_dim=graph.node_features().shape[1], edge_dim=1,
                                  rules=len(graph.rules), config=config, seed=0), config)
    trainer.episode(env, greedy=True)
    assert env.current_cost > best  # the untrained policy does not find it
    metrics = {}
    for update in range(100):
        metrics = trainer.update(list(itertools.chain.from_iterable(
            trainer.episode(env) for _ in range(config.episodes_per_update))))
        if update % 5 == 4:
            trainer.episode(env, greedy=True)
            if env.current_cost == best:
                break
    assert env.current_cost == best, f"PPO ended at {env.current_cost} ({env.path})"
    return env, metrics


def test_ppo_learns_the_best_sequence_of_folds():
    graph, table, best = _folds_chain()
    assert _best_reachable(graph, chain_cost(table), 4) == best
    env, _ = _learn(graph, chain_cost(table), best, horizon=4)
    assert len(env.path) == 2 and all(step.startswith("fold@") for step in env.path)


def test_ppo_learns_a_sequence_that_passes_through_a_costlier_graph():
    """Greedy shrinks both a's (cost 6); the best (3) first splits an a, which costs more."""
    graph, table, best = detour_chain()
    cost = chain_cost(table)
    env, metrics = _learn(graph, cost, best, horizon=5)
    costs = [cost(graph)]
    for label in env.path:  # replay: some step raises the cost
        graph = graph.apply(next(a for a in graph.actions() if a.label == label))
        costs.append(cost(graph))
    assert any(b > a for a, b in itertools.pairwise(costs)), costs
    assert set(metrics) >= {"losses/policy_loss", "losses/value_loss", "losses/entropy",
                            "losses/approx_kl", "losses/clip_fraction",
                            "losses/explained_variance"}
    assert metrics["losses/approx_kl"] >= 0.0


def test_the_policy_saves_and_loads_without_pickle(tmp_path):
    graph, _, _ = detour_chain()
    config = PPOConfig(hidden=16, layers=2)
    dims = {"node_dim": graph.node_features().shape[1], "edge_dim": 1}
    policy = make_policy(rules=3, config=config, seed=3, **dims)
    path = tmp_path / "policy.npz"
    save_policy(path, policy, config=config, rule_names=graph.rule_names,
                manifest={"steps": 7}, **dims)
    with np.load(path, allow_pickle=False) as arrays:
        assert {"rule_head.0.weight", "value_head.2.bias"} <= set(arrays.files)
    loaded, loaded_config, manifest = load_policy(path, GraphPolicy)
    assert loaded_config == config and manifest["steps"] == 7
    assert manifest["rules"] == list(graph.rule_names)
    assert json.loads(path.with_suffix(".json").read_text())["node_dim"] == dims["node_dim"]
    env = GraphRewriteEnv(graph, lambda g: 1.0)
    batch = batch_observations([env.reset()[0]], 3)
    for a, b in zip(policy(batch), loaded(batch), strict=True):
        torch.testing.assert_close(a, b)


def _roofline(mod) -> float:
    from harl.frontend.tasks import extract_tasks
    from harl.target import parse_target

    return sum(t.weight * (t.flop / 5e7 + 0.005) for t in extract_tasks(mod, parse_target(None)))


@pytest.mark.parametrize("name", ["transformer_block", "cnn"])
def test_sampled_actions_on_real_rules_always_apply(name):
    from harl.graph.load import relax_of_onnx

    mod = relax_of_onnx(EXAMPLES / f"{name}.onnx")
    graph = RelaxGraph(mod, ALL_RULES)
    assert graph.node_features().shape[1] == NODE_DIM and graph.edges()[1].shape[1] == EDGE_DIM
    env = GraphRewriteEnv(graph, lambda g: _roofline(g.mod), horizon=4)
    policy = make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(ALL_RULES),
                         config=PPOConfig(), seed=0)
    trainer, applied = Trainer(policy, PPOConfig(), seed=1), 0
    for _ in range(3):
        for step in trainer.episode(env):
            applied += step.action < len(step.obs.actions)
    assert applied and env.failures == 0  # every sampled rewrite applied
    best = env.best
    assert best.cost <= env.initial_cost
    inputs = random_relax_inputs(mod)
    for got, want in zip(run_relax(best.graph.mod, inputs), run_relax(mod, inputs),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_relax_node_features_read_shapes_flops_and_edges():
    from harl.graph.load import relax_of_onnx
    from harl.graph.rl.relax_graph import KINDS, LOG_SCALE, SHAPE_DIMS

    graph = RelaxGraph(relax_of_onnx(EXAMPLES / "cnn.onnx"), ALL_RULES)
    nodes, (links, sizes) = graph.node_features(), graph.edges()
    param = graph.mod["main"].params[0]
    shape = tuple(int(d) for d in param.ty.shape.values)
    base = len(KINDS)
    assert nodes[0, KINDS.index("param")] == 1.0 and nodes[0, base] == len(shape) / SHAPE_DIMS
    assert nodes[0, base + 1] == pytest.approx(np.log1p(np.prod(shape)) / LOG_SCALE)
    conv = next(i for i in range(len(nodes)) if nodes[i, KINDS.index("nn.conv2d")] == 1.0)
    assert nodes[conv, -1] > nodes[conv, base + 1] > 0  # multiply-adds exceed its outputs
    assert len(links) >= len(nodes) - 1 and (sizes > 0).all()


def test_a_failing_rewrite_is_masked_and_leaves_the_graph():
    from harl.graph.load import relax_of_onnx

    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    graph = RelaxGraph(mod, [BrokenRule(), rule_by_name("fold_scale_matmul")])
    env = GraphRewriteEnv(graph, lambda g: _roofline(g.mod))
    obs, _ = env.reset()
    assert [a.rule for a in obs.actions] == [0, 1]
    obs, reward, terminated, _, info = env.step(0)
    assert reward == 0.0 and not terminated and env.graph is graph
    assert [a.rule for a in obs.actions] == [1] and info["action_mask"].sum() == 2


def test_rl_search_returns_the_cheapest_graph_it_reached():
    from harl.graph.load import relax_of_onnx
    from harl.graph.search.rl import rl_search

    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    seen = []

    def cost(graph):
        seen.append(_roofline(graph))
        return seen[-1]

    result = rl_search(mod, cost, config=RlConfig(episodes=4, horizon=3,
                                                  ppo=PPOConfig(episodes_per_update=2)))
    assert result.episodes == 5 and result.updates == 2 and result.policy == "fresh"
    assert result.cost == min(seen) == pytest.approx(_roofline(result.mod))
    assert result.initial_cost == seen[0] and result.evals == len(seen)
    assert len(result.applied) <= 3 and (result.cost < result.initial_cost) == bool(
        result.applied)


def test_a_trained_policy_plays_its_most_likely_episode_first(tmp_path):
    from harl.graph.load import relax_of_onnx
    from harl.graph.search.rl import rl_search

    path = tmp_path / "trained.npz"
    config = PPOConfig(hidden=8, layers=1, episodes_per_update=2)
    save_policy(path, make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(ALL_RULES),
                                  config=config), config=config, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=tuple(r.name for r in ALL_RULES))
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    result = rl_search(mod, _roofline, config=RlConfig(episodes=2, horizon=3, policy=str(path),
                                                       ppo=config))
    # zero-shot, two sampled (one update), the last most likely one
    assert (result.episodes, result.updates, result.policy) == (4, 1, str(path))
    assert result.cost <= result.initial_cost


def test_the_shipped_policy_is_a_cpu_search_s_start():
    from harl.graph.rules import search_rules
    from harl.graph.search.rl import SHIPPED_POLICY, starting_policy

    names = tuple(r.name for r in search_rules(blocked_convs=True))
    policy, _, source = starting_policy(RlConfig(), names, node_dim=NODE_DIM, edge_dim=EDGE_DIM)
    assert source == "shipped" and policy.rules == len(names)
    manifest = json.loads(SHIPPED_POLICY.with_suffix(".json").read_text())
    means = manifest["evaluation"]["mean_cut_percent"]  # what the tool's gate passed on
    assert means["policy_greedy"] > max(means["random_mean"], 0.0)


def test_a_policy_for_other_rules_is_not_used(tmp_path):
    from harl.graph.search.rl import starting_policy

    path = tmp_path / "other.npz"
    config = PPOConfig(hidden=8, layers=1)
    save_policy(path, make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=2,
                                  config=config), config=config, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=("a", "b"))
    names = tuple(r.name for r in ALL_RULES)
    _, _, source = starting_policy(RlConfig(policy=str(path)), names, node_dim=NODE_DIM,
                                   edge_dim=EDGE_DIM)
    assert source == "fresh"
    save_policy(path, make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(names),
                                  config=config), config=config, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=names)
    policy, ppo, source = starting_policy(RlConfig(policy=str(path)), names,
                                          node_dim=NODE_DIM, edge_dim=EDGE_DIM)
    assert source == str(Path(path)) and ppo.hidden == 8 and policy.rules == len(names)
