"""Time one model compiled with each of several work dirs' databases, interleaved, in one process.

    python tools/compare_work_dirs.py MODEL.onnx WORK_DIR [WORK_DIR ...] [--rounds 10]

Latencies measured in separate runs drift with machine load; here every build (plus untuned TVM
and onnxruntime) is timed round-robin in the same process, and medians and ratios are printed.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from harl.evaluate import (
    CompiledModel,
    OnnxRuntimeModel,
    check_outputs,
    compile_model,
    interleaved_latencies_ms,
)
from harl.frontend.onnx_model import import_to_relax, load_onnx
from harl.loop import open_database
from harl.target import local_cpu_count
from harl.tvm_env import load_tensor_intrinsics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dirs", type=Path, nargs="+")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    model = load_onnx(args.model)
    relax_mod = import_to_relax(model)
    inputs = model.random_inputs(0)
    names = [spec.name for spec in model.inputs]
    reference = OnnxRuntimeModel(model, threads=local_cpu_count())
    expected = reference.run(inputs)
    runners = {"onnxruntime": reference}
    target = None
    for work_dir in args.work_dirs:
        database = open_database(work_dir)
        target = database.get_all_tuning_records()[0].target
        load_tensor_intrinsics(target)
        built = CompiledModel(compile_model(relax_mod, target, database), target, names)
        check = check_outputs(built.run(inputs), expected, list(model.output_names), 1e-3, 1e-4)
        assert check.verified, f"{work_dir}: max abs error {check.max_abs_err}"
        runners[str(work_dir)] = built
    runners["untuned TVM"] = CompiledModel(compile_model(relax_mod, target), target, names)

    samples = interleaved_latencies_ms(runners, inputs, args.rounds, 5)
    baseline = statistics.median(samples[str(args.work_dirs[0])])
    print(f"{'build':<40} {'median ms':>10} {'vs first work dir':>18}")
    for key, values in samples.items():
        median = statistics.median(values)
        print(f"{key:<40} {median:>10.4g} {median / baseline:>17.2f}x")


if __name__ == "__main__":
    main()
