"""Resuming a work dir: the manifest, --fresh, earlier trials per task, cost model warm start,
and files a crash cut short."""

import math

import pytest
from conftest import fill_database, matmul_module
from tvm.s_tir import meta_schedule as ms

from harl.database import RECORD_FILE, WORKLOAD_FILE
from harl.database.repair import load_database
from harl.errors import HarlError
from harl.loop import open_database
from harl.report.history import TaskStats
from harl.resume import PriorRun, RunManifest, claim_work_dir, warm_start_cost_model
from harl.target import parse_target

FAILED = [1e10]  # what MetaSchedule records for a failed trial


def manifest(tmp_path, model_bytes=b"model", strategy="metaschedule", target=None,
             cost_prior=None):
    model = tmp_path / "model.onnx"
    model.write_bytes(model_bytes)
    return RunManifest.of(model, target or parse_target('{"kind": "llvm", "num-cores": 2}'),
                          strategy, cost_prior)


# -- manifest and --fresh ------------------------------------------------------------------------

def test_same_run_resumes_and_a_different_one_is_refused(tmp_path, harl_messages):
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    (tmp_path / RECORD_FILE).write_text("[0]\n")  # the run has measured something
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    one_core = parse_target('{"kind": "llvm", "num-cores": 1}')
    for other, what in ((manifest(tmp_path, b"other model"), "model"),
                        (manifest(tmp_path, target=one_core), "target"),
                        (manifest(tmp_path, strategy="harl"), "strategy")):
        with pytest.raises(HarlError, match=f"holds a run of {what} .*use --fresh"):
            claim_work_dir(tmp_path, other, fresh=False)
    assert harl_messages() == []


def test_a_run_with_the_prior_does_not_resume_without_it(tmp_path):
    claim_work_dir(tmp_path, manifest(tmp_path, strategy="harl", cost_prior=True), fresh=False)
    (tmp_path / RECORD_FILE).write_text("[0]\n")
    with pytest.raises(HarlError, match="holds a run of harl with the cost-model prior, not "
                                        "--no-prior; use --fresh"):
        claim_work_dir(tmp_path, manifest(tmp_path, strategy="harl", cost_prior=False),
                       fresh=False)
    manifest(tmp_path).write(tmp_path)  # written before harl recorded the prior
    claim_work_dir(tmp_path, manifest(tmp_path, cost_prior=False), fresh=False)
    assert RunManifest.read(tmp_path).cost_prior is False


def test_a_run_that_measured_nothing_is_not_in_the_way(tmp_path):
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    claim_work_dir(tmp_path, manifest(tmp_path, b"fixed model"), fresh=False)
    fixed = manifest(tmp_path, b"fixed model")
    assert RunManifest.read(tmp_path).model_sha256 == fixed.model_sha256


def test_fresh_moves_the_earlier_run_aside(tmp_path, harl_messages):
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    for name in (RECORD_FILE, WORKLOAD_FILE, "history.csv", "metrics.jsonl"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "agents").mkdir()  # harl's checkpoints must not leak into the fresh run
    claim_work_dir(tmp_path, manifest(tmp_path, b"other model"), fresh=True)
    said = harl_messages()
    (aside,) = tmp_path.glob("previous-*")
    assert said == [f"harl: --fresh: moved the earlier run to {aside}"]
    assert (aside / RECORD_FILE).read_text() == "x\n" and (aside / "logs").is_dir()
    assert not (tmp_path / RECORD_FILE).exists() and not (tmp_path / "history.csv").exists()
    assert (aside / "agents").is_dir() and not (tmp_path / "agents").exists()
    assert not (tmp_path / "metrics.jsonl").exists()
    other = manifest(tmp_path, b"other model")
    assert RunManifest.read(tmp_path).model_sha256 == other.model_sha256


# -- earlier trials ------------------------------------------------------------------------------

def test_earlier_trials_are_counted_per_task_with_failures_and_bests(tmp_path):
    fill_database(tmp_path, {32: [[2e-3], FAILED, [1e-3, 3e-3]], 16: [[5e-4]], 8: [[1e-4]]})
    database = open_database(tmp_path)  # as a resumed run opens it
    tasks = [matmul_module(32), matmul_module(16), matmul_module(64)]  # 8 is not a task now
    prior = PriorRun.read(database, tasks)
    assert [len(r) for r in prior.records] == [3, 1, 0] and prior.trials == 4
    stats = [TaskStats(f"t{i}", 1.0, 1.0) for i in range(3)]
    prior.seed_stats(stats)
    assert [(s.trials, s.failures) for s in stats] == [(3, 1), (1, 0), (0, 0)]
    assert stats[0].best_s == pytest.approx(2e-3) and stats[1].best_s == pytest.approx(5e-4)
    assert stats[2].best_s == math.inf


def test_cost_model_learns_the_earlier_trials(tmp_path):
    target = fill_database(tmp_path, {32: [[2e-3], [1e-3], FAILED, [4e-3]]})
    database = open_database(tmp_path)
    prior = PriorRun.read(database, [matmul_module(32)])
    context = ms.TuneContext(mod=matmul_module(32), target=target,
                             space_generator="post-order-apply", num_threads=1).clone()
    model = ms.cost_model.XGBModel(num_warmup_samples=2)
    assert warm_start_cost_model(model, [context], prior) == 4
    assert model.data_size == 4 and model.booster is not None
    (group,) = model.data.values()
    assert sorted(group.costs.tolist()) == pytest.approx([1e-3, 2e-3, 4e-3, 1e10])


# -- files a crash cut short ---------------------------------------------------------------------

def test_a_truncated_record_file_cannot_be_opened_and_the_repair_fixes_it(tmp_path,
                                                                           harl_messages):
    fill_database(tmp_path, {16: [[1e-3], [2e-3], [3e-3]]})
    path = tmp_path / RECORD_FILE
    intact = path.read_bytes()
    path.write_bytes(intact[:-40])  # a crash in the middle of the last line
    with pytest.raises(ValueError):  # the line is not JSON
        open_database(tmp_path)
    assert path.read_bytes() == intact[:-40]  # as it was: not written back
    assert len(load_database(tmp_path).get_all_tuning_records()) == 2
    said = harl_messages()
    (backup,) = tmp_path.glob(RECORD_FILE + ".corrupt-*")
    assert backup.read_bytes() == intact[:-40]
    assert path.read_bytes() == b"".join(intact.splitlines(keepends=True)[:2])
    assert len(said) == 1 and f"dropped 1 line of {RECORD_FILE}" in said[0]


def test_a_complete_last_line_without_newline_is_kept(tmp_path, harl_messages):
    fill_database(tmp_path, {16: [[1e-3], [2e-3]]})
    path = tmp_path / RECORD_FILE
    path.write_bytes(path.read_bytes()[:-1])  # the crash came between the line and its newline
    assert len(load_database(tmp_path).get_all_tuning_records()) == 2
    assert path.read_bytes().endswith(b"\n") and harl_messages() == []
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_claiming_the_work_dir_repairs_history_with_one_warning(tmp_path, harl_messages):
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    (tmp_path / "history.csv").write_text("time_s,task_id\n1.0,0\n2.0,")
    claim_work_dir(tmp_path, manifest(tmp_path), fresh=False)
    said = harl_messages()
    assert len(said) == 1 and said[0].startswith("harl: warning: ")
    assert "dropped 1 line of history.csv" in said[0] and ".corrupt-" in said[0]
    assert (tmp_path / "history.csv").read_text() == "time_s,task_id\n1.0,0\n"


def test_a_later_tuning_step_is_seeded_apart_from_the_first():
    """A resume (or the graph level's second step) draws new samples, not the first step's."""
    from harl.tune import step_seed

    assert step_seed(3, 0) == 3
    seeds = {step_seed(3, done) for done in (0, 48, 64)} | {step_seed(4, 48)}
    assert len(seeds) == 4 and all(0 <= seed < 2**31 - 1 for seed in seeds)
