"""How fast harl's search replays traces and extracts features, on one thread and on several.

    python tools/replay_speed.py MODEL.onnx [--task 0] [--samples 128] [--threads 2]
        [--target cuda]

Draws `--samples` random schedules of the task's first sketch (the task with the most weighted
FLOPs by default), each from its own seed, serially and on `--threads` threads, and checks that
both give the same schedules; then times `PerStoreFeature` on them with 1 and `--threads`
threads. This is the work behind each state harl's search scores (`schedules_of` in
harl/search/trace_sites.py). Where the sketch has thread bounds (GPU targets; no GPU is needed
to make schedules), harl's fresh samples are also drawn with and without them, to show they
skip work and change no schedule, and drawn as harl's search draws them: until `--samples`
are within the bounds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from harl.frontend.onnx_model import import_to_relax, load_onnx
from harl.frontend.tasks import extract_tasks
from harl.report.metrics import MetricsLogger
from harl.search.search_config import HarlSearchConfig
from harl.search.sketch_replay import SketchReplay
from harl.search.thread_bounds import ThreadBounds
from harl.search.trace_sites import schedules_of, with_state
from harl.target import is_gpu, local_cpu_count, parse_target
from harl.tvm_env import load_tensor_intrinsics


def timed(work):
    """`work()` and the seconds it took."""
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


def program_hashes(schedules) -> list:
    """Each schedule's program hash (None where the replay failed)."""
    return [None if sch is None else tvm_ffi.structural_hash(sch.mod) for sch in schedules]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--task", type=int, default=0, help="index, largest weighted FLOPs first")
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--threads", type=int, default=local_cpu_count())
    parser.add_argument("--target", default="llvm", help="harl.tune --target")
    args = parser.parse_args(argv)

    target = parse_target(args.target)
    load_tensor_intrinsics(target)
    relax_mod = import_to_relax(load_onnx(args.model), fast_math=not is_gpu(target))
    task = extract_tasks(relax_mod, target)[args.task]

    def context(threads):
        return ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                              task_name=task.name, num_threads=threads).clone()

    wide = context(args.threads)
    sketch = wide.generate_design_space()[0].trace.simplified(remove_postproc=True)
    postprocs = list(wide.space_generator.postprocs)
    traces, seeds = [with_state(sketch, None)] * args.samples, list(range(1, args.samples + 1))
    serial, serial_s = timed(lambda: schedules_of(task.mod, traces, postprocs, seeds))
    threaded, threaded_s = timed(
        lambda: schedules_of(task.mod, traces, postprocs, seeds, workers=args.threads))
    same = program_hashes(serial) == program_hashes(threaded)
    legal = [s for s in serial if s is not None]
    print(f"{task.name} ({task.flop / 1e6:.2f} MFLOP): {len(legal)} of {args.samples} samples "
          f"legal; the same schedules on {args.threads} threads: {same}")
    print(f"replay + postprocs: {serial_s:.2f} s on 1 thread, {threaded_s:.2f} s on "
          f"{args.threads} ({serial_s / threaded_s:.2f}x)")
    if legal:
        candidates = [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True))
                      for s in legal]
        extractor = PerStoreFeature()
        _, one_s = timed(lambda: extractor.extract_from(context(1), candidates))
        _, many_s = timed(lambda: extractor.extract_from(wide, candidates))
        print(f"features: {one_s:.2f} s on 1 thread, {many_s:.2f} s on {args.threads} "
              f"({one_s / many_s:.2f}x)")
    bounds = ThreadBounds.of(sketch)
    if bounds is not None:
        same = same and thread_bounds_speed(task.mod, sketch, bounds, postprocs, args)
    return 0 if same else 1


def thread_bounds_speed(mod, sketch, bounds, postprocs, args) -> bool:
    """harl's fresh samples of `sketch` drawn with and without its thread bounds: prints both
    times; whether they are the same schedules."""
    drawn, seconds = [], []
    for sketch_bounds in (None, bounds):
        replay = SketchReplay(mod, postprocs, workers=args.threads, rng=np.random.default_rng(0),
                              metrics=MetricsLogger())
        plan = SimpleNamespace(trace=sketch, shortcut=replay.shortcut_of(sketch),
                               thread_bounds=sketch_bounds)
        samples, took = timed(lambda: replay.fresh(plan, args.samples))  # noqa: B023
        drawn.append(program_hashes([sch for _, sch in samples]))
        seconds.append(took)
    print(f"harl's fresh samples: {len(drawn[0])} of {args.samples} legal; {seconds[0]:.2f} s, "
          f"{seconds[1]:.2f} s skipping the {replay.out_of_bounds} outside the thread bounds "
          f"({seconds[0] / seconds[1]:.2f}x); the same schedules: {drawn[0] == drawn[1]}")
    draws = HarlSearchConfig().bounded_draws
    replay = SketchReplay(mod, postprocs, workers=args.threads, rng=np.random.default_rng(0),
                          metrics=MetricsLogger())
    plan = SimpleNamespace(trace=sketch, shortcut=replay.shortcut_of(sketch), thread_bounds=bounds)
    filled, took = timed(lambda: replay.fresh(plan, args.samples, args.samples * draws))
    kept = program_hashes([sch for _, sch in filled])
    print(f"drawn until {args.samples} are within the bounds (at most {draws}x the draws, "
          f"harl's search): {len(kept)} legal after {replay.out_of_bounds} skipped; {took:.2f} s; "
          f"the first draws' schedules kept: {kept[:len(drawn[1])] == drawn[1]}")
    return drawn[0] == drawn[1] and kept[:len(drawn[1])] == drawn[1]


if __name__ == "__main__":
    raise SystemExit(main())
