"""Benchmark harl against MetaSchedule, untuned TVM and onnxruntime; or measure the roofline.

    python tools/bench.py MODEL [MODEL ...] [--strategies harl,metaschedule] [--trials 20,64]
                          [--seeds 0,1,2] [--out DIR]
    python tools/bench.py MODEL --arms ablation [--baseline harl]   # harl without each part
    python tools/bench.py --smoke            # tiny end-to-end check (1.5-2 min on 2 cores)
    python tools/bench.py --roofline         # FMA peak, numpy BLAS, tuned matmul and conv2d

MODEL is an ONNX path or `light:NAME` (the ONNX package's own test models: light:resnet50,
light:squeezenet, ...). Every model x arm x budget x seed is one `python -m harl.tune` run,
one at a time; then each model's tuned builds are timed interleaved in one process, beside
untuned TVM, onnxruntime and, when it is installed (`pip install openvino`), OpenVINO's CPU
runtime in fp32 (`--no-openvino` leaves it out). An arm is a strategy with config settings
(tools/benchlib/arms.py); each strategy is the arm of its name.
Ratios pair every run with the baseline arm's run of the same model, budget and seed.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

from benchlib.arms import ABLATION, ARMS, arm_named, choose_baseline, parse_arms  # noqa: E402
from benchlib.machine import ROOT, header_lines  # noqa: E402
from benchlib.models import count_tasks, model_label, resolve_model  # noqa: E402
from benchlib.openvino_runner import INSTALL_HINT, openvino_wanted  # noqa: E402
from benchlib.plots import plot_model  # noqa: E402
from benchlib.report import (  # noqa: E402
    markdown_table,
    summary_columns,
    summary_rows,
    timed_openvino,
    write_runs_csv,
    write_summary,
)
from benchlib.runs import RunSpec, run_tuning, tail  # noqa: E402
from benchlib.timing import TimingSettings, time_model  # noqa: E402

from harl.errors import HarlError  # noqa: E402
from harl.measure.threads import use_physical_cores  # noqa: E402

SMOKE_MODEL = ROOT / "tasks" / "examples" / "mlp.onnx"


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/bench.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="ONNX paths or light:NAME")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--strategies", default=None,
                     help="comma-separated harl.tune strategies, each at its defaults "
                          "(default harl,metaschedule)")
    how.add_argument("--arms", default=None,
                     help=f"comma-separated arms: {', '.join(ARMS)}; {ABLATION} = harl and "
                          "every arm that changes one part of it")
    parser.add_argument("--baseline", default=None,
                        help="the arm ratios are taken against (default metaschedule when it "
                             "runs, else harl)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--trials", type=int_list, default=None,
                        help="global trial budgets per model, comma-separated (default 64)")
    budget.add_argument("--trials-per-task", type=int_list, default=None,
                        help="budgets per task: each is multiplied by the model's task count")
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2],
                        help="seeds, comma-separated (default 0,1,2)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default logs/bench/<timestamp>/)")
    parser.add_argument("--target", default=None, help="harl.tune --target (default: this CPU)")
    parser.add_argument("--trials-per-batch", type=int, default=None,
                        help="harl.tune --trials-per-batch (default: harl's choice)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="interleaved timing rounds per model (default 10)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timings per build per round (default 5)")
    parser.add_argument("--timing-processes", type=int, default=3,
                        help="fresh processes that each compile and time every build; a "
                             "build's latency is the median over them (default 3)")
    parser.add_argument("--no-openvino", action="store_true",
                        help="do not time OpenVINO's CPU runtime (fp32, TVM's thread count) "
                             "beside onnxruntime; by default it is timed when installed "
                             f"({INSTALL_HINT})")
    parser.add_argument("--resume", action="store_true",
                        help="reuse runs whose work dir already holds a report.json")
    parser.add_argument("--smoke", action="store_true",
                        help="mlp.onnx, both strategies, 6 trials, seed 0, 3 timing rounds "
                             "in 2 processes")
    parser.add_argument("--roofline", action="store_true",
                        help="FMA peak, numpy BLAS and harl-tuned matmul / conv2d in GFLOP/s")
    parser.add_argument("--roofline-size", type=int, default=1024,
                        help="roofline matmul size N (NxN times NxN; default 1024)")
    parser.add_argument("--conv-size", type=int, default=56,
                        help="roofline conv2d height = width (64->64 channels, 3x3; default 56)")
    parser.add_argument("--roofline-trials", type=int, default=64,
                        help="harl.tune trial budget of each roofline kernel (default 64)")
    parser.add_argument("--roofline-strategy", default="harl",
                        help="strategy that tunes the roofline kernels (default harl)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    out = args.out or Path("logs") / "bench" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    header = header_lines(argv)
    threads, _ = use_physical_cores()  # the timing here and the tuning runs it starts
    header.append(f"TVM's runtime: {threads} threads (TVM_NUM_THREADS)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        print("\n".join(header), flush=True)
        if args.roofline:
            from benchlib.roofline import run_roofline

            run_roofline(args, out, header)
            return 0
        return run_bench(args, out, header)
    except (HarlError, OSError) as err:
        print(f"bench: error: {err}", file=sys.stderr)
        return 2


def run_bench(args: argparse.Namespace, out: Path, header: list[str]) -> int:
    """All runs, then per model the interleaved timing; 1 when some run failed."""
    if args.smoke:
        args.models, args.strategies, args.arms = [str(SMOKE_MODEL)], "harl,metaschedule", None
        args.trials, args.trials_per_task, args.seeds = [6], None, [0]
        args.rounds, args.repeats, args.timing_processes = 3, 3, 2
    if not args.models:
        raise HarlError("name at least one model (or use --smoke / --roofline)")
    arms = selected_arms(args)
    baseline = choose_baseline(arms, args.baseline)
    if any(n <= 0 for n in (args.trials or []) + (args.trials_per_task or [])):
        raise HarlError("trial budgets must be positive")
    models = [resolve_model(spec) for spec in args.models]
    labels = [model_label(path) for path in models]
    if len(set(labels)) != len(labels):
        raise HarlError(f"two models share a name (output folders would clash): {labels}")
    if min(args.rounds, args.repeats, args.timing_processes) <= 0:
        raise HarlError("--rounds, --repeats and --timing-processes must be positive")
    settings = TimingSettings(rounds=args.rounds, repeats=args.repeats,
                              processes=args.timing_processes,
                              openvino=openvino_wanted(not args.no_openvino))

    all_runs, references, plots = [], {}, []
    for path in models:
        label = model_label(path)
        if args.trials_per_task:
            tasks = count_tasks(path, args.target)
            budgets = [n * tasks for n in args.trials_per_task]
            print(f"bench: {label}: {tasks} tasks -> global budgets {budgets}", flush=True)
        else:
            budgets = args.trials or [64]
        runs = []
        for trials in budgets:
            for seed in args.seeds:
                for arm in arms:
                    spec = RunSpec(path, label, arm, trials, seed)
                    print(f"bench: tuning {label} {arm} trials={trials} seed={seed} ...",
                          flush=True)
                    run = run_tuning(spec, out, args.target, args.trials_per_batch, args.resume)
                    if run.exit_code != 0:
                        print(f"bench: run exited {run.exit_code}:\n"
                              f"{tail(run.work_dir / 'tune_output.txt')}", flush=True)
                    runs.append(run)
        references[label] = time_model(path, runs, settings,
                                       say=lambda msg: print(msg, flush=True))
        plots.append(plot_model(out / f"{label}_curves.png", label, runs))
        all_runs += runs
        # Written after every model, so that a long bench leaves results as it goes.
        write_runs_csv(out / "runs.csv", all_runs, references, baseline)
        write_summary(out / "summary.md", header, all_runs, references, plots, baseline)
    print()
    print(markdown_table(summary_columns(baseline, timed_openvino(references)),
                         summary_rows(all_runs, references, baseline)))
    print(f"\nbench: runs.csv, summary.md and plots in {out}")
    failed = [run for run in all_runs if run.exit_code != 0]
    if failed:
        print(f"bench: {len(failed)} of {len(all_runs)} runs failed (see summary.md)",
              file=sys.stderr)
    return 1 if failed else 0


def selected_arms(args: argparse.Namespace) -> list[str]:
    """The arms' names, from --arms, or from --strategies (each strategy the arm of its name)."""
    if args.arms is not None:
        return [arm.name for arm in parse_arms(args.arms)]
    from harl.search import STRATEGIES

    text = args.strategies or "harl,metaschedule"
    strategies = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise HarlError(f"unknown strategy {unknown or text!r}; choose from "
                        f"{', '.join(STRATEGIES)}")
    return [arm_named(s).name for s in strategies]


if __name__ == "__main__":
    sys.exit(main())
