"""The location shortcut replays exactly what TVM replays, on real TVM."""

import copy

import numpy as np
import tvm_ffi
from conftest import conv2d_module, matmul_module
from tvm.s_tir import meta_schedule as ms

from harl.agents.tile_tuner import propose
from harl.search.location_shortcut import LocationShortcut, ShortcutTrace, TailShortcut
from harl.search.trace_sites import (
    fresh_schedules,
    initial_options,
    schedule_of,
    site_of,
    state_of,
    tunable_insts,
    with_state,
)
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics


def sketches_of(mod):
    target = parse_target(None)
    load_tensor_intrinsics(target)
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             num_threads=1, rand_state=0).clone()
    traces = [s.trace.simplified(remove_postproc=True) for s in context.generate_design_space()]
    return traces, list(context.space_generator.postprocs)


def shortcut_of(mod, trace):
    return LocationShortcut.of(mod, trace, lambda: fresh_schedules(mod).new(1))


def walk_states(mod, trace, postprocs, rng, starts=12, steps=6):
    """Fresh samples, and random walks of the tile tuner's moves from them: moves reach
    locations TVM would not keep (a unit loop, say) as well as ones it would."""
    sites = [site_of(inst) for inst in tunable_insts(trace)]
    options = initial_options(trace)
    samples = [schedule_of(mod, with_state(trace, None), postprocs, seed)
               for seed in range(1, starts + 1)]
    states = [state_of(sch.trace) for sch in samples if sch is not None]
    for index, site in enumerate(sites):
        if site.kind == "compute_location":
            options[index] = sorted(set(options[index]) | {state[index] for state in states})
    walked = []
    for state in states:
        for _ in range(steps):
            index = int(rng.integers(len(sites)))
            moved = propose(sites[index], state[index], rng, options[index])
            if moved is not None:
                state = state[:index] + (moved,) + state[index + 1:]
                walked.append(state)
    return states + walked


def test_a_shortcut_replays_the_schedule_tvm_replays():
    """The general shortcut (for a location sampled before a sketch's last instructions) on
    the conv2d's sketches: the same programs as TVM's, and TVM's own replay where TVM would
    re-sample the location."""
    mod = conv2d_module()
    traces, postprocs = sketches_of(mod)
    rng = np.random.default_rng(0)
    outcomes = set()
    with_shortcut = 0
    for trace in traces:
        shortcut = shortcut_of(mod, trace)
        if shortcut is None:
            continue
        shortcut = copy.copy(shortcut)
        shortcut.prefix = None  # as if the location were not sampled last
        with_shortcut += 1
        for seed, state in enumerate(walk_states(mod, trace, postprocs, rng), start=1):
            original = with_state(trace, state)
            plan = shortcut.plan(original)
            if isinstance(plan, ShortcutTrace):
                outcomes.add((plan.decision >= 0, plan.replay(fresh_schedules(mod).new(1), 1)))
            expected = schedule_of(mod, original, postprocs, seed)
            got = schedule_of(mod, plan, postprocs, seed)
            assert (got is None) == (expected is None)
            if got is not None:
                assert tvm_ffi.structural_equal(got.mod, expected.mod)
                assert shortcut.is_original(expected)
    assert with_shortcut >= 1
    # taken at a loop, at the root or inlined, and given up where TVM would re-sample
    assert {(True, True), (False, True), (True, False)} <= outcomes


def test_a_tail_shortcut_keeps_what_tvm_keeps_and_redraws_what_tvm_resamples():
    """A sketch whose location is sampled last: where TVM keeps a state's location, the same
    program; where TVM would re-sample it, one TVM keeps, and the state measured is the one
    the shortcut applied."""
    mod = conv2d_module()
    traces, postprocs = sketches_of(mod)
    rng = np.random.default_rng(0)
    kept = redrawn = 0
    for trace in traces:
        shortcut = shortcut_of(mod, trace)
        if shortcut is None or shortcut.prefix is None:
            continue
        for seed, state in enumerate(walk_states(mod, trace, postprocs, rng), start=1):
            original = with_state(trace, state)
            plan = shortcut.plan(original)
            assert isinstance(plan, TailShortcut)
            expected = schedule_of(mod, original, postprocs, seed)
            got = schedule_of(mod, plan, postprocs, seed)
            assert (got is None) == (expected is None)
            if got is None:
                continue
            tvm_keeps = state_of(expected.trace)[-1] == state[-1]
            if shortcut.is_original(got):  # the shortcut gave up: TVM replayed it
                assert tvm_ffi.structural_equal(got.mod, expected.mod)
                continue
            measured = shortcut.measured_state(state, got)
            assert measured[-1] == plan.location
            assert (plan.location == state[-1]) == tvm_keeps
            again = schedule_of(mod, with_state(trace, measured), postprocs, 1)
            assert state_of(again.trace) == measured  # TVM keeps the location applied
            assert tvm_ffi.structural_equal(got.mod, again.mod)
            if tvm_keeps:
                kept += 1
                assert tvm_ffi.structural_equal(got.mod, expected.mod)
            else:
                redrawn += 1
    assert kept >= 100 and redrawn >= 10, (kept, redrawn)


def test_no_shortcut_without_a_sampled_location_or_with_another_compute_at():
    from tvm.s_tir.schedule import Instruction, Trace

    mod = matmul_module(16)
    traces, _ = sketches_of(mod)
    sampled = [any(i.kind.name == "SampleComputeLocation" for i in t.insts) for t in traces]
    assert [shortcut_of(mod, t) is not None for t in traces] == sampled
    # a compute-at that drops unit loops is not the one TVM checks each candidate with
    mod = conv2d_module()
    trace = sketches_of(mod)[0][0]
    insts, decisions = list(trace.insts), dict(trace.decisions.items())
    assert shortcut_of(mod, Trace(insts, decisions)) is not None
    at = next(k for k, inst in enumerate(insts) if inst.kind.name == "ComputeAt")
    insts[at] = Instruction(insts[at].kind, insts[at].inputs, [False, -1], insts[at].outputs)
    assert shortcut_of(mod, Trace(insts, decisions)) is None


def test_a_sampled_location_is_one_tvm_keeps_and_as_likely_as_from_tvm():
    from collections import Counter

    mod = conv2d_module()
    traces, postprocs = sketches_of(mod)
    trace = traces[0]
    shortcut = shortcut_of(mod, trace)
    undecided = with_state(trace, None)
    ours, tvms, fallbacks = Counter(), Counter(), 0
    for seed in range(1, 301):
        plan = shortcut.sample_plan(undecided)
        assert isinstance(plan, TailShortcut)
        sch = schedule_of(mod, plan, postprocs, seed)
        tvm = schedule_of(mod, undecided, postprocs, seed)
        if sch is None or tvm is None:
            assert sch is None and tvm is None
            continue
        if plan.location is None:  # not legal here: TVM drew it, from the same seed
            fallbacks += 1
            assert tvm_ffi.structural_equal(sch.mod, tvm.mod)
            state = state_of(sch.trace)
        else:
            state = (*state_of(sch.trace), plan.location)
            again = schedule_of(mod, with_state(trace, state), postprocs, 1)  # TVM keeps it
            assert state_of(again.trace) == state
            assert tvm_ffi.structural_equal(sch.mod, again.mod)
        other = state_of(tvm.trace)
        assert state[:-1] == other[:-1]  # the same seed samples the same tiles
        ours[state[-1]] += 1
        tvms[other[-1]] += 1
    assert sum(ours.values()) - fallbacks > 250  # nearly all drawn by the shortcut
    # independent draws from one distribution: each location's counts within noise
    for location in set(ours) | set(tvms):
        assert abs(ours[location] - tvms[location]) <= 30, (location, ours, tvms)
