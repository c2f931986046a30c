"""GO's policy on harl's rewrite graphs: one pass decides every match of an unseen graph (any
segment size, graphs shorter than a segment included), segments see only the previous
segment's detached memory, a pass skips matches an earlier rewrite changed, the policy saves
and loads without pickle, PPO improves the greedy episode on the synthetic chains, the search
keeps to its budget on a real graph, and `--graph go` runs end to end on real TVM."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, harl_tune_here, tiny_graph_config, trial_record_lines

from harl.graph.rl.chain import ChainGraph, ChainRule, chain_cost, detour_chain
from harl.graph.rl.config import GoConfig, PPOConfig
from harl.graph.rl.go_env import GoEnv, apply_pass
from harl.graph.rl.go_policy import GoPolicy, SegmentAttention, make_go_policy
from harl.graph.rl.policy import batch_observations
from harl.graph.rl.ppo import Trainer, stack_actions
from harl.graph.rl.saving import load_policy, save_policy

torch.set_num_threads(1)

RULES = (ChainRule("split", ("a",), ("b", "b")), ChainRule("fuse", ("b", "b", "c"), ("d",)),
         ChainRule("shrink", ("a",), ("e",)))
VOCAB = ("a", "b", "c", "d", "e", "x")


def _chain(ops: str) -> ChainGraph:
    return ChainGraph(tuple(ops), RULES, VOCAB)


def _policy(config: PPOConfig, *, segment: int, seed: int = 0, heads: int = 2):
    return make_go_policy(node_dim=len(VOCAB) + 1, edge_dim=1, rules=len(RULES), config=config,
                          heads=heads, segment=segment, seed=seed)


def _nudge(policy) -> None:
    """Random weights in the take head, so that decisions are not all one half."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        last = policy.take_head[-1]
        last.weight.copy_(torch.randn(last.weight.shape, generator=generator))
        last.bias.fill_(0.1)


@pytest.mark.parametrize("segment", [1, 3, 64])
def test_a_policy_decides_every_match_of_an_unseen_graph_in_one_pass(segment):
    policy = _policy(PPOConfig(hidden=16, layers=2), segment=segment)
    _nudge(policy)
    graphs = [_chain("axacaxac"), _chain("ac"), _chain("xx"),  # never trained on; no match
              _chain("xaxxacaxaacxa")]
    observations = [GoEnv(g, lambda g: 1.0 + len(g.ops)).reset()[0] for g in graphs]
    generator = torch.Generator().manual_seed(1)
    decisions = [policy.decide(obs, generator=generator) for obs in observations]
    for obs, decision in zip(observations, decisions, strict=True):
        assert decision.take.dtype == bool and decision.take.shape == (len(obs.actions),)
        assert (decision.logprob < 0) == bool(obs.actions) and np.isfinite(decision.value)
    assert any(d.take.any() for d in decisions) and not all(d.take.all() for d in decisions)
    # the batch's log-probs are the single decisions', each graph attended apart from the others
    batch = batch_observations(observations, len(RULES))
    logp, entropy, values = policy.evaluate(batch, stack_actions([d.take for d in decisions]))
    assert logp.shape == entropy.shape == values.shape == (len(graphs),)
    torch.testing.assert_close(logp, torch.tensor([d.logprob for d in decisions]))
    torch.testing.assert_close(values, torch.tensor([d.value for d in decisions]))
    bound = [len(obs.actions) * np.log(2) for obs in observations]  # Bernoulli entropy <= ln 2
    assert ((entropy > 0) == torch.tensor([bool(o.actions) for o in observations])).all()
    assert (entropy <= torch.tensor(bound) + 1e-5).all()
    greedy = policy.decide(observations[3], greedy=True)
    logits, _ = policy(batch_observations(observations[3:], len(RULES)))
    assert (greedy.take == (logits > 0).numpy()).all()


def test_a_fresh_policy_takes_each_match_with_its_prior():
    obs = GoEnv(_chain("xaxxacaxaacxa"), lambda g: 1.0 + len(g.ops)).reset()[0]
    for prior in (0.5, 0.1):
        policy = make_go_policy(node_dim=len(VOCAB) + 1, edge_dim=1, rules=len(RULES),
                                config=PPOConfig(hidden=16, layers=2), heads=2, segment=4,
                                take_prior=prior)
        logits, _ = policy(batch_observations([obs], len(RULES)))
        torch.testing.assert_close(torch.sigmoid(logits), torch.full_like(logits, prior))
        assert not policy.decide(obs, greedy=True).take.any()  # greedy: none above one half


def test_a_segment_sees_the_previous_segments_memory_and_no_later_one():
    torch.manual_seed(0)
    layer = SegmentAttention(8, heads=2, segment=3)
    h = torch.randn(9, 8, requires_grad=True)  # a graph of 7 nodes (segments 0-2, 3-5, 6), then 2
    node_graph = torch.tensor([0] * 7 + [1] * 2)
    out = layer(h, node_graph, 2)
    assert out.shape == (9, 8)
    later = h.detach().clone()
    later[4] += 1.0  # in the second segment
    moved = (layer(later, node_graph, 2) - out).abs().sum(1) > 1e-6
    assert not moved[:3].any() and moved[3:7].all() and not moved[7:].any()
    earlier = h.detach().clone()
    earlier[1] += 1.0  # in the first: its output is the second segment's memory
    moved = (layer(earlier, node_graph, 2) - out).abs().sum(1) > 1e-6
    assert moved[:7].all() and not moved[7:].any()
    # the memory is detached: no gradient into the first segment. (Weighted: the layer's
    # normalised rows each sum to a constant, so a plain sum has no gradient at all.)
    (out[3:6] * torch.randn(3, 8)).sum().backward()
    assert (h.grad[:3] == 0).all() and (h.grad[3:6] != 0).any() and (h.grad[6:] == 0).all()


def test_a_pass_skips_a_taken_match_an_earlier_rewrite_changed():
    graph = _chain("axac")
    actions = graph.actions()
    labels = [a.label for a in actions]
    assert labels == ["split@0", "split@2", "shrink@0", "shrink@2"]
    done = apply_pass(graph, actions, np.array([True, False, True, True]))
    # split@0 makes b b x a c: shrink@0 is gone, and the a shrink@2 meant is now at 3
    assert done.graph.ops == ("b", "b", "x", "a", "c") and done.applied == ("split@0",)
    assert done.skipped == 2 and done.failed == 0
    done = apply_pass(graph, actions, np.array([False, False, True, True]))
    assert done.graph.ops == ("e", "x", "e", "c") and done.skipped == 0


def test_a_pass_is_priced_once_and_the_budget_ends_an_episode():
    graph, table, _ = detour_chain()
    priced = []

    def cost(g) -> float:
        priced.append(g.ops)
        return chain_cost(table)(g)

    env = GoEnv(graph, cost, passes=3, affordable=lambda g: len(priced) < 3)
    obs, _ = env.reset()
    take = np.array([a.label in ("split@2", "shrink@0") for a in obs.actions])
    obs, reward, terminated, truncated, _ = env.step(take)
    assert priced == [("a", "x", "a", "c"), ("e", "x", "b", "b", "c")]  # the start, one pass
    assert reward == pytest.approx(100 * (7 - 7.5) / 7) and not (terminated or truncated)
    obs, reward, terminated, _, _ = env.step(np.array([a.label == "fuse@2"
                                                       for a in obs.actions]))
    assert reward == pytest.approx(100 * (7.5 - 3) / 7) and terminated  # no match left
    assert env.best.cost == 3.0 and env.best.pass_costs == (7.5, 3.0)
    assert env.best.passes == (("split@2", "shrink@0"), ("fuse@2",))
    obs, _ = env.reset()
    _, reward, terminated, _, _ = env.step(np.array([a.label == "split@0"
                                                     for a in obs.actions]))
    assert terminated and reward == 0.0 and env.graph is graph  # no estimate left
    assert len(priced) == 3
    obs, _ = env.reset()
    _, reward, terminated, _, _ = env.step(np.zeros(len(obs.actions), dtype=bool))
    assert terminated and reward == 0.0  # nothing taken ends the episode


def test_the_policy_saves_and_loads_without_pickle(tmp_path):
    config = PPOConfig(hidden=16, layers=2)
    policy = _policy(config, segment=3, seed=3)
    _nudge(policy)
    path = tmp_path / "go.npz"
    save_policy(path, policy, config=config, node_dim=len(VOCAB) + 1, edge_dim=1,
                rule_names=tuple(r.name for r in RULES), manifest={"updates": 5})
    with np.load(path, allow_pickle=False) as arrays:
        assert {"attention.attention.in_proj_weight", "take_head.2.bias",
                "value_head.2.bias"} <= set(arrays.files)
    loaded, loaded_config, manifest = load_policy(path, GoPolicy)
    assert loaded_config == config and manifest["updates"] == 5
    assert manifest["segment"] == 3 and manifest["heads"] == 2
    assert json.loads(path.with_suffix(".json").read_text())["rules"] == list(
        r.name for r in RULES)
    obs = GoEnv(_chain("axacaxaxac"), lambda g: 1.0).reset()[0]
    for greedy in (True, False):
        a = policy.decide(obs, greedy=greedy, generator=torch.Generator().manual_seed(2))
        b = loaded.decide(obs, greedy=greedy, generator=torch.Generator().manual_seed(2))
        assert (a.take == b.take).all() and a.logprob == b.logprob and a.value == b.value


def _folds_chain():
    """Scales that fold into the matmul after them (s m -> m) and a rule that only costs."""
    rules = (ChainRule("fold", ("s", "m"), ("m",)), ChainRule("spread", ("m",), ("m", "m")))
    table = {"s": 1.0, "m": 1.0, "x": 0.5}
    return ChainGraph(("s", "m", "s", "x", "s", "m"), rules, tuple(table)), table


def test_ppo_across_two_chains_improves_the_greedy_episodes():
    """Trained jointly on two chains (their rules apart), the greedy episode on each earns more
    than the untrained policy's (which takes nothing)."""
    detour, detour_table, _ = detour_chain()
    folds, folds_table = _folds_chain()
    vocab = tuple(sorted(set(detour.vocab) | set(folds.vocab)))
    rules = detour.rules + folds.rules
    envs = [GoEnv(ChainGraph(g.ops, rules, vocab), chain_cost(table), passes=3)
            for g, table in ((detour, detour_table), (folds, folds_table))]
    config = PPOConfig(hidden=32, layers=2, episodes_per_update=8)
    policy = make_go_policy(node_dim=len(vocab) + 1, edge_dim=1, rules=len(rules),
                            config=config, heads=2, segment=2, seed=0)
    trainer = Trainer(policy, config, seed=0)

    def greedy_returns() -> list[float]:
        return [sum(s.reward for s in trainer.episode(env, greedy=True)) for env in envs]

    untrained = greedy_returns()
    assert untrained == [0.0, 0.0]
    rng, metrics = np.random.default_rng(0), {}
    for _ in range(30):
        metrics = trainer.update(list(itertools.chain.from_iterable(
            trainer.episode(envs[rng.integers(2)]) for _ in range(config.episodes_per_update))))
    trained = greedy_returns()
    assert all(t > u for t, u in zip(trained, untrained, strict=True)), trained
    assert trained[0] == pytest.approx(100 * (7 - 3) / 7)  # the detour's best, 3 from 7
    assert {"losses/approx_kl", "losses/clip_fraction", "losses/explained_variance",
            "losses/entropy"} <= set(metrics)


def _roofline(mod) -> float:
    from harl.frontend.tasks import extract_tasks
    from harl.target import parse_target

    return sum(t.weight * (t.flop / 5e7 + 0.005) for t in extract_tasks(mod, parse_target(None)))


def test_go_search_keeps_to_its_budget_and_returns_the_cheapest_graph_costed():
    from harl.graph.load import relax_of_onnx
    from harl.graph.search.go import go_search

    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    seen = []

    def cost(graph):
        seen.append(_roofline(graph))
        return seen[-1]

    config = GoConfig(passes=2, max_evals=6, finetune_episodes=4, policy="fresh",
                      ppo=PPOConfig(hidden=16, layers=2, episodes_per_update=2))
    result = go_search(mod, cost, config=config)
    assert result.policy == "fresh" and result.zero_shot_cost == result.initial_cost
    assert result.evals == len(seen) <= 6 and result.initial_cost == seen[0]
    assert result.cost == min(seen) == pytest.approx(_roofline(result.mod))
    assert result.applied == [label for labels in result.passes for label in labels]
    assert len(result.path_costs) == len(result.passes) <= 2
    assert (result.cost < result.initial_cost) == bool(result.applied)


def test_a_go_policy_for_other_rules_is_not_used(tmp_path):
    from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM
    from harl.graph.rules import ALL_RULES
    from harl.graph.search.go import starting_go_policy

    config = PPOConfig(hidden=8, layers=1)
    names = tuple(r.name for r in ALL_RULES)
    path = tmp_path / "other.npz"
    for rule_names in (("a", "b"), names[:-1], ("extra",) + names):
        policy = make_go_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(rule_names),
                                config=config, heads=2, segment=5)
        save_policy(path, policy, config=config, node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                    rule_names=rule_names)
        loaded, ppo, source = starting_go_policy(GoConfig(policy=str(path)), names,
                                                 node_dim=NODE_DIM, edge_dim=EDGE_DIM)
        assert source == ("fresh" if len(rule_names) <= len(names) else str(path))
    assert ppo.hidden == 8  # a loaded policy keeps its own width
    # trained on more rules: these rules' embeddings, in the search's order
    assert loaded.rules == len(names) and loaded.rule_embed.weight.shape[0] == len(names)
    torch.testing.assert_close(loaded.rule_embed.weight, policy.rule_embed.weight[1:])


def test_go_end_to_end(tmp_path):
    from harl.graph.search.go import SHIPPED_GO_POLICY

    config = tiny_graph_config(tmp_path)
    work_dir = tmp_path / "run"
    # Tuning only: the graph stage checks the rewritten graph against the original itself (the
    # model's compile and check after tuning are the other searches' end-to-end tests').
    proc = harl_tune_here(EXAMPLES / "transformer_block.onnx", "--graph", "go", "--trials", 4,
                          "--work-dir", work_dir, "--config", config, "--no-evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    graph = report["graph"]
    assert graph["method"] == "go" and graph.get("dropped") is None
    assert graph["go_policy"] == ("shipped" if SHIPPED_GO_POLICY.is_file() else "fresh")
    assert json.loads((work_dir / "graph.json").read_text())["applied"] == graph["applied"]
    for search in (graph, graph["second_search"]):
        assert 1 <= search["graphs_costed"] <= 8  # [graph.go] max_evals
        assert search["estimated_ms_after"] <= search["estimated_ms_before"]
        # a graph is cheaper by more than MIN_GAIN: sums in another order may differ by 1e-16
        assert search["estimated_ms_after"] <= search["go_zero_shot_estimated_ms"] * (1 + 1e-9)
        assert 1 <= search["go_episodes"] <= 4 and search["go_updates"] <= 1
        assert len(search["go_path_estimated_ms"]) == len(search["go_passes"]) <= 2
    assert graph["applied"] == [label for labels in graph["go_passes"] for label in labels]
    assert graph["rewritten"] == bool(graph["applied"])
    assert (work_dir / "model_rewritten.json").exists() == graph["rewritten"]
    lines = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    searches = [line for line in lines if line.get("stage") == "graph"]
    assert [line["search"] for line in searches] == ["first", "second"]
    assert report["trials_done"] == 4 and len(trial_record_lines(work_dir)) == 4
    assert "graph (go): " in proc.stdout
