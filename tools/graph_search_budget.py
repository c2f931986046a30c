"""Sample efficiency of the graph searches: the best estimated cost against real cost estimates.

    python tools/graph_search_budget.py MODEL.onnx [MODEL.onnx ...]
        [--methods greedy,eqsat,rl,worldmodel,go] [--seeds 0,1,2] [--out logs/graph_budget]
        [--config FILE.toml] [--target T]

Each model is imported and its graph searched as the first search of a `python -m harl.tune
--graph METHOD` run does it (harl.graph.pipeline.GraphStage: its rules, its conv layout pass,
the cost model without a database), each method at its defaults (or FILE.toml's `[graph]`
tables) with its seed (`[graph.rl] seed`, `[graph.worldmodel] seed`, `[graph.eqsat] seed`,
`[graph.go] seed`) set to the run's. A real step is one estimate of a distinct graph (the
searches' CostMemo prices a graph once); after each, the run's curve gets (estimates so far,
best estimated ms so far). One cost model per model and seed is shared by the methods (its
cache saves time, not estimates).
Writes OUT/MODEL/METHOD-seedN.json (the curve and the search's graph.json fields) and
OUT/summary.md: per method, median [min, max] over seeds of the final estimated cut (1 -
best/initial), the real estimates, the search seconds and the estimates needed to reach 90% of
the best cut any method reached on that model and seed (over the seeds where one cut); then
the world model's quality (wm_quality) where it ran.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

from benchlib.curves import CurvePoint, first_reaching, spread  # noqa: E402
from benchlib.machine import header_lines  # noqa: E402
from benchlib.report import markdown_table  # noqa: E402

from harl.errors import HarlError  # noqa: E402

METHODS = ("greedy", "eqsat", "rl", "worldmodel", "go")
SHARE = 0.9
"""the share of the best cut a run must reach to count as having reached it"""


class Recorder:
    """A cost model that records, after each estimate, (estimates so far, best total ms so
    far, seconds since the run began). The searches cost a graph once (CostMemo), so each call
    is one distinct graph; `laid_out` counts the distinct graphs after the conv layout pass."""

    def __init__(self, model) -> None:
        self.model, self.laid_out, self.curve = model, set(), []
        self.best, self.start = math.inf, time.perf_counter()

    def estimate(self, mod):
        import tvm_ffi

        self.laid_out.add(tvm_ffi.structural_hash(mod["main"], map_free_vars=True))
        cost = math.inf
        try:
            result = self.model.estimate(mod)
            cost = result.total_ms
            return result
        finally:  # a failed estimate is a real step too (the search prices it infinite)
            self.best = min(self.best, cost)
            self.curve.append(CurvePoint(len(self.curve) + 1,
                                         time.perf_counter() - self.start, self.best))

    def __getattr__(self, name):
        return getattr(self.model, name)


def int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}"
                                         ) from None


def method_config(graph, method: str, seed: int):
    """The `[graph]` config of a run of `method` with its search seeded by `seed`."""
    seeded = {"rl": {"rl": dataclasses.replace(graph.rl, seed=seed)},
              "worldmodel": {"worldmodel": dataclasses.replace(graph.worldmodel, seed=seed)},
              "eqsat": {"eqsat": dataclasses.replace(graph.eqsat, seed=seed)},
              "go": {"go": dataclasses.replace(graph.go, seed=seed)}}
    return dataclasses.replace(graph, method=method, **seeded.get(method, {}))


def search_model(path: Path, config, methods: list[str], seeds: list[int], out: Path) -> list:
    """Every method and seed searched on the model at `path`; a dict per run."""
    from harl.frontend.onnx_model import import_model, load_onnx
    from harl.graph.pipeline import GraphStage
    from harl.graph.search.common import first_line
    from harl.target import is_gpu, parse_target
    from harl.tvm_env import load_tensor_intrinsics, native_logs_into, quiet_tvm_loggers

    model_dir = out / path.stem
    model_dir.mkdir(parents=True, exist_ok=True)
    quiet_tvm_loggers(model_dir / "tvm.log")
    target = parse_target(config.target)
    load_tensor_intrinsics(target)
    with native_logs_into(model_dir / "tvm.log"):
        _, original = import_model(load_onnx(path, config.input_shapes),
                                   fast_math=not is_gpu(target))
    runs = []
    with tempfile.TemporaryDirectory() as empty:  # a work dir with no database
        for seed in seeds:
            shared = None
            for method in methods:
                stage = GraphStage(method_config(config.graph, method, seed), work_dir=empty,
                                   target=target, model=None, verify=config.verify, seed=seed,
                                   prepack_weights=config.prepack_weights)
                with native_logs_into(model_dir / "tvm.log"):
                    if shared is None:  # loaded and the start priced outside the runs' time
                        shared = stage.first_cost_model()
                        layout = stage.layout  # the run's conv layout pass, or None
                        shared.estimate(original if layout is None else layout(original))
                    recorder = Recorder(shared)
                    try:
                        _, summary = stage.search(original, recorder)
                    except Exception as err:  # noqa: BLE001  (a failed run is a row of data)
                        summary = {"failed": first_line(err)}
                seconds = summary.get("search_seconds", time.perf_counter() - recorder.start)
                first = recorder.curve[0].estimate_ms if recorder.curve else math.nan
                run = {"model": path.stem, "method": method, "seed": seed,
                       "initial_ms": summary.get("estimated_ms_before", first),
                       "best_ms": recorder.best, "estimates": len(recorder.curve),
                       "distinct_laid_out": len(recorder.laid_out),
                       "seconds": round(seconds, 3),
                       "curve": [[p.trials, p.estimate_ms, round(p.seconds, 3)]
                                 for p in recorder.curve],
                       "summary": summary}
                (model_dir / f"{method}-seed{seed}.json").write_text(json.dumps(run, indent=1))
                print(f"{path.stem} seed {seed} {method}: {run['estimates']} estimates, "
                      f"cut {cut(run):.3f} in {seconds:.1f} s"
                      + (f" (failed: {summary['failed']})" if "failed" in summary else ""),
                      flush=True)
                runs.append(run)
    return runs


def cut(run: dict) -> float:
    return 1.0 - run["best_ms"] / run["initial_ms"]


def needed(run: dict, runs: list[dict]) -> int | None | str:
    """Real estimates `run` took to reach SHARE of the best cut of its model and seed (None:
    not reached; "no cut": no method cut the estimate by more than MIN_GAIN on that seed)."""
    from harl.graph.search.common import MIN_GAIN

    cuts = [cut(r) for r in runs if r["seed"] == run["seed"]]
    best = max((c for c in cuts if math.isfinite(c)), default=0.0)
    if best <= MIN_GAIN:
        return "no cut"
    target = run["initial_ms"] * (1.0 - SHARE * best)
    point = first_reaching([CurvePoint(n, s, ms) for n, ms, s in run["curve"]], target)
    return None if point is None else point.trials


def cell(values, form: str = ".3g") -> str:
    s = spread(values)
    if s is None:
        return "n/a"
    if s.low == s.high:
        return f"{s.median:{form}}"
    return f"{s.median:{form}} [{s.low:{form}}, {s.high:{form}}]"


def model_tables(runs: list[dict], methods: list[str]) -> str:
    """The model's sample-efficiency table, and its world-model quality table if any."""
    columns = ("method", "seeds", "estimated cut", "real estimates", "search s",
               f"estimates to {SHARE:.0%} of the best cut (seeds)")
    rows = []
    for method in methods:
        group = [r for r in runs if r["method"] == method]
        reach = [n for n in (needed(r, runs) for r in group) if n != "no cut"]
        got = [n for n in reach if n is not None]
        reached = (f"{cell(got)} ({len(got)}/{len(reach)})" if got
                   else f"not reached (0/{len(reach)})" if reach else "no seed cut")
        rows.append([method, str(len(group)), cell([cut(r) for r in group], ".2%"),
                     cell([r["estimates"] for r in group]),
                     cell([r["seconds"] for r in group]), reached])
    text = markdown_table(columns, rows)
    quality = [r["summary"]["wm_quality"] for r in runs if r["summary"].get("wm_quality")]
    if quality:
        keys = sorted({key for q in quality for key in q})
        text += "\n\nworld model quality (held-out real transitions), median [min, max]:\n\n"
        text += markdown_table(("metric", "value"),
                               [[key, cell([q.get(key) for q in quality])] for key in keys])
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/graph_search_budget.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="ONNX models")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated graph searches ({', '.join(METHODS)})")
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2],
                        help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--out", type=Path, default=Path("logs/graph_budget"),
                        help="where the curves and summary.md go (logs/graph_budget)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                        help="a harl.tune config file: its [graph] tables set the searches")
    parser.add_argument("--target", default=None, help="as harl.tune's (default: this CPU)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    try:
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise HarlError(f"--methods: one or more of {', '.join(METHODS)}, got {args.methods}")
        missing = [str(p) for p in args.models if not p.is_file()]
        if missing:
            raise HarlError(f"no such model: {', '.join(missing)}")
        from harl.config_file import effective_config
        from harl.measure.threads import use_physical_cores

        use_physical_cores()  # as a tuning run, before any kernel runs here
        flags = {"target": args.target} if args.target else {}
        configs = [effective_config(p, args.config, flags) for p in args.models]
    except (HarlError, ValueError) as err:
        print(f"graph_search_budget: {err}", file=sys.stderr)
        return 2
    header = header_lines(argv)
    header[0] = "command: " + shlex.join(["python", "tools/graph_search_budget.py", *argv])
    print("\n".join(header), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    sections = []
    for path, config in zip(args.models, configs, strict=True):
        start = time.perf_counter()
        runs = search_model(path, config, methods, args.seeds, args.out)
        section = (f"## {path.stem} ({path}, {time.perf_counter() - start:.0f} s)\n\n"
                   + model_tables(runs, methods))
        print("\n" + section + "\n", flush=True)
        sections.append(section)
        (args.out / "summary.md").write_text("\n".join(f"- {line}" for line in header)
                                             + "\n\n" + "\n\n".join(sections) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
