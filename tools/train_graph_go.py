"""Train GO's policy (`--graph go`) jointly across the graph corpus and ship it if its zero-shot
episodes beat a random take/skip policy on the held-out graphs.

    python tools/train_graph_go.py                     # train, evaluate, write if it wins
    python tools/train_graph_go.py --minutes 6 --updates 200 --out harl/data/graph_go_policy.npz
    python tools/train_graph_go.py --evaluate harl/data/graph_go_policy.npz   # evaluate only

The corpus (tools/benchlib/graph_corpus.py) is small torch modules with random weights, none a
benchmark model; its held-out third is never trained on. Graphs are priced as
tools/train_graph_rl.py prices them (GraphCostModel with the shipped cost-model prior and 4
sampled schedules per unmeasured task), after the conv layout pass and over the rules a run's
search has on this CPU (blocked convs, no NHWC rules, and the node rules: a conv's blocked
layout, a fusion fence; --no-node-decisions: without them; --all-rules: every rewrite rule, no
layout).
Each PPO update's episodes are played on training graphs drawn at random, so that a batch
mixes graphs. On the held-out graphs the policy's
greedy episode (zero-shot: no update on them) is compared with a policy that takes each match
with probability one half, for the same number of passes (the mean and the best of k of its
episodes), and with taking every match at every pass; each line says how many estimates (passes
priced) it used per graph. The policy is written as .npz (weights) and .json (config, corpus,
updates, date, TVM version, the evaluation) only where its zero-shot mean cost cut on the
held-out graphs is above the random policy's mean and above zero (taking nothing, which an
untrained policy's greedy episode does), unless --force.
"""

from __future__ import annotations

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

from harl.graph.rl.config import GoConfig  # noqa: E402
from harl.graph.rl.go_env import GoEnv  # noqa: E402
from harl.graph.rl.go_policy import GoPolicy, make_go_policy, restrict_rules  # noqa: E402
from harl.graph.rl.ppo import Trainer  # noqa: E402
from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM, RelaxGraph  # noqa: E402
from harl.graph.rl.saving import load_policy, save_policy  # noqa: E402
from harl.graph.search.go import SHIPPED_GO_POLICY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Priced:
    """A graph's cost through `memo` (over rewrite graphs), shared by every policy played on
    it, counting the graphs priced (what a search with a memo of its own would have spent)."""

    def __init__(self, memo) -> None:
        self.memo, self.calls = memo, 0

    def __call__(self, graph) -> float:
        self.calls += 1
        return self.memo(graph)


def make_envs(graph_specs, work: Path, cost_model, passes: int, *, rules,
              layout=None) -> dict[str, GoEnv]:
    """One env per corpus graph over `rules`, each with its own cost memo; a graph is priced
    after `layout` (a run's lowering: the conv layout pass, the fences), as a run prices it."""
    from harl.graph.search.common import CostMemo

    price = module_price(cost_model, layout)
    envs = {}
    for spec in graph_specs:
        memo = CostMemo(lambda graph: price(graph.mod), key=lambda g: g.key())
        graph = RelaxGraph(relax_graph_of(spec, work), rules)
        envs[spec.name] = GoEnv(graph, Priced(memo), passes=passes)
    return envs


def play(env: GoEnv, decide) -> tuple[float, int]:
    """One episode in `env` whose take masks `decide(observation)` gives; (final cost, passes
    priced)."""
    before = env.cost.calls
    obs, _ = env.reset()
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(decide(obs))
        done = terminated or truncated
    return env.current_cost, env.cost.calls - before


def evaluate(envs: dict[str, GoEnv], policy, *, k: int, seed: int) -> dict:
    """Per held-out graph, the relative cost cut (%) and the passes priced of: the policy's
    greedy episode (zero-shot), k episodes taking each match with probability one half (their
    mean and best), and taking every match; and their means over the graphs."""
    rng = np.random.default_rng(seed)
    rows = {}
    for name, env in envs.items():
        def cut(cost, env=env):
            return 100.0 * (env.initial_cost - cost) / env.initial_cost

        zero_shot, zero_shot_priced = play(env, lambda obs: policy.decide(obs, greedy=True).take)
        randoms = [play(env, lambda obs: rng.random(len(obs.actions)) < 0.5) for _ in range(k)]
        take_all, take_all_priced = play(env, lambda obs: np.ones(len(obs.actions), bool))
        rows[name] = {
            "policy_zero_shot": cut(zero_shot), "policy_zero_shot_estimates": zero_shot_priced,
            "random_mean": float(np.mean([cut(c) for c, _ in randoms])),
            "random_best_of_k": max(cut(c) for c, _ in randoms),
            "random_estimates_per_episode": float(np.mean([n for _, n in randoms])),
            "take_all": cut(take_all), "take_all_estimates": take_all_priced}
    means = {key: float(np.mean([row[key] for row in rows.values()]))
             for key in next(iter(rows.values()))}
    return {"k": k, "per_graph": rows, "mean": means}


def online(envs: dict[str, GoEnv], policy: str) -> dict:
    """Per held-out graph, the cost cut (%) and estimates of `--graph go` at its defaults
    (zero-shot, then fine-tuning) from `policy` (fresh, or a policy file); and the means."""
    from harl.graph.search.go import go_search

    rows = {}
    for name, env in envs.items():
        found = go_search(env.start.mod, lambda mod, env=env: env.cost.memo(
            RelaxGraph(mod, env.start.rules)), config=GoConfig(policy=policy),
            rules=env.start.rules)
        rows[name] = {"cut": 100.0 * (env.initial_cost - found.cost) / env.initial_cost,
                      "estimates": found.evals}
    return {"per_graph": rows,
            "mean_cut_percent": float(np.mean([r["cut"] for r in rows.values()])),
            "mean_estimates": float(np.mean([r["estimates"] for r in rows.values()]))}


def train(envs: dict[str, GoEnv], trainer: Trainer, *, updates: int, minutes: float, seed: int,
          log_path: Path) -> dict:
    """PPO over the training graphs: each update's episodes on graphs drawn at random."""
    run = ppo_across_graphs(envs, trainer, updates=updates, minutes=minutes, seed=seed,
                            log_path=log_path, unit="passes")
    return {"updates": run["updates"], "episodes": run["episodes"],
            "passes_played": run["steps"], "seconds": run["seconds"],
            "estimates": sum(env.cost.memo.evals for env in envs.values())}


def _say(label: str, means: dict) -> None:
    print(f"{label}: zero-shot cut {means['policy_zero_shot']:.3f}% "
          f"({means['policy_zero_shot_estimates']:.2f} estimates a graph); random take/skip "
          f"mean {means['random_mean']:.3f}%, best of k {means['random_best_of_k']:.3f}% "
          f"({means['random_estimates_per_episode']:.2f} estimates an episode); take all "
          f"{means['take_all']:.3f}% ({means['take_all_estimates']:.2f})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = training_parser(__doc__.split("\n\n")[0], updates=200, minutes=6.0, k=8,
                             out=SHIPPED_GO_POLICY, work=ROOT / "logs" / "graph_go",
                             k_help="random episodes per held-out graph", all_rules=True)
    parser.add_argument("--passes", type=int, default=GoConfig.passes,
                        help="passes per episode, in training and evaluation")
    parser.add_argument("--segment", type=int, default=GoConfig.segment)
    parser.add_argument("--heads", type=int, default=GoConfig.heads)
    parser.add_argument("--take-prior", type=float, default=0.5,
                        help="a fresh policy's probability of taking each match")
    parser.add_argument("--no-node-decisions", action="store_true",
                        help="without the node rules (a conv's blocked layout, fusion fences)")
    parser.add_argument("--online", action="store_true",
                        help="also run --graph go at its defaults on the held-out graphs, from "
                             "the trained policy and from a fresh one")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from harl.graph.config import GraphConfig
    from harl.graph.pipeline import conv_layout_pass
    from harl.target import parse_target

    (args.work / "corpus").mkdir(parents=True, exist_ok=True)
    train_specs, held_specs = split(specs())
    target = parse_target("llvm")
    cost_model = corpus_cost_model(target, args)
    rules, layout = product_setting(target, args.all_rules,
                                    node_decisions=not args.no_node_decisions)
    held = make_envs(held_specs, args.work / "corpus", cost_model, args.passes, rules=rules,
                     layout=layout)
    if args.evaluate is not None:
        policy, _, manifest = load_policy(args.evaluate, GoPolicy)
        offered = [rule.name for rule in rules]
        if list(manifest["rules"]) != offered:  # as a search that offers fewer rules uses it
            policy = restrict_rules(policy, manifest["rules"], offered)
        result = evaluate(held, policy, k=args.k, seed=args.seed)
        _say(f"{args.evaluate} on the held-out graphs", result["mean"])
        if args.online:
            for start in (str(args.evaluate), "fresh"):
                print(f"online from {start}: {online(held, start)}")
        return 0
    config = ppo_config(args.ppo)
    envs = make_envs(train_specs, args.work / "corpus", cost_model, args.passes, rules=rules,
                     layout=layout)
    rule_names = next(iter(envs.values())).start.rule_names
    policy = make_go_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(rule_names),
                            config=config, heads=args.heads, segment=args.segment,
                            seed=args.seed, take_prior=args.take_prior)
    untrained = evaluate(held, policy, k=args.k, seed=args.seed)["mean"]
    _say("untrained policy on the held-out graphs", untrained)
    trainer = Trainer(policy, config, seed=args.seed)
    run = train(envs, trainer, updates=args.updates, minutes=args.minutes, seed=args.seed,
                log_path=args.work / "train_metrics.jsonl")
    print(f"trained: {run}")
    result = evaluate(held, trainer.policy, k=args.k, seed=args.seed)
    means = result["mean"]
    _say("trained policy on the held-out graphs (mean cost cut)", means)
    if args.online:
        candidate = args.work / "candidate.npz"
        save_policy(candidate, trainer.policy, config=config, node_dim=NODE_DIM,
                    edge_dim=EDGE_DIM, rule_names=rule_names)
        result["online"] = {"trained": online(held, str(candidate)),
                            "fresh": online(held, "fresh")}
        print("held-out mean cost cut (%) of --graph go at its defaults: from the trained "
              f"policy {result['online']['trained']['mean_cut_percent']:.3f} "
              f"({result['online']['trained']['mean_estimates']:.1f} estimates), from a fresh "
              f"one {result['online']['fresh']['mean_cut_percent']:.3f} "
              f"({result['online']['fresh']['mean_estimates']:.1f})")
    wins = means["policy_zero_shot"] > max(means["random_mean"], 0.0)
    if not (wins or args.force):
        print("the policy's zero-shot episodes do not beat both a random take/skip policy and "
              "taking nothing on the held-out graphs: nothing written")
        return 1
    save_policy(args.out, trainer.policy, config=config, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=rule_names, manifest={
                    **provenance("tools/train_graph_go.py", train_specs=train_specs,
                                 held_specs=held_specs, run=run, seed=args.seed,
                                 evaluation=result, score_injective=args.score_injective),
                    "conv_layout": ("imported" if args.all_rules
                                    or conv_layout_pass(target, GraphConfig()) is None
                                    else "nchwc"),
                    "passes_per_episode": args.passes, "untrained_policy": untrained,
                    "beats_random": wins})
    print(f"written: {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
