"""One PNG per model: best end-to-end estimate against trials and against tuning seconds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchlib.curves import band
from benchlib.runs import RunResult

COLORS = {"metaschedule": "tab:blue", "harl": "tab:red"}
LINESTYLES = ("-", "--", ":", "-.")


def plot_model(path: Path, label: str, runs: Sequence[RunResult]) -> Path:
    """Median over seeds as a line, min..max shaded; one line per arm and budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    budgets = sorted({r.spec.trials for r in runs})
    arms = sorted({r.spec.arm for r in runs})
    figure, (by_trials, by_seconds) = plt.subplots(1, 2, figsize=(12, 4.5))
    extra = plt.rcParams["axes.prop_cycle"].by_key()["color"][2:]
    others = [arm for arm in arms if arm not in COLORS]
    for arm in arms:
        # More arms than colors (an ablation has a dozen): a repeated color gets another style.
        place = others.index(arm) if arm in others else 0
        color, shift = COLORS.get(arm) or extra[place % len(extra)], place // len(extra)
        for index, budget in enumerate(budgets):
            curves = [r.curve for r in runs
                      if r.spec.arm == arm and r.spec.trials == budget and r.curve]
            if not curves:
                continue
            name = f"{arm}, {budget} trials ({len(curves)} seed{'s' * (len(curves) > 1)})"
            style = LINESTYLES[(index + shift) % len(LINESTYLES)]
            for axis, by in ((by_trials, "trials"), (by_seconds, "seconds")):
                # Every x where some seed's best changes, so that steps are exact.
                grid = sorted({getattr(point, by) for curve in curves for point in curve})
                median, low, high = band(curves, grid, by)
                axis.plot(grid, median, color=color, linestyle=style, label=name,
                          drawstyle="steps-post", marker="o" if len(grid) <= 40 else None,
                          markersize=3)
                axis.fill_between(grid, low, high, color=color, alpha=0.15, step="post")
    for axis, xlabel in ((by_trials, "trials measured"),
                         (by_seconds, "tuning wall time (s)")):
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:.3g}"))
        axis.yaxis.set_minor_formatter(FuncFormatter(lambda y, _pos: f"{y:.3g}"))
        axis.set_xlabel(xlabel)
        axis.set_ylabel("best end-to-end estimate (ms, log)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"{label}: best end-to-end latency estimate while tuning, from the trial "
                    "at which every task is measured (median over seeds, min..max shaded)",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
