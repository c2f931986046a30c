"""Seconds the tuning loop spends in each measurement stage, for the per-trial cost split."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StageClock:
    """Running totals; the builder and runner add to them, the trial recorder reads them."""

    build_s: float = 0.0
    run_s: float = 0.0
