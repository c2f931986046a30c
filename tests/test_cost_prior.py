"""The cost-model prior: where it applies, which tasks it scores, what it does to a first batch,
and the tool that trains it (on a real tuning run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, conv2d_module, matmul_module
from test_harl_search import RankingScorer, fake_latency, make_strategy
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from harl.cli import build_parser, config_from_args
from harl.search.cost_prior import (
    DATA_DIR,
    MANIFEST_FILE,
    MODEL_FILE,
    CostPrior,
    load_cost_prior,
    prior_mismatch,
    target_arch,
)
from harl.search.program_scorer import ProgramScorer, batch_trust
from harl.search.trace_sites import schedule_of, with_state
from harl.target import parse_target
from harl.tvm_adapter import python_instance, xgb_predict

sys.path.insert(0, str(ROOT / "tools"))

import make_corpus  # noqa: E402
from benchlib.prior import train_and_write  # noqa: E402
from benchlib.synthetic import (  # noqa: E402
    FLOP_RANGE,
    SMALL_FLOP_RANGE,
    draw_branches,
    operator_keys,
    synthetic_models,
)
from replay_scorers import main as replay_scorers  # noqa: E402
from train_cost_prior import benchmarked_models, smallest_drawn  # noqa: E402


def test_the_shipped_prior_applies_to_cpu_targets_on_its_tvm_only(tmp_path, harl_messages):
    llvm = parse_target("llvm")
    manifest = json.loads((DATA_DIR / MANIFEST_FILE).read_text())
    shipped = load_cost_prior(llvm)
    assert (shipped is not None) == (prior_mismatch(manifest, llvm) is None)  # its CPU only
    assert load_cost_prior(parse_target("cuda")) is None
    # The rest on a copy labelled as trained on this host, so that it holds on any machine.
    host = {**manifest, "arch": target_arch(llvm)}
    shutil.copy(DATA_DIR / MODEL_FILE, tmp_path / MODEL_FILE)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(host))
    prior = load_cost_prior(llvm, tmp_path)
    assert prior is not None and 0.0 < prior.trust <= 1.0
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({**host, "tvm_version": "0.1"}))
    assert load_cost_prior(llvm, tmp_path) is None  # another TVM's features
    assert load_cost_prior(llvm, tmp_path / "missing") is None
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(host))
    (tmp_path / MODEL_FILE).write_text("not a model")
    assert load_cost_prior(llvm, tmp_path) is None
    said = harl_messages()
    assert len(said) == 1 and "\n" not in said[0] and "unreadable" in said[0]


class ConstantModel:
    """Stands in for an XGBoost model: the same score for every candidate."""

    def __init__(self, score: float) -> None:
        self.score = score

    def _predict(self, xs):
        return np.full(len(xs), self.score)


def samples(mod, target, count):
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             num_threads=1).clone()
    space = context.generate_design_space()[0]
    postprocs = list(context.space_generator.postprocs)
    drawn = [schedule_of(mod, with_state(space.trace.simplified(remove_postproc=True), None),
                         postprocs, seed) for seed in range(1, 4 * count + 1)]
    legal = [sch for sch in drawn if sch is not None][:count]
    return context, [MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, True))
                     for sch in legal]


class InverseModel:
    """Stands in for a prior that ranks exactly opposite to the run's model `xgb`."""

    def __init__(self, xgb) -> None:
        self.xgb = xgb

    def _predict(self, xs):
        return -np.asarray(xgb_predict(self.xgb, xs))


def test_the_prior_scores_a_task_alone_until_the_run_model_has_measured_it():
    target = parse_target("llvm")
    xgb = ms.cost_model.XGBModel(num_warmup_samples=4)
    scorer = ProgramScorer(python_instance(xgb), CostPrior(ConstantModel(7.0), 0.5, min_flop=1e6),
                           equal_weight_samples=6)
    matmul, conv = matmul_module(128), conv2d_module(size=32, channels=16)  # 4.2, 4.7 MFLOP
    assert not scorer.ranks(conv2d_module()) and not scorer.uses_prior(matmul_module(32))
    context, candidates = samples(matmul, target, 6)
    assert scorer.ranks(matmul) and not scorer.informative and scorer.own_weight(matmul) == 0
    assert np.all(scorer(context, candidates).scores == 7.0)
    xgb.update(context, candidates[:3], [RunnerResult([1e-3 * (i + 1)], None) for i in range(3)])
    xgb.update(context, candidates[3:5], [RunnerResult(None, "failed")] * 2)
    scorer.note_update()
    assert scorer.informative and scorer.samples_of(matmul) == 3
    assert scorer.own_weight(matmul) == 0  # failed measurements teach it little about the task
    xgb.update(context, candidates[5:], [RunnerResult([5e-4], None)])
    scorer.note_update()
    assert scorer.own_weight(matmul) == pytest.approx(4 / 10)  # 4 of min_task_samples 4
    assert scorer.own_weight(conv) == 0  # one task at a time: the prior alone on the conv
    own = xgb_predict(python_instance(xgb), [x.numpy() for x in xgb.extractor.extract_from(
        context, candidates)])
    # The prior scores every candidate alike, so it adds nothing: the blend ranks like the
    # run's model, on the scale of the task's measured throughputs (best latency / latency).
    scores = scorer(context, candidates).scores
    assert np.array_equal(np.argsort(scores), np.argsort(own))
    # Over the task's successful measurements (1, 2, 3, 0.5 ms) the run's model's standardised
    # scores average 0, so the blend averages their throughputs, best latency / latency.
    assert np.mean(scores[[0, 1, 2, 5]]) == pytest.approx(np.mean([0.5, 0.25, 0.5 / 3, 1.0]))
    assert ProgramScorer(python_instance(xgb)).own_weight(conv) == 1.0  # no prior: the run's model
    assert scorer.ranks(matmul_module(32))  # too small for the prior; the run's model has learned


def test_the_run_model_outweighs_the_prior_as_it_learns_the_task():
    target = parse_target("llvm")
    xgb = ms.cost_model.XGBModel(num_warmup_samples=4)
    context, candidates = samples(matmul_module(128), target, 8)
    xgb.update(context, candidates, [RunnerResult([1e-3 * (1 + i % 3 + i / 8)], None)
                                     for i in range(8)])
    own = xgb_predict(python_instance(xgb), [x.numpy() for x in xgb.extractor.extract_from(
        context, candidates)])
    assert own.std() > 0

    def agreement(equal_weight_samples):
        prior = CostPrior(InverseModel(python_instance(xgb)), 0.5, min_flop=1e6)
        scorer = ProgramScorer(python_instance(xgb), prior,
                               equal_weight_samples=equal_weight_samples)
        return np.corrcoef(scorer(context, candidates).scores, own)[0, 1]

    assert agreement(24) < -0.9  # 8 measurements against 24: the prior leads
    assert agreement(2) > 0.5  # 8 against 2: the run's model leads


class PriorRankingScorer(RankingScorer):
    """A scorer whose prior ranks like `fake_latency` and has not been judged on the task (a
    64x64 matmul: too small for the shipped prior, so this one stands in for it)."""

    def __init__(self, trust: float) -> None:
        super().__init__(1)
        self.prior = CostPrior(None, trust)

    def uses_prior(self, mod):
        return True

    def own_weight(self, mod):
        return 0.0  # the task measured nothing yet


def test_the_prior_chooses_the_first_batch_from_the_top_of_the_pool():
    def first_batch(scorer):
        strategy, spaces = make_strategy(64, scorer=scorer)
        strategy.pre_tuning(16, 8, spaces, None, None)
        trust = batch_trust(strategy.scorer, strategy.mod, strategy.trust, borrowed=lambda: None)
        latencies = [fake_latency(c.sch) for c in strategy.generate_measure_candidates()]
        return trust, float(np.mean(latencies))

    trust, screened = first_batch(PriorRankingScorer(0.6))
    assert trust == 0.6  # the prior's offline trust, before the task has measured anything
    _, unscreened = first_batch(PriorRankingScorer(0.1))  # too little trust to choose
    assert screened < unscreened


def test_no_prior_flag_reaches_the_config(tmp_path):
    model = tmp_path / "m.onnx"
    assert config_from_args(build_parser().parse_args([str(model)])).cost_prior is True
    assert config_from_args(build_parser().parse_args([str(model), "--no-prior"])).cost_prior \
        is False


def test_synthetic_models_are_reproducible_and_keyed_like_any_onnx_model(tmp_path):
    branches = draw_branches(np.random.default_rng(3), 200)
    assert {b.key[0] for b in branches} == {"conv", "matmul", "bmm"}
    assert any(b.key[0] == "conv" and b.key[-1] > 1 for b in branches)  # depthwise too
    first = synthetic_models(tmp_path / "a", 2, seed=5)
    again = synthetic_models(tmp_path / "b", 2, seed=5)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    rng = np.random.default_rng(5)
    drawn = [b.key for _ in range(2) for b in draw_branches(rng, 3)]
    assert set().union(*map(operator_keys, first)) == set(drawn)
    small = draw_branches(np.random.default_rng(3), 50, SMALL_FLOP_RANGE)
    assert all(SMALL_FLOP_RANGE[0] <= b.flop <= SMALL_FLOP_RANGE[1] for b in small)
    assert {b.key[0] for b in small} == {"conv", "matmul", "bmm"}
    assert operator_keys(EXAMPLES / "cnn.onnx") == {
        ("conv", 3, 16, 32, 3, 1, 1), ("conv", 16, 32, 32, 3, 2, 1), ("matmul", 1, 32, 10)}


def test_the_prior_is_used_down_to_the_smallest_flops_it_was_trained_on():
    runs = ROOT / "logs" / "prior" / "runs"  # names only: nothing is read
    big, small = runs / "synthetic00" / "harl-t64-s0", runs / "small03" / "harl-t64-s0"
    assert smallest_drawn([big, small]) == SMALL_FLOP_RANGE[0] < FLOP_RANGE[0]
    assert smallest_drawn([big]) == FLOP_RANGE[0]  # the small runs failed or were not asked


def test_the_corpus_held_out_models_found_are_refused_as_training_shapes(tmp_path, capsys):
    records = make_corpus.manifest()
    held_out = [r["name"] for r in records if r["split"] == make_corpus.HELD_OUT]
    development = next(r["name"] for r in records if r["split"] == make_corpus.DEV)
    for name in (held_out[0], development):
        (tmp_path / f"{name}.onnx").write_bytes(b"")
    refused = benchmarked_models(tmp_path)
    assert str(tmp_path / f"{held_out[0]}.onnx") in refused
    assert not any(development in spec for spec in refused)  # development models may be seen
    assert held_out[1] in capsys.readouterr().out  # named as missing, so not refused


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time
def test_the_training_tool_writes_a_prior_harl_loads(tmp_path, capsys):
    """One synthetic model tuned for real, then trained on: the files load and rank; the replay
    tool judges the scorers on the run."""
    model = synthetic_models(tmp_path / "models", 1, seed=11)[0]
    work_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harl.tune", str(model), "--trials", "24",
                           "--trials-per-batch", "6", "--no-evaluate", "--no-prior", "--quiet",
                           "--work-dir", str(work_dir)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with pytest.raises(SystemExit, match="no records"):  # its own shapes are "benchmarked"
        train_and_write([work_dir], [str(model)], 1e6, folder=tmp_path / "refused")
    manifest = train_and_write([work_dir], [str(EXAMPLES / "cnn.onnx")], 1e6,
                               folder=tmp_path / "prior")
    assert manifest["records"] >= 12 and manifest["tvm_version"] and manifest["min_flop"] == 1e6
    ran_on = json.loads((work_dir / "report.json").read_text())["runtime_threads"]
    assert manifest["runtime_threads"] == [ran_on] and ran_on >= 1
    prior = load_cost_prior(parse_target("llvm"), tmp_path / "prior")
    assert prior is not None
    context, candidates = samples(matmul_module(128), parse_target("llvm"), 4)
    scorer = ProgramScorer(None, prior)
    assert scorer.uses_prior(context.mod) and prior.min_flop > 0
    assert np.all(np.isfinite(scorer(context, candidates).scores))
    capsys.readouterr()
    assert replay_scorers([str(work_dir), "--after", "2", "--next", "6"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 2 |")]
    assert len(rows) == 1
    cells = rows[0].strip("| ").split(" | ")
    assert int(cells[1]) >= 1  # workloads replayed
    assert all(-1.0 <= float(x) <= 1.0 for x in cells[2:])
