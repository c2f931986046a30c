"""Replay tuning runs: how well the run's model, the cost-model prior and their blend rank a
task's next candidates after its first measurements.

    python tools/replay_scorers.py WORK_DIR... [--held-out] [--after 4,8,16,24,32,48] [--next 16]
        [--min-flop F] [--max-flop F]

For each workload of each work dir (of at least the prior's minimum FLOPs, or within
`--min-flop`/`--max-flop`) and each count s in
`--after`: the run's model is trained as in a run (the dir's other workloads, all of their
records, which flatters it, and the workload's first s records), and the rank correlation of
each scorer's scores with the measured throughputs of the next `--next` records is averaged over
workloads. Scorers: the run's model, the prior, and their blend as ProgramScorer weighs it for
several `equal_weight_samples` (K). The replayed records were chosen by the run that measured
them, mostly by its own model (or by MetaSchedule's), so a model is judged on a narrow set,
which reads low; the comparison between scorers is on the same set. The prior is the shipped
one; with `--held-out` (for the prior's own training runs, logs/prior/runs/*/*) it is retrained
without each dir's workloads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

from harl.agents.model_trust import rank_correlation  # noqa: E402
from harl.search.program_scorer import Standardiser, blend, own_weight_after  # noqa: E402
from harl.store.prior_training import train  # noqa: E402
from harl.store.rows import MeasuredWorkload, read_workloads  # noqa: E402
from harl.tvm_adapter import xgb_predict  # noqa: E402

EQUAL_WEIGHTS = (4, 8, 16, 48, 96)


def replay_workload(workload: MeasuredWorkload, others: list[MeasuredWorkload], prior,
                    after: list[int], following: int) -> dict[tuple[int, str], float]:
    """Rank correlation per (s, scorer) on one workload."""
    latencies = np.asarray(workload.latencies)
    throughput = workload.throughputs()
    rhos = {}
    for s in after:
        end = min(len(latencies), s + following)
        if end - s < min(6, following):
            continue
        measured = [i for i in range(s) if np.isfinite(latencies[i])]
        if len(measured) < 2:
            continue
        first = MeasuredWorkload(workload.name, workload.source, workload.features[:s],
                         workload.latencies[:s])
        own = train([*others, first])
        reference = [workload.features[i] for i in measured]
        own_ref = Standardiser.of(xgb_predict(own, reference))
        prior_ref = Standardiser.of(xgb_predict(prior, reference))
        own_next = xgb_predict(own, workload.features[s:end])
        prior_next = xgb_predict(prior, workload.features[s:end])
        target = throughput[s:end]
        rhos[s, "run's model"] = rank_correlation(own_next, target)
        rhos[s, "prior"] = rank_correlation(prior_next, target)
        for k in EQUAL_WEIGHTS:
            weight = own_weight_after(len(measured), k)  # as ProgramScorer weighs it
            rhos[s, f"blend K={k}"] = rank_correlation(
                blend(weight, own_next, prior_next, own_ref, prior_ref), target)
    return rhos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--held-out", action="store_true",
                        help="retrain the prior without each dir's workloads")
    parser.add_argument("--after", default="4,8,16,24,32,48",
                        help="measurements of a task before the replayed ones")
    parser.add_argument("--next", type=int, default=16, dest="following",
                        help="replayed measurements after each count")
    parser.add_argument("--min-flop", type=float, default=None,
                        help="smallest workload replayed (default: the prior's own minimum)")
    parser.add_argument("--max-flop", type=float, default=float("inf"),
                        help="largest workload replayed (the others still train the models)")
    args = parser.parse_args(argv)
    after = [int(x) for x in args.after.split(",")]

    from harl.search.cost_prior import load_cost_prior
    from harl.target import parse_target

    shipped = load_cost_prior(parse_target("llvm"))
    if shipped is None and not args.held_out:
        raise SystemExit("replay_scorers: the shipped prior does not apply on this machine")
    runs = {work_dir: read_workloads(work_dir) for work_dir in args.work_dirs}
    min_flop = args.min_flop if args.min_flop is not None else (
        shipped.min_flop if shipped is not None else 0.0)
    results: dict[tuple[int, str], list[float]] = {}
    for work_dir, workloads in runs.items():
        judged = [w for w in workloads if min_flop <= w.flop <= args.max_flop]
        if not judged:
            continue
        prior = shipped.xgb if shipped is not None else None
        if args.held_out:
            names = {w.name for w in workloads}
            prior = train([w for other, ws in runs.items() if other != work_dir for w in ws
                           if w.name not in names])
        for workload in judged:
            others = [w for w in workloads if w is not workload]
            for key, rho in replay_workload(workload, others, prior, after,
                                            args.following).items():
                results.setdefault(key, []).append(rho)
        print(f"replayed {work_dir}", file=sys.stderr, flush=True)
    scorers = list(dict.fromkeys(name for _, name in results))
    print("| records (failed included) | workloads | " + " | ".join(scorers) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in scorers) + " |")
    for s in after:
        cells = [results.get((s, name), []) for name in scorers]
        if cells[0]:
            print(f"| {s} | {len(cells[0])} | "
                  + " | ".join(f"{np.mean(c):.2f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
