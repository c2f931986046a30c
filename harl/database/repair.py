"""Repair a file whose last line a crash cut short.

The database files and history.csv are appended one line at a time, so a crash (`kill -9`, power
loss) can leave a partial last line. TVM's JSONDatabase refuses to load such a file ("Unexpected
end of string"). Here the partial line is dropped, after a copy of the damaged file is kept beside
it as `<name>.corrupt-<timestamp>`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def repair_truncated_last_line(path: Path, is_json: bool) -> Path | None:
    """Drop a partial last line of `path`; returns the backup of the damaged file, or None.

    A last line without its newline is partial, unless `is_json` and it is complete JSON (the
    crash came between the line and its newline): then only the newline is added. A CSV row
    without its newline may be cut anywhere, so it is always dropped.
    """
    path = Path(path)
    if not path.exists():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n") + 1
    if is_json and _is_json(data[cut:]):
        with path.open("ab") as file:
            file.write(b"\n")
        return None
    backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(path, backup)
    with path.open("r+b") as file:
        file.truncate(cut)
    return backup
