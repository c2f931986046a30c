"""A one-line live progress display on terminals; silent when output goes to a log."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Trials done/left, the end-to-end estimate and an ETA, redrawn in place."""

    def __init__(self, total_trials: int, stream=None, enabled: bool | None = None,
                 done_before: int = 0) -> None:
        self.total = total_trials
        self.done_before = done_before  # trials of an earlier run (resume): not in the rate
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = isatty if enabled is None else enabled
        self.start = time.monotonic()
        self._drawn = False

    def update(self, done: int, estimate_ms: float | None, tasks_measured: int,
               n_tasks: int) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        new = done - self.done_before
        eta = elapsed / new * (self.total - done) if new > 0 else float("nan")
        estimate = f"{estimate_ms:.4g} ms" if estimate_ms is not None else "-"
        line = (f"[{done:>{len(str(self.total))}}/{self.total} trials] "
                f"e2e estimate {estimate} ({tasks_measured}/{n_tasks} tasks measured)  "
                f"elapsed {format_duration(elapsed)}  "
                f"eta {format_duration(eta) if new > 0 else '?'}")
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
