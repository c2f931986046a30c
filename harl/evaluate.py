"""Compile the model with a database, check it against onnxruntime, and time both."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from harl.frontend.large_models import serialised
from harl.frontend.onnx_model import OnnxModel
from harl.target import gpu_visible, is_gpu, local_cpu_count, use_nvcc_for_cuda

if TYPE_CHECKING:
    from pathlib import Path

    from harl.config import TuneConfig
    from harl.report.phases import PhaseClock
    from harl.report.summary import RunReport


@dataclass(frozen=True)
class OutputCheck:
    """How far the tuned model's outputs are from the reference."""

    max_abs_err: float
    worst_output: str
    verified: bool
    rtol: float
    atol: float


def compile_model(relax_mod, target, database=None, *, prepack_weights: bool | None = None):
    """Relax VM executable; tasks missing from `database` keep their default schedules.

    The pipeline is TVM's compile_relax (fuse, apply the database, DLight for what a GPU's
    database lacks, lower), and where the database was tuned with prepacked weights
    (harl.frontend.tasks.fusion_passes) the functions are marked alike, and each schedule's
    weight packing is split out and folded into the constants (TVM's cpu_weight_prepack).
    `prepack_weights` says how the database was tuned; None: as its records show (a database
    that cannot list them, such as TVM's UnionDatabase, needs it said)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight
    from tvm.s_tir import meta_schedule as ms

    from harl.frontend.tasks import fusion_passes, prepacks_weights

    if database is None:
        database = ms.database.MemoryDatabase()
    if target.kind.name == "cuda":
        use_nvcc_for_cuda()
    prepacked = prepacks_weights(database) if prepack_weights is None else prepack_weights

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod, _ctx):  # passes made here: some need the target's context
        passes = [*fusion_passes(target, prepack_weights=prepacked),
                  relax.transform.MetaScheduleApplyDatabase()]
        if prepacked:
            passes += [relax.transform.SplitLayoutRewritePreproc(),
                       relax.transform.FoldConstant()]
        if is_gpu(target):
            passes.append(dlight.ApplyDefaultSchedule(
                dlight.gpu.Matmul(), dlight.gpu.GEMV(), dlight.gpu.Reduction(),
                dlight.gpu.GeneralReduction(), dlight.gpu.Fallback()))
        return tvm.transform.Sequential(passes + _vm_lowering_passes(target))(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(relax_mod, target=target, relax_pipeline=pipeline)


def _vm_lowering_passes(target) -> list:
    """TVM's passes from fused dataflow to VM code for `target`; TVM 0.27 registers none for
    a generic CPU, where compile_relax uses this same list."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        return pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target)
    except (ValueError, AttributeError):
        t = relax.transform
        return [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(),
                t.CallTIRRewrite(), t.StaticPlanBlockMemory(), t.LowerAllocTensor(),
                t.KillAfterLastUse(), t.LowerRuntimeBuiltin(), t.ComputePrimValue(),
                t.VMShapeLower(), t.AttachGlobalSymbol()]


class CompiledModel:
    """A loaded executable that runs on named numpy inputs."""

    def __init__(self, executable, target, input_names: list[str]) -> None:
        import tvm
        from tvm import relax

        self.device = tvm.cuda(0) if is_gpu(target) else tvm.cpu(0)
        self.vm = relax.VirtualMachine(executable, self.device)
        self.input_names = input_names

    def _args(self, inputs: dict[str, np.ndarray]) -> list:
        import tvm

        return [tvm.runtime.tensor(inputs[name], self.device) for name in self.input_names]

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs copied to numpy while the VM is alive."""
        result = self.vm["main"](*self._args(inputs))
        return [np.asarray(out.numpy()) for out in _flatten(result)]

    def median_latency_ms(self, inputs: dict[str, np.ndarray], repeats: int) -> float:
        """Median of `repeats` timings, each averaging enough runs to last >= 20 ms."""
        timer = self.vm.time_evaluator("main", self.device, number=1, repeat=repeats,
                                       min_repeat_ms=20)
        return float(np.median(timer(*self._args(inputs)).results) * 1e3)


def median_wall_ms(call, repeats: int, min_seconds: float = 0.02) -> float:
    """Median of `repeats` wall-clock timings of `call`, each averaging runs over `min_seconds`."""
    call()  # warm-up
    samples = []
    for _ in range(repeats):
        runs, start = 0, time.perf_counter()
        while True:
            call()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        samples.append(elapsed / runs * 1e3)
    return statistics.median(samples)


def _flatten(result) -> list:
    import tvm

    if isinstance(result, tvm.runtime.Tensor):
        return [result]
    flat = []
    for item in result:
        flat.extend(_flatten(item))
    return flat


class OnnxRuntimeModel:
    """The reference: onnxruntime on the CPU with the same thread count, whatever the target."""

    def __init__(self, model: OnnxModel, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        source = serialised(model.proto)
        if source is None and (model.shapes_folded or model.ops_lowered):
            raise ValueError(f"{model.path}: a rewritten graph past 2 GB has no file to run")
        if source is None:  # the model as loaded: onnxruntime opens its file and weights' files
            source = str(model.path)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, inputs))

    def median_latency_ms(self, inputs: dict[str, np.ndarray], repeats: int) -> float:
        return median_wall_ms(lambda: self.run(inputs), repeats)


SETTLE_S = 0.3
"""pause before each runner's turn when several take turns: TVM's and onnxruntime's idle worker
threads go on spinning for a while after a run, and a runtime timed in that while shares the
cores with them (on 2 cores, each timed up to 3.5x slower right after the other)"""


def interleaved_latencies_ms(runners: dict, inputs: dict[str, np.ndarray], *, rounds: int,
                             repeats_per_round: int | dict[str, int],
                             settle_s: float = SETTLE_S) -> dict[str, list[float]]:
    """Time every runner once per round, round-robin, so that machine drift hits all alike,
    each turn after a pause of `settle_s` (see SETTLE_S).

    `repeats_per_round`: one count for all, or one per runner (see `latencies_within_ms`).
    """
    samples: dict[str, list[float]] = {key: [] for key in runners}
    for _ in range(rounds):
        for key, runner in runners.items():
            if len(runners) > 1:
                time.sleep(settle_s)
            repeats = (repeats_per_round[key] if isinstance(repeats_per_round, dict)
                       else repeats_per_round)
            samples[key].append(runner.median_latency_ms(inputs, repeats))
    return samples


def latencies_within_ms(runners: dict, inputs: dict[str, np.ndarray], *, rounds: int,
                        max_repeats: int, seconds: float) -> dict[str, list[float]]:
    """Interleaved timings of every runner in about `seconds` each: up to `max_repeats`
    samples per round, fewer for a slow runner.

    One run of each, timed by the wall clock, tells how slow it is (and warms it up): a large
    model left untuned can take seconds per run, and 20 samples of it would take minutes. A
    runner too slow for one sample per round (each sample runs it twice: TVM's timer warms up
    first) keeps that one run as its only sample.
    """
    once = {}
    for key, runner in runners.items():
        start = time.perf_counter()
        runner.run(inputs)
        once[key] = time.perf_counter() - start
    repeats = {key: min(max_repeats, int(seconds / (rounds * 2 * max(t, 0.01))))
               for key, t in once.items()}
    timed = {key: runner for key, runner in runners.items() if repeats[key] > 0}
    samples = interleaved_latencies_ms(timed, inputs, rounds=rounds,
                                       repeats_per_round=repeats) if timed else {}
    return {key: samples.get(key) or [once[key] * 1e3] for key in runners}


def check_outputs(actual: list[np.ndarray], expected: list[np.ndarray], names: list[str],
                  *, rtol: float, atol: float) -> OutputCheck:
    """Elementwise |a - e| <= atol + rtol * |e| on every output."""
    if len(actual) != len(expected):
        return OutputCheck(float("inf"), f"{len(actual)} outputs vs {len(expected)}", False,
                           rtol, atol)
    worst_name, worst_err, verified = names[0] if names else "", 0.0, True
    for name, got, want in zip(names, actual, expected, strict=True):
        if got.shape != want.shape:
            return OutputCheck(float("inf"), name, False, rtol, atol)
        diff = _abs_diff(got, want)
        err = float(diff.max()) if diff.size else 0.0
        if not np.isfinite(err) or err > worst_err:
            worst_name, worst_err = name, err
        if not np.all(_within(diff, want, rtol, atol)):
            verified = False
    return OutputCheck(worst_err, worst_name, verified, rtol, atol)


ONNXRUNTIME = "onnxruntime"
UNTUNED_TVM = "untuned TVM"


@dataclass(frozen=True)
class Verdict:
    """The tuned build's check, and against which reference it was decided."""

    check: OutputCheck
    reference: str  # ONNXRUNTIME, or UNTUNED_TVM where TVM itself disagrees with onnxruntime
    untuned_vs_onnxruntime: OutputCheck | None = None  # set when the reference is UNTUNED_TVM


def verify_tuned(tuned: list[np.ndarray], untuned: list[np.ndarray],
                 expected: list[np.ndarray], names: list[str], *, rtol: float,
                 atol: float) -> Verdict:
    """The tuned build's outputs against onnxruntime's.

    Where TVM's untuned build of the same model disagrees with onnxruntime too, TVM's compile
    differs before any tuning (a quantized model's value on a rounding boundary, rounded the
    other way after an ulp of difference in a mean), which no schedule caused. Then each element
    the untuned build got wrong is held to the untuned build's value instead, and every other
    element still to onnxruntime's. Outputs of the wrong number, shape or a non-finite error are
    never excused."""
    check = check_outputs(tuned, expected, names, rtol=rtol, atol=atol)
    if check.verified:
        return Verdict(check, ONNXRUNTIME)
    before = check_outputs(untuned, expected, names, rtol=rtol, atol=atol)
    # A finite error means the same count and shapes as onnxruntime's, and no NaN or inf.
    if before.verified or not (math.isfinite(check.max_abs_err)
                               and math.isfinite(before.max_abs_err)):
        return Verdict(check, ONNXRUNTIME)
    references = [np.where(_within(_abs_diff(then, want), want, rtol, atol), want, then)
                  for then, want in zip(untuned, expected, strict=True)]
    return Verdict(check_outputs(tuned, references, names, rtol=rtol, atol=atol), UNTUNED_TVM,
                   before)


def _abs_diff(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want.astype(np.float64))


def _within(diff: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Where |got - want| <= atol + rtol * |want|: the tolerance of every output check."""
    return diff <= atol + rtol * np.abs(want)


def evaluate_into(report: RunReport, model: OnnxModel, relax_mod, target, database,
                  *, config: TuneConfig, clock: PhaseClock, tvm_log: Path) -> None:
    """Fill the report's latencies and output check (skipped when the target is not here);
    `clock` laps the compile and check, then the timing; TVM's C++ warnings while compiling go
    to `tvm_log`."""
    from harl.measure import cpu_load
    from harl.tvm_env import native_logs_into

    if is_gpu(target) and not gpu_visible():
        report.latency_ms = {"untuned": None, "tuned": None, "onnxruntime": None}
        return
    names = [spec.name for spec in model.inputs]
    inputs = model.random_inputs(config.seed)
    with native_logs_into(tvm_log):
        tuned = CompiledModel(compile_model(relax_mod, target, database,
                                            prepack_weights=config.prepack_weights),
                              target, names)
        untuned = CompiledModel(compile_model(relax_mod, target), target, names)
    reference = OnnxRuntimeModel(model, threads=local_cpu_count())

    expected = reference.run(inputs)
    rtol, atol = config.verify.tolerances(output.dtype for output in expected)
    verdict = verify_tuned(tuned.run(inputs), untuned.run(inputs), expected,
                           list(model.output_names), rtol=rtol, atol=atol)
    check = verdict.check
    report.max_abs_err, report.worst_output = check.max_abs_err, check.worst_output
    report.rtol, report.atol, report.verified = check.rtol, check.atol, check.verified
    report.verified_against = verdict.reference
    if verdict.untuned_vs_onnxruntime is not None:
        report.untuned_max_abs_err = verdict.untuned_vs_onnxruntime.max_abs_err
    clock.lap("compile_verify")

    runners = {"untuned": untuned, "tuned": tuned, "onnxruntime": reference}
    rounds = 4
    before = cpu_load.snapshot()
    samples = latencies_within_ms(runners, inputs, rounds=rounds,
                                  max_repeats=max(1, config.verify.latency_repeats // rounds),
                                  seconds=config.verify.timing_seconds)
    others = cpu_load.other_load_cores(before, cpu_load.snapshot())
    report.timing_other_cores = None if others is None else round(others, 3)
    report.latency_ms = {key: round(sorted(v)[len(v) // 2], 6) for key, v in samples.items()}
    clock.lap("timing")
