"""Command-line front end of `python -m harl.tune`: flags, and errors as one plain line."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from harl.config import TuneConfig
from harl.errors import HarlError
from harl.frontend.onnx_model import parse_input_shape
from harl.search import STRATEGIES


def _help(name: str) -> str:
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(TuneConfig)}[name]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harl.tune",
        description="Tune an ONNX model with TVM, verify it against onnxruntime, and report.")
    parser.add_argument("model", type=Path, help=_help("model"))
    parser.add_argument("--target", default=None, help=_help("target"))
    parser.add_argument("--trials", type=int, default=64, help=_help("trials") + " (default 64)")
    parser.add_argument("--work-dir", type=Path, default=None, help=_help("work_dir"))
    parser.add_argument("--strategy", default="metaschedule", choices=list(STRATEGIES),
                        help=_help("strategy") + " (default metaschedule)")
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
    parser.add_argument("--quiet", action="store_true", help=_help("quiet"))
    parser.add_argument("--no-evaluate", dest="evaluate", action="store_false",
                        help="tune only: skip compiling, checking and timing the tuned model")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return parser


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    from harl.measure.rpc import rpc_config_from

    shapes = dict(parse_input_shape(text) for text in args.input_shape)
    return TuneConfig(model=args.model, target=args.target, trials=args.trials,
                      work_dir=args.work_dir, strategy=args.strategy, input_shapes=shapes,
                      seed=args.seed, quiet=args.quiet, trials_per_batch=args.trials_per_batch,
                      evaluate=args.evaluate,
                      rpc=rpc_config_from(args.rpc_tracker, args.rpc_key))


def run_cli(argv: list[str] | None = None) -> int:
    """Parse flags, run, and turn known failures into one line on stderr."""
    from harl.tune import run

    args = build_parser().parse_args(argv)
    try:
        run(config_from_args(args))
    except HarlError as err:
        if args.debug:
            raise
        print(f"harl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("\nharl: interrupted; trials measured so far are in the work dir's database",
              file=sys.stderr)
        return 130
    return 0
