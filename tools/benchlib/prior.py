"""Train harl's cost-model prior on tuning work dirs and write it, with its manifest, to harl/data/.

The model is TVM's XGBModel trained as MetaSchedule trains it during a run: a row of
`PerStoreFeature` per store of a candidate, labels per workload scaled to (best latency /
candidate's latency), failed candidates at 0. Its quality is judged by leaving each work dir's
workloads out of training in turn (and their copies in other dirs): the rank correlation of the
held-out predictions with the measured throughputs, per workload.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from pathlib import Path

import numpy as np

from benchlib.machine import cpu_model
from benchlib.models import resolve_model
from benchlib.synthetic import operator_keys
from harl.agents.model_trust import rank_correlation
from harl.search.cost_prior import DATA_DIR, MANIFEST_FILE, MODEL_FILE
from harl.store.prior_training import MIN_HELD_OUT, train
from harl.store.rows import MeasuredWorkload, read_workloads
from harl.tvm_adapter import xgb_predict


def refused_keys(models: list[str]) -> set[tuple]:
    """The conv and matmul shapes of every model in `models` (paths or bench specs)."""
    return set().union(*(operator_keys(resolve_model(spec)) for spec in models))


def held_out_by_work_dir(workloads: list[MeasuredWorkload]) -> dict[str, float]:
    """Per workload (by source work dir left out in turn, with any copy of its workloads in other
    dirs): rank correlation of predictions with measured throughputs."""
    rhos = {}
    for source in sorted({w.source for w in workloads}):
        held = {w.name for w in workloads if w.source == source}
        others = [w for w in workloads if w.name not in held]
        if not others:
            continue
        model = train(others)
        for w in workloads:
            if w.source == source and len(w.features) >= MIN_HELD_OUT:
                rhos[f"{Path(source).parent.name}/{w.name[:12]}"] = rank_correlation(
                    xgb_predict(model, w.features), w.throughputs())
    return rhos


def train_and_write(work_dirs: list[Path], benchmarked_models: list[str], min_flop: float,
                    folder: Path = DATA_DIR, command: str = "") -> dict:
    """Train on every work dir's records, judge by leaving each out, write model and manifest
    (`min_flop`: the smallest FLOPs drawn, below which harl does not use the prior).

    A work dir whose model (its report.json's) shares a conv or matmul shape with one of
    `benchmarked_models` is refused whole.
    """
    import tvm

    from harl.search.cost_prior import target_arch
    from harl.target import parse_target

    target = parse_target("llvm")
    refused = refused_keys(benchmarked_models)
    workloads, skipped, threads = [], [], set()
    for work_dir in work_dirs:
        report = json.loads((work_dir / "report.json").read_text())
        model = Path(report["model"])
        if operator_keys(model) & refused:
            skipped.append(model.stem)
            continue
        workloads += read_workloads(work_dir)
        threads.add(report.get("runtime_threads"))  # None: a run from before harl recorded it
    if not workloads:
        raise SystemExit("no records to train on")
    rhos = held_out_by_work_dir(workloads)
    model = train(workloads)
    folder.mkdir(parents=True, exist_ok=True)
    model.booster.save_model(str(folder / MODEL_FILE))
    records = sum(len(w.features) for w in workloads)
    failed = sum(not math.isfinite(x) for w in workloads for x in w.latencies)
    manifest = {
        "target_kind": "llvm",
        "arch": target_arch(target),
        "tvm_version": tvm.__version__,
        "features": "PerStoreFeature (TVM defaults), one row per store",
        "measured_on": f"{cpu_model()}, target {target}",
        "runtime_threads": sorted(threads, key=str),  # TVM's CPU thread pool in the runs
        "date": datetime.date.today().isoformat(),
        "command": command,
        "work_dirs": len(work_dirs),
        "workloads": len(workloads),
        "records": records,
        "failed_records": failed,
        "refused_models": skipped,
        "refused_shapes_from": len(benchmarked_models),
        "held_out_rho": round(statistics.median(rhos.values()), 3) if rhos else 0.0,
        "held_out_rho_quartiles": [round(float(q), 3) for q in
                                   np.percentile(list(rhos.values()), [25, 50, 75])]
        if rhos else [],
        "held_out_workloads": len(rhos),
        "min_flop": min_flop,
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return manifest
