"""Compile every run's database for one model and time all builds interleaved in this process.

Untuned TVM and onnxruntime (same thread count) run in the same rounds, so machine drift hits every
build alike; only medians and ratios leave this module.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from benchlib.runs import RunResult

ONNXRUNTIME = "onnxruntime"
UNTUNED = "untuned TVM"


@dataclass(frozen=True)
class TimingSettings:
    rounds: int = 10  # round-robin rounds over all builds
    repeats: int = 5  # timings per build per round, each >= 20 ms of runs
    rtol: float = 1e-3
    atol: float = 1e-4


def time_model(model_path: Path, runs: list[RunResult], settings: TimingSettings,
               say=print) -> dict[str, float]:
    """Fill each run's latency / verification; return the reference medians (ms)."""
    from harl.evaluate import (
        CompiledModel,
        OnnxRuntimeModel,
        check_outputs,
        compile_model,
        interleaved_latencies_ms,
    )
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.loop import open_database
    from harl.target import local_cpu_count, parse_target
    from harl.tvm_env import load_tensor_intrinsics

    model = load_onnx(model_path)
    relax_mod = import_to_relax(model)
    inputs = model.random_inputs(0)
    names = [spec.name for spec in model.inputs]
    reference = OnnxRuntimeModel(model, threads=local_cpu_count())
    expected = reference.run(inputs)
    runners: dict[str, object] = {ONNXRUNTIME: reference}
    target = None
    for run in runs:
        if not run.ok:
            continue
        database = open_database(run.work_dir)
        records = database.get_all_tuning_records()
        if not records:
            continue
        target = records[0].target
        load_tensor_intrinsics(target)
        say(f"bench: compiling {run.work_dir.name} ...")
        built = CompiledModel(compile_model(relax_mod, target, database), target, names)
        check = check_outputs(built.run(inputs), expected, list(model.output_names),
                              settings.rtol, settings.atol)
        run.verified, run.max_abs_err = check.verified, check.max_abs_err
        runners[str(run.work_dir)] = built
    if target is None:
        target = parse_target(runs[0].report.get("target") if runs and runs[0].report else None)
    load_tensor_intrinsics(target)
    runners[UNTUNED] = CompiledModel(compile_model(relax_mod, target), target, names)

    say(f"bench: timing {len(runners)} builds interleaved, {settings.rounds} rounds ...")
    samples = interleaved_latencies_ms(runners, inputs, settings.rounds, settings.repeats)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    for run in runs:
        run.latency_ms = medians.get(str(run.work_dir))
    return {ONNXRUNTIME: medians[ONNXRUNTIME], UNTUNED: medians[UNTUNED]}
