"""Graph searches on harl's rules: the term encoding's round trip through egglog, ILP
extraction that pays a shared subterm once, greedy search, MCTS-guided equality saturation
finding a graph that needs non-improving steps, and failing rules skipped. The cost is a
stand-in: per fused task, FLOPs at 50 GFLOP/s plus 5 us per launch, times the task's
weight."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import BrokenRule, random_relax_inputs, run_relax

from harl.graph.load import relax_of_onnx
from harl.graph.rules import rule_by_name
from harl.graph.search.eqsat import EqsatConfig, eqsat, operator_changes
from harl.graph.search.extract import (
    dag_cost,
    ilp_extract,
    ilp_extract_top,
    read_egraph,
    tree_extract,
)
from harl.graph.search.greedy import greedy
from harl.graph.search.term import Term, TermTable

EXAMPLES = Path(__file__).resolve().parent.parent / "tasks" / "examples"


def _cost(mod) -> float:
    from harl.frontend.tasks import extract_tasks
    from harl.target import parse_target

    tasks = extract_tasks(mod, parse_target(None))
    return sum(t.weight * (t.flop / 5e7 + 0.005) for t in tasks)




def _same_outputs(a, b, *, exact: bool = False) -> None:
    inputs = random_relax_inputs(a)
    for x, y in zip(run_relax(a, inputs), run_relax(b, inputs), strict=True):
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["transformer_block", "cnn"])
def test_round_trip_through_egglog_terms(name):
    from egglog import EGraph

    mod = relax_of_onnx(EXAMPLES / f"{name}.onnx")
    egraph, table = EGraph(), TermTable()
    egraph.let("root", table.insert(egraph, mod)[0])
    graph = read_egraph(egraph)
    calls = sum(1 for b in mod["main"].body.blocks[0].bindings)
    assert calls <= len(graph.nodes)
    back = table.rebuild(mod, graph.root, tree_extract(graph, table.local_cost))
    assert len(back["main"].body.blocks[0].bindings) == calls
    _same_outputs(mod, back, exact=True)


def test_ilp_extraction_pays_a_shared_subterm_once():
    """add(f(S), g(S)) against add(A, B): per class, A (10) beats f(S) (1 + 15) and B beats
    g(S), but with S paid once f(S) and g(S) cost 17 against 20 (the add costs 1 more)."""
    from egglog import EGraph, Vec, union

    costs = {"S": 15.0, "f": 1.0, "g": 1.0, "A": 10.0, "B": 10.0, "add": 1.0, "x": 0.0}
    egraph = EGraph()
    s = Term.op("S", Vec(Term.leaf("x")))
    shared = Term.op("add", Vec(Term.op("f", Vec(s)), Term.op("g", Vec(s))))
    root = egraph.let("root", shared)
    a, b = Term.op("A", Vec(Term.leaf("x"))), Term.op("B", Vec(Term.leaf("x")))
    egraph.register(union(Term.op("f", Vec(s))).with_(a), union(Term.op("g", Vec(s))).with_(b))
    egraph.register(union(root).with_(Term.op("add", Vec(a, b))))
    graph = read_egraph(egraph)
    tree, ilp = tree_extract(graph, costs.get), ilp_extract(graph, costs.get)
    ranked = ilp_extract_top(graph, costs.get, count=3)
    assert [dag_cost(c, graph.root, costs.get) for c in ranked] == [18.0, 21.0, 27.0]
    assert dag_cost(tree, graph.root, costs.get) == 21.0
    assert dag_cost(ilp, graph.root, costs.get) == 18.0
    assert {key for key, _ in ilp.values()} == {"add", "f", "g", "S", "x"}


def test_greedy_lowers_the_cost_of_the_transformer_block():
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    result = greedy(mod, _cost)
    assert result.cost < result.trace[0]
    assert all(b < a for a, b in itertools.pairwise(result.trace))
    assert len(result.applied) == len(result.trace) - 1
    assert result.applied[0].startswith("merge_parallel_matmul")
    _same_outputs(mod, result.mod)


def test_eqsat_takes_steps_that_greedy_will_not():
    """Attention's 1/sqrt(d) folds into the Q projection only after three hoists that leave
    the cost unchanged; greedy folds the other scale and stops, the e-graph search folds
    both."""
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    hoist, fold = rule_by_name("hoist_scale"), rule_by_name("fold_scale_matmul")
    best = mod
    for _ in range(3):
        best = hoist.apply(best, hoist.matches(best)[0])
    for _ in range(2):
        best = fold.apply(best, fold.matches(best)[0])
    rules = [hoist, fold]
    plain = greedy(mod, _cost, rules=rules)
    found = eqsat(mod, _cost, rules=rules, config=EqsatConfig(iterations=12, seed=0))
    assert found.cost == pytest.approx(_cost(best)) and found.cost < plain.cost
    assert found.graphs > 3 and found.enodes > 0 and found.eclasses <= found.enodes
    assert sum(step.startswith("fold_scale_matmul") for step in found.applied) == 2
    _same_outputs(mod, found.mod)


def test_every_extracted_candidate_computes_the_same_outputs():
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    found = eqsat(mod, _cost, config=EqsatConfig(iterations=15, seed=1))
    assert {"ilp", "tree", "mcts", "original"} <= set(found.candidate_mods)
    assert found.cost == min(found.candidates.values()) < found.initial_cost
    for name in ("ilp", "tree"):
        _same_outputs(mod, found.candidate_mods[name])


def test_a_rewrite_cheaper_only_by_float_rounding_is_not_taken():
    """Summing the same tasks in another order moves a total in its last bits: no gain."""
    import tvm_ffi

    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")

    def rounding(graph) -> float:
        same = tvm_ffi.structural_equal(graph["main"], mod["main"], map_free_vars=True)
        return 1.0 if same else 1.0 - 1e-15

    found = eqsat(mod, rounding, config=EqsatConfig(iterations=4, seed=0))
    assert found.source == "original" and found.applied == [] and found.mod is mod
    assert greedy(mod, rounding, max_evals=8).applied == []


def test_an_extracted_graph_is_described_by_its_operator_changes():
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    merge = rule_by_name("merge_parallel_matmul")
    merged = merge.apply(mod, merge.matches(mod)[0])
    assert operator_changes(mod, mod) == "operator counts unchanged"
    changes = operator_changes(mod, merged)
    assert "relax.matmul" in changes and "relax.split 0 -> 1" in changes, changes


def test_the_e_graph_stops_growing_at_its_node_limit():
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    found = eqsat(mod, _cost, config=EqsatConfig(node_limit=70, iterations=30))
    assert 70 <= found.enodes < 140 and found.iterations < 30
    assert found.cost <= found.initial_cost


def test_a_failing_rule_never_ends_a_search(caplog):
    mod = relax_of_onnx(EXAMPLES / "transformer_block.onnx")
    rules = [BrokenRule(), rule_by_name("fold_scale_matmul")]
    with caplog.at_level(logging.WARNING):
        plain = greedy(mod, _cost, rules=rules)
        found = eqsat(mod, _cost, rules=rules, config=EqsatConfig(iterations=4))
    assert plain.applied and plain.cost < plain.trace[0]
    assert found.cost <= plain.cost
    assert any("broken@lv12" in r.message and "skipped" in r.message for r in caplog.records)


def test_a_graph_that_cannot_be_encoded_stands(caplog):
    """Bindings outside a dataflow block are not encoded: the search keeps the graph."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(relax.op.add(x, x))
        bb.emit_func_output(y)
    mod = tvm.IRModule({"main": bb.get()["main"]})
    with caplog.at_level(logging.WARNING):
        found = eqsat(mod, lambda _mod: 1.0)
    assert found.mod is mod and found.source == "original" and found.cost == 1.0
    assert any("cannot be encoded" in r.message for r in caplog.records)
