"""Command-line flags of `python -m harl.tune`, and the command that resumes a run."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path

from harl.config import MeasureConfig, StoreConfig, TuneConfig
from harl.errors import HarlError
from harl.frontend.onnx_model import parse_input_shape
from harl.search import STRATEGIES

PRECEDENCE = ("Settings come from the defaults, then a --config file, then the flags given here: "
              "each wins over the one before. --print-config shows the result.")


def _help(name: str, config=TuneConfig) -> str:
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(config)}[name]


def build_parser() -> argparse.ArgumentParser:
    """The flags; those that set a config field default to None (not given: the config file's
    value, else the field's default)."""
    from harl.graph.config import METHODS

    parser = argparse.ArgumentParser(
        prog="python -m harl.tune",
        description="Tune an ONNX model with TVM, verify it against onnxruntime, and report. "
                    + PRECEDENCE)
    parser.add_argument("model", type=Path, nargs="?", default=None,
                        help=_help("model") + " (not needed with --print-config)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                        help="set any field of the run's configs from this TOML file, one table "
                             "per config ([measure], [allocator], [search.tile.policy], ...); "
                             "flags given here win over it")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective config (defaults, --config file and flags "
                             "merged) as TOML, each field under its help, and exit")
    parser.add_argument("--target", default=None, help=_help("target"))
    parser.add_argument("--trials", type=int, default=None,
                        help=_help("trials") + " (default 64)")
    parser.add_argument("--work-dir", type=Path, default=None, help=_help("work_dir"))
    parser.add_argument("--strategy", default=None, choices=list(STRATEGIES),
                        help=_help("strategy") + " (default harl)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                        help=_help("input_shapes") + "; repeat for several inputs")
    parser.add_argument("--trials-per-batch", type=int, default=None,
                        help=_help("trials_per_batch"))
    parser.add_argument("--seed", type=int, default=None, help=_help("seed") + " (default 0)")
    parser.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT",
                        help="measure on the TVM RPC tracker at HOST:PORT "
                             "(default: the config file's [rpc], else "
                             "$TVM_TRACKER_HOST:$TVM_TRACKER_PORT)")
    parser.add_argument("--rpc-key", default=None,
                        help="device key of the RPC servers to measure on (default: the config "
                             "file's [rpc], else $TVM_TRACKER_KEY; without a key, candidates are "
                             "timed locally)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", dest="fresh", action="store_false", default=False,
                       help="continue the run already in the work dir (the default)")
    start.add_argument("--fresh", action="store_true", default=False, help=_help("fresh"))
    parser.add_argument("--config-changed-ok", action="store_true",
                        help=_help("config_changed_ok") + " (by default such a resume is refused)")
    measure = MeasureConfig()
    parser.add_argument("--build-timeout", type=float, default=None,
                        help=_help("build_timeout_s", MeasureConfig)
                        + f" (default {measure.build_timeout_s:g})")
    parser.add_argument("--run-timeout", type=float, default=None,
                        help=_help("run_timeout_s", MeasureConfig)
                        + f" (default {measure.run_timeout_s:g})")
    parser.add_argument("--no-reference-timing", dest="reference_timing", action="store_false",
                        default=None, help=_help("reference_timing", MeasureConfig)
                        + " (on by default; this turns it off)")
    parser.add_argument("--quiet", action="store_true", default=None, help=_help("quiet"))
    parser.add_argument("--no-evaluate", dest="evaluate", action="store_false", default=None,
                        help="tune only: skip compiling, checking and timing the tuned model")
    parser.add_argument("--no-prior", dest="cost_prior", action="store_false", default=None,
                        help=_help("cost_prior") + " (on by default; this turns it off)")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--store", type=Path, default=None, metavar="DIR",
                       help=_help("path", StoreConfig))
    store.add_argument("--no-store", dest="store_enabled", action="store_false", default=None,
                       help="neither learn from earlier runs' measurements nor keep this run's "
                            "([store] in a config file sets its limits)")
    parser.add_argument("--graph", default=None, choices=METHODS,
                        help="search rewrites of the model's graph before tuning its tasks "
                             "(greedy: the best rewrite while the estimated latency drops; "
                             "eqsat: equality saturation guided by MCTS; rl: a graph neural "
                             "network policy fine-tuned with PPO; worldmodel: that policy "
                             "trained in a world model of the rewards; go: a policy with "
                             "segment attention that takes or skips every rule match at once, "
                             "trained across graphs), again with the tuned "
                             "latencies before the last share of the trials; [graph] in a "
                             "config file sets its limits (default off)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return parser


# flag (argparse dest) -> the config field it sets, as a path of table names and a key
FLAG_FIELDS = {
    "target": ("target",), "trials": ("trials",), "work_dir": ("work_dir",),
    "strategy": ("strategy",), "trials_per_batch": ("trials_per_batch",), "seed": ("seed",),
    "quiet": ("quiet",), "evaluate": ("evaluate",), "cost_prior": ("cost_prior",),
    "build_timeout": ("measure", "build_timeout_s"), "run_timeout": ("measure", "run_timeout_s"),
    "reference_timing": ("measure", "reference_timing"), "graph": ("graph", "method"),
    "store": ("store", "path"), "store_enabled": ("store", "enabled"),
}


def flag_values(args: argparse.Namespace, file_sets_rpc: bool = False) -> dict:
    """The config values the flags given set, shaped like a config file's tables."""
    from harl.config_file import to_dict
    from harl.measure.rpc import rpc_config_from

    values: dict = {"fresh": args.fresh, "config_changed_ok": args.config_changed_ok}
    for dest, path in FLAG_FIELDS.items():
        value = getattr(args, dest)
        if value is not None:
            table = values
            for name in path[:-1]:
                table = table.setdefault(name, {})
            table[path[-1]] = str(value) if isinstance(value, Path) else value
    if args.input_shape:
        values["input_shapes"] = {name: list(shape) for name, shape in
                                  (parse_input_shape(text) for text in args.input_shape)}
    if args.rpc_tracker or args.rpc_key or not file_sets_rpc:  # the environment: below the file
        rpc = rpc_config_from(args.rpc_tracker, args.rpc_key)
        if rpc is not None:
            values["rpc"] = to_dict(rpc)
    return values


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    """The run's config: the defaults, then `args.config`'s file, then the flags given."""
    from harl.config_file import effective_config, read_config_file

    file_sets_rpc = args.config is not None and "rpc" in read_config_file(args.config)
    model = args.model if args.model is not None else Path("MODEL.onnx")
    config = effective_config(model, args.config, flag_values(args, file_sets_rpc))
    if config.measure.build_timeout_s <= 0 or config.measure.run_timeout_s <= 0:
        raise HarlError("--build-timeout and --run-timeout (measure.build_timeout_s and "
                        "measure.run_timeout_s) must be positive numbers of seconds")
    return config


def resume_command(argv: list[str]) -> str:
    """The command that continues an interrupted run: the same one, without --fresh."""
    return shlex.join(["python", "-m", "harl.tune", *(a for a in argv if a != "--fresh")])


def write_failure(err: OSError) -> str:
    """One line for a file operation that failed (most often a write: a full disk): what, and
    on which file."""
    where = f": {err.filename}" if err.filename else ""
    return f"{err.strerror or err}{where}"
