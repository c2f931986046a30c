"""Digest of the records harl's search makes when measurement is a fixed function of the program.

    python tools/search_digest.py MODEL.onnx WORK_DIR [--trials 96] [--strategy harl]

The builder builds nothing and the runner's latency is a hash of the candidate's TIR (0.1-1.1
ms), so the search sees the same feedback every time: two runs of the same code, seed and
model print the same digest, and a refactoring that keeps the search's behaviour keeps it too
(real timings differ run to run by 10-20% on a shared host, which hides such a check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harl.config import MeasureConfig  # noqa: E402
from harl.database import RECORD_FILE  # noqa: E402
from harl.frontend.onnx_model import import_model, load_onnx  # noqa: E402
from harl.frontend.tasks import extract_tasks  # noqa: E402
from harl.loop import LoopSettings, tune_tasks  # noqa: E402
from harl.search import STRATEGIES, make_plan  # noqa: E402
from harl.search.cost_prior import load_cost_prior  # noqa: E402
from harl.target import parse_target  # noqa: E402
from harl.tvm_env import load_tensor_intrinsics  # noqa: E402

_HASH_FILE = "program_hash"


@derived_object
class HashBuilder(PyBuilder):
    """Builds nothing: leaves the candidate's structural hash where the runner finds it."""

    def build(self, build_inputs):
        results = []
        for build_input in build_inputs:
            folder = tempfile.mkdtemp(prefix="harl_digest_")
            Path(folder, _HASH_FILE).write_text(str(tvm_ffi.structural_hash(build_input.mod)))
            results.append(BuilderResult(os.path.join(folder, "unbuilt.tar"), None))
        return results


@derived_object
class HashRunner(PyRunner):
    """A candidate's latency: 0.1-1.1 ms, fixed by its program's structural hash."""

    def run(self, runner_inputs):
        futures = []
        for runner_input in runner_inputs:
            folder = os.path.dirname(runner_input.artifact_path)
            program = int(Path(folder, _HASH_FILE).read_text())
            futures.append(ms.runner.LocalRunnerFuture([1e-4 * (1 + program % 1000 / 100)],
                                                       None))
        return futures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dir", type=Path, help="a fresh folder for the run's database")
    parser.add_argument("--trials", type=int, default=96)
    parser.add_argument("--trials-per-batch", type=int, default=8)
    parser.add_argument("--strategy", choices=STRATEGIES, default="harl")
    args = parser.parse_args()
    if (args.work_dir / RECORD_FILE).exists():
        sys.exit(f"{args.work_dir} already holds records: give a fresh folder")
    target = parse_target(None)
    load_tensor_intrinsics(target)
    _, relax_mod = import_model(load_onnx(args.model))
    tasks = extract_tasks(relax_mod, target)
    plan = make_plan(args.strategy, seed=0, num_cores=2, tasks=tasks,
                     cost_prior=load_cost_prior(target) if args.strategy == "harl" else None)
    settings = LoopSettings(trials=args.trials, trials_per_batch=args.trials_per_batch, seed=0,
                            num_cores=2)
    tune_tasks(tasks, target, plan, args.work_dir, settings=settings, measure=MeasureConfig(),
               builder=HashBuilder(), runner=HashRunner())
    lines = (args.work_dir / RECORD_FILE).read_text().splitlines()
    # workload index, trace and latency of each record (not the target or argument info)
    kept = [json.dumps(json.loads(line)[:1] + json.loads(line)[1][:2]) for line in lines]
    digest = hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]
    print(f"{len(lines)} records, digest {digest}")


if __name__ == "__main__":
    main()
