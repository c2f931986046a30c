"""Repair the work dir's files where a crash or a bad disk damaged them, keeping every good line.

The database files and history.csv are appended one line at a time, so a crash (`kill -9`, power
loss) can leave a partial last line, and a disk can damage any line. TVM's JSONDatabase refuses
to load either ("Unexpected end of string", "Cannot tokenize", a workload index out of range).
Here each damaged line is dropped (a tuning record with it whose workload line was dropped, and
the records left point at their workloads' new lines), after a copy of the damaged file is kept
beside it as `<name>.corrupt-<timestamp>`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from harl.database import RECORD_FILE, WORKLOAD_FILE, open_database
from harl.tvm_adapter import pinned_statements

logger = logging.getLogger(__name__)

_RECORD_INDEX = re.compile(rb"^\[\s*(\d+)\s*,")


@dataclass
class Repair:
    """What a repair dropped, and where the damaged copies went."""

    dropped: dict[str, int] = field(default_factory=dict)  # file name -> lines dropped
    backups: list[Path] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.backups)

    def merge(self, other: Repair) -> Repair:
        for name, count in other.dropped.items():
            self.dropped[name] = self.dropped.get(name, 0) + count
        self.backups.extend(other.backups)
        return self


def backup_of(path: Path) -> Path:
    """A new name beside `path` for its damaged copy."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    return backup


def replace_lines(path: Path, lines: list[bytes]) -> Path:
    """Keep a copy of `path` beside it, then make `path` hold `lines` (atomically, on disk);
    returns the copy."""
    backup = backup_of(path)
    shutil.copy2(path, backup)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        file.writelines(line + b"\n" for line in lines)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    return backup


def _lines(path: Path) -> list[bytes] | None:
    """`path`'s lines without their newlines (a last one without its newline included), or
    None if there is no such file."""
    if not path.exists():
        return None
    return path.read_bytes().splitlines()


def _json(line: bytes):
    """The JSON value of `line`, or None if it is not one (or has bytes a file should not)."""
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _workload(value, deep: bool):
    """TVM's Workload of a workload line's `value` if `deep`, else True; None if damaged."""
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(part, str) for part in value)):
        return None
    if not deep:
        return True
    from tvm.s_tir import meta_schedule as ms

    try:
        return ms.database.Workload.from_json(value)
    except Exception:  # noqa: BLE001  (TVM raises its own kinds)
        return None


def _record_ok(value, workload, deep: bool) -> bool:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], list)
            and len(value[1]) == 4 and isinstance(value[1][0], list)):
        return False
    if deep:
        from tvm.s_tir import meta_schedule as ms

        try:
            ms.database.TuningRecord.from_json(value[1], workload)
        except Exception:  # noqa: BLE001  (TVM raises its own kinds)
            return False
    return True


def repair_database(work_dir: Path, deep: bool = False) -> Repair:
    """Drop the database's damaged lines: ones that are not JSON of the right form (and, if
    `deep`, that TVM cannot parse: its Workload and TuningRecord readers, which replay the
    trace), and records whose workload line is missing or dropped. A file that needs no repair
    is left as it is, except that a complete last line gets its missing newline."""
    repair = Repair()
    work_dir = Path(work_dir)
    workload_path, record_path = work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE
    workload_lines = _lines(workload_path) or []
    kept_workloads: list[bytes] = []
    new_index: dict[int, int] = {}  # workload line -> its line once the damaged ones are gone
    workloads = []  # TVM's, when deep
    held = []  # their statements, so that replaying a record leaves the next ones loadable
    for index, line in enumerate(workload_lines):
        value = _json(line)
        workload = None if value is None else _workload(value, deep)
        if workload is not None:
            new_index[index] = len(kept_workloads)
            kept_workloads.append(line)
            workloads.append(workload)
            if deep:
                held.append(pinned_statements(workload.mod))
    _settle(workload_path, workload_lines, kept_workloads, repair)

    record_lines = _lines(record_path)
    if record_lines is None:
        return repair
    kept_records: list[bytes] = []
    for line in record_lines:
        value = _json(line)
        match = _RECORD_INDEX.match(line)
        if value is None or match is None or int(match.group(1)) not in new_index:
            continue
        index = new_index[int(match.group(1))]
        if not _record_ok(value, workloads[index], deep):
            continue
        if index != int(match.group(1)):
            line = b"[%d," % index + line[match.end():]
        kept_records.append(line)
    _settle(record_path, record_lines, kept_records, repair)
    return repair


def _settle(path: Path, lines: list[bytes], kept: list[bytes], repair: Repair) -> None:
    """Write `kept` over `path` if it differs from `lines` (and add a missing last newline)."""
    if kept != lines:
        repair.backups.append(replace_lines(path, kept))
        repair.dropped[path.name] = len(lines) - len(kept)
    elif lines and not path.read_bytes().endswith(b"\n"):  # cut just before its newline
        with path.open("ab") as file:
            file.write(b"\n")


def load_database(work_dir: Path):
    """The work dir's JSON database, repaired first where damaged, with one warning counting
    what was dropped; never TVM's traceback. A database TVM still cannot load after its lines
    are checked one by one is moved aside whole, and the run starts a new one."""
    work_dir = Path(work_dir)
    repair = repair_database(work_dir)
    try:
        database = open_database(work_dir)
    except Exception:  # noqa: BLE001  (TVM's parse errors: check each line with its readers)
        repair.merge(repair_database(work_dir, deep=True))
        try:
            database = open_database(work_dir)
        except Exception as err:  # noqa: BLE001
            aside = []
            for path in (work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE):
                if path.exists():
                    aside.append(backup_of(path))
                    path.rename(aside[-1])
            why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            logger.warning(f"harl: warning: TVM cannot load the database in {work_dir} ({why}): "
                           f"moved it aside as {', '.join(path.name for path in aside)}; the run "
                           "starts a new one")
            return open_database(work_dir)
    if repair:
        logger.warning(describe(repair, work_dir))
    return database


def describe(repair: Repair, work_dir: Path) -> str:
    """One warning line for a repair."""
    counts = ", ".join(f"{count} line{'s' if count != 1 else ''} of {name}"
                       for name, count in repair.dropped.items())
    kept = ", ".join(backup.name for backup in repair.backups)
    return (f"harl: warning: damaged lines in {work_dir} (a crash while writing, or the disk?): "
            f"dropped {counts}; every good line is kept; damaged copies kept as {kept}")


def repair_json_lines(path: Path) -> Repair:
    """Drop the lines of a JSON-lines file (metrics.jsonl) that are not JSON, a cut last one
    among them, so that what is appended next starts a line of its own."""
    repair = Repair()
    lines = _lines(Path(path))
    if lines is None:
        return repair
    _settle(Path(path), lines, [line for line in lines if _json(line) is not None], repair)
    return repair


def repair_history(path: Path, columns: tuple[str, ...]) -> Repair:
    """Drop history.csv's damaged rows: ones not of `columns`' width, or whose time is not a
    number, or not text; a last row without its newline (it may be cut anywhere). A file whose
    header is damaged is moved aside whole (the run starts a new one)."""
    repair = Repair()
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return repair
    data = path.read_bytes()
    lines = data.splitlines()
    complete = lines if data.endswith(b"\n") else lines[:-1]
    header = _csv_row(complete[0]) if complete else None
    if not header or header[0] != columns[0]:
        backup = backup_of(path)
        path.rename(backup)
        repair.backups.append(backup)
        repair.dropped[path.name] = len(lines)
        return repair
    kept = [complete[0]] + [line for line in complete[1:] if _history_row_ok(line, len(header))]
    if kept != lines:
        repair.backups.append(replace_lines(path, kept))
        repair.dropped[path.name] = len(lines) - len(kept)
    return repair


def _csv_row(line: bytes) -> list[str] | None:
    try:
        text = line.decode("utf-8")
        if "\0" in text:
            return None
        rows = list(csv.reader(io.StringIO(text)))
    except (UnicodeDecodeError, csv.Error):
        return None
    return rows[0] if len(rows) == 1 else None


def _history_row_ok(line: bytes, width: int) -> bool:
    row = _csv_row(line)
    if row is None or len(row) != width:
        return False
    try:
        float(row[0])
        int(row[1])
    except ValueError:
        return False
    return True
