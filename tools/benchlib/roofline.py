"""`python tools/bench.py --roofline`: how close a harl-tuned kernel gets to the physical limit.

(a) the measured fp32 FMA peak (benchlib.peak) beside the theoretical one, (b) numpy's BLAS fp32
matmul as the practical ceiling, (c) a matmul and a conv2d, each an ONNX model with constant random
weights tuned by `python -m harl.tune`, then compiled and timed interleaved with onnxruntime (and
numpy for the matmul) in this process, in GFLOP/s and as a percentage of (a) and (b).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchlib.machine import cpu_mhz, usable_cores
from benchlib.peak import CHAINS, NumpyMatmul, measure_peak, theoretical_peak_gflops
from benchlib.runs import RunSpec, run_tuning, tail
from harl.errors import HarlError

TUNED, ONNXRUNTIME, NUMPY = "tuned TVM", "onnxruntime", "numpy BLAS"


@dataclass(frozen=True)
class Kernel:
    label: str
    path: Path
    flop: float


def save_onnx(path: Path, node, inputs, output, weight: np.ndarray) -> Path:
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph([node], path.stem, inputs, [output],
                              [numpy_helper.from_array(weight, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def matmul_kernel(folder: Path, n: int) -> Kernel:
    """Y = X @ W with X: [n, n] input, W: [n, n] constant."""
    from onnx import TensorProto, helper

    weight = np.random.default_rng(1).uniform(-1, 1, (n, n)).astype(np.float32)
    path = save_onnx(folder / f"matmul{n}.onnx", helper.make_node("MatMul", ["X", "W"], ["Y"]),
                     [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
                     helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n]), weight)
    return Kernel(f"matmul {n}x{n}x{n}", path, 2.0 * n ** 3)


def conv_kernel(folder: Path, size: int, channels: int = 64) -> Kernel:
    """ResNet-like 3x3 conv, stride 1, pad 1: [1, C, size, size] -> [1, C, size, size]."""
    from onnx import TensorProto, helper

    weight = np.random.default_rng(2).uniform(-0.1, 0.1, (channels, channels, 3, 3))
    node = helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    shape = [1, channels, size, size]
    path = save_onnx(folder / f"conv{size}.onnx", node,
                     [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
                     helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape),
                     weight.astype(np.float32))
    return Kernel(f"conv2d {channels}->{channels} 3x3 on {size}x{size}", path,
                  2.0 * channels * size * size * channels * 9)


def time_kernel(kernel: Kernel, work_dir: Path, numpy_n: int | None, rounds: int = 5,
                repeats: int = 3) -> dict:
    """Compile the tuned database, check it against onnxruntime, time it interleaved."""
    from harl.database import read_database
    from harl.evaluate import (
        CompiledModel,
        OnnxRuntimeModel,
        check_outputs,
        compile_model,
        interleaved_latencies_ms,
    )
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.target import is_gpu, local_cpu_count
    from harl.tvm_env import load_tensor_intrinsics

    model = load_onnx(kernel.path)
    inputs = model.random_inputs(0)
    database = read_database(work_dir)
    target = database.get_all_tuning_records()[0].target
    load_tensor_intrinsics(target)
    relax_mod = import_to_relax(model, fast_math=not is_gpu(target))
    tuned = CompiledModel(compile_model(relax_mod, target, database), target,
                          [spec.name for spec in model.inputs])
    reference = OnnxRuntimeModel(model, threads=local_cpu_count())
    check = check_outputs(tuned.run(inputs), reference.run(inputs), list(model.output_names),
                          rtol=1e-3, atol=1e-4)
    runners = {TUNED: tuned, ONNXRUNTIME: reference}
    if numpy_n is not None:
        runners[NUMPY] = NumpyMatmul(numpy_n)
    samples = interleaved_latencies_ms(runners, inputs, rounds=rounds, repeats_per_round=repeats)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {"verified": check.verified, "max_abs_err": check.max_abs_err,
            "latency_ms": medians,
            "gflops": {key: kernel.flop / (ms * 1e-3) / 1e9 for key, ms in medians.items()}}


def run_roofline(args: argparse.Namespace, out: Path, header: list[str]) -> dict:
    if args.roofline_size <= 0 or args.conv_size <= 0 or args.roofline_trials <= 0:
        raise HarlError("--roofline-size, --conv-size and --roofline-trials must be positive")
    folder = out / "roofline"
    folder.mkdir(parents=True, exist_ok=True)
    cores, mhz = usable_cores(), cpu_mhz()
    print("bench: measuring the FMA peak ...", flush=True)
    peak = measure_peak(folder, threads=cores)
    theory = theoretical_peak_gflops(cores, mhz, peak.lanes)

    results = {}
    matmul = matmul_kernel(folder, args.roofline_size)
    for kernel, numpy_n in ((matmul, args.roofline_size),
                            (conv_kernel(folder, args.conv_size), None)):
        spec = RunSpec(kernel.path, kernel.path.stem, args.roofline_strategy,
                       args.roofline_trials, 0)
        print(f"bench: tuning {kernel.label} ({args.roofline_strategy}, "
              f"{args.roofline_trials} trials) ...", flush=True)
        run = run_tuning(spec, folder, args.target, args.trials_per_batch, args.resume)
        if not run.ok:
            raise HarlError(f"tuning {kernel.label} failed (exit {run.exit_code}): "
                            f"{tail(run.work_dir / 'tune_output.txt', 1)}")
        results[kernel.label] = {"flop": kernel.flop, "tune_seconds":
                                 run.report.get("tune_seconds"),
                                 "trials_done": run.report.get("trials_done"),
                                 **time_kernel(kernel, run.work_dir, numpy_n)}
    numpy_gflops = results[matmul.label]["gflops"][NUMPY]
    summary = {"fma_peak_gflops": peak.gflops_all_cores, "fma_peak_one_core_gflops":
               peak.gflops_one_core, "fma_lanes": peak.lanes, "compiler": peak.compiler,
               "cores": cores, "cpu_mhz": mhz, "theoretical_peak_gflops": theory,
               "numpy_matmul_gflops": numpy_gflops, "kernels": results,
               "strategy": args.roofline_strategy, "trials": args.roofline_trials}
    (out / "roofline.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = format_roofline(header, summary)
    (out / "roofline.md").write_text(text)
    print(text)
    return summary


def format_roofline(header: list[str], s: dict) -> str:
    theory = s["theoretical_peak_gflops"]
    theory_text = ("unknown (no clock in /proc/cpuinfo)" if theory is None else
                   f"{theory:.1f} GFLOP/s = {s['cores']} cores x {s['cpu_mhz'] / 1e3:.2f} GHz "
                   f"(as /proc/cpuinfo reports it) x 2 FMA units x {s['fma_lanes']} lanes x 2")
    peak, ceiling = s["fma_peak_gflops"], s["numpy_matmul_gflops"]
    lines = ["# Roofline", "", "```", *header, "```", "",
             f"- measured fp32 peak: {peak:.1f} GFLOP/s on {s['cores']} threads "
             f"({s['fma_peak_one_core_gflops']:.1f} on one), best of 5: {CHAINS} independent "
             f"chains of {s['fma_lanes']}-lane vector FMAs per thread, C compiled by "
             f"{s['compiler']}",
             f"- theoretical peak: {theory_text}",
             f"- numpy BLAS fp32 matmul (practical ceiling): {ceiling:.1f} GFLOP/s "
             f"({100 * ceiling / peak:.0f}% of the measured peak)",
             f"- kernels tuned by `python -m harl.tune --strategy {s['strategy']} --trials "
             f"{s['trials']}`, then timed interleaved with onnxruntime (and numpy) in one process "
             f"(medians)", "",
             "| kernel | GFLOP | trials | tuned GFLOP/s | % of FMA peak | % of numpy matmul | "
             "onnxruntime GFLOP/s | outputs match onnxruntime |",
             "|" + " --- |" * 8]
    for label, k in s["kernels"].items():
        tuned = k["gflops"][TUNED]
        match = "yes" if k["verified"] else f"NO (max abs err {k['max_abs_err']:.3g})"
        lines.append(f"| {label} | {k['flop'] / 1e9:.3g} | {k['trials_done']} | {tuned:.1f} | "
                     f"{100 * tuned / peak:.1f}% | {100 * tuned / ceiling:.1f}% | "
                     f"{k['gflops'][ONNXRUNTIME]:.1f} | {match} |")
    return "\n".join(lines) + "\n"
