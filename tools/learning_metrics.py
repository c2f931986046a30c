"""Is each level of harl learning? A summary of the agents' metrics.jsonl in each work dir.

    python tools/learning_metrics.py WORK_DIR [WORK_DIR ...] [--json]

Per work dir: the tile tuner's PPO updates (how many, and the median of each loss and statistic
over the first and the last third of them); the allocator's Spearman rank correlation between the
value it gave the task it chose and that batch's realised reward, and the share of positive
rewards; the sketch chooser's rank correlation between each sketch's value and what its
candidates realised; the cost model's trust early and late. A level without metrics (an arm
without that agent, a metaschedule run) reads n/a.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

PPO_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "explained_variance",
            "clip_fraction")
"""the tile policy's statistics of one PPO update, recorded as tile/<key>"""


def read_metrics(path: Path) -> list[dict]:
    """The lines of a metrics.jsonl (none if it is absent); a line cut short is skipped."""
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            continue  # the run was killed while writing it
        if isinstance(line, dict):
            lines.append(line)
    return lines


def _number(value: object) -> float | None:
    """A finite number, or None (metrics write NaN as null)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def series(lines: list[dict], key: str) -> list[float]:
    """The key's finite values in the order they were written."""
    return [v for line in lines if (v := _number(line.get(key))) is not None]


def thirds(values: list[float]) -> dict | None:
    """n and the medians of the first and the last third of `values` (None when empty)."""
    if not values:
        return None
    k = max(1, len(values) // 3)
    return {"n": len(values), "first": statistics.median(values[:k]),
            "last": statistics.median(values[-k:])}


def spearman(pairs: list[tuple[float, float]]) -> dict | None:
    """n and Spearman's rho of (prediction, outcome) pairs; rho None below 3 pairs or when
    either side is constant (rank correlation is undefined then)."""
    if not pairs:
        return None
    xs, ys = zip(*pairs, strict=True)
    rho = None
    if len(pairs) >= 3 and len(set(xs)) > 1 and len(set(ys)) > 1:
        from scipy.stats import spearmanr

        rho = float(spearmanr(xs, ys).statistic)
    return {"n": len(pairs), "rho": rho}


def _pairs(lines: list[dict], x_key: str, y_key: str) -> list[tuple[float, float]]:
    return [(x, y) for line in lines if (x := _number(line.get(x_key))) is not None
            and (y := _number(line.get(y_key))) is not None]


def summarise(lines: list[dict]) -> dict:
    """What each level's metrics say of its learning; None where a level wrote none."""
    sketch_pairs = []
    for line in lines:
        for key in line:
            if key.startswith("sketch/value_") and key.removeprefix("sketch/value_").isdigit():
                sketch_pairs += _pairs([line], key, key.replace("/value_", "/realised_"))
    rewards = series(lines, "alloc/reward")
    return {
        "lines": len(lines),
        "tile_ppo": {"updates": len(series(lines, "tile/policy_loss")),
                     **{key: thirds(series(lines, f"tile/{key}")) for key in PPO_KEYS}},
        "allocator": {
            "value_vs_reward": spearman(_pairs(lines, "alloc/chosen_value", "alloc/reward")),
            "reward_positive": {"n": len(rewards), "share": sum(r > 0 for r in rewards)
                                / len(rewards)} if rewards else None},
        "sketch": {"value_vs_realised": spearman(sketch_pairs)},
        "cost_model": {"model_trust": thirds(series(lines, "tile/model_trust"))},
    }


def _cells(stat: dict | None) -> tuple[str, str]:
    """(n, value) of a thirds, spearman or share entry for the table."""
    if stat is None:
        return "0", "n/a"
    if "first" in stat:
        return str(stat["n"]), f"{stat['first']:.4g} -> {stat['last']:.4g}"
    if "rho" in stat:
        return str(stat["n"]), "n/a" if stat["rho"] is None else f"rho {stat['rho']:+.2f}"
    return str(stat["n"]), f"{100 * stat['share']:.0f}%"


def table(work_dir: str, summary: dict) -> str:
    """The summary of one work dir as a fixed-width table."""
    ppo, alloc = summary["tile_ppo"], summary["allocator"]
    rows = [("tile PPO", "updates", str(ppo["updates"]), "" if ppo["updates"] else "n/a")]
    rows += [("tile PPO", key, *_cells(ppo[key])) for key in PPO_KEYS]
    rows += [("allocator", "chosen value ~ reward", *_cells(alloc["value_vs_reward"])),
             ("allocator", "reward > 0", *_cells(alloc["reward_positive"])),
             ("sketch", "value ~ realised", *_cells(summary["sketch"]["value_vs_realised"])),
             ("cost model", "model_trust", *_cells(summary["cost_model"]["model_trust"]))]
    head = ("level", "metric", "n", "value (first third -> last third; ~: Spearman)")
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(3)]
    lines = [f"{work_dir}: {summary['lines']} metrics lines"]
    for row in (head, *rows):
        lines.append("  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]),
                                row[2].rjust(widths[2]), row[3]]).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/learning_metrics.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("work_dirs", nargs="+", type=Path, help="harl.tune work dirs")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.work_dirs if not d.is_dir()]
    if missing:
        print(f"learning_metrics: error: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    summaries = {str(d): summarise(read_metrics(d / "metrics.jsonl")) for d in args.work_dirs}
    if args.json:
        print(json.dumps(summaries, indent=2))
    else:
        print("\n\n".join(table(d, s) for d, s in summaries.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
