"""Seconds the tuning loop spends in each measurement stage, for the per-trial cost split."""

from __future__ import annotations

from dataclasses import dataclass

from harl.measure.cpu_load import MIN_WINDOW_S


@dataclass
class StageClock:
    """Running totals; the builder and runner add to them, the trial recorder reads them."""

    build_s: float = 0.0
    run_s: float = 0.0
    # Of the runs whose CPU load was watched (local measuring): their seconds, and the
    # core-seconds other processes took meanwhile (harl.measure.cpu_load)
    watched_run_s: float = 0.0
    others_core_s: float = 0.0

    def others_while_measuring(self) -> float | None:
        """Cores' worth of CPU time other processes took, on average, while candidates were
        measured; None where less was watched than the counters can tell apart."""
        if self.watched_run_s < MIN_WINDOW_S:
            return None
        return max(0.0, self.others_core_s / self.watched_run_s)
