"""Continuing a run from its work dir: what was done before, and whether it is the same run.

A work dir holds one run: `run.json` (the manifest: model bytes' sha256, target, strategy, and
whether the cost-model prior was asked for) says which. Re-running on it resumes: the trials in
its database count against the budget, seed the per-task statistics, warm the cost model, and
MetaSchedule's search strategies start from each workload's best records. `--fresh` moves the
earlier run aside instead. Files a crash or a disk damaged are repaired on the way in (see
harl.database.repair), and one run at a time holds the work dir (harl.workdir_lock).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harl.agents.checkpoint import AGENTS_DIR, damaged_checkpoints, save_json
from harl.database import RECORD_FILE, WORKLOAD_FILE
from harl.database.repair import backup_of, describe, repair_history, repair_json_lines
from harl.errors import HarlError
from harl.naive_nests import is_naive_trace
from harl.report.history import HISTORY_COLUMNS, TaskStats
from harl.report.metrics import METRICS_FILE

logger = logging.getLogger(__name__)

MANIFEST_FILE = "run.json"
HISTORY_FILE = "history.csv"
# Everything a run writes; --fresh moves these aside.
RUN_FILES = (MANIFEST_FILE, WORKLOAD_FILE, RECORD_FILE, HISTORY_FILE, "report.json",
             METRICS_FILE, AGENTS_DIR, "logs",
             "graph.json", "model_rewritten.json")  # harl.graph.pipeline's graph files
FAILED_RUN_SECS = 1e9  # MetaSchedule records a failed trial with run_secs [1e10]


@dataclass(frozen=True)
class RunManifest:
    """Which run a work dir belongs to."""

    model: str
    model_sha256: str
    target: str  # the target's JSON
    strategy: str
    cost_prior: bool | None = None  # None: written before harl recorded it
    config: dict | None = None  # the effective TuneConfig (harl.config_file); None: not recorded

    @staticmethod
    def of(model_path: Path, target, strategy: str,
           cost_prior: bool | None = None, config: dict | None = None) -> RunManifest:
        digest = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        return RunManifest(str(model_path), digest, str(target), strategy, cost_prior, config)

    def write(self, work_dir: Path) -> None:
        """Write it whole or not at all (a crash must not leave a damaged manifest)."""
        save_json(work_dir / MANIFEST_FILE, asdict(self), indent=2)

    @staticmethod
    def read(work_dir: Path) -> RunManifest | None:
        path = work_dir / MANIFEST_FILE
        if not path.exists():
            return None
        try:
            return RunManifest(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            raise HarlError(f"{path} is damaged; use --fresh to start over, "
                            "or another --work-dir") from None

    def mismatch(self, other: RunManifest) -> str | None:
        """What differs from `other` (the run already in the work dir), or None."""
        if self.model_sha256 != other.model_sha256:
            return f"model {other.model} (sha256 {other.model_sha256[:12]}), not {self.model}"
        if self.target != other.target:
            return f"target {other.target}, not {self.target}"
        if self.strategy != other.strategy:
            return f"strategy {other.strategy}, not {self.strategy}"
        if None not in (self.cost_prior, other.cost_prior) and self.cost_prior != other.cost_prior:
            if other.cost_prior:
                return f"{other.strategy} with the cost-model prior, not --no-prior"
            return f"{other.strategy} with --no-prior, not the cost-model prior"
        return None


def has_earlier_run(work_dir: Path) -> bool:
    return any((work_dir / name).exists() for name in RUN_FILES if name != "logs")


def move_earlier_run_aside(work_dir: Path) -> Path | None:
    """Move an earlier run's files into `work_dir/previous-<timestamp>/`; returns that folder."""
    if not has_earlier_run(work_dir):
        return None
    aside = work_dir / f"previous-{time.strftime('%Y%m%d-%H%M%S')}"
    aside.mkdir()
    for name in RUN_FILES:
        if (work_dir / name).exists():
            (work_dir / name).rename(aside / name)
    return aside


def claim_work_dir(work_dir: Path, manifest: RunManifest, *, fresh: bool) -> None:
    """Make `work_dir` hold `manifest`'s run: start over, or check it and repair crash damage."""
    if fresh:
        aside = move_earlier_run_aside(work_dir)
        if aside is not None:
            logger.info(f"harl: --fresh: moved the earlier run to {aside}")
    else:
        earlier = RunManifest.read(work_dir)
        has_records = (work_dir / RECORD_FILE).exists() and (work_dir / RECORD_FILE).stat().st_size
        if has_records and earlier is not None and (why := manifest.mismatch(earlier)):
            raise HarlError(f"work dir {work_dir} holds a run of {why}; use --fresh to start "
                            "over there, or another --work-dir")
        repair = repair_history(work_dir / HISTORY_FILE, HISTORY_COLUMNS).merge(
            repair_json_lines(work_dir / METRICS_FILE))
        if repair:
            logger.warning(describe(repair, work_dir))
        for name, why in damaged_checkpoints(work_dir / AGENTS_DIR):
            backup = backup_of(work_dir / AGENTS_DIR / name)
            (work_dir / AGENTS_DIR / name).rename(backup)
            logger.warning(f"harl: warning: the agents' checkpoint {AGENTS_DIR}/{name} is "
                           f"damaged ({why}): that agent starts afresh; damaged copy kept as "
                           f"{backup.name}")
    manifest.write(work_dir)  # the database is repaired where it is loaded (load_database)


@dataclass
class PriorRun:
    """The trials a work dir's database already holds for each task."""

    records: list[list]  # per task: its TuningRecords

    @staticmethod
    def read(database, task_mods: list) -> PriorRun:
        """Group the database's records by task (records of other workloads are ignored)."""
        # The database hands out one Workload object per workload; TVM objects hash by identity.
        task_of = {database.commit_workload(mod): index
                   for index, mod in enumerate(task_mods) if database.has_workload(mod)}
        records: list[list] = [[] for _ in task_mods]
        for record in database.get_all_tuning_records():
            index = task_of.get(record.workload)
            if index is not None:
                records[index].append(record)
        return PriorRun(records)

    @property
    def trials(self) -> int:
        """Records of searched schedules (an unscheduled nest's is not a trial)."""
        return sum(not is_naive_trace(record.trace)
                   for task_records in self.records for record in task_records)

    def seed_stats(self, stats: list[TaskStats]) -> None:
        """Count the earlier trials, failures and bests into harl's per-task statistics."""
        for task, task_records in zip(stats, self.records, strict=True):
            for record in task_records:
                latency = record_latency_s(record)
                if is_naive_trace(record.trace):
                    task.naive_s = min(task.naive_s, latency)
                    continue
                task.trials += 1
                if math.isfinite(latency):
                    task.best_s = min(task.best_s, latency)
                else:
                    task.failures += 1


def record_latency_s(record) -> float:
    """Mean measured seconds of a tuning record; inf for a failed trial."""
    secs = [float(s) for s in (record.run_secs or [])]
    if not secs or max(secs) >= FAILED_RUN_SECS:
        return math.inf
    return sum(secs) / len(secs)


def warm_start_cost_model(cost_model, contexts: list, prior: PriorRun) -> int:
    """Train the cost model on the earlier trials, as if they had just been measured.

    Returns the number of records it learned from (those whose trace still replays).
    """
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    learned = 0
    for context, task_records in zip(contexts, prior.records, strict=True):
        candidates, results = [], []
        for record in task_records:
            if is_naive_trace(record.trace):  # its latency would rescale the task's labels
                continue
            try:
                candidate = record.as_measure_candidate()
            except Exception:  # noqa: BLE001  (a trace that no longer replays teaches nothing)
                continue
            failed = not math.isfinite(record_latency_s(record))
            candidates.append(candidate)
            results.append(RunnerResult(None, "failed earlier") if failed
                           else RunnerResult([float(s) for s in record.run_secs], None))
        if candidates:
            cost_model.update(context, candidates, results)
            learned += len(candidates)
    return learned
