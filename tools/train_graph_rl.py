"""Train the graph agent (`--graph rl`) across the graph corpus and ship it if it beats a random
policy on the held-out graphs.

    python tools/train_graph_rl.py                     # train, evaluate, write if it wins
    python tools/train_graph_rl.py --minutes 8 --updates 400 --out harl/data/graph_rl_policy.npz
    python tools/train_graph_rl.py --evaluate harl/data/graph_rl_policy.npz   # evaluate only

The corpus (tools/benchlib/graph_corpus.py) is small torch modules with random weights, none a
benchmark model; its held-out third is never trained on. Graphs are priced as the product's
first search prices them, by GraphCostModel with the shipped cost-model prior, but with 4
sampled schedules per unmeasured task instead of 16: on these small graphs a new graph costs
0.1-0.4 s, so training fits a few CPU-minutes (the roofline alone, `samples=0`, is faster but
sees almost no rewrite pay on them). As in a run on this CPU, a graph is priced after the conv
layout pass and the rules are the search's (blocked convs, no NHWC rules; --all-rules: every
rule, no layout). The product fine-tunes online with its own estimates.
The policy is written as .npz (weights) and .json (config, corpus, updates, date, TVM version,
the evaluation) only where its most likely episode (zero-shot) cuts the held-out graphs' cost
more than a random policy's episode does on average, and more than taking nothing, and
`--graph rl` at its defaults cuts them at least as much from it as from a fresh policy,
unless --force.
"""

from __future__ import annotations

import json
import sys
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

from harl.graph.rl.env import GraphRewriteEnv  # noqa: E402
from harl.graph.rl.policy import GraphPolicy  # noqa: E402
from harl.graph.rl.ppo import Trainer, make_policy  # noqa: E402
from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph  # noqa: E402
from harl.graph.rl.saving import load_policy, save_policy  # noqa: E402
from harl.graph.search.rl import SHIPPED_POLICY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HORIZON = 6
LEARNING_RATE = 1e-3
"""PPO's step size across the corpus (the product's 3e-3 fine-tunes on one graph): at 3e-3 the
policy collapsed onto merging convs and could not leave it (docs/experiments.md)"""


def make_envs(graph_specs, work: Path, cost_model, *, rules,
              layout=None) -> dict[str, GraphRewriteEnv]:
    """One environment per corpus graph over `rules`, each with its own cost memo; a graph is
    priced after `layout` (the conv layout pass), as a run prices it."""
    from harl.graph.search.common import CostMemo

    price = module_price(cost_model, layout)
    envs = {}
    for spec in graph_specs:
        memo = CostMemo(price)
        graph = RelaxGraph(relax_graph_of(spec, work), rules)
        envs[spec.name] = GraphRewriteEnv(graph, lambda g, memo=memo: memo(g.mod),
                                          horizon=HORIZON)
    return envs


def random_episode(env: GraphRewriteEnv, rng: np.random.Generator, *, stops: bool) -> float:
    """One episode of uniformly random legal actions (the stop among them with `stops`, else
    rewrites until the horizon); the final cost."""
    obs, _ = env.reset()
    done = False
    while not done:
        action = int(rng.integers(len(obs.actions) + (1 if stops else 0)))
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    return env.current_cost


def evaluate(envs: dict[str, GraphRewriteEnv], trainer: Trainer, *, k: int,
             seed: int) -> dict:
    """Per held-out graph, the relative cost cut (%) of: the policy's most likely episode
    (zero-shot), the best of its `k` sampled episodes, the mean and the best of `k` random ones
    (the stop among the actions), the best of `k` random ones without the stop, and greedy
    search for reference; and their means."""
    from harl.graph.search.greedy import greedy as greedy_search

    rng = np.random.default_rng(seed)
    rows = {}
    for name, env in envs.items():
        def cut(cost, env=env):
            return 100.0 * (env.initial_cost - cost) / env.initial_cost

        trainer.episode(env, greedy=True)
        greedy = cut(env.current_cost)
        sampled = []
        for _ in range(k):
            trainer.episode(env)
            sampled.append(cut(env.current_cost))
        random = [cut(random_episode(env, rng, stops=True)) for _ in range(k)]
        rows[name] = {
            "policy_greedy": greedy, "policy_best_of_k": max(sampled),
            "random_mean": float(np.mean(random)), "random_best_of_k": max(random),
            "random_no_stop_best_of_k": max(cut(random_episode(env, rng, stops=False))
                                            for _ in range(k)),
            "greedy_search": cut(greedy_search(env.start.mod, lambda mod, env=env: env.cost(
                RelaxGraph(mod, env.start.rules)), rules=env.start.rules, max_evals=60).cost)}
    means = {key: float(np.mean([row[key] for row in rows.values()]))
             for key in next(iter(rows.values()))}
    return {"k": k, "per_graph": rows, "mean_cut_percent": means}


def online(envs: dict[str, GraphRewriteEnv], policy: str) -> dict:
    """Per held-out graph, the cost cut (%) of the product's search (`--graph rl` at its
    defaults: episodes fine-tuning the policy on the graph, the cheapest graph reached) from
    `policy` (fresh, or a policy file), and the estimates it spent before first reaching that
    graph's cost; and their means."""
    from harl.graph.rl.config import RlConfig
    from harl.graph.search.rl import rl_search

    rows = {}
    for name, env in envs.items():
        costs: list[float] = []  # one per distinct graph: rl_search memoises its calls

        def cost(mod, env=env, costs=costs):
            costs.append(env.cost(RelaxGraph(mod, env.start.rules)))
            return costs[-1]

        found = rl_search(env.start.mod, cost, config=RlConfig(policy=policy),
                          rules=env.start.rules)
        rows[name] = {"cut": 100.0 * (env.initial_cost - found.cost) / env.initial_cost,
                      "estimates_to_best": 1 + next(i for i, c in enumerate(costs)
                                                    if c <= found.cost)}
    return {"per_graph": rows,
            "mean_cut_percent": float(np.mean([row["cut"] for row in rows.values()])),
            "mean_estimates_to_best": float(np.mean([row["estimates_to_best"]
                                                     for row in rows.values()]))}


def train(envs: dict[str, GraphRewriteEnv], trainer: Trainer, *, updates: int, minutes: float,
          seed: int, log_path: Path) -> dict:
    """PPO over the training graphs: each update's episodes on graphs drawn at random."""
    return ppo_across_graphs(envs, trainer, updates=updates, minutes=minutes, seed=seed,
                             log_path=log_path)


def main(argv: list[str] | None = None) -> int:
    parser = training_parser(__doc__.split("\n\n")[0], updates=400, minutes=8.0, k=4,
                             out=SHIPPED_POLICY, work=ROOT / "logs" / "graph_rl", all_rules=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from harl.target import parse_target

    (args.work / "corpus").mkdir(parents=True, exist_ok=True)
    train_specs, held_specs = split(specs())
    target = parse_target("llvm")
    cost_model = corpus_cost_model(target, args)
    rules, layout = product_setting(target, args.all_rules)
    held = make_envs(held_specs, args.work / "corpus", cost_model, rules=rules, layout=layout)
    config = ppo_config(args.ppo, learning_rate=LEARNING_RATE)
    if args.evaluate is not None:
        policy, config, _ = load_policy(args.evaluate, GraphPolicy)
        print(json.dumps(evaluate(held, Trainer(policy, config, seed=args.seed), k=args.k,
                                  seed=args.seed)["mean_cut_percent"], indent=1))
        for start in (str(args.evaluate), "fresh"):
            print(f"online from {start}: {online(held, start)}")
        return 0
    envs = make_envs(train_specs, args.work / "corpus", cost_model, rules=rules, layout=layout)
    policy = make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                         rules=len(next(iter(envs.values())).start.rule_names), config=config,
                         seed=args.seed)
    trainer = Trainer(policy, config, seed=args.seed)
    fresh = evaluate(held, Trainer(make_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                                               rules=policy.rules, config=config,
                                               seed=args.seed), config, seed=args.seed),
                     k=args.k, seed=args.seed)["mean_cut_percent"]
    run = train(envs, trainer, updates=args.updates, minutes=args.minutes, seed=args.seed,
                log_path=args.work / "train_metrics.jsonl")
    result = evaluate(held, trainer, k=args.k, seed=args.seed)
    means = result["mean_cut_percent"]
    print(f"trained: {run}")
    print("held-out mean cost cut (%): " + ", ".join(f"{k} {v:.3f}" for k, v in means.items())
          + f"; the untrained policy's best of k: {fresh['policy_best_of_k']:.3f}")
    rule_names = next(iter(envs.values())).start.rule_names
    candidate = args.work / "candidate.npz"
    save_policy(candidate, trainer.policy, config=config, node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                rule_names=rule_names)
    result["online"] = {"trained": online(held, str(candidate)), "fresh": online(held, "fresh")}
    online_runs = result["online"]
    print("held-out mean cost cut (%) of --graph rl at its defaults (estimates to its best): "
          + ", ".join(f"from the {start} policy {run['mean_cut_percent']:.3f} "
                      f"({run['mean_estimates_to_best']:.1f})"
                      for start, run in online_runs.items()))
    wins = (means["policy_greedy"] > max(means["random_mean"], 0.0)
            and online_runs["trained"]["mean_cut_percent"]
            >= online_runs["fresh"]["mean_cut_percent"])
    if not (wins or args.force):
        print("zero-shot, the policy does not beat a random one's episode on the held-out "
              "graphs, or --graph rl from it cuts less than from a fresh one: nothing written")
        return 1
    save_policy(args.out, trainer.policy, config=config, node_dim=NODE_DIM, edge_dim=EDGE_DIM,
                rule_names=rule_names, manifest={
                    **provenance("tools/train_graph_rl.py", train_specs=train_specs,
                                 held_specs=held_specs, run=run, seed=args.seed,
                                 evaluation=result, score_injective=args.score_injective),
                    "conv_layout": "imported" if layout is None else "nchwc",
                    "horizon": HORIZON, "untrained_policy_mean_cut_percent": fresh})
    print(f"written: {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
