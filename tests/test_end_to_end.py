"""`python -m harl.tune` on real TVM (llvm), exactly as a user runs it, and plain-TVM reuse."""

import csv
import json
import math
import os
import shutil

import onnx
import pytest
from conftest import (
    EXAMPLES,
    ROOT,
    assert_plain_tvm_rebuilds,
    harl_tune,
    harl_tune_here,
    save_conv_bn_model,
    shipped_prior_applies,
    trial_record_lines,
)

from harl.measure.cpu_load import snapshot
from harl.measure.threads import physical_core_count
from harl.target import gpu_visible


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("mlp")
    # 7 trials in batches of 2: the last batch is cut to the one trial left.
    proc = harl_tune(EXAMPLES / "mlp.onnx", "--trials", 7, "--trials-per-batch", 2,
                     "--work-dir", work_dir)
    return proc, work_dir


def test_tune_exits_zero_and_prints_latencies(mlp_run):
    proc, _ = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    for label in ("untuned TVM latency", "tuned TVM latency", "onnxruntime latency"):
        assert label in proc.stdout
    assert "verified                 true" in proc.stdout


def test_report_history_and_database_agree(mlp_run):
    proc, work_dir = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True and report["strategy"] == "harl"  # the default
    # Its two big matmuls are in the prior's range, where the prior applies (x86, its TVM).
    assert report["cost_prior"] is shipped_prior_applies()
    assert report["max_abs_err"] <= 1e-3
    chosen = os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    assert report["runtime_threads"] == (int(chosen) if chosen else physical_core_count())
    assert set(report["latency_ms"]) == {"untuned", "tuned", "onnxruntime"}
    assert all(v > 0 for v in report["latency_ms"].values())
    if snapshot() is not None:  # Linux: others' load while timing was read (seconds of it)
        assert report["timing_other_cores"] >= 0.0
    # Measuring this MLP's candidates may take under the second a load is told over.
    assert report["measure_other_cores"] is None or report["measure_other_cores"] >= 0.0
    # The MLP's every task is measured, so no picks: the phases in the order they ran.
    assert list(report["phase_seconds"]) == ["setup", "tuning", "store", "compile_verify",
                                             "timing"]
    assert report["phase_seconds"]["tuning"] == pytest.approx(report["tune_seconds"], abs=0.01)
    assert "wall time" in proc.stdout
    assert len(report["tasks"]) == 3 and report["trials_done"] == 7
    # A task may get no trial when its unscheduled nest, measured first, is a sliver of the model.
    assert all(task["best_ms"] > 0 and (task["trials"] > 0 or task["naive"])
               for task in report["tasks"])
    # Where the search's time went: a breakdown of it (features and predictions only once a
    # model ranks the task, which the prior does on x86 from the first batch).
    stages = report["agent_stage_seconds"]
    assert "search/replay_seconds" in stages and set(stages) <= {
        "search/replay_seconds", "search/feature_seconds", "search/prediction_seconds",
        "tile/policy_seconds"}
    assert 0 < sum(stages.values()) <= report["agent_seconds"]["search/agent_seconds"] + 0.01
    rows = list(csv.DictReader((work_dir / "history.csv").open()))
    assert len([row for row in rows if row["trial"]]) == report["trials_done"]
    assert len(trial_record_lines(work_dir)) == report["trials_done"]
    assert len((work_dir / "database_workload.json").read_text().splitlines()) == 3


def test_database_is_reused_by_plain_tvm(mlp_run):
    proc, work_dir = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_plain_tvm_rebuilds(EXAMPLES / "mlp.onnx", work_dir, applied="3/3")
    # The tool must stand on TVM alone.
    assert "harl" not in (ROOT / "tools" / "build_with_tvm.py").read_text().split('"""')[2]


def test_harl_agents_leave_metrics_and_checkpoints(mlp_run):
    proc, work_dir = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    lines = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    keys = {key.split("/")[0] for line in lines for key in line if "/" in key}
    assert {"alloc", "sketch", "tile"} <= keys
    allocator = json.loads((work_dir / "agents" / "task_allocator.json").read_text())
    assert sum(task["trials"] for task in allocator) == report["trials_done"]
    assert (work_dir / "agents" / "tile_policy.npz").stat().st_size > 0


def test_metaschedule_baseline_end_to_end(tmp_path):
    proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--strategy", "metaschedule", "--trials", 7,
                          "--trials-per-batch", 2, "--work-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["strategy"] == "metaschedule" and report["verified"] is True
    assert report["cost_prior"] is False  # the baseline stays TVM's own
    assert report["trials_done"] == 7 and all(t["trials"] > 0 for t in report["tasks"])
    assert not (tmp_path / "metrics.jsonl").exists()  # no agents, no agent metrics
    assert not (tmp_path / "agents").exists()


@pytest.mark.parametrize("args, message", [
    (["missing.onnx"], "model file not found"),
    ([EXAMPLES / "mlp.onnx", "--trials", "0"], "--trials must be a positive number"),
    ([EXAMPLES / "mlp.onnx", "--target", "bogus"], "unknown target"),
    ([EXAMPLES / "mlp.onnx", "--input-shape", "input:1,x"], "malformed --input-shape"),
    ([EXAMPLES / "mlp.onnx", "--run-timeout", "0"], "must be positive numbers of seconds"),
    pytest.param([EXAMPLES / "mlp.onnx", "--target", "cuda"], "none is visible here",
                 marks=pytest.mark.skipif(gpu_visible(), reason="a GPU is here")),
])
def test_bad_input_is_one_line_exit_2(args, message):
    proc = harl_tune_here(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


def test_bad_input_is_all_a_fresh_process_prints():
    proc = harl_tune(EXAMPLES / "mlp.onnx", "--trials", "0", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "harl: error: --trials must be a positive number, got 0"]


def test_unwritable_work_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = harl_tune(EXAMPLES / "mlp.onnx", "--work-dir", blocker / "sub", timeout=120)
    assert proc.returncode == 2 and "cannot write to work dir" in proc.stderr


def test_rerun_with_the_budget_spent_goes_straight_to_verification(mlp_run, tmp_path):
    proc, work_dir = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(work_dir, tmp_path / "run")
    records = (tmp_path / "run" / "database_tuning_record.json").read_text()
    trials = len(trial_record_lines(tmp_path / "run"))
    rerun = harl_tune_here(EXAMPLES / "mlp.onnx", "--trials", 7, "--trials-per-batch", 2,
                           "--work-dir", tmp_path / "run")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (f"resuming: {trials} trials already in the database, the budget "
            "of 7 is spent; going straight to compile and verify") in rerun.stdout
    assert "verified                 true" in rerun.stdout
    assert (tmp_path / "run" / "database_tuning_record.json").read_text() == records
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["trials_resumed"] == report["trials_done"] == trials
    assert f"({report['trials_resumed']} resumed)" in rerun.stdout


def test_another_model_in_the_same_work_dir_is_refused(mlp_run, tiny_matmul, tmp_path):
    proc, work_dir = mlp_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(work_dir, tmp_path / "run")
    other = harl_tune(tiny_matmul, "--work-dir", tmp_path / "run", timeout=120)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    (line,) = other.stderr.strip().splitlines()
    assert "holds a run of model" in line and "mlp.onnx" in line and "--fresh" in line


def test_a_model_that_computes_shapes_is_tuned_folded_and_plain_tvm_reuses_the_log(
        shape_computing_model, tmp_path):
    work_dir = tmp_path / "run"
    proc = harl_tune_here(shape_computing_model, "--trials", 2, "--work-dir", work_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "folded by onnxruntime" in proc.stdout
    assert "verified                 true" in proc.stdout
    folded = work_dir / "model_imported.onnx"
    assert_plain_tvm_rebuilds(folded, work_dir)


def test_a_gru_model_is_tuned_unrolled_and_plain_tvm_reuses_the_log(gru_model, tmp_path):
    work_dir = tmp_path / "run"
    proc = harl_tune_here(gru_model, "--trials", 4, "--work-dir", work_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TVM's importer lacks GRU" in proc.stdout
    assert "verified                 true" in proc.stdout
    # The Gather's index reaches its kernel as an int64 tensor: filled with TVM's random bits it
    # read out of bounds and the measurement crashed.
    report = json.loads((work_dir / "report.json").read_text())
    take = [task for task in report["tasks"] if task["name"].startswith("take")]
    assert take and all(task["best_ms"] is not None and math.isfinite(task["best_ms"])
                        for task in take), report["tasks"]
    assert_plain_tvm_rebuilds(work_dir / "model_imported.onnx", work_dir, "--reference", gru_model)


def test_a_float16_model_is_checked_with_float16_tolerances(tmp_path):
    # TVM sums the conv's products in float16 in another order than onnxruntime: ~8e-3 apart,
    # beyond float32's tolerances (1e-3 relative, 1e-4 absolute), within float16's.
    model = save_conv_bn_model(tmp_path / "conv_bn16.onnx", conv_bias=True, dtype="float16")
    proc = harl_tune_here(model, "--trials", 2, "--work-dir", tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "verified                 true" in proc.stdout
    assert "(rtol 0.01, atol 0.01, vs onnxruntime)" in proc.stdout


def test_where_tvm_itself_disagrees_with_onnxruntime_tuning_is_checked_against_untuned_tvm(
        tmp_path):
    # TVM's erf (a polynomial, harl's fast math) and onnxruntime's differ in the last bits of
    # most elements: at zero tolerance TVM's untuned build disagrees with onnxruntime, and the
    # tuned one must match it instead.
    import onnx
    from onnx import TensorProto, helper

    from harl.config import TuneConfig, VerifyConfig
    from harl.tune import run

    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [64, 64]) for name in "xy")
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Erf", ["a"], ["y"])]
    path = tmp_path / "erf.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "erf", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    # MetaSchedule's strategy measures no naive loop nest, which under load can beat the tuned
    # kernel and leave nothing tuned to check.
    exact = run(TuneConfig(model=path, trials=2, work_dir=tmp_path / "exact", quiet=True,
                           strategy="metaschedule", verify=VerifyConfig(rtol=0.0, atol=0.0)))
    assert exact.trials_done >= 1 and not exact.tasks[0].naive  # a tuned kernel was compiled
    assert exact.verified and exact.verified_against == "untuned TVM"
    assert exact.max_abs_err == 0 and 0 < exact.untuned_max_abs_err < 1e-5
    usual = run(TuneConfig(model=path, trials=2, work_dir=tmp_path / "usual", quiet=True))
    assert usual.verified and usual.verified_against == "onnxruntime"
    assert usual.untuned_max_abs_err is None


def test_a_symbolic_batch_is_tuned_as_1_and_plain_tvm_reuses_the_log_with_batch_norm(tmp_path):
    # harl fuses each batch norm into its conv (TVM's DecomposeOpsForInference); the log's
    # workload is that fused function, which plain TVM finds after the same passes. The
    # model's batch is symbolic: harl says it takes 1, and saves the graph with that shape.
    model = save_conv_bn_model(tmp_path / "conv_bn.onnx", batch="N")
    work_dir = tmp_path / "run"
    proc = harl_tune_here(model, "--trials", 2, "--work-dir", work_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "batch dim x[0] 'N' is symbolic: tuned for 1 (--input-shape x:1,8,16,16" in proc.stdout
    assert "verified                 true" in proc.stdout
    imported = work_dir / "model_imported.onnx"
    dims = onnx.load(str(imported)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 8, 16, 16]
    assert_plain_tvm_rebuilds(imported, work_dir, applied="all")
