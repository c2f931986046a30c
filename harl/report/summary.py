"""report.json for machines and a summary table for people."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harl.measure.cpu_load import describe_other_load, worth_saying
from harl.report.history import TaskStats
from harl.report.phases import format_phases


@dataclass
class TaskSummary:
    name: str
    weight: float
    flop: float
    trials: int
    failures: int
    best_ms: float | None
    stopped: bool = False  # given up: its candidates kept failing
    predicted: bool = False  # no measured record: compiled with the cost model's unmeasured pick
    naive: bool = False  # TVM's unscheduled loop nest beat the tuned kernels (best_ms is its)


@dataclass
class RunReport:
    """Everything a run found, as written to report.json."""

    model: str
    target: str
    strategy: str
    trials: int
    trials_done: int
    seed: int
    tune_seconds: float
    tasks: list[TaskSummary]
    trials_resumed: int = 0  # of trials_done, those measured by an earlier run in the work dir
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    max_abs_err: float | None = None
    worst_output: str | None = None
    rtol: float | None = None
    atol: float | None = None
    verified: bool | None = None
    # "onnxruntime", or "untuned TVM" where TVM's untuned build already disagreed with
    # onnxruntime (by `untuned_max_abs_err`) and the tuned build was checked against it
    verified_against: str | None = None
    untuned_max_abs_err: float | None = None
    work_dir: str = ""
    agent_seconds: dict[str, float] = field(default_factory=dict)  # by part (harl strategy)
    # Where those seconds went: trace replay, features, predictions, policy (not added to them).
    agent_stage_seconds: dict[str, float] = field(default_factory=dict)
    cost_prior: bool = False  # a cost-model prior ranked the samples of some task
    cost_prior_source: str | None = None  # which: "shipped" (harl/data) or "store" (harl.store)
    runtime_threads: int | None = None  # threads of TVM's CPU runtime in this process's runs
    gpu_target: bool = False  # the kernels ran on a GPU; onnxruntime always runs on the CPU
    # This run's wall seconds by phase, in the order they ran (harl.report.phases)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # Cores other processes (or the host) kept busy on average while the latencies were timed,
    # and while this run's candidates were measured locally (harl.measure.cpu_load); None where
    # the counters could not be read or nothing was measured
    timing_other_cores: float | None = None
    measure_other_cores: float | None = None
    # The effective config (harl.config_file.recorded): defaults, config file and flags merged
    config: dict = field(default_factory=dict)
    # The graph level (--graph; harl.graph.pipeline): how the tuned graph was chosen
    graph: dict | None = None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def task_summaries(stats: list[TaskStats]) -> list[TaskSummary]:
    summaries = []
    for s in stats:
        best_s = s.best_known_s
        summaries.append(TaskSummary(s.name, s.weight, s.flop, s.trials, s.failures,
                                     best_s * 1e3 if math.isfinite(best_s) else None, s.stopped,
                                     naive=s.naive_s < s.best_s))
    return summaries


STAGE_NAMES = {"search/replay_seconds": "trace replay", "search/feature_seconds": "features",
               "search/prediction_seconds": "predictions", "tile/policy_seconds": "policy"}


def format_summary(report: RunReport) -> str:
    """A fixed-width table of tasks followed by the model-level latencies."""
    lines = [f"{'task':<44} {'weight':>6} {'MFLOP':>9} {'trials':>6} {'best ms':>10}"]
    for task in report.tasks:
        best = (f"{task.best_ms:.4g}" if task.best_ms is not None
                else "failed" if task.trials else "predicted" if task.predicted else "untuned")
        best += " (naive)" if task.naive else ""
        best += " (stopped)" if task.stopped else ""
        lines.append(f"{task.name[:44]:<44} {task.weight:>6g} {task.flop / 1e6:>9.3f} "
                     f"{task.trials:>6} {best:>10}")
    predicted = sum(1 for task in report.tasks if task.predicted)
    untuned = sum(1 for task in report.tasks if task.best_ms is None and not task.predicted)
    if predicted:
        lines.append(f"{predicted} task(s) without a measured schedule run the cost model's "
                     "pick among random samples, unmeasured and not in the tuning log: a larger "
                     "--trials measures them")
    if untuned:
        lines.append(f"{untuned} task(s) without a measured schedule keep TVM's default one")
    lines.append("")
    lat = report.latency_ms
    # A GPU model against onnxruntime on the CPU is not like with like: say so.
    on_cpu = " (onnxruntime on the CPU)" if report.gpu_target else ""
    for label, key in (("untuned TVM", "untuned"), ("tuned TVM", "tuned"),
                       ("onnxruntime", "onnxruntime")):
        value = lat.get(key)
        text = f"{value:.4g} ms" if value else "n/a"
        lines.append(f"{label + ' latency':<24} {text}" + (on_cpu if key == "onnxruntime" else ""))
    if lat.get("untuned") and lat.get("tuned"):
        lines.append(f"{'speed-up over untuned':<24} {lat['untuned'] / lat['tuned']:.2f}x")
    if lat.get("onnxruntime") and lat.get("tuned"):
        ratio = lat["tuned"] / lat["onnxruntime"]
        lines.append(f"{'tuned / onnxruntime':<24} {ratio:.2f}x{on_cpu}")
    other = report.timing_other_cores
    if worth_saying(other):
        lines.append(f"{'other load':<24} " + describe_other_load(other, "timing") +
                     ": the latencies may be off (time on a quiet machine)")
    if report.verified is not None:
        against = report.verified_against or "onnxruntime"
        lines.append(f"{'max abs error':<24} {report.max_abs_err:.3g} "
                     f"(rtol {report.rtol:g}, atol {report.atol:g}, vs {against})")
        if report.untuned_max_abs_err is not None:
            lines.append(f"{'':<24} TVM's untuned build differs from onnxruntime by "
                         f"{report.untuned_max_abs_err:.3g}: where it does, the tuned build "
                         "was checked against it")
    verified = "not run" if report.verified is None else str(report.verified).lower()
    lines.append(f"{'verified':<24} {verified}")
    resumed = f" ({report.trials_resumed} resumed)" if report.trials_resumed else ""
    lines.append(f"{'trials':<24} {report.trials_done} in {report.tune_seconds:.0f} s{resumed}")
    measured_now = report.trials_done - report.trials_resumed  # what this process's seconds bought
    if report.agent_seconds and measured_now > 0:
        per_trial = sum(report.agent_seconds.values()) / measured_now
        stages = ", ".join(f"{STAGE_NAMES.get(key, key)} {seconds / measured_now * 1e3:.0f}"
                           for key, seconds in report.agent_stage_seconds.items())
        lines.append(f"{'agents + cost model':<24} {per_trial * 1e3:.0f} ms per trial"
                     + (f" (of which {stages})" if stages else ""))
    if report.phase_seconds:
        lines.append(f"{'wall time':<24} {format_phases(report.phase_seconds)}")
    return "\n".join(lines)
