"""Time one model compiled with each of several work dirs' databases, interleaved, in one process.

    python tools/compare_work_dirs.py MODEL.onnx WORK_DIR [WORK_DIR ...] [--rounds 10]
        [--with-picks]

Latencies measured in separate runs drift with machine load; here every build (plus untuned TVM
and onnxruntime) is timed round-robin in the same process, and medians and ratios are printed.
With --with-picks each work dir is also built the way `python -m harl.tune` compiles it: the
tasks without a measured record get the pick of a cost model trained on the dir's records
(harl/untuned.py).
"""

from __future__ import annotations

import argparse
import json
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
from harl.frontend.tasks import extract_tasks
from harl.loop import open_database
from harl.measure.threads import use_physical_cores
from harl.resume import PriorRun
from harl.search.cost_prior import load_cost_prior
from harl.target import local_cpu_count
from harl.tvm_env import load_tensor_intrinsics
from harl.untuned import predicted_schedules, scorer_from_records, unmeasured_tasks


def main() -> None:
    from tvm.s_tir import meta_schedule as ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dirs", type=Path, nargs="+")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--with-picks", action="store_true",
                        help="also build each dir with the cost model's picks for its untuned "
                             "tasks")
    args = parser.parse_args()
    threads, _ = use_physical_cores()
    print(f"TVM's runtime: {threads} threads")

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
        builds = {str(work_dir): database}
        if args.with_picks:
            tasks = extract_tasks(relax_mod, target)
            prior = PriorRun.read(database, [task.mod for task in tasks])
            report = work_dir / "report.json"  # as the run did: with the prior if it used one
            used_prior = report.is_file() and json.loads(report.read_text()).get("cost_prior")
            scorer = scorer_from_records(prior, tasks, target,
                                         load_cost_prior(target) if used_prior else None)
            wanted = [i for i in unmeasured_tasks(prior) if scorer.ranks(tasks[i].mod)]
            picks = predicted_schedules(tasks, wanted, target, scorer)
            print(f"{work_dir}: {len(picks.task_indices)} of {len(tasks)} tasks picked")
            builds[f"{work_dir} + picks"] = ms.database.UnionDatabase(database, picks.database)
        for key, db in builds.items():
            built = CompiledModel(compile_model(relax_mod, target, db), target, names)
            check = check_outputs(built.run(inputs), expected, list(model.output_names), 1e-3,
                                  1e-4)
            assert check.verified, f"{key}: max abs error {check.max_abs_err}"
            runners[key] = built
    runners["untuned TVM"] = CompiledModel(compile_model(relax_mod, target), target, names)

    samples = interleaved_latencies_ms(runners, inputs, args.rounds, 5)
    baseline = statistics.median(samples[str(args.work_dirs[0])])
    print(f"{'build':<48} {'median ms':>10} {'vs first work dir':>18}")
    for key, values in samples.items():
        median = statistics.median(values)
        print(f"{key:<48} {median:>10.4g} {median / baseline:>17.2f}x")


if __name__ == "__main__":
    main()
