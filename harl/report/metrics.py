"""A key-value metrics logger for the agents: namespaced keys (`alloc/`, `sketch/`, `tile/`),
one JSON line per dump in the work dir's metrics.jsonl, flushed at once."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

METRICS_FILE = "metrics.jsonl"  # in the work dir


class MetricsLogger:
    """`record(key, value)` accumulates; `dump(**context)` writes one line and starts afresh."""

    def __init__(self) -> None:
        self._file = None
        self._values: dict[str, float] = {}
        self._start = time.monotonic()
        self.totals: dict[str, float] = {}
        self.stages: dict[str, float] = {}  # where the totals' seconds went (not added to them)

    def open(self, path: Path) -> None:
        """Append to `path` from now on (until then, values are only summed in `totals`)."""
        self.close()
        self._file = open(Path(path), "a")  # noqa: SIM115  (closed in close())

    def record(self, key: str, value: float) -> None:
        self._values[key] = float(value)

    def add(self, key: str, value: float) -> None:
        """Add to a running total (kept for the whole run, e.g. seconds spent by an agent)."""
        self.totals[key] = self.totals.get(key, 0.0) + float(value)

    def add_stage(self, key: str, seconds: float) -> None:
        """Add to a breakdown of the totals' seconds (e.g. the search's trace replay)."""
        self.stages[key] = self.stages.get(key, 0.0) + float(seconds)

    def timing(self, key: str) -> AbstractContextManager[None]:
        """`add(key, seconds)` for the seconds the block takes."""
        return _timed(self.add, key)

    def stage_timing(self, key: str) -> AbstractContextManager[None]:
        """`add_stage(key, seconds)` for the seconds the block takes."""
        return _timed(self.add_stage, key)

    def dump(self, **context) -> None:
        if not self._values:
            return
        if self._file is not None:
            line = {"time_s": round(time.monotonic() - self._start, 3), **context}
            line.update({k: (v if math.isfinite(v) else None) for k, v in self._values.items()})
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()
        self._values = {}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@contextmanager
def _timed(add: Callable[[str, float], None], key: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        add(key, time.perf_counter() - start)
