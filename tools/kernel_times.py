"""Where a tuned CPU model's time goes: every kernel its VM calls, timed on its own in place.

    python tools/kernel_times.py MODEL.onnx WORK_DIR [--with-picks] [--top 30]

TVM 0.27's Relax VM has no profiler. This compiles MODEL with WORK_DIR's database (as
tools/compare_work_dirs.py does), times the whole model, then runs it once with an instrument
that notes each call the VM makes and its arguments, and times each kernel again on those same
arguments (hot caches: the way the tuner measured it). Per function it prints the calls per
model run, the time they take, and what the work dir's report.json says of the task: its
weighted estimate (best latency x occurrences), trials, and whether TVM's unscheduled nest
serves it. The model's latency minus the kernels' sum is the rest: the VM's own calls
(allocations, reshapes), the thread pool's wake-ups between kernels, and the caches a kernel
finds cold in the model's sequence.

Functions are matched to tasks by name (TVM compiles a task that occurs several times to one
function called several times: its calls and its weight agree). A kernel is re-run on the
buffers it got, whatever they hold by then (the VM reuses storage): dense kernels' time does
not depend on the values.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

MIN_SECONDS = 0.01  # a kernel's timing averages runs over at least this long


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("--with-picks", action="store_true",
                        help="build as harl.tune compiles: untuned tasks get the cost model's "
                             "pick")
    parser.add_argument("--top", type=int, default=30, help="functions listed (slowest first)")
    parser.add_argument("--repeats", type=int, default=10, help="timings of the whole model")
    args = parser.parse_args()

    from benchlib.timing import picked_database

    from harl.evaluate import CompiledModel, compile_model
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.loop import open_database
    from harl.measure.threads import use_physical_cores
    from harl.target import is_gpu
    from harl.tvm_env import load_tensor_intrinsics

    use_physical_cores()
    model = load_onnx(args.model)
    inputs = model.random_inputs(0)
    database = open_database(args.work_dir)
    records = database.get_all_tuning_records()
    if not records:
        raise SystemExit(f"{args.work_dir} holds no tuning record")
    target = records[0].target
    if is_gpu(target):  # a kernel's launch returns before it ends: the timer would not see it
        raise SystemExit("kernel_times.py times CPU builds only")
    relax_mod = import_to_relax(model, fast_math=True)  # as harl imports for CPU targets
    load_tensor_intrinsics(target)
    if args.with_picks:
        database = picked_database(args.work_dir, database, relax_mod, target)
    built = CompiledModel(compile_model(relax_mod, target, database), target,
                          [spec.name for spec in model.inputs])
    model_ms = built.median_latency_ms(inputs, args.repeats)
    kernel_ms, calls = kernel_times(built, inputs)
    print_table(model_ms, kernel_ms, calls, task_summaries(args.work_dir), args.top)


def kernel_times(built, inputs) -> tuple[dict[str, float], dict[str, int]]:
    """Per function the VM called with tensors only (kernels): ms per model run, and calls."""
    import tvm

    from harl.evaluate import median_wall_ms

    seen = []

    def note_call(func, name, before_run, _ret, *call_args):
        if before_run:
            seen.append((name, func, call_args))
        return 0  # go on as usual

    built.vm.set_instrument(note_call)
    built.run(inputs)
    built.vm.set_instrument(lambda *_: 0)
    kernel_ms, calls = defaultdict(float), defaultdict(int)
    for name, func, call_args in seen:
        if not call_args or not all(isinstance(a, tvm.runtime.Tensor) for a in call_args):
            continue  # the VM's builtins take shapes, storage and constants
        kernel_ms[name] += median_wall_ms(lambda f=func, a=call_args: f(*a), repeats=1,
                                          min_seconds=MIN_SECONDS)
        calls[name] += 1
    return dict(kernel_ms), dict(calls)


def task_summaries(work_dir: Path) -> dict[str, dict]:
    report = work_dir / "report.json"
    if not report.exists():
        return {}
    return {task["name"]: task for task in json.loads(report.read_text())["tasks"]}


def print_table(model_ms: float, kernel_ms: dict[str, float], calls: dict[str, int],
                tasks: dict[str, dict], top: int) -> None:
    total = sum(kernel_ms.values())
    print(f"model {model_ms:.4g} ms; its {sum(calls.values())} kernel calls alone "
          f"{total:.4g} ms; the rest (VM calls, thread wake-ups, cold caches) "
          f"{model_ms - total:.4g} ms")
    print(f"{'ms':>9} {'share':>6} {'calls':>5} {'estimate':>9} {'trials':>6}  function "
          "(*: TVM's unscheduled nest is the task's best)")
    for name, ms in sorted(kernel_ms.items(), key=lambda item: -item[1])[:top]:
        task = tasks.get(name)
        estimate = trials = "-"  # a function that is no task of the work dir's, or unmeasured
        if task is not None and task["best_ms"] is not None:
            estimate = f"{task['best_ms'] * task['weight']:.4g}"
            trials = str(task["trials"]) + ("*" if task.get("naive") else "")
        print(f"{ms:9.4g} {ms / model_ms:6.1%} {calls[name]:5d} {estimate:>9} {trials:>6}  "
              f"{name}")


if __name__ == "__main__":
    main()
