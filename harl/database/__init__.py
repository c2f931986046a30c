"""The work dir's tuning records: keeping them loadable after a crash."""

from __future__ import annotations

from pathlib import Path

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


def open_database(work_dir: Path):
    """The work dir's MetaSchedule JSON database (created if absent)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(
        path_workload=str(Path(work_dir) / WORKLOAD_FILE),
        path_tuning_record=str(Path(work_dir) / RECORD_FILE),
        module_equality="structural",
    )
