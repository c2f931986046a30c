"""Prepacked weights: conv and matmul schedules choose their constant weights' layout, the
packing is folded into the weights at compile time, and plain TVM rebuilds the result."""

import json

from conftest import EXAMPLES, assert_plain_tvm_rebuilds, harl_tune_here, three_convs

from harl.config_resume import config_changes
from harl.database import open_database
from harl.frontend.onnx_model import import_to_relax, load_onnx
from harl.frontend.tasks import extract_tasks, prepacks_weights
from harl.target import parse_target


def _layout_free(task) -> list[int]:
    attrs = task.mod["main"].attrs
    return [int(i) for i in attrs["layout_free_buffers"]] if "layout_free_buffers" in attrs else []


def test_extraction_marks_constant_weights_layout_free_only_when_asked():
    target = parse_target(None)
    mod = import_to_relax(load_onnx(EXAMPLES / "cnn.onnx"))
    marked = {t.name: _layout_free(t) for t in extract_tasks(mod, target, prepack_weights=True)}
    convs = [name for name in marked if "conv2d" in name]
    assert convs and all(marked[name] for name in convs)  # each conv's weight argument
    plain = extract_tasks(mod, target)
    assert not any(_layout_free(t) for t in plain)
    assert not any("layout_free_buffers" in t.mod["main"].attrs for t in plain)


def test_tuned_convs_read_packed_weights_and_plain_tvm_rebuilds_them(tmp_path):
    (tmp_path / "c.toml").write_text("prepack_weights = true\n")
    # 4 trials of three convs: a task is left to the cost model's pick, compiled beside the
    # records (in a UnionDatabase, which cannot list them)
    model = three_convs(tmp_path / "three_convs.onnx")
    proc = harl_tune_here(model, "--trials", 4, "--trials-per-batch", 4,
                          "--work-dir", tmp_path / "run", "--config", tmp_path / "c.toml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert any(task["predicted"] for task in report["tasks"])
    assert report["verified"] is True
    database = open_database(tmp_path / "run")
    assert prepacks_weights(database)
    traces = [str(r.trace) for r in database.get_all_tuning_records()]
    assert any("layout_rewrite_preproc" in trace for trace in traces)  # RewriteLayout acted
    out = assert_plain_tvm_rebuilds(model, tmp_path / "run")
    assert "cpu_weight_prepack" in out


def test_by_default_the_imported_layout_is_tuned_and_cold_timing_runs(tmp_path):
    (tmp_path / "c.toml").write_text("[measure]\nflush_caches = true\n")
    proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--trials", 3, "--work-dir", tmp_path / "run",
                          "--config", tmp_path / "c.toml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not prepacks_weights(open_database(tmp_path / "run"))
    out = assert_plain_tvm_rebuilds(EXAMPLES / "mlp.onnx", tmp_path / "run", applied="3/3")
    assert "cpu_weight_prepack" not in out


def test_cold_timing_is_one_flushed_run_per_timing():
    from harl.config import MeasureConfig
    from harl.measure.runner import evaluator_config

    cold = evaluator_config(MeasureConfig(flush_caches=True, cold_repeats=5))
    assert (cold.number, cold.repeat, cold.min_repeat_ms) == (1, 5, 0)
    assert cold.enable_cpu_cache_flush
    assert not evaluator_config(MeasureConfig()).enable_cpu_cache_flush


def test_a_run_recorded_before_prepacking_counts_as_unpacked_on_resume():
    assert config_changes({"seed": 0}, {"seed": 0, "prepack_weights": True}) == [
        "prepack_weights false -> true"]
    assert config_changes({"seed": 0}, {"seed": 0, "prepack_weights": False}) == []
