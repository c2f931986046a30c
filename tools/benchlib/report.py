"""runs.csv (one row per run) and summary.md (per model and budget, medians over seeds).

Ratios pair each run with the baseline arm's run of the same model, budget and seed
(metaschedule by default; harl for an ablation without it)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.curves import Spread, first_reaching, spread
from benchlib.openvino_runner import OPENVINO
from benchlib.runs import RunResult
from benchlib.timing import ONNXRUNTIME, UNTUNED
from harl.config_file import toml_value
from harl.measure.cpu_load import worth_saying

BASELINE = "metaschedule"
"""the arm ratios are taken against unless a caller names another"""


def run_columns(baseline: str = BASELINE) -> tuple[str, ...]:
    """runs.csv's header: `arm` names the run's arm, `strategy` its harl.tune --strategy."""
    return ("model", "arm", "strategy", "trials", "seed", "exit_code", "tune_wall_s",
            "process_wall_s", "trials_done", "final_estimate_ms", "latency_ms",
            "latency_ms_per_process", f"vs_{baseline}", "vs_onnxruntime", "vs_openvino",
            "vs_untuned", "verified", "max_abs_err", "build_s_per_trial", "run_s_per_trial",
            "search_s_per_trial", "agents_s_per_trial", "cost_model_training_s_per_trial",
            "measure_other_cores", "work_dir")


def agent_split(run: RunResult) -> tuple[float, float] | None:
    """harl's seconds per trial in its agents (allocator, search with the cost model's
    predictions) and in cost-model training, from report.json; None for other strategies."""
    seconds = run.report.get("agent_seconds") or {}
    trials = run.report.get("trials_done", 0) - run.report.get("trials_resumed", 0)
    if not seconds or trials <= 0:
        return None
    training = seconds.get("cost_model/update_seconds", 0.0)
    agents = sum(v for k, v in seconds.items() if k.endswith("agent_seconds"))
    return agents / trials, training / trials


def baseline_of(run: RunResult, runs: Sequence[RunResult],
                baseline: str = BASELINE) -> RunResult | None:
    """The baseline arm's run with the same model, budget and seed."""
    for other in runs:
        s, o = run.spec, other.spec
        if (o.arm == baseline and o.label == s.label and o.trials == s.trials
                and o.seed == s.seed):
            return other
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def vs_baseline(run: RunResult, runs: Sequence[RunResult],
                baseline: str = BASELINE) -> float | None:
    """The run's latency over its baseline twin's (same model, budget and seed)."""
    base = baseline_of(run, runs, baseline)
    return ratio(run.latency_ms, base.latency_ms if base else None)


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def write_runs_csv(path: Path, runs: Sequence[RunResult],
                   references: dict[str, dict[str, float]], baseline: str = BASELINE) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(run_columns(baseline))
        for run in runs:
            refs = references.get(run.spec.label, {})
            cost, split = run.cost, agent_split(run)
            writer.writerow([_fmt(v) for v in (
                run.spec.label, run.spec.arm, run.spec.strategy, run.spec.trials, run.spec.seed,
                run.exit_code, run.report.get("tune_seconds"), run.process_s,
                run.report.get("trials_done"), run.final_estimate_ms, run.latency_ms,
                " ".join(_fmt(v) for v in run.latencies_ms), vs_baseline(run, runs, baseline),
                ratio(run.latency_ms, refs.get(ONNXRUNTIME)),
                ratio(run.latency_ms, refs.get(OPENVINO)), ratio(run.latency_ms, refs.get(UNTUNED)),
                run.verified, run.max_abs_err,
                cost.build_s if cost else None, cost.run_s if cost else None,
                cost.search_s if cost else None, split[0] if split else None,
                split[1] if split else None, run.report.get("measure_other_cores"),
                str(run.work_dir))])


@dataclass(frozen=True)
class Reach:
    """How many seeds' runs reached the baseline's final estimate, and when (median over those)."""

    reached: int
    seeds: int
    trials: Spread | None
    seconds: Spread | None


def _reach(targets: Iterable[tuple[RunResult, float]]) -> Reach:
    """Per (run, target estimate in ms): when the run's estimate curve first reaches it."""
    points, seeds = [], 0
    for run, target_ms in targets:
        seeds += 1
        point = first_reaching(run.curve, target_ms)
        if point is not None:
            points.append(point)
    return Reach(len(points), seeds, spread(p.trials for p in points),
                 spread(p.seconds for p in points))


def reach_baseline(group: Sequence[RunResult], runs: Sequence[RunResult],
                   baseline: str = BASELINE) -> Reach:
    """Trials and tuning seconds each run needs to reach its baseline twin's final estimate."""
    bases = ((run, baseline_of(run, runs, baseline)) for run in group)
    return _reach((run, base.final_estimate_ms) for run, base in bases
                  if base is not None and base.final_estimate_ms is not None and run.curve)


def reach_reference(group: Sequence[RunResult], reference_ms: float | None) -> Reach:
    """Trials and tuning seconds until each run's estimate, scaled to its timed build (times
    latency / final estimate: the share outside the tuned kernels held at the final's), first
    reaches a reference runtime's latency such as onnxruntime's."""
    if reference_ms is None:
        return _reach(())
    return _reach((run, reference_ms * run.final_estimate_ms / run.latency_ms) for run in group
                  if run.curve and run.latency_ms and run.final_estimate_ms)


def _spread_text(s: Spread | None, form: str = ".3g", suffix: str = "") -> str:
    if s is None:
        return "n/a"
    if s.n == 1 or s.low == s.high:
        return f"{s.median:{form}}{suffix}"
    return f"{s.median:{form}}{suffix} [{s.low:{form}}, {s.high:{form}}]"


def _reach_text(reach: Reach, which: str) -> str:
    if reach.seeds == 0:
        return "n/a"
    if reach.reached == 0:
        return f"not reached (0/{reach.seeds})"
    value = reach.trials if which == "trials" else reach.seconds
    return f"{_spread_text(value)} ({reach.reached}/{reach.seeds})"


def timed_openvino(references: dict[str, dict[str, float]]) -> bool:
    """Whether OpenVINO was timed for some model (installed, and its outputs matched)."""
    return any(OPENVINO in refs for refs in references.values())


def summary_columns(baseline: str = BASELINE, openvino: bool = False) -> tuple[str, ...]:
    """summary.md's table header; `openvino` adds "tuned / openvino" (see `timed_openvino`)."""
    return ("model", "trials", "arm", f"latency / {baseline}", f"trials to {baseline}'s final",
            f"tuning s to {baseline}'s final", "tuned / onnxruntime",
            *(("tuned / openvino",) if openvino else ()), "trials to onnxruntime",
            "tuning wall s",
            "per trial s: build / run / search+cost model (harl: agents, cost-model training)")


def _groups(runs: Sequence[RunResult],
            baseline: str) -> list[tuple[tuple[str, int, str], list[RunResult]]]:
    """The runs by model, budget and arm (the baseline first among a budget's arms)."""
    keys = sorted({(r.spec.label, r.spec.trials, r.spec.arm) for r in runs},
                  key=lambda k: (k[0], k[1], k[2] != baseline, k[2]))
    return [(key, [r for r in runs if (r.spec.label, r.spec.trials, r.spec.arm) == key])
            for key in keys]


def summary_rows(runs: Sequence[RunResult], references: dict[str, dict[str, float]],
                 baseline: str = BASELINE) -> list[list[str]]:
    """One row per model x budget x arm; cells are medians over seeds [min, max]. A
    "tuned / openvino" cell follows "tuned / onnxruntime" where OpenVINO was timed for some
    model (`n/a` for a model it was not timed for)."""
    rows, openvino = [], timed_openvino(references)
    for (label, trials, arm), group in _groups(runs, baseline):
        ort = references.get(label, {}).get(ONNXRUNTIME)
        ov = references.get(label, {}).get(OPENVINO)
        reach = reach_baseline(group, runs, baseline)
        costs = [r.cost for r in group if r.cost is not None]
        cost_text = "n/a" if not costs else " / ".join(
            f"{spread(getattr(c, part) for c in costs).median:.3g}"
            for part in ("build_s", "run_s", "search_s"))
        splits = [split for r in group if (split := agent_split(r)) is not None]
        if costs and splits:
            cost_text += (f" (agents {spread(a for a, _ in splits).median:.3g}, "
                          f"training {spread(t for _, t in splits).median:.3g})")
        failed = [r for r in group if r.exit_code != 0]
        arm_text = arm + (f" ({len(failed)} of {len(group)} runs failed)" if failed else "")
        rows.append([
            label, str(trials), arm_text,
            _spread_text(spread(vs_baseline(r, runs, baseline) for r in group), ".2f", "x"),
            _reach_text(reach, "trials"), _reach_text(reach, "seconds"),
            _spread_text(spread(ratio(r.latency_ms, ort) for r in group), ".2f", "x"),
            *([_spread_text(spread(ratio(r.latency_ms, ov) for r in group), ".2f", "x")]
              if openvino else []),
            _reach_text(reach_reference(group, ort), "trials"),
            _spread_text(spread(r.report.get("tune_seconds") for r in group)),
            cost_text,
        ])
    return rows


def paired_columns(baseline: str = BASELINE) -> tuple[str, ...]:
    return ("model", "trials", "arm", "pairs", f"latency / {baseline}: median", "min", "max",
            f"faster than {baseline}")


def paired_rows(runs: Sequence[RunResult], baseline: str = BASELINE) -> list[list[str]]:
    """Per model x budget x arm other than the baseline: over the seeds both tuned and timed,
    arm latency / baseline latency of the same seed (median, min, max), the number of such
    pairs and in how many the arm was faster."""
    rows = []
    for (label, trials, arm), group in _groups(runs, baseline):
        if arm == baseline:
            continue
        ratios = [r for r in (vs_baseline(run, runs, baseline) for run in group)
                  if r is not None]
        s = spread(ratios)
        cells = ["n/a"] * 3 if s is None else [f"{v:.3f}" for v in (s.median, s.low, s.high)]
        faster = f"{sum(r < 1 for r in ratios)}/{s.n}" if s else "n/a"
        rows.append([label, str(trials), arm, str(s.n if s else 0), *cells, faster])
    return rows


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_summary(path: Path, header: Sequence[str], runs: Sequence[RunResult],
                  references: dict[str, dict[str, float]], plots: Sequence[Path],
                  baseline: str = BASELINE) -> str:
    """summary.md; returns its text."""
    seeds = sorted({r.spec.seed for r in runs})
    arms = {r.spec.arm: r.spec.arm_spec for r in runs}
    parts = ["# harl benchmark", "", "```", *header, "```", "",
             f"Seeds {', '.join(map(str, seeds))}. Cells are the median over seeds, "
             "[min, max] when they differ. Latencies: each of several fresh processes per model "
             "compiles every run's database and times all builds, untuned TVM, onnxruntime "
             "and, where installed, OpenVINO (CPU, fp32, TVM's thread count) round-robin; a "
             "build's latency is the median over processes of its per-process medians "
             "(runs.csv lists them); only ratios are compared. "
             f"\"to {baseline}'s final\": trials and tuning seconds until a run's end-to-end "
             "estimate (weighted sum of the best measured task latencies, counted once every "
             f"task is measured) first reaches the final estimate of the {baseline} run with "
             "the same budget and seed, with the number of seeds that reached it; for "
             f"{baseline} itself, when it reached its own final. \"trials to onnxruntime\": "
             "trials until a run's estimate, scaled by its timed latency over its final "
             "estimate, first reaches onnxruntime's latency. Per-trial seconds: the loop's "
             "wall time per measured trial, split into building, running (measuring) and the "
             "rest (search strategy, cost model, scheduler). Arms:", "",
             *(f"- {name}: `--strategy {arm.strategy}`"
               + (", " + ", ".join(f"`{key} = {toml_value(value)}`"
                                   for key, value in arm.settings.items())
                  if arm.settings else "") for name, arm in arms.items()), "",
             markdown_table(summary_columns(baseline, timed_openvino(references)),
                            summary_rows(runs, references, baseline)),
             ""]
    for label, refs in references.items():
        verified = [r for r in runs if r.spec.label == label and r.verified is not None]
        bad = [r.work_dir.name for r in verified if not r.verified]
        openvino = (f"openvino {refs[OPENVINO]:.4g} ms, " if OPENVINO in refs
                    else "openvino not timed, " if timed_openvino(references) else "")
        parts.append(f"- {label}: same-process medians onnxruntime {refs[ONNXRUNTIME]:.4g} ms, "
                     f"{openvino}untuned TVM {refs[UNTUNED]:.4g} ms; outputs of "
                     f"{len(verified) - len(bad)}/{len(verified)} tuned builds match onnxruntime"
                     + (f" (mismatch: {', '.join(bad)})" if bad else ""))
    for run in [r for r in runs if worth_saying(r.report.get("measure_other_cores"))]:
        parts.append(f"- run {run.spec.label}/{run.work_dir.name} measured its candidates while "
                     f"other processes or the host kept {run.report['measure_other_cores']:.2f} "
                     "cores busy on average: its tuning may have chosen on timings that were off")
    failed = [r for r in runs if r.exit_code != 0]
    for run in failed:
        parts.append(f"- run {run.spec.label}/{run.work_dir.name} exited {run.exit_code}; "
                     f"see {run.work_dir / 'tune_output.txt'}")
    paired = paired_rows(runs, baseline)
    if paired:
        parts += ["", f"## Each arm against {baseline}, seed by seed", "",
                  f"Per model and budget: an arm's latency over that of the {baseline} run of "
                  "the same seed, over the seeds where both were tuned and timed (pairs), and "
                  f"in how many the arm was faster than {baseline}.", "",
                  markdown_table(paired_columns(baseline), paired)]
    if plots:
        parts += ["", *(f"![{p.stem}]({p.name})" for p in plots)]
    text = "\n".join(parts) + "\n"
    path.write_text(text)
    return text
