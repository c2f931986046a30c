"""How fast harl's search replays traces and extracts features, on one thread and on several.

    python tools/replay_speed.py MODEL.onnx [--task 0] [--samples 128] [--threads 2]

Draws `--samples` random schedules of the task's first sketch (the task with the most weighted
FLOPs by default), each from its own seed, serially and on `--threads` threads, and checks that
both give the same schedules; then times `PerStoreFeature` on them with 1 and `--threads`
threads. This is the work behind each state harl's search scores (`schedules_of` in
harl/search/trace_sites.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from harl.frontend.onnx_model import import_to_relax, load_onnx
from harl.frontend.tasks import extract_tasks
from harl.search.trace_sites import schedules_of, with_state
from harl.target import local_cpu_count, parse_target
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
    args = parser.parse_args(argv)

    target = parse_target("llvm")
    load_tensor_intrinsics(target)
    task = extract_tasks(import_to_relax(load_onnx(args.model)), target)[args.task]

    def context(threads):
        return ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                              task_name=task.name, num_threads=threads).clone()

    wide = context(args.threads)
    sketch = wide.generate_design_space()[0].trace.simplified(remove_postproc=True)
    postprocs = list(wide.space_generator.postprocs)
    traces, seeds = [with_state(sketch, None)] * args.samples, list(range(1, args.samples + 1))
    serial, serial_s = timed(lambda: schedules_of(task.mod, traces, postprocs, seeds))
    threaded, threaded_s = timed(
        lambda: schedules_of(task.mod, traces, postprocs, seeds, args.threads))
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
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
