"""A task's sketches replayed into schedules: decided states, fresh samples, measured forms."""

from __future__ import annotations

import numpy as np

from harl.agents.tile_tuner import State
from harl.report.metrics import MetricsLogger
from harl.search.location_shortcut import LocationShortcut, TailShortcut
from harl.search.trace_sites import (
    all_samples_are_sites,
    fresh_schedules,
    schedule_of,
    schedules_of,
    state_of,
    with_state,
)


class SketchReplay:
    """Schedules of one task's sketches (anything with a `trace` and a `shortcut`), after the
    postprocs, on `workers` threads.

    The seeds are drawn from `rng` here, in order, so the schedules do not depend on the
    threads. Replay time goes to the metrics as `search/replay_seconds`.
    """

    def __init__(self, mod, postprocs, workers: int, rng: np.random.Generator,
                 metrics: MetricsLogger) -> None:
        self.mod, self.postprocs, self.workers = mod, list(postprocs), workers
        self.rng, self.metrics = rng, metrics

    def shortcut_of(self, trace) -> LocationShortcut | None:
        """A sketch's location shortcut, where a state decides all of its samples (a
        candidate replayed from the original trace is then the schedule that was scored)."""
        if not all_samples_are_sites(trace):
            return None
        return LocationShortcut.of(self.mod, trace, lambda: fresh_schedules(self.mod).new(1))

    def _replayed(self, plans: list) -> list:
        """`schedules_of` the plans (traces or shortcuts), each with a seed drawn here."""
        seeds = [int(self.rng.integers(1 << 30)) for _ in plans]
        return schedules_of(self.mod, plans, self.postprocs, seeds, self.workers)

    def states(self, sketch, states: list[State | None]) -> list:
        """Schedule for each state (None: a fresh random sample), or None where illegal.
        Decided states take the sketch's location shortcut, if it has one."""
        with self.metrics.stage_timing("search/replay_seconds"):
            plans = [with_state(sketch.trace, state) for state in states]
            if sketch.shortcut is not None:
                plans = [plan if state is None else sketch.shortcut.plan(plan)
                         for plan, state in zip(plans, states, strict=True)]
            return self._replayed(plans)

    def fresh(self, sketch, count: int) -> list[tuple[State, object]]:
        """`count` fresh samples of a sketch, with their states (illegal ones left out); the
        sketch's location shortcut samples them where it applies."""
        with self.metrics.stage_timing("search/replay_seconds"):
            trace = with_state(sketch.trace, None)
            plans = [trace if sketch.shortcut is None else sketch.shortcut.sample_plan(trace)
                     for _ in range(count)]
            schedules = self._replayed(plans)
        drawn = []
        for plan, sch in zip(plans, schedules, strict=True):
            if sch is None:
                continue
            state = state_of(sch.trace)
            if isinstance(plan, TailShortcut) and plan.location is not None:
                state = (*state, plan.location)  # sampled last, by the shortcut
            drawn.append((state, sch))
        return drawn

    def as_measured(self, sketch, state: State, sch):
        """`sch` (of `state`) in the form a database stores: a schedule the location shortcut
        replayed is replayed again from the original trace, with the location the shortcut
        applied (the state then decides every sample, so it is the same program)."""
        if sketch.shortcut is None or sketch.shortcut.is_original(sch):
            return sch
        state = sketch.shortcut.measured_state(state, sch)
        with self.metrics.stage_timing("search/replay_seconds"):
            return schedule_of(self.mod, with_state(sketch.trace, state), self.postprocs, 1)
