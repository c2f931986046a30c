"""Train the cost-model prior harl ships for CPU targets (harl/data/), from synthetic workloads.

    python tools/train_cost_prior.py [--models 24] [--small-models 12] [--trials 64] \
        [--out logs/prior]

1. writes `--models` random ONNX models of three operators each (benchlib/synthetic.py: convs,
   depthwise convs, dense and batched matmuls of 1-600 MFLOP; none a benchmarked kernel), and
   `--small-models` more whose operators are of 0.1-1 MFLOP,
2. tunes each once with `python -m harl.tune --no-evaluate --no-prior` (runs with a report.json in
   their work dir are reused, so an interrupted run picks up where it stopped),
3. trains an XGBoost model on every measured record, as MetaSchedule's XGBModel trains (features
   per store, labels the best latency of the workload over each record's), and writes it to
   harl/data/ with a manifest: TVM version, the workloads, how many records, the held-out rank
   correlation per workload when it is left out of training, and the smallest FLOPs drawn (harl
   leaves smaller tasks to the run's own model).

A synthetic model sharing a conv or matmul shape with a model harl is benchmarked on (the
examples, the bench's kernels, the ONNX package's light models, the corpus's held-out models) is
refused as training data: the prior must not have seen what it is judged on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

from benchlib.machine import ROOT  # noqa: E402
from benchlib.models import light_model_names  # noqa: E402
from benchlib.runs import RunSpec, run_tuning  # noqa: E402
from benchlib.synthetic import FLOP_RANGE, SMALL_FLOP_RANGE, synthetic_models  # noqa: E402
from make_corpus import HELD_OUT, manifest  # noqa: E402


def benchmarked_models(corpus: Path = ROOT / "logs" / "corpus") -> list[str]:
    """Every model harl is measured on: the examples, the bench's kernels, the ONNX package's
    light models (SqueezeNet and the unseen-model sweep), and the corpus's held-out models
    found in `corpus` (tools/make_corpus.py writes them there; one line names those missing)."""
    examples = sorted(str(p) for p in (ROOT / "tasks" / "examples").glob("*.onnx"))
    held_out = [record["name"] for record in manifest() if record["split"] == HELD_OUT]
    found = [corpus / f"{name}.onnx" for name in held_out]
    missing = [path.stem for path in found if not path.is_file()]
    if missing:
        print(f"train_cost_prior: held-out corpus models not in {corpus}, so not refused: "
              f"{', '.join(missing)} (python tools/make_corpus.py --split held-out)", flush=True)
    return [*examples, "kernel:conv56", "kernel:matmul512",
            *(f"light:{name}" for name in light_model_names()),
            *(str(path) for path in found if path.is_file())]


SMALL_MODELS = "small"
"""name of the small models (0.1-1 MFLOP operators), and of their run folders"""


def smallest_drawn(work_dirs: list[Path]) -> float:
    """The smallest FLOPs drawn for the models of `work_dirs` (each dir is runs/MODEL/RUN): what
    the prior is trained on, below which harl leaves tasks to the run's own model."""
    small = any(d.parent.name.startswith(SMALL_MODELS) for d in work_dirs)
    return (SMALL_FLOP_RANGE if small else FLOP_RANGE)[0]


def tune_models(models: list[Path], out: Path, trials: int) -> list[Path]:
    """Tune each model once (reusing finished runs); their work dirs."""
    work_dirs = []
    for index, model in enumerate(models):
        spec = RunSpec(model, model.stem, "harl", trials, 0)
        result = run_tuning(spec, out, extra_args=("--no-prior",), resume=True)
        print(f"[{index + 1}/{len(models)}] {model.stem}: exit {result.exit_code}, "
              f"{result.report.get('trials_done', 0)} trials", flush=True)
        if result.ok:
            work_dirs.append(result.work_dir)
    return work_dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=24, help="synthetic models to tune")
    parser.add_argument("--small-models", type=int, default=12,
                        help="synthetic models of small operators (0.1-1 MFLOP) to tune")
    parser.add_argument("--trials", type=int, default=64, help="trials per model")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model generator")
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "prior")
    parser.add_argument("--tune-only", action="store_true", help="stop before training")
    args = parser.parse_args(argv)
    models = synthetic_models(args.out / "models", args.models, seed=args.seed)
    models += synthetic_models(args.out / "models", args.small_models, seed=args.seed,
                               flop_range=SMALL_FLOP_RANGE, name=SMALL_MODELS)
    work_dirs = tune_models(models, args.out / "runs", args.trials)
    if args.tune_only:
        return 0
    from benchlib.prior import train_and_write

    train_and_write(work_dirs, benchmarked_models(), min_flop=smallest_drawn(work_dirs),
                    command=" ".join(["python", "tools/train_cost_prior.py", *sys.argv[1:]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
