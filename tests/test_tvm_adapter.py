"""Each of TVM's internals that harl reaches, exercised on the installed TVM (no tuning)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest
import tvm
import tvm_ffi
from conftest import global_average_pool, matmul_module
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from harl import tvm_adapter
from harl.agents.task_allocator import AllocatorConfig, TaskAllocator
from harl.search.harl_scheduler import HarlTaskScheduler
from harl.target import parse_target
from harl.tvm_adapter import TvmInternalsChanged


def two_stages(rule: str | None = None):
    """B = A * 2, C = B + 1 over 16x16: a producer to inline or move, a consumer with loops."""
    a = te.placeholder((16, 16), name="A")
    attrs = {"schedule_rule": rule} if rule else None
    b = te.compute((16, 16), lambda i, j: a[i, j] * 2, name="B", attrs=attrs)
    c = te.compute((16, 16), lambda i, j: b[i, j] + 1, name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, c])})


def tune_context(mod):
    return ms.TuneContext(mod=mod, target=parse_target("llvm"), space_generator="post-order-apply",
                          search_strategy="replay-trace", task_name="probe", num_threads=1)


def test_a_missing_internal_names_itself_and_the_tvm_version():
    with pytest.raises(TvmInternalsChanged) as raised:
        tvm_adapter.xgb_predict(object(), [])
    assert "XGBModel._predict" in str(raised.value)
    assert f"TVM {tvm.__version__}" in str(raised.value)
    assert raised.value.internal == "XGBModel._predict"


def test_python_instance_is_the_object_behind_a_derived_object():
    cost_model = ms.cost_model.XGBModel(num_warmup_samples=0)
    trainer = tvm_adapter.python_instance(cost_model)
    assert hasattr(trainer, "booster") and trainer.num_warmup_samples == 0
    assert tvm_adapter.python_instance("xgb") is None  # not a derived object


def test_an_xgb_trainer_trains_and_predicts_on_raw_features():
    trainer = tvm_adapter.xgb_trainer(num_warmup_samples=0, verbose_eval=10**9)
    rng = np.random.default_rng(0)
    xs = [rng.uniform(size=(2, 164)).astype("float32") for _ in range(32)]
    ys = np.array([x[:, 0].sum() for x in xs])
    tvm_adapter.xgb_train(trainer, xs, ys / ys.max())
    predicted = np.asarray(tvm_adapter.xgb_predict(trainer, xs))
    assert predicted.shape == (32,)
    assert np.corrcoef(predicted, ys)[0, 1] > 0.5


def test_a_wrapped_update_is_what_tvm_calls():
    cost_model = ms.cost_model.XGBModel(num_warmup_samples=0)
    seen = []

    def around(update, *args):
        seen.append(len(args[1]))
        update(*args)

    tvm_adapter.wrap_cost_model_update(tvm_adapter.python_instance(cost_model), around)
    cost_model.update(tune_context(matmul_module(16)), [], [])  # through TVM's C++ wrapper
    assert seen == [0]


def test_a_task_scheduler_reaches_its_task_records():
    scheduler = HarlTaskScheduler(TaskAllocator([1.0], [1.0], AllocatorConfig()))
    assert tvm_adapter.scheduler_tasks(tvm_adapter.python_instance(scheduler)) == []


def test_a_wrapped_search_strategy_is_initialised_with_the_context():
    strategy = ms.search_strategy.ReplayTrace()
    tvm_adapter.initialize_search_strategy(strategy, tune_context(matmul_module(16)))
    spaces = tune_context(matmul_module(16)).generate_design_space()
    strategy.pre_tuning(4, 2, spaces, None, None)  # raises unless initialised
    assert strategy.generate_measure_candidates()
    strategy.post_tuning()


def test_the_schedule_calls_do_what_the_checked_methods_do():
    checked, direct = Schedule(two_stages()), Schedule(two_stages())
    checked.seed(7)
    tvm_adapter.seed(direct, 7)
    assert checked.fork_seed() == direct.fork_seed()
    b, c = direct.get_sblock("B"), direct.get_sblock("C")
    assert [direct.get(x) for x in tvm_adapter.get_consumers(direct, b)] == [direct.get(c)]
    loops = tvm_adapter.get_loops(direct, c)
    assert tvm_adapter.loop_extents(direct, loops) == [16, 16]
    tvm_adapter.compute_at(direct, b, loops[0])
    checked.compute_at(checked.get_sblock("B"), checked.get_loops(checked.get_sblock("C"))[0],
                       preserve_unit_loops=True)
    assert tvm_ffi.structural_equal(checked.mod, direct.mod)
    inlined = Schedule(two_stages())
    tvm_adapter.compute_inline(inlined, inlined.get_sblock("B"))
    assert [name for name in ("B", "C") if _has_block(inlined, name)] == ["C"]


def _has_block(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
    except Exception:  # noqa: BLE001  (TVM raises its own error for a missing block)
        return False
    return True


def test_tensor_intrinsics_are_imported_without_the_package_init():
    # In a fresh process: another test may have imported every set in this one.
    probe = ("import sys\n"
             "from harl import tvm_adapter\n"
             "tvm_adapter.import_tensor_intrinsics(('x86',))\n"
             "assert 'tvm.s_tir.tensor_intrin.x86' in sys.modules\n"
             "package = sys.modules['tvm.s_tir.tensor_intrin']\n"
             "assert not hasattr(package, 'cuda'), 'the package __init__ ran (every set)'\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_served_schedule_rule_is_what_metaschedule_calls_for_the_block():
    rule = "harl_adapter_probe"
    assert not tvm_adapter.schedule_rule_served(["cpu"], rule)
    called = []

    def drop(sch, block):
        called.append(sch.get(block).name_hint)
        sch.unannotate(block, "schedule_rule")
        return [sch]

    tvm_adapter.serve_schedule_rule("cpu", rule, drop)
    assert tvm_adapter.schedule_rule_served(["llvm", "cpu"], rule)
    assert tune_context(two_stages(rule)).generate_design_space()
    assert called == ["B"]


def test_the_onnx_importers_operator_table():
    table = tvm_adapter.onnx_convert_map()
    assert {"Conv", "MatMul", "Relu"} <= set(table)


def test_the_rpc_measurement_takes_the_arguments_harl_passes():
    params = list(inspect.signature(tvm_adapter.rpc_worker_func()).parameters)
    assert params[5:] == ["rpc_config", "evaluator_config", "alloc_repeat", "artifact_path",
                          "device_type", "args_info"]
    assert len(params) == 11


def test_a_host_modules_imports_are_packed_and_listed():
    host = tvm.compile(matmul_module(16), target="llvm").mod
    assert tvm_adapter.imported_modules(host, "cuda") == []
    assert [m.kind for m in tvm_adapter.imported_modules(host, "llvm")] == ["llvm"]
    assert isinstance(tvm_adapter.pack_imports(host), bytes)


def test_held_statements_keep_a_schedule_from_writing_its_module():
    mod = global_average_pool()
    before = tvm_ffi.structural_hash(mod)
    held = tvm_adapter.pinned_statements(mod)
    assert len(held) >= 6  # the root block, both nests' loops and blocks
    sch = Schedule(mod)
    sch.annotate(sch.get_sblock("root"), "meta_schedule.vectorize", 64)  # replaces the root
    loops = sch.get_loops(sch.get_sblock("T_divide"))
    sch.vectorize(sch.fuse(*loops[2:]))  # without the held statements: written into `mod`
    assert tvm_ffi.structural_hash(mod) == before
    assert "T.vectorized" in sch.mod.script() and "T.vectorized" not in mod.script()
