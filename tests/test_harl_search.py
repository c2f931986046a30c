"""harl's search strategy and task scheduler on real TVM tasks, with a fake runner."""

import math
import threading
from dataclasses import replace

import numpy as np
import pytest
import tvm
import tvm_ffi
from conftest import conv2d_module, matmul_module
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult

from harl.agents.model_trust import TrustBoard
from harl.agents.tile_policy import FEATURE_DIM
from harl.agents.tile_tuner import Evaluation
from harl.search import trace_sites
from harl.search.harl_search import HarlSearchStrategy, tunable_insts
from harl.search.program_scorer import ProgramScorer
from harl.search.search_config import HarlSearchConfig, fresh_count
from harl.search.sketch_replay import SketchReplay
from harl.search.trace_sites import schedules_of, site_kind, state_of, with_state
from harl.stoppable_search import StoppableSearch, TrialBudget
from harl.target import parse_target
from harl.tvm_adapter import python_instance, xgb_trainer
from harl.tvm_env import load_tensor_intrinsics


def tile_products(trace):
    return [int(np.prod([int(v) for v in trace.decisions[inst]]))
            for inst in tunable_insts(trace) if inst.kind.name == "SamplePerfectTile"]


def make_strategy(n=64, scorer=None, trust_board=None, task_id=-1, threads=1, mod=None):
    """A strategy bound to a matmul task (or `mod`), and that task's design spaces."""
    target = parse_target(None)
    load_tensor_intrinsics(target)
    context = ms.TuneContext(mod=mod if mod is not None else matmul_module(n), target=target,
                             space_generator="post-order-apply", task_name="matmul",
                             num_threads=threads).clone()
    strategy = HarlSearchStrategy(HarlSearchConfig(), seed=1, scorer=scorer,
                                  trust_board=trust_board, task_id=task_id)
    strategy._initialize_with_tune_context(context)
    return strategy, context.generate_design_space()


def fake_latency(sch) -> float:
    """A deterministic stand-in latency: favours a large innermost tile."""
    inner = [int(sch.trace.decisions[i][-1]) for i in tunable_insts(sch.trace)
             if i.kind.name == "SamplePerfectTile"]
    return 1e-3 / (1 + sum(inner))


def measured_batches(strategy, check=lambda candidate: None) -> list[list[int]]:
    """Runs `strategy` to its end, each batch measured at `fake_latency` after `check` of each
    candidate; the structural hashes of each batch's candidates."""
    keys = []
    while (candidates := strategy.generate_measure_candidates()) is not None:
        for candidate in candidates:
            check(candidate)
        keys.append([tvm_ffi.structural_hash(c.sch.mod) for c in candidates])
        strategy.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    return keys


def test_candidates_are_legal_distinct_and_within_budget():
    strategy, spaces = make_strategy()
    expected_products = [tile_products(s.trace) for s in spaces]
    strategy.pre_tuning(12, 4, spaces, None, ms.cost_model.RandomModel())
    seen, batches = set(), 0
    while (candidates := strategy.generate_measure_candidates()) is not None:
        batches += 1
        assert len(candidates) <= 4
        for candidate in candidates:
            assert tile_products(candidate.sch.trace) in expected_products
            key = tvm_ffi.structural_hash(candidate.sch.mod)
            assert key not in seen
            seen.add(key)
        results = [RunnerResult([fake_latency(c.sch)], None) for c in candidates]
        results[0] = RunnerResult(None, "crashed")  # a failure is data, not a crash
        strategy.notify_runner_results(candidates, results)
    assert len(seen) == 12 and batches == 3
    strategy.post_tuning()


@pytest.mark.parametrize("learned", [False, True])
def test_replaying_traces_on_threads_changes_no_candidate(monkeypatch, learned):
    # Learned: 64-sample pools and model-guided trajectories; else a few samples, random walks.
    threads_used = set()
    replay = trace_sites.schedule_of

    def recording(*args):
        threads_used.add(threading.current_thread().name)
        return replay(*args)

    monkeypatch.setattr(trace_sites, "schedule_of", recording)

    def batches(threads):
        scorer = RankingScorer(1) if learned else None
        strategy, spaces = make_strategy(scorer=scorer, threads=threads)
        strategy.pre_tuning(12, 4, spaces, None, ms.cost_model.RandomModel())
        return measured_batches(strategy)

    serial = batches(1)
    assert threads_used == {threading.current_thread().name}
    assert len(serial) == 3 and batches(2) == serial
    assert any(name.startswith("harl-replay") for name in threads_used)


@pytest.mark.slow  # an equivalence check of a speed-up, not a user path: kept out of CI for time
def test_the_decided_location_shortcut_changes_no_candidate(monkeypatch):
    from harl.search.location_shortcut import LocationShortcut, ShortcutTrace

    # the general shortcut only: a tail shortcut draws other (equally likely) fresh samples,
    # and other locations where TVM would re-sample one
    of = LocationShortcut.of

    def general(*args):
        shortcut = of(*args)
        if shortcut is not None:
            shortcut.prefix = None
        return shortcut

    monkeypatch.setattr(LocationShortcut, "of", general)

    taken = []
    replay = ShortcutTrace.replay

    def counting(self, sch, seed):
        taken.append(replay(self, sch, seed))
        return taken[-1]

    monkeypatch.setattr(ShortcutTrace, "replay", counting)

    mod = conv2d_module()
    _, spaces = make_strategy(mod=mod)  # drawn once: each draw samples their decisions anew

    def in_tvms_form(candidate):  # the database's form: TVM's own trace
        assert any(i.kind.name == "SampleComputeLocation" for i in candidate.sch.trace.insts)

    def batches():
        strategy, _ = make_strategy(scorer=RankingScorer(1), mod=mod)
        # past the first batch of each of the six sketches, so elites start trajectories
        strategy.pre_tuning(24, 4, spaces, None, ms.cost_model.RandomModel())
        return measured_batches(strategy, in_tvms_form)

    shortcut = batches()
    assert any(taken)
    monkeypatch.setattr(SketchReplay, "shortcut_of", lambda self, trace: None)
    taken.clear()
    assert batches() == shortcut and not taken


def test_schedules_of_keeps_order_and_failures_in_place():
    strategy, spaces = make_strategy()
    trace = with_state(spaces[0].trace.simplified(remove_postproc=True), None)
    seeds = list(range(1, 9))
    serial = schedules_of(strategy.mod, [trace] * 8, strategy.postprocs, seeds)
    threaded = schedules_of(strategy.mod, [trace] * 8, strategy.postprocs, seeds, workers=2)
    assert [tvm_ffi.structural_hash(s.mod) for s in threaded] == [
        tvm_ffi.structural_hash(s.mod) for s in serial]

    class RejectOddFactors:  # a postproc that rejects schedules by a decision
        def apply(self, sch):
            return int(sch.trace.decisions[tunable_insts(sch.trace)[0]][0]) % 2 == 0

    rejected = schedules_of(strategy.mod, [trace] * 8, [RejectOddFactors()], seeds, workers=2)
    assert [s is None for s in rejected] == [
        int(s.trace.decisions[tunable_insts(s.trace)[0]][0]) % 2 == 1 for s in serial]
    with pytest.raises(ValueError):
        schedules_of(strategy.mod, [trace] * 2, strategy.postprocs, seeds)


def test_a_state_is_scored_once_per_fill():
    counted = []

    class CountingScorer(RankingScorer):
        def __call__(self, context, candidates):
            counted.extend(tvm_ffi.structural_hash(c.sch.mod) for c in candidates)
            return super().__call__(context, candidates)

    strategy, spaces = make_strategy(scorer=CountingScorer(1))
    strategy.pre_tuning(12, 4, spaces, None, None)
    evaluate = strategy._evaluator(0, {})
    schedules = strategy.replay.states(strategy.sketches[0], [None] * 3)
    first, second, _ = [state_of(sch.trace) for sch in schedules]
    once = evaluate([first, first, second])
    again = evaluate([second, first])
    assert len(counted) == len(set(counted)) == 2
    assert list(again.scores) == [once.scores[2], once.scores[0]]
    assert np.isfinite(once.scores).all() and once.features.shape == (3, FEATURE_DIM)
    assert evaluate([]).scores.shape == (0,)


def test_a_small_task_also_searches_its_sketches_on_one_thread():
    small, spaces = make_strategy(64)  # 0.5 MFLOP
    small.pre_tuning(8, 4, spaces, None, ms.cost_model.RandomModel())
    assert len(small.sketches) == 2 * len(spaces)
    serial = [sketch.trace for sketch in small.sketches[len(spaces):]]
    assert all("parallel" not in [site_kind(inst) for inst in tunable_insts(trace)]
               for trace in serial)
    large, spaces = make_strategy(256)  # 34 MFLOP: a serial schedule would only lose
    large.pre_tuning(8, 4, spaces, None, ms.cost_model.RandomModel())
    assert len(large.sketches) == len(spaces)


def test_a_batch_whose_samples_fail_is_topped_up_not_ended():
    # An empty batch ends the task for good in MetaSchedule: a round of unlucky samples (here
    # the first 4 fail the postprocs) must be topped up by the next round.
    strategy, spaces = make_strategy()
    strategy.pre_tuning(12, 4, spaces, None, ms.cost_model.RandomModel())
    draw, failures = strategy.replay.fresh, [4]

    def unlucky(sketch, count, max_draws=None):
        drawn = draw(sketch, count, max_draws)
        lost = min(failures[0], len(drawn))
        failures[0] -= lost
        return drawn[lost:]  # failed samples are left out

    strategy.replay.fresh = unlucky
    candidates = strategy.generate_measure_candidates()
    assert failures[0] == 0 and candidates is not None and len(candidates) == 4


def test_a_task_whose_samples_always_fail_ends():
    strategy, spaces = make_strategy()
    strategy.pre_tuning(12, 4, spaces, None, ms.cost_model.RandomModel())
    strategy.replay.fresh = lambda sketch, count, max_draws=None: []
    strategy.replay.states = lambda sketch, states: [None] * len(states)
    assert strategy.generate_measure_candidates() is None


def relu_module(n: int = 64):
    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: te.max(a[i, j], 0.0), name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def test_a_sketch_that_samples_nothing_is_replayed_once_per_fill_and_then_ends():
    # Every replay of such a sketch is the same program; a fused chain of many blocks takes
    # 50 ms each, and a pool of 64 of them once cost a GRU model's run 24 s for two trials.
    strategy, spaces = make_strategy(mod=relu_module())
    strategy.pre_tuning(8, 4, spaces, None, ms.cost_model.RandomModel())
    assert strategy.sketches and all(s.deterministic for s in strategy.sketches)
    draws, fresh = [], strategy.replay.fresh

    def counted(sketch, count, max_draws=None):
        draws.append(count)
        return fresh(sketch, count, max_draws)

    strategy.replay.fresh = counted
    batches = measured_batches(strategy)
    assert set(draws) == {1}
    assert sum(map(len, batches)) == len(strategy.sketches)  # one program each, then it ends


def test_harls_search_takes_the_results_of_a_cut_batch():
    strategy, spaces = make_strategy()
    strategy.pre_tuning(64, 4, spaces, None, ms.cost_model.RandomModel())
    search = StoppableSearch(strategy, 0, should_stop=lambda _: False, budget=TrialBudget(6))
    sizes = []
    while (candidates := search.generate_measure_candidates()) is not None:
        sizes.append(len(candidates))
        search.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    assert sizes == [4, 2] and strategy.trials == 6  # it counted the two it was told of


def test_elites_keep_the_best_measured_states():
    strategy, spaces = make_strategy(32)
    strategy.pre_tuning(8, 8, spaces, None, ms.cost_model.RandomModel())
    candidates = strategy.generate_measure_candidates()
    latencies = [fake_latency(c.sch) for c in candidates]
    strategy.notify_runner_results(candidates, [RunnerResult([x], None) for x in latencies])
    elite_best = min(lat for sketch in strategy.sketches for lat, _ in sketch.elites)
    assert math.isclose(elite_best, min(latencies))


def test_same_seed_same_candidates():
    batches = []
    for _ in range(2):
        strategy, spaces = make_strategy(32)
        strategy.pre_tuning(6, 6, spaces, None, None)
        batches.append([tvm_ffi.structural_hash(c.sch.mod)
                        for c in strategy.generate_measure_candidates()])
    assert batches[0] == batches[1]


def test_trajectories_run_once_the_cost_model_has_learned():
    """After warm-up, candidates come from policy-guided trajectories scored by XGBoost."""
    xgb = ms.cost_model.XGBModel(num_warmup_samples=4)
    strategy, spaces = make_strategy(32, scorer=ProgramScorer(python_instance(xgb)))
    strategy.pre_tuning(16, 8, spaces, None, None)
    assert not strategy.scorer.informative
    candidates = strategy.generate_measure_candidates()
    results = [RunnerResult([fake_latency(c.sch)], None) for c in candidates]
    xgb.update(strategy.context, candidates, results)
    strategy.notify_runner_results(candidates, results)
    assert strategy.scorer.informative
    updates_before = strategy.policy.updates
    candidates = strategy.generate_measure_candidates()
    assert 0 < len(candidates) <= 8
    assert sum(len(sketch.tuner.steps) for sketch in strategy.sketches) > 0  # rollouts kept
    strategy.notify_runner_results(
        candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    assert strategy.policy.updates == updates_before  # prior-only, the default: never trained


class RankingScorer:
    """A cost model that has learned (`direction` 1: ranks exactly like `fake_latency`; -1: the
    other way round)."""

    informative = True

    def __init__(self, direction: int) -> None:
        self.direction = direction

    def ranks(self, mod):
        return True

    def uses_prior(self, mod):
        return False  # the run's own model

    def own_weight(self, mod):
        return 1.0

    def __call__(self, context, candidates):
        return Evaluation(np.array([self.direction / fake_latency(c.sch) for c in candidates]))

    def holdout_trust(self, mod):
        return None  # judged only on what it predicted before measurement


def tune_with(scorer, batches=4, batch_size=8):
    """Mean fake latency of each batch after the first, and the trust reached."""
    strategy, spaces = make_strategy(64, scorer=scorer)
    strategy.pre_tuning(batches * batch_size, batch_size, spaces, None, None)
    means = []
    for _ in range(batches):
        candidates = strategy.generate_measure_candidates()
        latencies = [fake_latency(c.sch) for c in candidates]
        means.append(float(np.mean(latencies)))
        strategy.notify_runner_results(candidates, [RunnerResult([x], None) for x in latencies])
    return means[1:], strategy.trust.value


def test_a_model_that_ranks_well_is_followed_and_one_that_ranks_badly_is_not():
    good_means, good_trust = tune_with(RankingScorer(1))
    bad_means, bad_trust = tune_with(RankingScorer(-1))
    assert good_trust > 0.8 and bad_trust == 0.0
    # Followed, the good model's favourites beat the batches of the bad one, which steers only
    # the refining half of each batch (the rest are fresh samples).
    assert np.mean(good_means) < np.mean(bad_means)


def test_fresh_share_follows_trust_within_bounds():
    assert fresh_count(8, has_elites=False, trust=1.0, tuner_share=0.2, max_share=0.5) == 8
    assert fresh_count(8, has_elites=True, trust=0.0, tuner_share=0.2, max_share=0.5) == 4  # capped
    assert fresh_count(8, has_elites=True, trust=0.75, tuner_share=0.2,
                       max_share=0.5) == 2  # 1 - trust
    assert fresh_count(8, has_elites=True, trust=1.0, tuner_share=0.25,
                       max_share=0.5) == 2  # tuner's floor


class SerialFavouringScorer(RankingScorer):
    """Ranks like `fake_latency` within a kind, on about the scale of throughputs, but rates
    every serial program `bias` higher (the prior, trained on one thread, errs that way)."""

    def __init__(self, bias: float) -> None:
        super().__init__(1)
        self.bias = bias

    def __call__(self, context, candidates):
        scores = 1e-5 * super().__call__(context, candidates).scores
        serial = [not any(site_kind(i) == "parallel" for i in c.sch.trace.insts)
                  for c in candidates]
        return Evaluation(scores + self.bias * np.array(serial))


def test_a_bias_for_serial_programs_does_not_move_the_outlook():
    strategy, spaces = make_strategy(64, scorer=RankingScorer(1))
    strategy.pre_tuning(64, 12, spaces, None, None)
    for _ in range(2):
        candidates = strategy.generate_measure_candidates()
        strategy.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    measured = [sketch.serial for sketch in strategy.sketches if sketch.elites]
    assert True in measured and False in measured  # both kinds to judge
    outlooks = []
    for scorer in (SerialFavouringScorer(bias=0.0), SerialFavouringScorer(bias=0.5)):
        strategy.scorer, strategy.replay.rng = scorer, np.random.default_rng(5)
        outlooks.append(strategy._outlook(trust=0.9))
    judged = outlooks[0][np.isfinite(outlooks[0])]
    assert len(judged) == len(measured) and ((judged > 0) & (judged < 2)).any()
    assert np.allclose(*outlooks, equal_nan=True)


def test_a_sketch_draws_the_broad_pool_until_it_has_elites_then_the_refining_one():
    strategy, spaces = make_strategy(64, scorer=RankingScorer(1))
    strategy.config = replace(strategy.config,  # no outlook: its samples would join the pool
                              sketch=replace(strategy.config.sketch, prediction_weight=0.0))
    strategy.pre_tuning(64, 8, spaces, None, None)
    drawn = []  # (sketch had elites, samples drawn)
    fresh = strategy.replay.fresh

    def spy(sketch, count, max_draws=None):
        drawn.append((bool(sketch.elites), count))
        return fresh(sketch, count, max_draws)
    strategy.replay.fresh = spy
    for _ in range(2):
        candidates = strategy.generate_measure_candidates()
        strategy.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    config = strategy.config
    assert config.refine_pool < config.fresh_pool
    assert {count for elites, count in drawn if not elites} == {config.fresh_pool}
    assert {count for elites, count in drawn if elites} == {config.refine_pool}


def recorded_transplants(strategy) -> list:
    """The transplant picks of `strategy`'s latest batch, kept up to date as batches are drawn."""
    made = []
    transplants = strategy._transplants

    def recording(count):
        picks = transplants(count)
        made[:] = picks
        return picks

    strategy._transplants = recording
    return made


def test_the_chooser_hears_the_models_outlook_of_each_measured_sketch():
    strategy, spaces = make_strategy(64, scorer=RankingScorer(1))
    transplants = recorded_transplants(strategy)
    strategy.pre_tuning(64, 8, spaces, None, None)
    assert len(strategy.sketches) > 1 and not np.isfinite(strategy.chooser.outlook).any()
    for _ in range(2):
        candidates = strategy.generate_measure_candidates()
        strategy.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    measured = [bool(sketch.elites) for sketch in strategy.sketches]
    strategy.generate_measure_candidates()  # judges the sketches before it fills them
    outlook = strategy.chooser.outlook
    assert list(np.isfinite(outlook)) == measured and strategy.chooser.trust > 0
    assert ((outlook[np.isfinite(outlook)] >= 0) & (outlook[np.isfinite(outlook)] <= 2)).all()
    filled = {sketch_id for sketch_id, _, _ in
              strategy.pending[len(transplants):]}  # not the transplants
    assert filled and not filled & set(strategy.probes)  # their scored samples joined the pool


def test_the_tasks_best_state_is_measured_once_in_sibling_sketches():
    strategy, spaces = make_strategy(64)  # 0.5 MFLOP: TVM's sketches and their serial variants
    strategy.pre_tuning(64, 12, spaces, None, ms.cost_model.RandomModel())
    made = recorded_transplants(strategy)

    def tiles(sketch_id, state):
        sites = strategy.sketches[sketch_id].tuner.sites
        return [d for site, d in zip(sites, state, strict=True) if site.kind == "tile"]

    seen, source, best = set(), None, None
    for _ in range(3):
        candidates = strategy.generate_measure_candidates()
        transplants = strategy.pending[: len(made)]  # a batch's transplants lead it
        assert [pick[:2] for pick in made] == [pick[:2] for pick in transplants]
        carried = {(sketch_id, state) for sketch_id, state, _ in transplants}
        assert bool(carried) == (source is not None)  # once the task has a best
        assert len(carried) <= round(12 * strategy.config.transplant_share)
        assert carried <= strategy.carried and not carried & seen
        for sketch_id, state, actual in transplants:
            assert actual == state  # the program measured is the state carried
            assert sketch_id != source and tiles(sketch_id, state) == tiles(source, best)
        seen |= carried
        strategy.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
        source = min((i for i, sketch in enumerate(strategy.sketches) if sketch.elites),
                     key=lambda i: strategy.sketches[i].elites[0][0])
        best = strategy.sketches[source].elites[0][1]

    none, _ = make_strategy(64)
    none.config = replace(none.config, transplant_share=0.0)
    none.pre_tuning(64, 12, spaces, None, ms.cost_model.RandomModel())
    none_made = recorded_transplants(none)
    for _ in range(2):
        candidates = none.generate_measure_candidates()
        assert not none_made
        none.notify_runner_results(
            candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    with pytest.raises(ValueError, match="transplant_share"):
        HarlSearchConfig(transplant_share=1.5)


def test_elites_are_refined_before_the_cost_model_has_learned():
    """With a model still guessing, half of a sketch's batch are mutations of its elites."""
    strategy, spaces = make_strategy(64)  # ProgramScorer without a model: never informative
    strategy.pre_tuning(64, 16, spaces, None, None)
    candidates = strategy.generate_measure_candidates()
    strategy.notify_runner_results(
        candidates, [RunnerResult([fake_latency(c.sch)], None) for c in candidates])
    found = {}
    for sketch_id, sketch in enumerate(strategy.sketches):
        search = sketch.tuner.search

        def spy(starts, evaluate, learn=True, search=search, sketch_id=sketch_id):
            found[sketch_id] = search(starts, evaluate, learn)
            assert not learn  # random scores teach the policy nothing
            return found[sketch_id]
        sketch.tuner.search = spy
    strategy.generate_measure_candidates()
    refined = [state for sketch_id, state, _ in strategy.pending
               if sketch_id in found and state in found[sketch_id].visited]
    with_elites = [p for p in strategy.pending if strategy.sketches[p[0]].elites]
    assert with_elites and len(refined) >= len(with_elites) // 2 - 1


def test_resumed_search_starts_from_the_databases_best_records(tmp_path):
    from harl.loop import open_database

    database = open_database(tmp_path)
    first, spaces = make_strategy(32)
    first.pre_tuning(8, 8, spaces, database, None)
    candidates = first.generate_measure_candidates()
    workload = database.commit_workload(first.mod)
    latencies = [fake_latency(c.sch) for c in candidates]
    for candidate, latency in zip(candidates, latencies, strict=True):
        database.commit_tuning_record(ms.database.TuningRecord(
            candidate.sch.trace, workload, [latency], first.context.target,
            candidate.args_info))

    resumed, spaces = make_strategy(32)
    resumed.pre_tuning(8, 8, spaces, open_database(tmp_path), None)
    elites = sorted(lat for sketch in resumed.sketches for lat, _ in sketch.elites)
    assert math.isclose(elites[0], min(latencies)) and math.isclose(resumed.best_s, elites[0])
    # The sketch chooser knows which sketches were tried: it does not start them over.
    per_sketch = np.bincount([sketch_id for sketch_id, _, _ in first.pending],
                             minlength=len(first.sketches))
    assert resumed.chooser.trials.tolist() == per_sketch.tolist()
    assert math.isclose(resumed.chooser.best_s.min(), min(latencies))
    # The seeded states reproduce the records' programs, which are not measured again.
    recorded = {tvm_ffi.structural_hash(c.sch.mod) for c in candidates}
    assert recorded <= resumed.measured
    for candidate in resumed.generate_measure_candidates():
        assert tvm_ffi.structural_hash(candidate.sch.mod) not in recorded


def first_batch_mean(trust_board):
    """Mean fake latency of a new task's first batch, chosen with a model that ranks well."""
    strategy, spaces = make_strategy(64, scorer=RankingScorer(1), trust_board=trust_board,
                                     task_id=1)
    strategy.pre_tuning(8, 8, spaces, None, None)
    return float(np.mean([fake_latency(c.sch) for c in strategy.generate_measure_candidates()]))


def test_a_new_task_borrows_the_trust_the_model_earned_on_the_others():
    unjudged = first_batch_mean(TrustBoard(24))  # no task judged: the batch is random samples
    board = TrustBoard(24)
    judged = board.task(0)
    for latency in (1e-3, 2e-3, 3e-3, 4e-3):
        judged.add(1 / latency, latency)  # the model ranked task 0 perfectly
    assert board.prior(1) == 1.0
    assert first_batch_mean(board) < 0.8 * unjudged  # the pool's best-predicted are measured


def test_holdout_trust_judges_the_model_on_measurements_it_did_not_train_on():
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup
    from tvm.s_tir.meta_schedule.utils import shash2hex

    rng = np.random.default_rng(0)
    mod, other = matmul_module(64), matmul_module(32)
    features = [rng.uniform(size=(2, 6)).astype("float32") for _ in range(24)]
    learnable = np.array([1e-3 / (1 + f[:, 0].sum()) for f in features], dtype="float32")
    for costs, expect_high in ((learnable, True), (rng.permutation(learnable), False)):
        xgb = xgb_trainer(num_warmup_samples=0, num_tuning_cores=1)
        xgb.data[shash2hex(other)] = FeatureGroup("other", features[:12], learnable[:12])
        xgb.data[shash2hex(mod)] = FeatureGroup("this", list(features), costs)
        trust = ProgramScorer(xgb).holdout_trust(mod)
        assert (trust > 0.7) if expect_high else (trust < 0.5)
    xgb.data[shash2hex(mod)] = FeatureGroup("this", features[:5], learnable[:5])
    assert ProgramScorer(xgb).holdout_trust(mod) is None  # too few to judge


def test_a_candidate_the_tail_shortcut_scored_is_measured_as_that_program(monkeypatch):
    from harl.search.location_shortcut import TailShortcut

    redrawn, compared = [], []
    replay = TailShortcut.replay

    def noting(self, sch, seed):
        ok = replay(self, sch, seed)
        if ok and self.decision is not None and self.location != self.decision:
            redrawn.append(self.location)
        return ok

    as_measured = SketchReplay.as_measured

    def checked(self, sketch, state, sch):
        measured = as_measured(self, sketch, state, sch)
        assert tvm_ffi.structural_equal(measured.mod, sch.mod)
        compared.append(sketch.shortcut.is_original(measured))
        return measured

    monkeypatch.setattr(TailShortcut, "replay", noting)
    monkeypatch.setattr(SketchReplay, "as_measured", checked)
    mod = conv2d_module()
    strategy, spaces = make_strategy(scorer=RankingScorer(1), mod=mod)
    strategy.pre_tuning(24, 4, spaces, None, ms.cost_model.RandomModel())
    measured_batches(strategy)
    assert len(compared) == 24 and all(compared)  # TVM's own trace, the program scored
    assert redrawn  # some states' locations were ones TVM would have re-sampled
