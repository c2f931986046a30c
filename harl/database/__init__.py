"""The work dir's tuning records: keeping them loadable after a crash."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
LOADING_SUFFIX = ".loading"  # the record file while its records are read back in


def open_database(work_dir: Path):
    """The work dir's MetaSchedule JSON database (created if absent).

    TVM's JSONDatabase would replay every record of a workload on that workload's one module,
    and some records' postprocs rewrite it in place (see `tvm_adapter.pinned_statements`): the
    records after them then fail to load ("old_outputs.size() == new_outputs.size()") or are
    kept against a rewritten workload. So TVM opens the workloads alone, with the record file
    set aside, and each record is read here against a workload whose statements are held, then
    committed back in its order. An interrupted load leaves the set-aside file, which the next
    open takes back.
    """
    from tvm.s_tir import meta_schedule as ms

    from harl.tvm_adapter import pinned_statements

    work_dir = Path(work_dir)
    workload_path, record_path = work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE
    aside = record_path.with_name(RECORD_FILE + LOADING_SUFFIX)
    if aside.exists():  # a load stopped before its end: the set-aside file has every record
        aside.replace(record_path)
    has_records = record_path.exists() and record_path.stat().st_size > 0
    if has_records:
        record_path.replace(aside)
    try:
        database = ms.database.JSONDatabase(path_workload=str(workload_path),
                                            path_tuning_record=str(record_path),
                                            module_equality="structural")
        if has_records:
            _commit_records(database, workload_path, aside, pinned_statements)
            with record_path.open("rb") as file:  # on the disk before its copy goes
                os.fsync(file.fileno())
            aside.unlink()
    except BaseException:
        if has_records and aside.exists():
            aside.replace(record_path)
        raise
    return database


def read_database(work_dir: Path):
    """The work dir's records in a MemoryDatabase, read as `open_database` reads them but
    leaving the files alone (a run may be appending to them); a last line still being written
    is left out."""
    from tvm.s_tir import meta_schedule as ms

    from harl.tvm_adapter import pinned_statements

    work_dir = Path(work_dir)
    database = ms.database.MemoryDatabase(module_equality="structural")
    records = work_dir / RECORD_FILE
    if records.exists():
        _commit_records(database, work_dir / WORKLOAD_FILE, records, pinned_statements,
                        complete_only=True)
    return database


def _lines(path: Path, complete_only: bool) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    if complete_only and lines and not text.endswith("\n"):
        lines.pop()  # still being written
    return [line for line in lines if line.strip()]


def _commit_records(database, workload_path: Path, records: Path, pinned_statements, *,
                    complete_only: bool = False) -> None:
    """Each record line of `records` parsed against its workload (statements held) and
    committed to `database`, in order (`complete_only`: a last line without its newline is
    left out; otherwise it raises, as a damaged line does)."""
    from tvm.s_tir import meta_schedule as ms

    workloads, held = [], []  # held: the workloads' statements, while records replay on them
    for line in _lines(workload_path, complete_only):
        mod = ms.database.Workload.from_json(json.loads(line)).mod
        workloads.append(database.commit_workload(mod))  # the database's own
        held.append(pinned_statements(workloads[-1].mod))

    def parsed(line: str):
        index, record = json.loads(line)
        return ms.database.TuningRecord.from_json(record, workloads[index])  # replays its trace

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # TVM's replays release the GIL
        for record in pool.map(parsed, _lines(records, complete_only)):
            database.commit_tuning_record(record)
