"""What the graph agents' training tools (tools/train_graph_rl.py, train_graph_go.py,
train_graph_worldmodel.py) share: their common options, the PPO config from `--ppo KEY=VALUE`,
the rules and layout a run's search has, the training loop over the corpus graphs and the
provenance a shipped policy's manifest records."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import time
from pathlib import Path

import numpy as np

from harl.graph.rl.config import PPOConfig

SAMPLES = 4  # sampled schedules per unmeasured task when a corpus graph is priced
COST = f"GraphCostModel with the shipped prior, samples={SAMPLES}, llvm"


def training_parser(description: str, *, updates: int, minutes: float, k: int, out: Path,
                    work: Path, updates_help: str = "PPO updates at most",
                    k_help: str = "episodes per held-out graph",
                    what: str = "policy", beat: str = "random",
                    all_rules: bool = False) -> argparse.ArgumentParser:
    """The options every tool takes, with the tool's defaults and words: `what` it trains and
    what it must `beat` to be written; with `all_rules`, --all-rules (see `product_setting`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--updates", type=int, default=updates, help=updates_help)
    parser.add_argument("--minutes", type=float, default=minutes, help="training time limit")
    parser.add_argument("--k", type=int, default=k, help=k_help)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--work", type=Path, default=work)
    parser.add_argument("--evaluate", type=Path, default=None,
                        help=f"evaluate this {what} on the held-out graphs; no training")
    parser.add_argument("--ppo", nargs="*", default=[], metavar="KEY=VALUE",
                        help="PPOConfig fields to change, e.g. entropy_coef=0.03")
    parser.add_argument("--force", action="store_true",
                        help=f"write the {what} even where it does not beat {beat}")
    parser.add_argument("--score-injective", action="store_true",
                        help="score the samples of tasks without a reduction too, as harl "
                             "priced graphs until 2026-11-29 (default: their roofline time "
                             "alone, as [graph] cost_score_injective = false)")
    if all_rules:
        parser.add_argument("--all-rules", action="store_true",
                            help="every rule and no conv layout pass (default: the rules and "
                                 "layout a run's search has on this CPU)")
    return parser


def ppo_config(overrides: list[str], **defaults) -> PPOConfig:
    """`PPOConfig` with the tool's `defaults` and the `KEY=VALUE` overrides over them, each
    converted to its field's type."""
    fields = {f.name: f.type for f in dataclasses.fields(PPOConfig)}
    return PPOConfig(**{**defaults, **{
        key: (int if fields[key] == "int" else float)(value)
        for key, value in (item.split("=", 1) for item in overrides)}})


def product_setting(target, all_rules: bool, *, node_decisions: bool = False):
    """(rules, the lowering or None) as a run's graph search on `target` has them at the
    default config: on a CPU the blocked conv layout, and no NHWC rules; with `node_decisions`
    the node rules too (as `--graph go` has them); with `all_rules`, every rule and no
    lowering."""
    from harl.graph.config import GraphConfig
    from harl.graph.pipeline import conv_layout_pass, lowering
    from harl.graph.rules import ALL_RULES, search_rules

    if all_rules:
        return ALL_RULES, None
    blocked = conv_layout_pass(target, GraphConfig()) is not None
    return (search_rules(blocked_convs=blocked, node_decisions=node_decisions),
            lowering(target, GraphConfig()) if blocked or node_decisions else None)


def corpus_cost_model(target, args):
    """The cost model corpus graphs are priced by: the shipped prior, `SAMPLES` schedules a
    task, tasks without a reduction scored only with the tool's --score-injective."""
    from harl.graph.cost import GraphCostModel

    return GraphCostModel(target, samples=SAMPLES, score_injective=args.score_injective)


def module_price(cost_model, layout):
    """A Relax module's estimated milliseconds as a run prices it: after `layout` (the lowering
    of `product_setting`, or None)."""
    def price(mod) -> float:
        return cost_model.estimate(mod if layout is None else layout(mod)).total_ms
    return price


def provenance(tool: str, *, train_specs, held_specs, run: dict, seed: int,
               evaluation: dict, score_injective: bool = False) -> dict:
    """What a shipped policy's manifest says of its training: the tool, the pricing, the
    corpus split, the run's counts, the seed, the date, TVM's version and the evaluation."""
    import tvm

    cost = COST + (", tasks without a reduction scored too" if score_injective
                   else ", tasks without a reduction at their roofline")
    return {"trained_by": tool, "cost": cost,
            "corpus": {"train": [s.name for s in train_specs],
                       "held_out": [s.name for s in held_specs]},
            **run, "seed": seed,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "tvm_version": tvm.__version__, "evaluation": evaluation}


def ppo_across_graphs(envs: dict, trainer, *, updates: int, minutes: float, seed: int,
                      log_path: Path, unit: str = "steps") -> dict:
    """PPO over the training graphs' envs: each update's episodes on graphs drawn at random,
    one JSON line of metrics per update in `log_path`, a line on stdout every tenth (`unit`
    names what an env step is); stops after `updates` updates or `minutes`."""
    rng, names = np.random.default_rng(seed), sorted(envs)
    start, steps_total, update = time.perf_counter(), 0, 0
    with log_path.open("w") as log:
        for update in range(1, updates + 1):
            steps = list(itertools.chain.from_iterable(
                trainer.episode(envs[names[rng.integers(len(names))]])
                for _ in range(trainer.config.episodes_per_update)))
            steps_total += len(steps)
            metrics = trainer.update(steps)
            elapsed = time.perf_counter() - start
            log.write(json.dumps({"update": update, "steps": steps_total,
                                  "seconds": round(elapsed, 1), **metrics}) + "\n")
            if update % 10 == 0:
                print(f"update {update}: {steps_total} {unit}, {elapsed:.0f} s, return "
                      f"{metrics['charts/episode_return']:.3g}, entropy "
                      f"{metrics['losses/entropy']:.3g}, kl {metrics['losses/approx_kl']:.3g}, "
                      f"explained variance {metrics['losses/explained_variance']:.3g}",
                      flush=True)
            if elapsed > 60 * minutes:
                break
    return {"updates": update, "episodes": trainer.episodes, "steps": steps_total,
            "seconds": round(time.perf_counter() - start, 1)}
