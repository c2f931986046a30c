"""Measured programs as a cost model trains on them: per workload, one feature matrix per
record (a `PerStoreFeature` row per buffer store) and its latency."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class MeasuredWorkload:
    """One workload's searched records: features and latencies (inf where a candidate failed)."""

    name: str
    """the workload's structural hash"""
    source: str
    """what measured it (a work dir, a store entry): left out of training together"""
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    flop: float = 0.0

    def labels(self) -> np.ndarray:
        """What MetaSchedule's XGBModel trains on: best latency / latency, 0 where it failed."""
        costs = np.where(np.isfinite(self.latencies), self.latencies, 1e10)
        return costs.min() / costs

    def throughputs(self) -> np.ndarray:
        """1 / latency per record, 0 where it failed (what predictions are judged against)."""
        latencies = np.asarray(self.latencies)
        return np.where(np.isfinite(latencies), 1.0 / latencies, 0.0)


def read_workloads(work_dir: Path) -> list[MeasuredWorkload]:
    """Every searched (not naive-nest) record of a work dir's database, with its features, by
    workload; records whose trace no longer replays are left out."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
    from tvm.s_tir.meta_schedule.utils import shash2hex

    from harl.database import RECORD_FILE, WORKLOAD_FILE
    from harl.frontend.tasks import task_flop
    from harl.naive_nests import is_naive_trace
    from harl.resume import record_latency_s

    work_dir = Path(work_dir)
    loaded = [ms.database.Workload.from_json(json.loads(line)) for line in
              (work_dir / WORKLOAD_FILE).read_text().splitlines() if line.strip()]
    extractor = PerStoreFeature()
    contexts: dict[int, object] = {}
    workloads: dict[int, MeasuredWorkload] = {}
    for line in (work_dir / RECORD_FILE).read_text().splitlines():
        if not line.strip():
            continue
        index, payload = json.loads(line)
        record = ms.database.TuningRecord.from_json(payload, loaded[index])
        if record.trace is None or is_naive_trace(record.trace):
            continue
        if index not in contexts:
            contexts[index] = ms.TuneContext(mod=loaded[index].mod, target=record.target,
                                             num_threads=1)
            workloads[index] = MeasuredWorkload(shash2hex(loaded[index].mod), str(work_dir),
                                                flop=task_flop(loaded[index].mod))
        try:
            candidate = record.as_measure_candidate()
            features = extractor.extract_from(contexts[index], [candidate])[0].numpy()
        except Exception:  # noqa: BLE001  (a trace that no longer replays teaches nothing)
            continue
        workloads[index].features.append(features.astype("float32"))
        workloads[index].latencies.append(record_latency_s(record))
    return [w for w in workloads.values() if w.features]


def to_arrays(workloads: list[MeasuredWorkload]) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Workloads as flat arrays (for an .npz) and a JSON-able list of their names and FLOPs."""
    rows = [x for w in workloads for x in w.features]
    width = rows[0].shape[1] if rows else 0
    arrays = {
        "features": (np.concatenate(rows) if rows else np.zeros((0, width))).astype("float32"),
        "stores": np.array([len(x) for x in rows], dtype=np.int64),
        "latencies": np.array([t for w in workloads for t in w.latencies], dtype=np.float64),
        "records": np.array([len(w.features) for w in workloads], dtype=np.int64),
    }
    return arrays, [{"name": w.name, "flop": w.flop} for w in workloads]


def from_arrays(arrays: dict[str, np.ndarray], described: list[dict],
                source: str) -> list[MeasuredWorkload]:
    """The inverse of `to_arrays`; a ValueError when the arrays do not agree with each other."""
    stores, records = arrays["stores"], arrays["records"]
    features, latencies = arrays["features"], arrays["latencies"]
    if (len(records) != len(described) or records.sum() != len(stores)
            or stores.sum() != len(features) or len(latencies) != len(stores)):
        raise ValueError("its arrays do not agree in length")
    matrices = np.split(features, np.cumsum(stores)[:-1]) if len(stores) else []
    workloads, start = [], 0
    for item, count in zip(described, records, strict=True):
        end = start + int(count)
        workloads.append(MeasuredWorkload(str(item["name"]), source,
                                          list(matrices[start:end]),
                                          [float(t) for t in latencies[start:end]],
                                          float(item["flop"])))
        start = end
    return workloads
