"""Where a tuned CPU model's time goes: every kernel its VM calls, timed on its own in place.

    python tools/kernel_times.py MODEL.onnx WORK_DIR [--with-picks] [--top 30] [--json PATH]

TVM 0.27's Relax VM has no profiler. This compiles MODEL with WORK_DIR's database (as
tools/compare_work_dirs.py does), times the whole model, then runs it once with an instrument
that notes each call the VM makes and its arguments, and times each kernel again on those same
arguments (hot caches: the way the tuner measured it), and once more cold: every argument but
the first (a kernel's data input, which the kernel before it has just written) flushed from the
caches before each call, as a kernel finds its weights in a model whose weights outgrow the
caches. Per function it prints the calls per model run, the time they take hot, and what the
work dir's report.json says of the task: its weighted estimate (best latency x occurrences),
trials, and whether TVM's unscheduled nest serves it; then the cold time. The model's latency
minus the kernels' hot sum is the rest: the caches a kernel finds cold in the model's sequence
(up to the cold sum's excess over the hot one), the VM's own calls (allocations, reshapes) and
the thread pool's wake-ups between kernels.

Each row also places its kernel on the roofline: its MFLOP per call (TVM's estimate for the task,
as in report.json), the GFLOP/s it achieved (FLOPs x calls / time) and its percentage of the
CPU's fp32 FMA peak, measured by benchlib.peak on as many threads as TVM's runtime uses (a kernel
without FLOPs, a copy, shows "-"). The header gives that peak, the theoretical one, and the
model's GFLOP/s. With --json PATH the header and every kernel's row also go to a JSON file.

Functions are matched to tasks by name (TVM compiles a task that occurs several times to one
function called several times: its calls and its weight agree). A kernel is re-run on the
buffers it got, whatever they hold by then (the VM reuses storage): dense kernels' time does
not depend on the values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PREPACKED_SUFFIX = "_prepacked"
"""what TVM's SplitLayoutRewritePreproc appends to a function whose weights it packs ahead"""
MIN_SECONDS = 0.01  # a kernel's timing averages runs over at least this long
COLD_REPEATS = 7  # cold timings of a kernel call (one run each, after a flush); the median counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("--with-picks", action="store_true",
                        help="build as harl.tune compiles: untuned tasks get the cost model's "
                             "pick")
    parser.add_argument("--top", type=int, default=30, help="functions listed (slowest first)")
    parser.add_argument("--repeats", type=int, default=10, help="timings of the whole model")
    parser.add_argument("--json", type=Path,
                        help="also write the header's facts and every kernel's row here")
    args = parser.parse_args()

    from benchlib.machine import cpu_mhz
    from benchlib.peak import measure_peak, theoretical_peak_gflops
    from benchlib.timing import graph_of, picked_database

    from harl.database import read_database
    from harl.evaluate import CompiledModel, compile_model
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.frontend.tasks import prepacks_weights
    from harl.measure.threads import use_physical_cores
    from harl.target import is_gpu
    from harl.tvm_env import load_tensor_intrinsics

    threads, _ = use_physical_cores()
    model = load_onnx(args.model)
    inputs = model.random_inputs(0)
    database = read_database(args.work_dir)
    records = database.get_all_tuning_records()
    if not records:
        raise SystemExit(f"{args.work_dir} holds no tuning record")
    target = records[0].target
    if is_gpu(target):  # a kernel's launch returns before it ends: the timer would not see it
        raise SystemExit("kernel_times.py times CPU builds only")
    # as harl imports for CPU targets; the graph the run saved where it rewrote it
    relax_mod = graph_of(args.work_dir, import_to_relax(model, fast_math=True))
    load_tensor_intrinsics(target)
    prepacked = prepacks_weights(database)  # the picks' UnionDatabase cannot tell
    if args.with_picks:
        database = picked_database(args.work_dir, database, relax_mod, target,
                                   prepack_weights=prepacked)
    built = CompiledModel(compile_model(relax_mod, target, database, prepack_weights=prepacked),
                          target, [spec.name for spec in model.inputs])
    model_ms = built.median_latency_ms(inputs, args.repeats)
    kernel_ms, cold_ms, calls = kernel_times(built, inputs)
    tasks = task_summaries(args.work_dir)
    flops = {name: task["flop"] for name, task in tasks.items()}  # TVM's count, as tuned
    with tempfile.TemporaryDirectory() as folder:  # the FMA kernel's C source and library
        peak = measure_peak(Path(folder), threads)
    mhz = cpu_mhz()
    rows = kernel_rows(model_ms, kernel_ms, calls, flops, tasks, peak.gflops_all_cores,
                       cold_ms=cold_ms)
    model_flop = sum(row["mflop"] * row["calls"] for row in rows if row["mflop"]) * 1e6
    header = {"model": str(args.model), "work_dir": str(args.work_dir), "model_ms": model_ms,
              "kernels_ms": sum(kernel_ms.values()), "kernels_cold_ms": sum(cold_ms.values()),
              "kernel_calls": sum(calls.values()),
              "model_mflop": model_flop / 1e6, "model_gflops": model_flop / (model_ms * 1e6),
              "threads": threads, "fma_peak_gflops": peak.gflops_all_cores,
              "fma_peak_one_core_gflops": peak.gflops_one_core, "fma_lanes": peak.lanes,
              "cpu_mhz": mhz,
              "theoretical_peak_gflops": theoretical_peak_gflops(threads, mhz, peak.lanes)}
    print_table(header, rows, args.top)
    if args.json is not None:
        args.json.write_text(json.dumps({**header, "kernels": rows}, indent=2) + "\n")


def kernel_times(built, inputs) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Per function the VM called with tensors only (kernels): ms per model run hot, ms per
    model run cold (all arguments but the first flushed from the caches before each call), and
    calls."""
    import tvm

    from harl.evaluate import median_wall_ms

    flush = tvm.get_global_func("cache_flush_cpu_non_first_arg")  # MetaSchedule's cold timing

    seen = []

    def note_call(func, name, before_run, _ret, *call_args):
        if before_run:
            seen.append((name, func, call_args))
        return 0  # go on as usual

    built.vm.set_instrument(note_call)
    built.run(inputs)
    built.vm.set_instrument(lambda *_: 0)
    kernel_ms, cold_ms, calls = defaultdict(float), defaultdict(float), defaultdict(int)
    for name, func, call_args in seen:
        if not call_args or not all(isinstance(a, tvm.runtime.Tensor) for a in call_args):
            continue  # the VM's builtins take shapes, storage and constants
        kernel_ms[name] += median_wall_ms(lambda f=func, a=call_args: f(*a), repeats=1,
                                          min_seconds=MIN_SECONDS)
        cold_ms[name] += cold_call_ms(func, call_args, flush)
        calls[name] += 1
    return dict(kernel_ms), dict(cold_ms), dict(calls)


def cold_call_ms(func, args, flush, repeats: int = COLD_REPEATS) -> float:
    """Median ms of one call of `func` on `args`, each run right after `flush(*args)`."""
    samples = []
    for _ in range(repeats):
        flush(*args)
        start = time.perf_counter()
        func(*args)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def task_summaries(work_dir: Path) -> dict[str, dict]:
    report = work_dir / "report.json"
    if not report.exists():
        return {}
    return {task["name"]: task for task in json.loads(report.read_text())["tasks"]}


def kernel_rows(model_ms: float, kernel_ms: dict[str, float], calls: dict[str, int],
                flops: dict[str, float], tasks: dict[str, dict], peak_gflops: float, *,
                cold_ms: dict[str, float] | None = None) -> list[dict]:
    """Per kernel, slowest first: its time (hot, and cold where `cold_ms` has it), calls and
    report facts, and where it stands against the peak (GFLOP/s and its percentage, from the hot
    time, are None for a kernel without FLOPs or not a task)."""
    cold_ms = cold_ms or {}
    rows = []
    for name, ms in sorted(kernel_ms.items(), key=lambda item: -item[1]):
        # a schedule that packs its weights is compiled as "<task>_prepacked"
        task_name = name.removesuffix(PREPACKED_SUFFIX)
        flop = flops.get(task_name)  # None: a function that is no task of the model
        gflops = flop * calls[name] / (ms * 1e6) if flop else None
        task = tasks.get(task_name)
        measured = task is not None and task["best_ms"] is not None
        rows.append({
            "function": name, "ms": ms, "cold_ms": cold_ms.get(name), "share": ms / model_ms,
            "calls": calls[name],
            "estimate_ms": task["best_ms"] * task["weight"] if measured else None,
            "trials": task["trials"] if measured else None,
            "naive": bool(task.get("naive")) if measured else None,
            "mflop": None if flop is None else flop / 1e6, "gflops": gflops,
            "peak_percent": None if gflops is None else 100 * gflops / peak_gflops})
    return rows


def print_table(header: dict, rows: list[dict], top: int) -> None:
    model_ms, total = header["model_ms"], header["kernels_ms"]
    print(f"model {model_ms:.4g} ms; its {header['kernel_calls']} kernel calls alone "
          f"{total:.4g} ms; the rest (VM calls, thread wake-ups, cold caches) "
          f"{model_ms - total:.4g} ms; the kernels cold (all but their first argument flushed "
          f"from the caches) {header['kernels_cold_ms']:.4g} ms")
    peak, theory = header["fma_peak_gflops"], header["theoretical_peak_gflops"]
    theory_text = ("unknown (no clock in /proc/cpuinfo)" if theory is None else
                   f"{theory:.1f} = {header['threads']} cores x {header['cpu_mhz'] / 1e3:.2f} GHz "
                   f"(the clock /proc/cpuinfo reports) x 2 FMA units x {header['fma_lanes']} "
                   f"lanes ({32 * header['fma_lanes']} bit) x 2")
    print(f"fp32 FMA peak on {header['threads']} threads: measured {peak:.1f} GFLOP/s "
          f"({header['fma_peak_one_core_gflops']:.1f} on one; {header['fma_lanes']}-lane FMAs), "
          f"theoretical {theory_text}")
    print(f"the kernels' {header['model_mflop']:.4g} MFLOP in the model's time: "
          f"{header['model_gflops']:.4g} GFLOP/s, {header['model_gflops'] / peak:.2%} of the "
          "measured peak")
    print(f"{'ms':>9} {'share':>6} {'calls':>5} {'estimate':>9} {'trials':>6} {'MFLOP':>9} "
          f"{'GFLOP/s':>8} {'%peak':>6} {'cold ms':>9}  function (*: TVM's unscheduled nest is "
          "the task's best)")
    for row in rows[:top]:
        estimate = trials = "-"  # a function that is no task of the work dir's, or unmeasured
        if row["estimate_ms"] is not None:
            estimate = f"{row['estimate_ms']:.4g}"
            trials = str(row["trials"]) + ("*" if row["naive"] else "")
        mflop = "-" if row["mflop"] is None else f"{row['mflop']:.4g}"
        gflops = percent = "-"
        if row["gflops"] is not None:
            gflops, percent = f"{row['gflops']:.4g}", f"{row['peak_percent']:.3g}%"
        cold = "-" if row["cold_ms"] is None else f"{row['cold_ms']:.4g}"
        print(f"{row['ms']:9.4g} {row['share']:6.1%} {row['calls']:5d} {estimate:>9} "
              f"{trials:>6} {mflop:>9} {gflops:>8} {percent:>6} {cold:>9}  {row['function']}")


if __name__ == "__main__":
    main()
