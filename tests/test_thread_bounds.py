"""A GPU sketch's thread bounds, judged from a state before replaying it (no GPU needed: only
the schedules are made)."""

import re
from types import SimpleNamespace

import numpy as np
import pytest
import tvm_ffi
from conftest import conv2d_module
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Instruction, Trace

from harl.report.metrics import MetricsLogger
from harl.search.sketch_replay import SketchReplay
from harl.search.thread_bounds import ThreadBounds
from harl.search.trace_sites import fresh_schedules, state_of, with_state
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics


def design_space(target_spec: str):
    """The first sketch of a small conv2d. On CUDA, MetaSchedule's rules without the tensor-core
    one: that one needs TVM's CUDA intrinsics loaded (over 30 s)."""
    target = parse_target(target_spec)
    load_tensor_intrinsics(parse_target("llvm"))  # the CPU's only
    kind = target.kind.name
    rules = ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind,
                                              mutator_probs=kind)
    context = ms.TuneContext(mod=conv2d_module(size=16, channels=16), target=target,
                             space_generator=rules, task_name="conv", num_threads=1).clone()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    return context, trace


@pytest.fixture(scope="module")
def cuda_sketch():
    return design_space("cuda")


def replay(context, trace, seed: int):
    """The state drawn, the extent of the loop bound to threadIdx.x before the postprocs, and
    whether they accept the schedule."""
    sch = fresh_schedules(context.mod).new(seed)
    trace.apply_to_schedule(sch, remove_postproc=True)
    before = state_of(sch.trace)
    extents = re.findall(r'T.thread_binding\((?:T.int64\()?(\d+)\)?, thread="threadIdx.x"\)',
                         sch.mod.script())
    assert len(extents) == 1
    try:
        accepted = all(p.apply(sch) for p in context.space_generator.postprocs)
    except Exception:  # noqa: BLE001
        accepted = False
    return before, int(extents[0]), accepted


def test_the_bounds_reject_exactly_the_samples_binding_too_few_or_too_many_threads(cuda_sketch):
    context, trace = cuda_sketch
    bounds = ThreadBounds.of(trace)
    assert bounds is not None and len(bounds.bounds) == 1
    bound = bounds.bounds[0]
    assert (bound.low, bound.high) == (32, 1024)  # MetaSchedule's defaults for CUDA
    verdicts = {"within": 0, "outside": 0}
    for seed in range(1, 41):
        state, extent, accepted = replay(context, with_state(trace, None), seed)
        assert bounds.allows(state) == (32 <= extent <= 1024)  # the extent TVM bound
        if not bounds.allows(state):
            assert not accepted  # a postproc would have rejected it after the whole replay
        verdicts["within" if bounds.allows(state) else "outside"] += 1
    assert verdicts["within"] > 0 and verdicts["outside"] > 0  # the check decides something


def test_the_start_of_the_trace_draws_the_bound_factors_as_the_whole_trace(cuda_sketch):
    context, trace = cuda_sketch
    bounds = ThreadBounds.of(trace)
    assert bounds.prefix < len(trace.insts)
    sites = {site for bound in bounds.bounds for site, _ in bound.factors}
    for seed in range(1, 11):
        start = fresh_schedules(context.mod).new(seed)
        bounds.prefix_trace(trace).apply_to_schedule(start, remove_postproc=True)
        whole, _, _ = replay(context, with_state(trace, None), seed)
        drawn = state_of(start.trace)
        assert all(drawn[site] == whole[site] for site in sites)


def test_cpu_sketches_have_no_thread_bounds():
    _, trace = design_space("llvm")
    assert ThreadBounds.of(trace) is None


@pytest.mark.parametrize("extra", ["warp_execution", "threadIdx.y"])
def test_blocks_whose_threads_are_counted_otherwise_have_no_bounds(cuda_sketch, extra):
    # TVM counts threadIdx.x, .y and .z together, and a warp for x under warp execution (the
    # tensor-core rules): the bound loop's extent is then not the block's thread count
    _, trace = cuda_sketch
    insts = list(trace.insts)
    bind = next(inst for inst in insts if inst.kind.name == "Bind"
                and str(inst.attrs[0]) == "threadIdx.x")
    annotate = next(inst for inst in insts if inst.kind.name == "Annotate")
    if extra == "warp_execution":
        added = Instruction(annotate.kind, list(annotate.inputs), ["warp_execution"], [])
    else:
        added = Instruction(bind.kind, list(bind.inputs), ["threadIdx.y"], [])
    assert ThreadBounds.of(Trace([*insts, added], dict(trace.decisions))) is None


def test_replay_skips_what_is_out_of_bounds_and_keeps_every_schedule_it_made_before(
        cuda_sketch):
    context, trace = cuda_sketch
    postprocs = list(context.space_generator.postprocs)
    bounds = ThreadBounds.of(trace)
    drawn = {}
    for sketch_bounds in (None, bounds):
        sketch = SimpleNamespace(trace=trace, shortcut=None, thread_bounds=sketch_bounds)
        replay_ = SketchReplay(context.mod, postprocs, workers=2, rng=np.random.default_rng(3),
                               metrics=MetricsLogger())
        samples = replay_.fresh(sketch, 24)
        drawn[sketch_bounds is None] = [tvm_ffi.structural_hash(s.mod) for _, s in samples]
    assert drawn[True] and drawn[True] == drawn[False]
    assert replay_.out_of_bounds > 0

    state = list(state_of(trace))
    for site, level in bounds.bounds[0].factors:  # the thread level's factor moves outermost
        factors = list(state[site])
        factors[0], factors[level] = factors[0] * factors[level], 1
        state[site] = tuple(factors)
    assert not bounds.allows(tuple(state))  # one thread
    replay_ = SketchReplay(context.mod, postprocs, workers=1, rng=np.random.default_rng(0),
                           metrics=MetricsLogger())
    assert replay_.states(sketch, [tuple(state)]) == [None]
    assert replay_.out_of_bounds == 1

    # a mix: each state gets the schedule (or None) it got without the bounds
    inside = [s for s, _ in SketchReplay(context.mod, postprocs, workers=1,
                                         rng=np.random.default_rng(5),
                                         metrics=MetricsLogger()).fresh(sketch, 8)][:2]
    mixed = [inside[0], tuple(state), None, inside[-1]]
    made = {}
    for sketch_bounds in (None, bounds):
        plan = SimpleNamespace(trace=trace, shortcut=None, thread_bounds=sketch_bounds)
        replay_ = SketchReplay(context.mod, postprocs, workers=2, rng=np.random.default_rng(7),
                               metrics=MetricsLogger())
        made[sketch_bounds is None] = [None if sch is None else tvm_ffi.structural_hash(sch.mod)
                                       for sch in replay_.states(plan, mixed)]
    assert made[True] == made[False]
    assert made[False][1] is None and None not in (made[False][0], made[False][3])


def test_samples_outside_the_bounds_are_replaced_by_more_draws(cuda_sketch):
    context, trace = cuda_sketch
    bounds = ThreadBounds.of(trace)
    sketch = SimpleNamespace(trace=trace, shortcut=None, thread_bounds=bounds)

    def fresh(max_draws):
        replay_ = SketchReplay(context.mod, list(context.space_generator.postprocs), workers=2,
                               rng=np.random.default_rng(3), metrics=MetricsLogger())
        return replay_.fresh(sketch, 16, max_draws), replay_.out_of_bounds

    once, _ = fresh(None)
    filled, skipped = fresh(16 * 8)
    assert 2 * len(once) < len(filled) <= 16
    assert all(bounds.allows(state) for state, _ in filled)
    hashes = [tvm_ffi.structural_hash(sch.mod) for _, sch in filled]
    assert hashes[:len(once)] == [tvm_ffi.structural_hash(sch.mod) for _, sch in once]
    capped, capped_skipped = fresh(24)
    assert len(once) <= len(capped) < len(filled)
    assert capped_skipped + len(capped) <= 24 < skipped


def test_the_search_proposes_the_same_cuda_candidates_and_replays_fewer(monkeypatch,
                                                                        cuda_sketch):
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from harl.agents.tile_tuner import TileTunerConfig
    from harl.search import harl_search
    from harl.search.harl_search import HarlSearchStrategy
    from harl.search.search_config import HarlSearchConfig

    short = HarlSearchConfig(tile=TileTunerConfig(trajectory_length=2, proposals_per_step=4),
                             bounded_draws=1)  # no draws in place of the skipped: same seeds

    def candidates(bounds_of):
        monkeypatch.setattr(harl_search.ThreadBounds, "of", staticmethod(bounds_of))
        context, _ = cuda_sketch
        strategy = HarlSearchStrategy(short, seed=1)
        strategy._initialize_with_tune_context(context)
        strategy.pre_tuning(8, 4, context.generate_design_space(), None,
                            ms.cost_model.RandomModel())
        keys = []
        while (batch := strategy.generate_measure_candidates()) is not None:
            keys += [tvm_ffi.structural_hash(c.sch.mod) for c in batch]
            strategy.notify_runner_results(batch, [RunnerResult([1e-3 / (1 + i)], None)
                                                   for i in range(len(batch))])
        return keys, strategy.replay.out_of_bounds

    bounds_of = ThreadBounds.of
    plain, _ = candidates(lambda trace: None)
    bounded, skipped = candidates(bounds_of)
    assert len(plain) == 8 and bounded == plain
    assert skipped > 0
