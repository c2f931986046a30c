"""Where a run's wall time went, phase by phase (report.json's `phase_seconds`)."""

from __future__ import annotations

import time

#: "setup": loading and importing the model, extracting its tasks, the work dir and cost prior
PHASE_NAMES = {"setup": "setup and import", "tuning": "tuning", "picks": "untuned tasks' picks",
               "compile_verify": "compile and verify", "timing": "timing"}


class PhaseClock:
    """Wall seconds per phase: each `lap` closes the phase that ran since the previous lap."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> float:
        """Seconds since the previous lap, added to `phase`'s."""
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed
        return elapsed


def format_phases(seconds: dict[str, float]) -> str:
    """'153 s: setup and import 20, tuning 36, ...' in the order the phases ran."""
    parts = ", ".join(f"{PHASE_NAMES.get(phase, phase)} {value:.0f}"
                      for phase, value in seconds.items())
    return f"{sum(seconds.values()):.0f} s: {parts}"
