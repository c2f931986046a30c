"""A task's best state offered to the run's other tasks whose sketches have the same loops."""

import json

import tvm
from conftest import matmul_module
from test_harl_search import fake_latency, make_strategy
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult

from harl.agents.tile_tuner import Site
from harl.search.search_config import HarlSearchConfig
from harl.search.sibling_transfer import (
    FOREIGN,
    Offer,
    SiblingBoard,
    carried_sibling_state,
    offers_from_json,
    signature_of,
)
from harl.search.trace_sites import state_of

TILES = (Site("tile", 4, 64), Site("tile", 2))
LOCATED = (*TILES, Site("parallel", 0), Site("compute_location", 0))
STATE = ((2, 4, 2, 4), (8, 8), 16, 2)


def test_signatures_tell_loop_extents_apart():
    assert signature_of(TILES, ((2, 4, 2, 4), (8, 8))) == signature_of(TILES, ((64, 1, 1, 1),
                                                                                (1, 64)))
    assert signature_of(TILES, ((2, 4, 2, 4), (8, 8))) != signature_of(TILES, ((64, 1, 1, 1),
                                                                                (1, 32)))


def test_the_board_offers_other_tasks_bests_fastest_first():
    board, key = SiblingBoard(), signature_of(LOCATED, STATE)
    board.publish(0, key, LOCATED, 2e-3, STATE)
    board.publish(0, key, LOCATED, 3e-3, ((64, 1, 1, 1), (1, 64), 16, 0))  # not task 0's best
    board.publish(1, key, LOCATED, 1e-3, ((1, 1, 1, 64), (64, 1), 8, 1))
    board.publish(2, ("another",), LOCATED, 1e-4, STATE)
    assert [(o.task_id, o.latency_s) for o in board.offers(2, key)] == [(1, 1e-3), (0, 2e-3)]
    assert [o.task_id for o in board.offers(1, key)] == [0]
    assert board.offers(0, ("unknown",)) == []


def test_choices_the_target_does_not_know_become_its_own():
    offer = Offer(0, 1e-3, LOCATED, STATE)
    options = [[], [], [1, 2, 4, 8, 16], [0, 2]]
    assert carried_sibling_state(offer, LOCATED, options) == STATE
    assert carried_sibling_state(offer, LOCATED, [[], [], [1, 2, 4, 8], [1]]) == (
        *STATE[:2], 8, 1)
    assert carried_sibling_state(offer, LOCATED, [[], [], [], [0]]) is None  # no parallel option
    assert carried_sibling_state(offer, (*TILES, Site("parallel", 0)), options[:3]) is None


def matmul_add_module(n: int):
    """The matmul of `matmul_module(n)` with a bias added after it: another task, same loops."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    bias = te.placeholder((n,), name="bias")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((n, n), lambda i, j: c[i, j] + bias[j], name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, bias, d])})


def test_a_sibling_task_measures_the_other_tasks_best_in_its_first_batch():
    board = SiblingBoard()
    first, first_spaces = make_strategy(64, task_id=0, mod=matmul_module(64))
    second, second_spaces = make_strategy(64, task_id=1, mod=matmul_add_module(64))
    for strategy in (first, second):
        strategy.siblings = board
    first.pre_tuning(8, 4, first_spaces, None, ms.cost_model.RandomModel())
    candidates = first.generate_measure_candidates()
    first.notify_runner_results(
        candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    best = min(candidates, key=lambda c: fake_latency(c.sch))
    best_tiles = [d for d in state_of(best.sch.trace) if isinstance(d, tuple)]

    second.pre_tuning(8, 4, second_spaces, None, ms.cost_model.RandomModel())
    batch = second.generate_measure_candidates()
    carried = [c for c in batch
               if [d for d in state_of(c.sch.trace) if isinstance(d, tuple)] == best_tiles]
    assert carried, "the matmul's best tiles were not measured in the matmul + bias task"

    alone, alone_spaces = make_strategy(64, task_id=1, mod=matmul_add_module(64))
    alone.config = HarlSearchConfig(sibling_share=0.0)
    alone.siblings = board
    alone.pre_tuning(8, 4, alone_spaces, None, ms.cost_model.RandomModel())
    assert alone.generate_measure_candidates()  # switched off: nothing offered is carried
    assert not alone.carried


def test_the_board_outlives_the_run_as_json_and_damaged_entries_are_left_out():
    board, key = SiblingBoard(), signature_of(LOCATED, STATE)
    board.publish(0, key, LOCATED, 2e-3, STATE)
    board.publish(1, key, LOCATED, 1e-3, ((1, 1, 1, 64), (64, 1), 8, 1))
    board.publish(1, ("other",), TILES, 5e-3, ((64, 1, 1, 1), (1, 32)))
    saved = json.loads(json.dumps(board.to_json()))
    assert len(saved) == 2  # the fastest state of each signature
    offers = offers_from_json([*saved, {"sites": [["tile", 2, 0]], "state": [3]},
                               {"latency_s": 1.0}, "garbage"])
    assert sorted((o.latency_s, o.state) for o in offers) == [
        (1e-3, ((1, 1, 1, 64), (64, 1), 8, 1)), (5e-3, ((64, 1, 1, 1), (1, 32)))]
    assert all(o.task_id == FOREIGN and o.sites in (LOCATED, TILES) for o in offers)
    assert offers_from_json({"not": "a list"}) == []

    later = SiblingBoard(foreign=offers)  # a resumed run, or another model's through the store
    assert [o.latency_s for o in later.offers(0, key)] == [1e-3]
    later.publish(0, key, LOCATED, 5e-4, STATE)
    assert [o.latency_s for o in later.offers(3, key)] == [5e-4, 1e-3]
    assert later.add_foreign([Offer(FOREIGN, 9e-3, LOCATED, STATE)]) == 0  # slower: not kept
    assert [o.latency_s for o in later.offers(3, key)] == [5e-4, 1e-3]
    assert [entry["latency_s"] for entry in later.to_json()] == [5e-4]  # its own tasks' only
