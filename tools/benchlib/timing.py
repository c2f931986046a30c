"""Compile every run's database for one model and time all builds interleaved.

Untuned TVM and onnxruntime (same thread count), and OpenVINO's CPU runtime in fp32 where it is
installed (benchlib.openvino_runner), run in the same rounds, so machine drift hits every build
alike. The whole timing repeats in `TimingSettings.processes` fresh processes: where a
process's buffers land moves a small model's build by up to 30% and a 512^3 matmul's by 10%, for
that process's whole life, so a build's latency is the median over processes of its
per-process medians. Only medians and ratios leave this module.
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from benchlib.openvino_runner import OPENVINO, OpenVinoModel
from benchlib.runs import RunResult

ONNXRUNTIME = "onnxruntime"
UNTUNED = "untuned TVM"


@dataclass(frozen=True)
class TimingSettings:
    rounds: int = 10  # round-robin rounds over all builds, per process
    repeats: int = 5  # timings per build per round, each >= 20 ms of runs
    processes: int = 3  # fresh processes that each compile and time every build
    rtol: float = 1e-3
    atol: float = 1e-4
    openvino: bool = True  # time OpenVINO beside onnxruntime (callers check it is installed)


@dataclass
class ProcessTiming:
    """One process's medians (ms) by work dir or reference name, and its output checks."""

    latency_ms: dict[str, float]
    checks: dict[str, tuple[bool, float]] = field(default_factory=dict)


def time_builds(model_path: Path, work_dirs: list[str], fallback_target: str | None,
                settings: TimingSettings, say=print, with_picks: bool = False) -> ProcessTiming:
    """In this process: compile each work dir's database, check its outputs against
    onnxruntime (against untuned TVM where TVM itself disagrees, as harl.tune does), then time
    every build, untuned TVM, onnxruntime and (with `settings.openvino`) OpenVINO interleaved.
    OpenVINO is timed only where its outputs match onnxruntime's. With `with_picks`, each work
    dir is also built as `python -m harl.tune` compiles it (key "<work dir> + picks", see
    `picked_database`)."""
    from harl.database import read_database
    from harl.evaluate import (
        CompiledModel,
        OnnxRuntimeModel,
        compile_model,
        interleaved_latencies_ms,
        verify_tuned,
    )
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.frontend.tasks import prepacks_weights
    from harl.measure import cpu_load
    from harl.measure.threads import use_physical_cores
    from harl.target import is_gpu, local_cpu_count, parse_target
    from harl.tvm_env import load_tensor_intrinsics

    # a fresh process sets TVM's thread count before any kernel runs
    tvm_threads, _ = use_physical_cores()
    model = load_onnx(model_path)
    inputs = model.random_inputs(0)
    names = [spec.name for spec in model.inputs]
    reference = OnnxRuntimeModel(model, threads=local_cpu_count())
    expected = reference.run(inputs)
    runners: dict[str, object] = {ONNXRUNTIME: reference}
    if settings.openvino:
        openvino = checked_openvino(model, inputs, expected, tvm_threads, settings, say)
        if openvino is not None:
            runners[OPENVINO] = openvino
    timing = ProcessTiming(latency_ms={})
    databases = {work_dir: read_database(Path(work_dir)) for work_dir in work_dirs}
    records = {work_dir: db.get_all_tuning_records() for work_dir, db in databases.items()}
    tuned_dirs = [work_dir for work_dir in work_dirs if records[work_dir]]
    target = (records[tuned_dirs[0]][0].target if tuned_dirs
              else parse_target(fallback_target))
    relax_mod = import_to_relax(model, fast_math=not is_gpu(target))
    load_tensor_intrinsics(target)
    untuned = CompiledModel(compile_model(relax_mod, target), target, names)
    untuned_outputs = untuned.run(inputs)
    for work_dir in tuned_dirs:
        database, dir_target = databases[work_dir], records[work_dir][0].target
        dir_mod = graph_of(Path(work_dir), relax_mod)
        builds = {work_dir: database}
        prepacked = prepacks_weights(database)  # the picks' UnionDatabase cannot tell
        if with_picks:
            builds[f"{work_dir} + picks"] = picked_database(
                Path(work_dir), database, dir_mod, dir_target, prepack_weights=prepacked, say=say)
        for key, db in builds.items():
            say(f"bench: compiling {Path(key).name} ...")
            built = CompiledModel(compile_model(dir_mod, dir_target, db,
                                                prepack_weights=prepacked), dir_target, names)
            # as harl.tune checks: against untuned TVM where TVM itself disagrees with onnxruntime
            verdict = verify_tuned(built.run(inputs), untuned_outputs, expected,
                                   list(model.output_names), rtol=settings.rtol, atol=settings.atol)
            if verdict.untuned_vs_onnxruntime is not None:
                say(f"bench: {Path(key).name}: checked against untuned TVM, which differs from "
                    f"onnxruntime by {verdict.untuned_vs_onnxruntime.max_abs_err:.3g}")
            timing.checks[key] = (verdict.check.verified, verdict.check.max_abs_err)
            runners[key] = built
    runners[UNTUNED] = untuned

    say(f"bench: timing {len(runners)} builds interleaved, {settings.rounds} rounds ...")
    before = cpu_load.snapshot()
    samples = interleaved_latencies_ms(runners, inputs, rounds=settings.rounds,
                                       repeats_per_round=settings.repeats)
    other = cpu_load.other_load_cores(before, cpu_load.snapshot())
    if cpu_load.worth_saying(other):
        say("bench: " + cpu_load.describe_other_load(other, "timing")
            + ": these latencies may be off")
    timing.latency_ms = {key: statistics.median(values) for key, values in samples.items()}
    return timing


def checked_openvino(model, inputs, expected, threads: int, settings: TimingSettings,
                     say=print) -> OpenVinoModel | None:
    """OpenVINO's CPU build of `model` on `threads` threads, or None (said) where OpenVINO
    cannot read or compile it or its outputs differ from onnxruntime's `expected`: a reference
    that computes something else is not timed."""
    from harl.evaluate import check_outputs

    try:
        runner = OpenVinoModel(model, threads)
        outputs = runner.run(inputs)
    except Exception as err:  # noqa: BLE001  (an optional runtime's failure is reported, not fatal)
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        say(f"bench: openvino cannot run {model.name} ({reason}): timing without it")
        return None
    check = check_outputs(outputs, expected, list(model.output_names), rtol=settings.rtol,
                          atol=settings.atol)
    if not check.verified:
        say(f"bench: openvino's outputs differ from onnxruntime's by {check.max_abs_err:.3g} "
            f"({check.worst_output}): timing without it")
        return None
    return runner


def graph_of(work_dir: Path, relax_mod):
    """The graph the work dir's run tuned: its saved rewritten graph (`--graph`), if any, else
    `relax_mod` (the model as harl imports it)."""
    import tvm

    from harl.graph.pipeline import REWRITTEN_FILE

    path = work_dir / REWRITTEN_FILE
    return tvm.ir.load_json(path.read_text()) if path.exists() else relax_mod


def picked_database(work_dir: Path, database, relax_mod, target, *, prepack_weights: bool,
                    say=print):
    """The work dir's database plus, for its tasks without a measured record, the pick of a
    cost model trained on its records (harl/untuned.py), as `python -m harl.tune` builds. The
    picks' builds get the default build limits and seed 0: a run with other `--build-timeout`,
    straggler settings or `--seed` may have compiled other picks. `prepack_weights`: whether the
    work dir tuned with prepacked weights (harl.frontend.tasks.prepacks_weights of `database`)."""
    from harl.config import MeasureConfig
    from harl.frontend.tasks import extract_tasks
    from harl.resume import PriorRun
    from harl.search.cost_prior import load_cost_prior
    from harl.untuned import pick_builder, scorer_from_records, unmeasured_tasks, with_predicted

    tasks = extract_tasks(relax_mod, target, prepack_weights=prepack_weights)
    prior = PriorRun.read(database, [task.mod for task in tasks])
    report = work_dir / "report.json"  # as the run did: with the prior if it used one
    used_prior = report.is_file() and json.loads(report.read_text()).get("cost_prior")
    scorer = scorer_from_records(prior, tasks, target,
                                 cost_prior=load_cost_prior(target) if used_prior else None)
    with pick_builder(MeasureConfig()) as builder:
        database, picks = with_predicted(database, tasks, unmeasured_tasks(prior), target, scorer,
                                         builder=builder)
    say(f"bench: {work_dir}: {len(picks.task_indices)} of {len(tasks)} tasks picked")
    return database


def _time_builds_quietly(model_path, work_dirs, fallback_target, settings,
                         with_picks) -> ProcessTiming:
    return time_builds(model_path, work_dirs, fallback_target, settings,
                       say=lambda msg: print(f"  {msg}", flush=True), with_picks=with_picks)


def time_in_processes(model_path: Path, work_dirs: list[str], fallback_target: str | None,
                      settings: TimingSettings, say=print,
                      with_picks: bool = False) -> list[ProcessTiming]:
    """`time_builds` in each of `settings.processes` fresh processes, one after another."""
    timings = []
    for index in range(max(1, settings.processes)):
        say(f"bench: timing process {index + 1} of {settings.processes} ...")
        # spawn, not fork: a forked child would inherit this process's TVM and allocator state.
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            timings.append(pool.submit(_time_builds_quietly, model_path, work_dirs,
                                       fallback_target, settings, with_picks).result())
    return timings


def time_model(model_path: Path, runs: list[RunResult], settings: TimingSettings,
               say=print) -> dict[str, float]:
    """Fill each run's latency (median over processes) and verification; return the
    reference medians (ms): onnxruntime's, untuned TVM's, and OpenVINO's where it was timed."""
    work_dirs = [str(run.work_dir) for run in runs if run.ok]
    fallback = runs[0].report.get("target") if runs and runs[0].report else None
    timings = time_in_processes(model_path, work_dirs, fallback, settings, say)
    for run in runs:
        key = str(run.work_dir)
        per_process = [t.latency_ms[key] for t in timings if key in t.latency_ms]
        run.latencies_ms = per_process
        run.latency_ms = statistics.median(per_process) if per_process else None
        if key in timings[0].checks:
            run.verified = all(t.checks[key][0] for t in timings)
            run.max_abs_err = max(t.checks[key][1] for t in timings)
    return {name: statistics.median(t.latency_ms[name] for t in timings if name in t.latency_ms)
            for name in (ONNXRUNTIME, OPENVINO, UNTUNED)
            if any(name in t.latency_ms for t in timings)}
