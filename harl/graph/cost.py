"""A graph's latency from its fused tasks: measured where the run's database holds the task,
the cost model's estimate in milliseconds where it does not.

The graph is cut into TVM's fused tasks as tuning cuts it (`harl.frontend.tasks`), so the
fusion a rewrite allows or prevents is priced in; its latency is the sum of weight x latency
over them (the anchors' per-operator cost table, moved to fused tasks). A task's latency is its
best measured record in the database, else an estimate: a roofline time (FLOPs and the bytes
its buffers hold, at reference rates) divided by the best score the cost model gives a few
random schedules of the task (a predicted fraction of the best throughput), mapped to
milliseconds by a log-log line fitted once on the database's measured workloads (so that all
graphs' estimates share one scale). Ranked on 15 variants of each example model
(tools/graph_cost_rank.py), the estimates ranked fusion choices well (Spearman 0.6-0.8) and
layout changes and merged matmuls wrongly (cheaper estimated, slower measured). Estimates are
cached by workload: a rewritten graph shares most tasks with the graph it came from, and only
its new tasks cost anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from harl.frontend.tasks import TuningTask, extract_tasks, task_flop
from harl.resume import record_latency_s

REFERENCE_GFLOPS = 20.0
"""floating-point rate of the roofline time, GFLOP/s: about what tuned fp32 kernels reach on the
2-core AMD EPYC harl is measured on; the calibration replaces it once the database holds a
measured task"""
REFERENCE_GBPS = 10.0
"""memory rate of the roofline time, GB/s (the bytes of the task's arguments, read or written
once)"""
CALL_OVERHEAD_MS = 0.0001
"""a kernel call's fixed cost, added to every roofline time (a measured reshape took 0.03 us)"""
SAMPLES = 16
"""random schedules of an unmeasured task the cost model scores; the best score counts"""
MIN_SCORE = 0.05
"""scores (predicted fractions of the best throughput) are clipped to [MIN_SCORE, 1]"""
SLOPE_RANGE = (0.25, 2.0)
"""bounds on the calibration's log-log slope: it stays monotone, and a few points cannot fold
it flat or steep"""
MIN_FIT_POINTS = 3
"""measured workloads needed to fit the slope; with fewer only the offset is fitted"""


@dataclass(frozen=True)
class TaskCost:
    """One fused task's share of a graph's latency."""

    name: str
    weight: float
    """how often the graph calls the task"""
    ms: float
    """one call's latency"""
    source: Literal["measured", "estimated"]
    """from the database's best record, or the calibrated cost model"""
    flop: float


@dataclass(frozen=True)
class GraphCost:
    """A graph's estimated latency and where it comes from."""

    total_ms: float
    """the sum of weight x ms over the tasks"""
    tasks: tuple[TaskCost, ...]

    @property
    def measured_share(self) -> float:
        """Fraction of the total that measured tasks make up."""
        measured = sum(t.weight * t.ms for t in self.tasks if t.source == "measured")
        return measured / self.total_ms if self.total_ms > 0 else 0.0


@dataclass(frozen=True)
class Calibration:
    """log(ms) = intercept + slope x log(predicted ms): the cost model's raw prediction put on
    the scale of the measured tasks."""

    intercept: float = 0.0
    slope: float = 1.0
    fitted_on: int = 0
    """measured workloads it was fitted on (0: the reference rates stand as they are)"""

    def ms(self, predicted_ms: float) -> float:
        return math.exp(self.intercept + self.slope * math.log(max(predicted_ms, 1e-9)))

    @classmethod
    def fit(cls, predicted_ms, measured_ms, min_points: int = MIN_FIT_POINTS) -> Calibration:
        """Least squares in log-log over pairs of predicted and measured ms, each pair weighted
        by its measured ms (the tasks that make up a graph's latency decide the line, not the
        reshapes of a few nanoseconds), the slope clipped to `SLOPE_RANGE`; the offset alone
        (slope 1) with fewer than `min_points` pairs or no spread in the predictions."""
        measured = np.maximum(np.asarray(measured_ms, dtype=float), 1e-9)
        x = np.log(np.maximum(np.asarray(predicted_ms, dtype=float), 1e-9))
        y = np.log(measured)
        if x.size == 0:
            return cls()
        weights = measured / measured.sum()
        x_mean, y_mean = float(weights @ x), float(weights @ y)
        x_var = float(weights @ (x - x_mean) ** 2)
        slope = 1.0
        if x.size >= min_points and x_var > 1e-12:
            covariance = float(weights @ ((x - x_mean) * (y - y_mean)))
            slope = float(np.clip(covariance / x_var, *SLOPE_RANGE))
        return cls(y_mean - slope * x_mean, slope, int(x.size))


def argument_bytes(mod) -> float:
    """Bytes of the task's arguments (inputs and outputs)."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    total = 0.0
    for info in ArgInfo.from_entry_func(mod, remove_preproc=True):
        dtype = tvm.DataType(str(info.dtype))
        total += math.prod(int(dim) for dim in info.shape) * dtype.bits * dtype.lanes / 8
    return total


def roofline_ms(mod, flop: float) -> float:
    """The task's time at the reference rates: compute or memory, whichever is slower."""
    return (max(flop / (REFERENCE_GFLOPS * 1e6), argument_bytes(mod) / (REFERENCE_GBPS * 1e6))
            + CALL_OVERHEAD_MS)


def measured_bests(database) -> dict[str, tuple[float, object]]:
    """Per workload (structural hash) in `database`: its best measured ms and its module.
    Failed trials and the placeholders of predicted picks are skipped."""
    from tvm.s_tir.meta_schedule.utils import shash2hex

    best: dict[str, tuple[float, object]] = {}
    for record in database.get_all_tuning_records():
        latency = record_latency_s(record)
        if not math.isfinite(latency):
            continue
        key = shash2hex(record.workload.mod)
        if key not in best or latency * 1e3 < best[key][0]:
            best[key] = (latency * 1e3, record.workload.mod)
    return best


def has_reduction(mod) -> bool:
    """Whether the task computes a reduction (a conv, a matmul, a pool, a norm's sums): TVM's
    anchor block, a block with an init statement, exists. Without one a task is element-wise
    or injective, memory-bound whatever its schedule."""
    from tvm.s_tir.analysis import find_anchor_sblock

    return find_anchor_sblock(mod) is not None


def best_score(mod, target, scorer, samples: int = SAMPLES, seed: int = 0) -> float | None:
    """The best of `scorer`'s scores (a ProgramScorer, or any callable of a TuneContext and
    candidates with `ranks(mod)`) over `samples` random schedules of `mod`'s design space;
    None where the scorer does not rank the task or no sample is legal."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    from harl.search.trace_sites import schedules_of, with_state
    from harl.target import local_cpu_count

    if samples <= 0 or not scorer.ranks(mod):
        return None
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             num_threads=local_cpu_count()).clone()
    sketches = [with_state(space.trace.simplified(remove_postproc=True), None)
                for space in context.generate_design_space()]
    if not sketches:
        return None
    rng = np.random.default_rng(seed)  # per task: a task's estimate does not depend on order
    seeds = [int(rng.integers(1 << 30)) for _ in range(samples)]
    drawn = schedules_of(mod, [sketches[i % len(sketches)] for i in range(samples)],
                         list(context.space_generator.postprocs), seeds,
                         workers=context.num_threads)
    legal = [sch for sch in drawn if sch is not None]
    if not legal:
        return None
    args = ArgInfo.from_entry_func(legal[0].mod, remove_preproc=True)
    scores = scorer(context, [MeasureCandidate(sch, args) for sch in legal]).scores
    return float(np.max(scores))


class GraphCostModel:
    """Estimates a Relax graph's latency on `target` from its fused tasks (see the module's
    docstring). `database` is a MetaSchedule database of measured records (a harl work dir's);
    `scorer` ranks schedules (default: the shipped cost-model prior where it applies to the
    target; `from_work_dir` adds the run's own model, trained on the work dir's records).
    Without a scorer that ranks a task, its roofline time stands alone. `prepack_weights`
    cuts graphs into tasks as the run does (harl.frontend.tasks.fusion_passes; default: as the
    database's records were tuned), so that measured workloads are found. Without
    `score_injective` a task with no reduction (`has_reduction`) is priced by its roofline time
    alone, unscored: the prior's scores of such tasks swung their estimates up to 20x the
    roofline where their FLOPs crossed its floor (docs/experiments.md)."""

    def __init__(self, target, *, database=None, scorer=None, samples: int = SAMPLES,
                 seed: int = 0, prepack_weights: bool | None = None,
                 measured_peak_floor: bool = True, score_injective: bool = False) -> None:
        from harl.frontend.tasks import prepacks_weights
        from harl.tvm_env import load_tensor_intrinsics

        load_tensor_intrinsics(target)
        if scorer is None:
            from harl.search.cost_prior import load_cost_prior
            from harl.search.program_scorer import ProgramScorer

            scorer = ProgramScorer(None, load_cost_prior(target))
        self.target, self.scorer, self.samples, self.seed = target, scorer, samples, seed
        self.measured = measured_bests(database) if database is not None else {}
        if prepack_weights is None:
            prepack_weights = bool(self.measured) and prepacks_weights(database)
        self.prepack_weights = prepack_weights
        self.measured_peak_floor = measured_peak_floor
        self.score_injective = score_injective
        self._predicted: dict[str, float] = {}  # workload hash -> raw predicted ms
        self._calibration: Calibration | None = None
        self._peak_gflops: float | None = None

    @classmethod
    def from_work_dir(cls, work_dir: Path, target, *, own_model: bool = True,
                      **kwargs) -> GraphCostModel:
        """The model over a harl work dir's database; with `own_model`, its schedules scored by
        the prior and a model trained on the work dir's records, as a resumed run's are."""
        from tvm.s_tir import meta_schedule as ms

        work_dir = Path(work_dir)
        database = ms.database.JSONDatabase(
            path_workload=str(work_dir / "database_workload.json"),
            path_tuning_record=str(work_dir / "database_tuning_record.json"),
            allow_missing=False)
        if own_model and "scorer" not in kwargs:
            kwargs["scorer"] = _scorer_from_database(database, target)
        return cls(target, database=database, **kwargs)

    @property
    def calibration(self) -> Calibration:
        """Fitted once, on every measured workload of the database, so that the estimates of all
        graphs are on one scale."""
        if self._calibration is None:
            pairs = [(self.predicted_ms(key, mod), ms) for key, (ms, mod) in self.measured.items()]
            self._calibration = Calibration.fit([p for p, _ in pairs], [m for _, m in pairs])
        return self._calibration

    @property
    def peak_gflops(self) -> float:
        """The highest FLOP rate of a measured workload (0 where none is measured): with
        `measured_peak_floor`, no estimated task is priced faster than this, so that a rewrite
        adding FLOPs (a 1x1 conv padded to 3x3) cannot look free beside measured tasks."""
        if self._peak_gflops is None:
            rates = [task_flop(mod) / (ms * 1e6) for ms, mod in self.measured.values() if ms > 0]
            self._peak_gflops = max(rates, default=0.0)
        return self._peak_gflops

    def predicted_ms(self, key: str, mod, flop: float | None = None) -> float:
        """The cost model's raw prediction for workload `mod` (structural hash `key`): its
        roofline time over the best score of its sampled schedules; cached."""
        if key not in self._predicted:
            flop = task_flop(mod) if flop is None else flop
            score = (best_score(mod, self.target, self.scorer, self.samples, self.seed)
                     if self.score_injective or has_reduction(mod) else None)
            share = 1.0 if score is None else float(np.clip(score, MIN_SCORE, 1.0))
            self._predicted[key] = roofline_ms(mod, flop) / share
        return self._predicted[key]

    @property
    def scored_workloads(self) -> int:
        """Workloads whose prediction has been computed (each computed once)."""
        return len(self._predicted)

    def task_cost(self, task: TuningTask) -> TaskCost:
        """One task's latency: measured if the database holds it, else estimated."""
        from tvm.s_tir.meta_schedule.utils import shash2hex

        key = shash2hex(task.mod)
        if key in self.measured:
            return TaskCost(task.name, task.weight, self.measured[key][0], "measured", task.flop)
        estimated = self.calibration.ms(self.predicted_ms(key, task.mod, task.flop))
        if self.measured_peak_floor and self.peak_gflops > 0:
            estimated = max(estimated, task.flop / (self.peak_gflops * 1e6))
        return TaskCost(task.name, task.weight, estimated, "estimated", task.flop)

    def estimate_tasks(self, tasks: list[TuningTask]) -> GraphCost:
        costs = tuple(self.task_cost(task) for task in tasks)
        return GraphCost(sum(c.weight * c.ms for c in costs), costs)

    def estimate(self, relax_mod) -> GraphCost:
        """The latency of Relax module `relax_mod` (as harl imports it, or rewritten);
        HarlError when it has no tunable task."""
        return self.estimate_tasks(extract_tasks(relax_mod, self.target,
                                                 prepack_weights=self.prepack_weights))


def _scorer_from_database(database, target):
    """A ProgramScorer: the prior where it applies, and a model trained on `database`'s
    records."""
    from tvm.s_tir.meta_schedule.utils import shash2hex

    from harl.resume import PriorRun
    from harl.search.cost_prior import load_cost_prior
    from harl.untuned import scorer_from_records

    mods = list({shash2hex(record.workload.mod): record.workload.mod
                 for record in database.get_all_tuning_records()}.values())
    tasks = [TuningTask(f"workload{i}", mod, 1.0, 0.0) for i, mod in enumerate(mods)]
    return scorer_from_records(PriorRun.read(database, mods), tasks, target,
                               cost_prior=load_cost_prior(target))
