"""Does a model tune faster because other models were tuned before? The store (harl.store) on
models it has never seen.

    python tools/store_transfer.py --warm MODEL [MODEL ...] --held-out MODEL [MODEL ...]
        [--trials 64] [--warm-trials 128] [--seeds 0,1,2] [--out logs/store_transfer]
        [--warm-config FILE.toml --warm-name NAME]

1. tunes each --warm model once (seed 0, --warm-trials) into a store, OUT/store: what a user's
   earlier runs leave behind;
2. tunes each --held-out model once per seed with an empty store (cold: harl's shipped prior
   only) and once with a copy of OUT/store (warm; the copy keeps runs of one model from
   teaching the next), both at --trials;
3. writes OUT/summary-WARM_NAME.md: per held-out model and seed, the cold run's final
   end-to-end estimate (history.csv, benchlib.curves), the trials the warm run needed to reach
   it (as a share of the budget), the trials the cold run needed to reach its own final, the
   warm run's final, which prior ranked the warm run's samples, the store's held-out check, and
   the cores other processes kept busy while each run measured (report.json; above a quarter,
   noise).

Finished runs are reused (their report.json), so an interrupted bench picks up where it stopped.
Time the final builds together with `python tools/compare_work_dirs.py MODEL OUT/cold/...
OUT/warm/...`.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

from benchlib.curves import first_reaching, spread  # noqa: E402
from benchlib.machine import ROOT, header_lines  # noqa: E402
from benchlib.models import resolve_model  # noqa: E402
from benchlib.report import markdown_table  # noqa: E402
from benchlib.runs import RunResult, RunSpec, run_tuning  # noqa: E402


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", nargs="+", required=True, metavar="MODEL",
                        help="models tuned first, into the store (paths or bench specs)")
    parser.add_argument("--held-out", nargs="+", required=True, metavar="MODEL",
                        help="models tuned cold and warm; none may be a --warm model")
    parser.add_argument("--trials", type=int, default=64, help="budget of each held-out run")
    parser.add_argument("--warm-trials", type=int, default=128, help="budget of each warm run")
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "store_transfer")
    parser.add_argument("--warm-config", type=Path, default=None, metavar="FILE.toml",
                        help="harl.tune --config for the warm runs of the held-out models (e.g. "
                             "[store] use = \"always\": the store's cost model whatever its "
                             "check says)")
    parser.add_argument("--warm-name", default="warm",
                        help="the warm arm's folder in OUT: another name keeps another arm's "
                             "runs, and the cold runs are reused")
    return parser


def tune(model: Path, out: Path, *, trials: int, seed: int, store: Path,
         config: Path | None = None) -> RunResult:
    """One harl run (reused when finished) with `store` (and `config`); exits on a failed run."""
    extra = ("--config", str(config)) if config is not None else ()
    result = run_tuning(RunSpec(model, model.stem, "harl", trials, seed), out, resume=True,
                        store=store, extra_args=extra)
    print(f"  {out.name}/{model.stem} s{seed}: exit {result.exit_code}, "
          f"{result.report.get('trials_done', 0)} trials", flush=True)
    if not result.ok:
        raise SystemExit(f"run failed: see {result.work_dir}/tune_output.txt")
    return result


def store_check(store: Path) -> dict:
    """The held-out check of the store's last trained cost model (prior.json), if any."""
    found = sorted(store.glob("*/prior.json"))
    return json.loads(found[0].read_text()) if found else {}


def compare(cold: RunResult, warm: RunResult, trials: int, store: Path) -> dict:
    """The row of one held-out model and seed (`store`: the warm run's)."""
    target = cold.final_estimate_ms
    reached = first_reaching(warm.curve, target) if target is not None else None
    own = first_reaching(cold.curve, target) if target is not None else None
    return {"model": cold.spec.label, "seed": cold.spec.seed, "cold_ms": target,
            "warm_ms": warm.final_estimate_ms,
            "warm_trials": reached.trials if reached else None,
            "cold_trials": own.trials if own else None,
            "share": reached.trials / trials if reached else None,
            "prior": warm.report.get("cost_prior_source"), "check": store_check(store),
            "others": (cold.report.get("measure_other_cores"),
                       warm.report.get("measure_other_cores"))}


def _fmt(value, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def summary(rows: list[dict], header: list[str], trials: int) -> str:
    table = [[r["model"], str(r["seed"]), _fmt(r["cold_ms"]), _fmt(r["warm_ms"]),
              _fmt(r["warm_trials"], "{}"), _fmt(r["share"], "{:.2f}"),
              _fmt(r["cold_trials"], "{}"), r["prior"] or "none",
              _fmt(r["check"].get("held_out_rho"), "{}") + " / "
              + _fmt(r["check"].get("shipped_rho"), "{}"),
              ", ".join(_fmt(x, "{:.2f}") for x in r.get("others", (None, None)))]
             for r in rows]
    shares = sorted(r["share"] if r["share"] is not None else math.inf for r in rows)
    ratios = spread(r["warm_ms"] / r["cold_ms"] for r in rows if r["warm_ms"] and r["cold_ms"])
    lines = ["# The store on models it has never seen", "", "```", *header, "```", "",
             markdown_table(["model", "seed", "cold final est. ms", "warm final est. ms",
                             "warm trials to cold final", "share of budget",
                             "cold trials to its final", "warm run's prior",
                             "store rho / shipped rho",
                             "other cores while measuring (cold, warm)"], table), ""]
    if shares:
        reached = sum(r["share"] is not None for r in rows)
        lines.append(f"- warm runs reaching the cold run's final: {reached} of {len(rows)}; "
                     f"median share of the {trials}-trial budget "
                     f"{statistics.median(shares):.2f} [{shares[0]:.2f}, {shares[-1]:.2f}] "
                     "(inf: never reached)")
    if ratios:
        lines.append(f"- warm final / cold final (estimates): median {ratios.median:.3f} "
                     f"[{ratios.low:.3f}, {ratios.high:.3f}]")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warm_models = [resolve_model(spec) for spec in args.warm]
    held_out = [resolve_model(spec) for spec in args.held_out]
    if {m.stem for m in warm_models} & {m.stem for m in held_out}:
        raise SystemExit("a held-out model is also a --warm model")
    out, store = args.out, args.out / "store"
    print(f"warming the store with {len(warm_models)} models ...", flush=True)
    for model in warm_models:
        tune(model, out / "warm-runs", trials=args.warm_trials, seed=0, store=store)
    rows = []
    for model in held_out:
        for seed in args.seeds:
            empty = out / "stores" / f"cold-{model.stem}-s{seed}"
            cold = tune(model, out / "cold", trials=args.trials, seed=seed, store=empty)
            copy = out / "stores" / f"{args.warm_name}-t{args.trials}-s{seed}-{model.stem}"
            if not (out / args.warm_name / model.stem / f"harl-t{args.trials}-s{seed}"
                    / "report.json").is_file():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(store, copy)
            warm = tune(model, out / args.warm_name, trials=args.trials, seed=seed, store=copy,
                        config=args.warm_config)
            rows.append(compare(cold, warm, args.trials, copy))
    command = "python tools/store_transfer.py " + shlex.join(argv if argv is not None
                                                             else sys.argv[1:])
    header = [command, *header_lines([])[1:]]
    text = summary(rows, header, args.trials)
    (out / f"summary-{args.warm_name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
