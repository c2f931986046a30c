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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchlib.machine import cpu_model
from benchlib.models import resolve_model
from benchlib.synthetic import operator_keys
from harl.agents.model_trust import rank_correlation
from harl.frontend.tasks import task_flop
from harl.naive_nests import is_naive_trace
from harl.search.cost_prior import DATA_DIR, MANIFEST_FILE, MODEL_FILE
from harl.tvm_adapter import xgb_predict, xgb_train, xgb_trainer

MIN_HELD_OUT = 8
"""workloads with fewer measured records are trained on but not judged"""


@dataclass
class Workload:
    name: str
    source: str  # the work dir it was measured in (left out of training together)
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # inf: the candidate failed
    flop: float = 0.0

    def labels(self) -> np.ndarray:
        costs = np.where(np.isfinite(self.latencies), self.latencies, 1e10)
        return costs.min() / costs

    def throughputs(self) -> np.ndarray:
        """1 / latency per record, 0 where it failed (what predictions are judged against)."""
        latencies = np.asarray(self.latencies)
        return np.where(np.isfinite(latencies), 1.0 / latencies, 0.0)


def _shash(mod) -> str:
    from tvm.s_tir.meta_schedule.utils import shash2hex

    return shash2hex(mod)


def refused_keys(models: list[str]) -> set[tuple]:
    """The conv and matmul shapes of every model in `models` (paths or bench specs)."""
    return set().union(*(operator_keys(resolve_model(spec)) for spec in models))


def read_workloads(work_dir: Path) -> list[Workload]:
    """Every searched (not naive-nest) record of a work dir, with features, by workload."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    from harl.resume import record_latency_s

    loaded = [ms.database.Workload.from_json(json.loads(line)) for line in
              (work_dir / "database_workload.json").read_text().splitlines() if line.strip()]
    extractor = PerStoreFeature()
    contexts: dict[int, object] = {}
    workloads: dict[int, Workload] = {}
    for line in (work_dir / "database_tuning_record.json").read_text().splitlines():
        if not line.strip():
            continue
        index, payload = json.loads(line)
        record = ms.database.TuningRecord.from_json(payload, loaded[index])
        if record.trace is None or is_naive_trace(record.trace):
            continue
        if index not in contexts:
            contexts[index] = ms.TuneContext(mod=loaded[index].mod, target=record.target,
                                             num_threads=1)
            workloads[index] = Workload(_shash(loaded[index].mod), str(work_dir),
                                        flop=task_flop(loaded[index].mod))
        try:
            candidate = record.as_measure_candidate()
            features = extractor.extract_from(contexts[index], [candidate])[0].numpy()
        except Exception:  # noqa: BLE001  (a trace that no longer replays teaches nothing)
            continue
        workloads[index].features.append(features.astype("float32"))
        workloads[index].latencies.append(record_latency_s(record))
    return [w for w in workloads.values() if w.features]


def train(workloads: list[Workload]):
    """TVM's XGBModel trained on the workloads' records as MetaSchedule trains it."""
    model = xgb_trainer(num_warmup_samples=0, verbose_eval=10**9)
    xgb_train(model, [x for w in workloads for x in w.features],
              np.concatenate([w.labels() for w in workloads]))
    return model


def held_out_rhos(workloads: list[Workload]) -> dict[str, float]:
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
    rhos = held_out_rhos(workloads)
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
