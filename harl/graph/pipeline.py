"""The graph level in a tuning run (`python -m harl.tune --graph greedy|eqsat|rl|worldmodel|go`).

Before tuning, the chosen search rewrites the imported graph, priced by `GraphCostModel` (the
cost-model prior, and the work dir's measured tasks where it holds any); the rewritten graph is
compiled untuned and run against the original on the same random inputs, and one that does not
match, or a search that raises, is dropped with one line: the original stands. After most of the
trials (all but `retune_share`), the search runs again from the original graph, now priced with
the tuned latencies; a graph it finds cheaper than the one being tuned by `switch_gain` (and
that matches the original) takes its place, and the rest of the trials tune its tasks.

The chosen graph is saved in the work dir (`model_rewritten.json`, `tvm.ir.save_json` of the
Relax module, loadable by plain TVM with `tvm.ir.load_json`), with `graph.json` saying how it
was found; a resumed run reuses both instead of searching again, so it tunes the same tasks.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from harl.graph.config import GraphConfig
from harl.graph.search.common import first_line

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.json"
"""how the run's graph was chosen: the method, the rewrites, the estimates, the second search"""
REWRITTEN_FILE = "model_rewritten.json"
"""the rewritten Relax module (absent where the imported graph stands)"""


def write_graph(work_dir: Path, mod) -> None:
    """Save `mod` as the work dir's REWRITTEN_FILE, whole or not at all."""
    import tvm

    part = Path(work_dir) / (REWRITTEN_FILE + ".part")
    part.write_text(tvm.ir.save_json(mod))
    part.replace(Path(work_dir) / REWRITTEN_FILE)


def conv_layout_pass(target, config: GraphConfig):
    """The pass that puts a graph's convs in `config.conv_layout` (harl.graph.rules.nchwc) on
    `target`, or None where it keeps them as they are (a GPU, or "imported")."""
    from harl.graph.rules.nchwc import channel_block, to_nchwc

    block = channel_block(target) if config.conv_layout == "nchwc" else None
    return None if block is None else lambda mod: to_nchwc(mod, block)


def lowering(target, config: GraphConfig):
    """What a run does to a graph before cutting out its tasks: the conv layout pass (where
    `conv_layout_pass` gives one), then the fusion fences of the graph's node hints
    (harl.graph.rules.hints.with_fences)."""
    from harl.graph.rules.hints import with_fences

    layout = conv_layout_pass(target, config)

    def lower(mod):
        return with_fences(mod if layout is None else layout(mod))
    return lower


def laid_out(mod, target, config: GraphConfig, work_dir: Path):
    """`mod` lowered (`lowering`: its convs in `config.conv_layout`, its fences applied),
    saved as the graph the run tunes where that changed it; else `mod` itself."""
    from harl.graph.rules.nchwc import channel_block

    lowered = lowering(target, config)(mod)
    if lowered is mod or same_graph(lowered, mod):
        if config.method == "off":  # one an earlier run in the work dir saved is not this run's
            (Path(work_dir) / REWRITTEN_FILE).unlink(missing_ok=True)
        return mod
    write_graph(work_dir, lowered)
    block = channel_block(target) if conv_layout_pass(target, config) else None
    logger.info("harl: graph: " + (f"convs computed in NCHW{block}c" if block else "lowered")
                + f" ({REWRITTEN_FILE})")
    return lowered


def trials_in(database) -> int:
    """Trials (records of searched schedules) the database holds, over every workload: the
    tasks of every graph the run has tuned."""
    from harl.naive_nests import is_naive_trace

    return sum(not is_naive_trace(record.trace) for record in database.get_all_tuning_records())


def first_budget(trials: int, config: GraphConfig) -> int:
    """Trials tuned before the second search (the rest, `retune_share` of them, after it)."""
    return trials - int(trials * config.retune_share)


def same_graph(a, b) -> bool:
    import tvm_ffi

    return tvm_ffi.structural_equal(a["main"], b["main"], map_free_vars=True)


class GraphStage:
    """The graph a run tunes, chosen and saved as the module docstring says. `model` is the
    OnnxModel (its inputs and output names), `verify` the run's VerifyConfig (tolerances)."""

    def __init__(self, config: GraphConfig, *, work_dir: Path, target, model, verify,
                 seed: int, prepack_weights: bool) -> None:
        self.config, self.work_dir, self.target = config, Path(work_dir), target
        self.prepack_weights = prepack_weights
        self.model, self.verify, self.seed = model, verify, seed
        self.layout = conv_layout_pass(target, config)  # None: convs keep their layouts
        self.lower = lowering(target, config)
        self.entry: dict = {}

    # -- the two searches ---------------------------------------------------------------------

    def first(self, original):
        """The graph to tune first: the saved one on a resume, else the search's (verified)."""
        saved = self._load(original)
        if saved is not None:
            return saved
        self.entry = {"method": self.config.method, "stage": "first", "rewritten": False,
                      "applied": [], "dropped": None, "second_search": None,
                      "changed_by_second_search": None}
        chosen = original
        try:
            found, summary = self._search(original, self._cost_model(own_model=False))
            self.entry.update(summary)
            self._log_metrics(summary, "first")
            chosen = self._checked(original, found, "") or original
            self.entry["rewritten"] = chosen is not original
            if chosen is original and self.entry["applied"]:
                self.entry["dropped_rewrites"] = self.entry["applied"]
                self.entry["applied"] = []
        except Exception as err:  # noqa: BLE001  (a failing search never ends the run)
            self._drop(f"the {self.config.method} search failed ({first_line(err)})")
        self._save(original, chosen)
        self._say_first()
        return chosen

    def second(self, original, current):
        """The graph for the rest of the trials: the search again, priced with the tuned
        latencies; `current` (the graph being tuned, after the conv layout pass) where it finds
        nothing cheaper (or on a resume past it)."""
        if self.entry.get("stage") == "final":
            return current
        chosen, second = current, {}
        try:
            cost_model = self._cost_model(own_model=self.config.cost_samples > 0)
            found, second = self._search(original, cost_model)
            second["estimated_ms_current"] = cost_model.estimate(current).total_ms
            self._log_metrics(second, "second")
            if (not same_graph(self._compiled(found), current)
                    and second["estimated_ms_after"]
                    < second["estimated_ms_current"] * (1.0 - self.config.switch_gain)):
                chosen = self._checked(original, found, "second ") or current
        except Exception as err:  # noqa: BLE001
            logger.info(f"harl: graph: the second {self.config.method} search failed "
                        f"({first_line(err)}); the graph being tuned stands")
            second["failed"] = first_line(err)
        changed = chosen is not current
        self.entry.update(stage="final", second_search=second, changed_by_second_search=changed)
        if changed:
            self.entry.update(rewritten=not same_graph(chosen, original),
                              applied=second.get("applied", []))
        self._save(original, chosen)
        after = second.get("estimated_ms_after")
        logger.info("harl: graph: second search with the tuned latencies "
                    + ("(failed)" if after is None else f"estimates {after:.4g} ms")
                    + (": a new graph, its tasks tuned with the rest of the trials"
                       + f" ({', '.join(second.get('applied', [])) or 'no rewrite'})"
                       if changed else ": the graph being tuned stands"))
        return chosen

    def first_cost_model(self):
        """The cost model the first search prices graphs with (tools/graph_search_budget.py)."""
        return self._cost_model(own_model=False)

    def search(self, mod, cost_model) -> tuple[object, dict]:
        """The configured search of `mod` as a run's searches do it, pricing each graph by
        `cost_model.estimate` after the conv layout pass: the graph found and its graph.json
        fields (tools/graph_search_budget.py)."""
        return self._search(mod, cost_model)

    def _compiled(self, mod):
        """`mod` as the run compiles it: lowered (`lowering`), so that a graph is priced on
        the tasks that are tuned (and a lowered graph, lowering being idempotent, as is)."""
        return self.lower(mod)

    def _cost_model(self, *, own_model: bool):
        from harl.database import RECORD_FILE
        from harl.graph.cost import GraphCostModel

        settings = {"samples": self.config.cost_samples, "seed": self.seed,
                    "prepack_weights": self.prepack_weights,
                    "measured_peak_floor": self.config.measured_peak_floor,
                    "score_injective": self.config.cost_score_injective}
        records = self.work_dir / RECORD_FILE
        if records.exists() and records.stat().st_size:
            return GraphCostModel.from_work_dir(self.work_dir, self.target, own_model=own_model,
                                                **settings)
        return GraphCostModel(self.target, **settings)

    def _search(self, mod, cost_model) -> tuple[object, dict]:
        from harl.graph.rules import search_rules
        from harl.graph.search.eqsat import eqsat
        from harl.graph.search.go import go_search
        from harl.graph.search.greedy import greedy
        from harl.graph.search.rl import rl_search
        from harl.graph.search.worldmodel import worldmodel_search

        def cost(graph) -> float:
            return cost_model.estimate(self._compiled(graph)).total_ms

        rules = search_rules(blocked_convs=self.layout is not None,
                             node_decisions=(self.config.method == "go"
                                             and self.config.go.node_decisions))

        if self.config.method == "greedy":
            result = greedy(mod, cost, rules=rules, max_evals=self.config.greedy_max_evals)
            return result.mod, {
                "applied": list(result.applied), "estimated_ms_before": result.trace[0],
                "estimated_ms_after": result.cost, "graphs_costed": result.evals,
                "search_seconds": round(result.seconds, 2)}
        if self.config.method == "rl":
            result = rl_search(mod, cost, config=self.config.rl, rules=rules)
            return result.mod, {
                **_learned_entry(result), "rl_policy": result.policy,
                "rl_episodes": result.episodes, "rl_updates": result.updates,
                "rl_path_estimated_ms": result.path_costs,
                "rl_ppo": _finite(result.metrics)}
        if self.config.method == "worldmodel":
            result = worldmodel_search(mod, cost, config=self.config.worldmodel, rules=rules)
            return result.mod, {
                **_learned_entry(result), "wm_pretrained": result.pretrained,
                "wm_real_episodes": result.real_episodes,
                "wm_dream_episodes": result.dream_episodes, "wm_rounds": result.rounds,
                "wm_updates": result.updates, "wm_path_estimated_ms": result.path_costs,
                "wm_quality": _finite(result.quality), "wm_metrics": _finite(result.metrics)}
        if self.config.method == "go":
            result = go_search(mod, cost, config=self.config.go, rules=rules)
            return result.mod, {
                **_learned_entry(result), "go_policy": result.policy,
                "go_episodes": result.episodes, "go_updates": result.updates,
                "go_passes": result.passes, "go_path_estimated_ms": result.path_costs,
                "go_zero_shot_estimated_ms": result.zero_shot_cost,
                "go_skipped": result.skipped, "go_ppo": _finite(result.metrics)}
        result = eqsat(mod, cost, config=self.config.eqsat, rules=rules)
        return result.mod, {
            "applied": list(result.applied) if result.source != "original" else [],
            "estimated_ms_before": result.initial_cost, "estimated_ms_after": result.cost,
            "graphs_costed": result.evals, "search_seconds": round(result.seconds, 2),
            "egraph_enodes": result.enodes, "egraph_eclasses": result.eclasses,
            "egraph_graphs": result.graphs, "eqsat_winner": result.source}

    # -- checking, saving, loading ------------------------------------------------------------

    def _checked(self, original, found, which: str):
        """`found` where it is the original or a graph whose outputs match the original's;
        None (with one line) where it does not match."""
        if same_graph(found, original):
            return original
        why = self.mismatch(original, found)
        if why is not None:
            self._drop(f"the {which}rewritten graph does not match the original ({why})")
            return None
        return found

    def mismatch(self, original, rewritten) -> str | None:
        """None where `rewritten`, compiled untuned, gives the original's outputs on the run's
        random inputs (the run's output tolerances); else what differs."""
        from harl.evaluate import CompiledModel, check_outputs, compile_model

        names = [spec.name for spec in self.model.inputs]
        inputs = self.model.random_inputs(self.seed)
        want = CompiledModel(compile_model(original, self.target), self.target, names).run(inputs)
        got = CompiledModel(compile_model(rewritten, self.target), self.target, names).run(inputs)
        rtol, atol = self.verify.tolerances(output.dtype for output in want)
        check = check_outputs(got, want, list(self.model.output_names), rtol=rtol, atol=atol)
        if check.verified:
            return None
        return f"output {check.worst_output!r} differs by {check.max_abs_err:.3g}"

    def _drop(self, why: str) -> None:
        self.entry["dropped"] = why
        stands = "the graph being tuned" if self.entry.get("stage") == "first" and (
            "second" in why) else "the original graph"
        logger.info(f"harl: graph: {why}; {stands} stands")

    def _say_first(self) -> None:
        entry = self.entry
        if entry.get("dropped") is not None:
            return
        before, after = entry.get("estimated_ms_before"), entry.get("estimated_ms_after")
        size = (f", e-graph {entry['egraph_enodes']} e-nodes" if "egraph_enodes" in entry
                else "")
        logger.info(f"harl: graph: {self.config.method} applied {len(entry['applied'])} "
                    f"rewrite(s) ({', '.join(entry['applied']) or 'none'}): estimated "
                    f"{before:.4g} -> {after:.4g} ms in {entry.get('search_seconds', 0):g} s"
                    f"{size}")

    def _log_metrics(self, summary: dict, search: str) -> None:
        """A search's numbers as one line of the work dir's metrics.jsonl, under graph/ (the
        estimates, graphs costed, PPO's diagnostics, the world model's quality on held-out real
        transitions), beside the tuning's."""
        from harl.report.metrics import METRICS_FILE, MetricsLogger

        def number(value) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool)

        metrics = MetricsLogger()
        for key, value in summary.items():
            if isinstance(value, dict):
                for inner, x in value.items():
                    if number(x):
                        metrics.record(f"graph/{key}/{inner}", x)
            elif number(value):
                metrics.record(f"graph/{key}", value)
        metrics.open(self.work_dir / METRICS_FILE)
        try:
            metrics.dump(stage="graph", search=search, method=self.config.method)
        finally:
            metrics.close()

    def _save(self, original, chosen) -> None:
        if chosen is original:
            (self.work_dir / REWRITTEN_FILE).unlink(missing_ok=True)
        else:
            write_graph(self.work_dir, chosen)
        part = self.work_dir / (GRAPH_FILE + ".part")
        part.write_text(json.dumps(self.entry, indent=2) + "\n")
        part.replace(self.work_dir / GRAPH_FILE)

    def _load(self, original):
        """The graph an earlier run in the work dir chose with the same method, or None."""
        import tvm

        try:
            entry = json.loads((self.work_dir / GRAPH_FILE).read_text())
        except (OSError, ValueError):
            return None
        if entry.get("method") != self.config.method:
            return None
        try:
            mod = (tvm.ir.load_json((self.work_dir / REWRITTEN_FILE).read_text())
                   if entry.get("rewritten") else original)
        except Exception as err:  # noqa: BLE001
            logger.info(f"harl: graph: the saved graph does not load ({first_line(err)}); "
                        "searching again")
            return None
        self.entry = entry
        logger.info(f"harl: graph: resuming with the graph chosen before ({GRAPH_FILE}: "
                    f"{len(entry.get('applied', []))} rewrite(s))")
        return mod


def _learned_entry(result) -> dict:
    """The graph.json fields of a learned search's result (`LearnedSearchResult`) that every
    such search fills alike."""
    return {"applied": list(result.applied), "estimated_ms_before": result.initial_cost,
            "estimated_ms_after": result.cost, "graphs_costed": result.evals,
            "search_seconds": round(result.seconds, 2)}


def _finite(metrics: dict) -> dict:
    """`metrics` rounded for graph.json, those that are not finite left out."""
    return {k: round(v, 6) for k, v in metrics.items() if math.isfinite(v)}


def summary_line(entry: dict) -> str:
    """The report's one line on the graph level."""
    if entry.get("dropped") and not entry.get("rewritten"):
        return f"graph ({entry['method']}): original graph ({entry['dropped']})"
    chosen_by = entry.get("second_search") if entry.get("changed_by_second_search") else entry
    before, after = chosen_by.get("estimated_ms_before"), chosen_by.get("estimated_ms_after")
    estimate = (f", estimated {before:.4g} -> {after:.4g} ms"
                if before is not None and after is not None else "")
    second = {True: ", chosen by the second search (its estimates, from tuned latencies)",
              False: ", kept by the second search", None: ""}[entry.get("changed_by_second_search")]
    size = f", e-graph {entry['egraph_enodes']} e-nodes" if "egraph_enodes" in entry else ""
    return (f"graph ({entry['method']}): {len(entry.get('applied', []))} rewrite(s)"
            f"{estimate}, search {entry.get('search_seconds', 0):g} s{size}{second}")
