"""Command-line front end of `python -m harl.tune`: flags, and errors as one plain line."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

from harl.config import MeasureConfig, TuneConfig
from harl.errors import HarlError
from harl.frontend.onnx_model import parse_input_shape
from harl.search import STRATEGIES


def _help(name: str, config=TuneConfig) -> str:
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(config)}[name]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harl.tune",
        description="Tune an ONNX model with TVM, verify it against onnxruntime, and report.")
    parser.add_argument("model", type=Path, help=_help("model"))
    parser.add_argument("--target", default=None, help=_help("target"))
    parser.add_argument("--trials", type=int, default=64, help=_help("trials") + " (default 64)")
    parser.add_argument("--work-dir", type=Path, default=None, help=_help("work_dir"))
    parser.add_argument("--strategy", default="harl", choices=list(STRATEGIES),
                        help=_help("strategy") + " (default harl)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                        help=_help("input_shapes") + "; repeat for several inputs")
    parser.add_argument("--trials-per-batch", type=int, default=None,
                        help=_help("trials_per_batch"))
    parser.add_argument("--seed", type=int, default=0, help=_help("seed") + " (default 0)")
    parser.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT",
                        help="measure on the TVM RPC tracker at HOST:PORT "
                             "(default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT)")
    parser.add_argument("--rpc-key", default=None,
                        help="device key of the RPC servers to measure on (default: "
                             "$TVM_TRACKER_KEY; without a key, candidates are timed locally)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", dest="fresh", action="store_false", default=False,
                       help="continue the run already in the work dir (the default)")
    start.add_argument("--fresh", action="store_true", default=False, help=_help("fresh"))
    measure = MeasureConfig()
    parser.add_argument("--build-timeout", type=float, default=measure.build_timeout_s,
                        help=_help("build_timeout_s", MeasureConfig)
                        + f" (default {measure.build_timeout_s:g})")
    parser.add_argument("--run-timeout", type=float, default=measure.run_timeout_s,
                        help=_help("run_timeout_s", MeasureConfig)
                        + f" (default {measure.run_timeout_s:g})")
    parser.add_argument("--no-reference-timing", dest="reference_timing", action="store_false",
                        help=_help("reference_timing", MeasureConfig)
                        + " (on by default; this turns it off)")
    parser.add_argument("--quiet", action="store_true", help=_help("quiet"))
    parser.add_argument("--no-evaluate", dest="evaluate", action="store_false",
                        help="tune only: skip compiling, checking and timing the tuned model")
    parser.add_argument("--no-prior", dest="cost_prior", action="store_false",
                        help=_help("cost_prior") + " (on by default; this turns it off)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return parser


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    from harl.measure.rpc import rpc_config_from

    shapes = dict(parse_input_shape(text) for text in args.input_shape)
    if args.build_timeout <= 0 or args.run_timeout <= 0:
        raise HarlError("--build-timeout and --run-timeout must be positive numbers of seconds")
    measure = MeasureConfig(build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout,
                            reference_timing=args.reference_timing)
    return TuneConfig(model=args.model, target=args.target, trials=args.trials,
                      work_dir=args.work_dir, strategy=args.strategy, input_shapes=shapes,
                      seed=args.seed, quiet=args.quiet, trials_per_batch=args.trials_per_batch,
                      evaluate=args.evaluate, fresh=args.fresh, measure=measure,
                      cost_prior=args.cost_prior,
                      rpc=rpc_config_from(args.rpc_tracker, args.rpc_key))


def resume_command(argv: list[str]) -> str:
    """The command that continues an interrupted run: the same one, without --fresh."""
    return shlex.join(["python", "-m", "harl.tune", *(a for a in argv if a != "--fresh")])


def write_failure(err: OSError) -> str:
    """One line for a file operation that failed (most often a write: a full disk): what, and
    on which file."""
    where = f": {err.filename}" if err.filename else ""
    return f"{err.strerror or err}{where}"


def run_cli(argv: list[str] | None = None) -> int:
    """Parse flags, run, and turn known failures into one line on stderr."""
    from harl.tune import run

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        run(config_from_args(args))
    except HarlError as err:
        if args.debug:
            raise
        print(f"harl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        work_dir = args.work_dir or TuneConfig(model=args.model).resolved_work_dir()
        print(f"\nharl: interrupted; every trial measured so far is kept in {work_dir}; "
              f"resume with: {resume_command(argv)}", file=sys.stderr)
        return 130
    except OSError as err:  # a write that failed: a full disk, a quota, a read-only mount
        if args.debug:
            raise
        work_dir = args.work_dir or TuneConfig(model=args.model).resolved_work_dir()
        print(f"harl: error: {write_failure(err)}; the trials measured before it are kept in "
              f"{work_dir}; resume with: {resume_command(argv)}", file=sys.stderr)
        return 2
    return 0
