"""Pretrain RLFlow's world model and its controller (`--graph worldmodel`) across the graph corpus
and ship them if, on the held-out graphs, the product's search from them beats the same search
from fresh ones and random rewrites at the same budget of real estimates.

    python tools/train_graph_worldmodel.py          # train, evaluate, write if it wins
    python tools/train_graph_worldmodel.py --rounds 6 --out harl/data/graph_worldmodel.npz
    python tools/train_graph_worldmodel.py --evaluate harl/data/graph_worldmodel.npz

The corpus (tools/benchlib/graph_corpus.py) is small torch modules with random weights, none a
benchmark model; its held-out third is never trained on. Graphs are priced as
tools/train_graph_go.py prices them (GraphCostModel with the shipped cost-model prior, 4
sampled schedules per unmeasured task, the conv layout pass and the rules a run's search has on
this CPU). Pretraining is the product's loop (harl.graph.rl.dream) across graphs: each round
plays real episodes on every training graph (the controller's, with the search's exploration),
refits the world model on every real transition so far, and trains the controller by PPO in
dreams of training graphs drawn at random (`--updates` updates a round). The world model's
quality is scored on real random episodes of the held-out graphs (`--k` a graph), which it is
never fitted on.

On each held-out graph, `--graph worldmodel` at its defaults (its budget of real estimates)
runs from the pretrained pair and from fresh ones, and random rewrites (uniform, no stop) play
episodes until the same budget is spent; each is run with seeds `--eval-seeds`. The pair is
written (.npz weights and .json manifests: config, corpus, rounds, date, TVM version, the
evaluation) only where the pretrained search's mean cost cut is above both the fresh search's
and random's, unless --force.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

import numpy as np  # noqa: E402
import torch  # noqa: E402
from benchlib.graph_corpus import relax_graph_of, specs, split  # noqa: E402
from benchlib.graph_training import (  # noqa: E402
    corpus_cost_model,
    module_price,
    ppo_across_graphs,
    ppo_config,
    product_setting,
    provenance,
    training_parser,
)

from harl.graph.rl.config import WorldModelConfig  # noqa: E402
from harl.graph.rl.dream import DreamEnv, real_episode  # noqa: E402
from harl.graph.rl.env import GraphRewriteEnv  # noqa: E402
from harl.graph.rl.ppo import Trainer, make_policy  # noqa: E402
from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph  # noqa: E402
from harl.graph.rl.saving import save_policy  # noqa: E402
from harl.graph.rl.world_model import make_world_model, save_world_model  # noqa: E402
from harl.graph.search.common import CostMemo  # noqa: E402
from harl.graph.search.worldmodel import SHIPPED_WORLD_MODEL, controller_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class CorpusGraph:
    """One corpus graph over the search's rules, priced through one memo (over Relax modules)
    that every arm shares, so that an estimate is computed once however many arms ask."""

    def __init__(self, spec, *, work: Path, cost_model, rules, layout) -> None:
        self.name = spec.name
        self.graph = RelaxGraph(relax_graph_of(spec, work), rules)
        self.price = CostMemo(module_price(cost_model, layout))

    def env(self, horizon: int, max_actions: int) -> tuple[GraphRewriteEnv, CostMemo]:
        """A real env on this graph with a memo of its own (counting its real estimates)."""
        memo = CostMemo(lambda graph: self.price(graph.mod), key=lambda graph: graph.key())
        return GraphRewriteEnv(self.graph, memo, horizon=horizon,
                               max_actions=max_actions), memo


def pretrain(graphs: list[CorpusGraph], config: WorldModelConfig, *, rounds: int,
             real_episodes: int, dream_updates: int, minutes: float, seed: int,
             work: Path) -> tuple[object, Trainer, dict]:
    """(world model, controller's trainer, counts): `rounds` of real episodes on every training
    graph, a refit on all of them, `dream_updates` PPO updates in dreams of the graphs; no
    round starts after `minutes`."""
    rules = len(graphs[0].graph.rule_names)
    envs = {g.name: g.env(config.horizon, config.max_actions) for g in graphs}
    trainer = Trainer(make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=rules,
                                  config=config.ppo, seed=seed), config.ppo, seed=seed)
    model = make_world_model(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=rules,
                             config=config.model, seed=seed + 1)
    logged, start, fit = [], time.perf_counter(), {}
    round_ = 0
    for round_ in range(1, rounds + 1):
        for env, memo in envs.values():
            logged.extend(real_episode(env, trainer.policy, memo, max_evals=10**9,
                                       generator=trainer.generator, explore=config.explore)
                          for _ in range(real_episodes))
        fit = model.fit(logged, seed=seed + round_)
        dreams = {name: DreamEnv(env, model) for name, (env, _) in envs.items()}
        left = max(0.0, minutes - (time.perf_counter() - start) / 60)
        ppo_across_graphs(dreams, trainer, updates=dream_updates, minutes=left,
                          seed=seed + round_,
                          log_path=work / f"dream_metrics_round{round_}.jsonl")
        print(f"round {round_}: {sum(len(e) for e in logged)} real steps, "
              f"{sum(m.evals for _, m in envs.values())} real estimates, fit "
              + ", ".join(f"{k.split('/')[-1]} {v:.3g}" for k, v in fit.items()), flush=True)
        if time.perf_counter() - start > 60 * minutes:
            break
    return model, trainer, {
        "rounds": round_, "real_episodes": len(logged),
        "real_steps": sum(len(e) for e in logged), "dream_episodes": trainer.episodes,
        "updates": trainer.updates, "estimates": sum(m.evals for _, m in envs.values()),
        "seconds": round(time.perf_counter() - start, 1), **finite(fit)}


def finite(metrics: dict) -> dict:
    """`metrics` without the values that are not finite (JSON has no NaN)."""
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


def held_out_quality(model, graphs: list[CorpusGraph], config: WorldModelConfig, *,
                     episodes: int, seed: int) -> dict:
    """The world model's scores on random real episodes of graphs it was never fitted on."""
    generator = torch.Generator().manual_seed(seed)
    policy = _any_policy(graphs[0])  # explore=1.0: every step a uniformly random rewrite
    transitions = []
    for graph in graphs:
        env, memo = graph.env(config.horizon, config.max_actions)
        transitions.extend(real_episode(env, policy, memo, max_evals=10**9,
                                        generator=generator, explore=1.0)
                           for _ in range(episodes))
    return finite(model.quality(transitions))


def _any_policy(graph: CorpusGraph):
    """A small untrained policy for `real_episode` with `explore=1.0`, which asks it only for
    the stop where no rewrite is left."""
    from harl.graph.rl.config import PPOConfig

    return make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(graph.graph.rule_names),
                       config=PPOConfig(hidden=8, layers=1))


def random_rewrites(graph: CorpusGraph, config: WorldModelConfig, seed: int) -> tuple[float, int]:
    """(best cost, real estimates) of uniformly random rewrite episodes played until the
    search's budget of real estimates is spent."""
    env, memo = graph.env(config.horizon, config.max_actions)
    generator = torch.Generator().manual_seed(seed)
    policy = _any_policy(graph)
    for _ in range(4 * config.max_evals):  # an episode may add no new graph
        if memo.evals >= config.max_evals or not real_episode(
                env, policy, memo, max_evals=config.max_evals, generator=generator,
                explore=1.0):
            break
    return env.best.cost, memo.evals


def evaluate(graphs: list[CorpusGraph], pretrained: Path, *, seeds: list[int],
             search: WorldModelConfig | None = None) -> dict:
    """Per held-out graph and seed, the cost cut (%) and real estimates of `--graph
    worldmodel` (`search`: its settings, the defaults by default) from `pretrained` and from
    fresh, and of random rewrites at its budget; the means over graphs and seeds, and on how
    many (graph, seed) pairs the pretrained search's cut beat the fresh one's."""
    from harl.graph.search.worldmodel import worldmodel_search

    arms = {"pretrained": str(pretrained), "fresh": "fresh"}
    rows: dict[str, dict] = {}
    for graph in graphs:
        initial = graph.price(graph.graph.mod)
        row: dict[str, list] = {}
        for seed in seeds:
            config = replace(search or WorldModelConfig(), seed=seed)
            for arm, setting in arms.items():
                found = worldmodel_search(graph.graph.mod, graph.price,
                                          config=replace(config, pretrained=setting),
                                          rules=graph.graph.rules)
                if found.pretrained != setting:  # the pair does not fit: say so, never compare
                    raise SystemExit(f"{pretrained} was trained on other rules or features "
                                     f"than {graph.name}'s search has")
                row.setdefault(arm, []).append((found.cost, found.evals))
            row.setdefault("random", []).append(random_rewrites(graph, config, seed))
        cuts = {arm: [100.0 * (initial - c) / initial for c, _ in runs]
                for arm, runs in row.items()}
        rows[graph.name] = {arm: {"cut": float(np.mean(cuts[arm])),
                                  "estimates": float(np.mean([n for _, n in runs]))}
                            for arm, runs in row.items()}
        rows[graph.name]["pretrained_wins"] = sum(
            a > b for a, b in zip(cuts["pretrained"], cuts["fresh"], strict=True))
        rows[graph.name]["pretrained_losses"] = sum(
            a < b for a, b in zip(cuts["pretrained"], cuts["fresh"], strict=True))
    means = {arm: {key: float(np.mean([r[arm][key] for r in rows.values()]))
                   for key in ("cut", "estimates")}
             for arm in ("pretrained", "fresh", "random")}
    return {"seeds": seeds, "per_graph": rows, "mean": means,
            "pretrained_wins": sum(r["pretrained_wins"] for r in rows.values()),
            "pretrained_losses": sum(r["pretrained_losses"] for r in rows.values())}


def save_pair(path: Path, model, trainer: Trainer, *, config: WorldModelConfig,
              rule_names: tuple[str, ...], manifest: dict) -> None:
    """The world model at `path` and its controller beside it, each with `manifest`."""
    save_world_model(path, model, rule_names=rule_names, manifest=manifest)
    save_policy(controller_path(path), trainer.policy, config=config.ppo, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=rule_names, manifest=manifest)


def _say(result: dict) -> None:
    print("held-out mean cost cut (%) and real estimates of --graph worldmodel: "
          + "; ".join(f"{arm} {m['cut']:.3f}% ({m['estimates']:.1f})"
                      for arm, m in result["mean"].items())
          + f"; pretrained against fresh, per graph and seed: {result['pretrained_wins']} "
          f"better, {result['pretrained_losses']} worse", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = training_parser(__doc__.split("\n\n")[0], updates=20, minutes=10.0, k=2,
                             out=SHIPPED_WORLD_MODEL, work=ROOT / "logs" / "graph_worldmodel",
                             updates_help="PPO updates in the dream per round",
                             k_help="random real episodes per held-out graph that score the "
                                    "world model",
                             what="world model (its controller beside it)",
                             beat="a fresh pair and random rewrites")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of (real episodes, refit, dream training)")
    parser.add_argument("--real-episodes", type=int, default=2,
                        help="real episodes per training graph per round")
    parser.add_argument("--eval-seeds", default="0,1,2",
                        help="seeds of each held-out search (comma-separated)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from harl.target import parse_target

    (args.work / "corpus").mkdir(parents=True, exist_ok=True)
    train_specs, held_specs = split(specs())
    target = parse_target("llvm")
    cost_model = corpus_cost_model(target, args)
    rules, layout = product_setting(target, all_rules=False)
    held = [CorpusGraph(s, work=args.work / "corpus", cost_model=cost_model, rules=rules,
                        layout=layout) for s in held_specs]
    seeds = [int(s) for s in args.eval_seeds.split(",")]
    if args.evaluate is not None:
        _say(evaluate(held, args.evaluate, seeds=seeds))
        return 0
    config = WorldModelConfig(ppo=ppo_config(args.ppo), seed=args.seed)
    graphs = [CorpusGraph(s, work=args.work / "corpus", cost_model=cost_model, rules=rules,
                          layout=layout) for s in train_specs]
    model, trainer, run = pretrain(graphs, config, rounds=args.rounds,
                                   real_episodes=args.real_episodes, dream_updates=args.updates,
                                   minutes=args.minutes, seed=args.seed, work=args.work)
    print(f"trained: {run}")
    quality = held_out_quality(model, held, config, episodes=args.k, seed=args.seed)
    print("world model on held-out real transitions: "
          + ", ".join(f"{k.split('/')[-1]} {v:.3g}" for k, v in quality.items()))
    manifest = {**provenance("tools/train_graph_worldmodel.py", train_specs=train_specs,
                             held_specs=held_specs, run=run, seed=args.seed, evaluation={},
                             score_injective=args.score_injective),
                "held_out_quality": quality,
                "conv_layout": "imported" if layout is None else "nchwc",
                "pretraining": {
                    "rounds": args.rounds, "real_episodes_per_graph": args.real_episodes,
                    "dream_updates_per_round": args.updates, "horizon": config.horizon,
                    "explore": config.explore, "max_actions": config.max_actions}}
    rule_names = graphs[0].graph.rule_names
    save_pair(args.work / "candidate.npz", model, trainer, config=config, rule_names=rule_names,
              manifest=manifest)
    result = evaluate(held, args.work / "candidate.npz", seeds=seeds)
    _say(result)
    means = result["mean"]
    wins = means["pretrained"]["cut"] > max(means["fresh"]["cut"], means["random"]["cut"])
    if not (wins or args.force):
        print("the pretrained pair's search does not beat both a fresh one and random "
              "rewrites on the held-out graphs: nothing written")
        return 1
    save_pair(args.out, model, trainer, config=config, rule_names=rule_names,
              manifest={**manifest, "evaluation": result, "beats_fresh_and_random": wins})
    print(f"written: {args.out}, {controller_path(args.out)} and their .json manifests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
