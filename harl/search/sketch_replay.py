"""A task's sketches replayed into schedules: decided states, fresh samples, measured forms."""

from __future__ import annotations

import numpy as np

from harl.agents.tile_tuner import State
from harl.report.metrics import MetricsLogger
from harl.search.location_shortcut import LocationShortcut, TailShortcut
from harl.search.thread_bounds import ThreadBounds
from harl.search.trace_sites import (
    all_samples_are_sites,
    fresh_schedules,
    on_threads,
    replayed,
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

    def __init__(self, mod, postprocs, *, workers: int, rng: np.random.Generator,
                 metrics: MetricsLogger) -> None:
        self.mod, self.postprocs, self.workers = mod, list(postprocs), workers
        self.rng, self.metrics = rng, metrics
        self.out_of_bounds = 0
        """states and fresh samples not replayed: outside their sketch's thread bounds"""

    def shortcut_of(self, trace) -> LocationShortcut | None:
        """A sketch's location shortcut, where a state decides all of its samples (a
        candidate replayed from the original trace is then the schedule that was scored)."""
        if not all_samples_are_sites(trace):
            return None
        return LocationShortcut.of(self.mod, trace, lambda: fresh_schedules(self.mod).new(1))

    def _seeds(self, count: int) -> list[int]:
        return [int(self.rng.integers(1 << 30)) for _ in range(count)]

    def _within_bounds(self, bounds: ThreadBounds, trace, seeds: list[int]) -> list[bool]:
        """Per seed, whether its sample of `trace` binds threads within `bounds`, judged by
        replaying only the start of the trace that draws the bound factors (the others would
        fail a postproc after the whole replay)."""
        prefix = bounds.prefix_trace(trace)
        within = on_threads(lambda seed: self._draws_within(bounds, prefix, seed), seeds,
                            workers=self.workers)
        self.out_of_bounds += within.count(False)
        return within

    def _draws_within(self, bounds: ThreadBounds, prefix, seed: int) -> bool:
        try:
            return bounds.allows(state_of(replayed(self.mod, prefix, seed).trace))
        except Exception:  # noqa: BLE001  (a sample that cannot be drawn is just dropped)
            return False

    def states(self, sketch, states: list[State | None]) -> list:
        """Schedule for each state (None: a fresh random sample), or None where illegal.
        Decided states take the sketch's location shortcut, if it has one; those that bind
        threads outside the sketch's bounds are not replayed."""
        bounds = sketch.thread_bounds
        within = [state is None or bounds is None or bounds.allows(state) for state in states]
        self.out_of_bounds += within.count(False)
        seeds = self._seeds(len(states))  # drawn for all: the skipped change no other's seed
        todo = [i for i, ok in enumerate(within) if ok]
        with self.metrics.stage_timing("search/replay_seconds"):
            plans = [with_state(sketch.trace, states[i]) for i in todo]
            if sketch.shortcut is not None:
                plans = [plan if states[i] is None else sketch.shortcut.plan(plan)
                         for plan, i in zip(plans, todo, strict=True)]
            made = schedules_of(self.mod, plans, self.postprocs, [seeds[i] for i in todo],
                                workers=self.workers)
        schedules = iter(made)
        return [next(schedules) if ok else None for ok in within]

    def fresh(self, sketch, count: int, max_draws: int | None = None
              ) -> list[tuple[State, object]]:
        """`count` fresh samples of a sketch, with their states (illegal ones left out); the
        sketch's location shortcut samples them where it applies. Samples outside the sketch's
        thread bounds are not replayed beyond the instructions that draw them, and more are
        drawn in their place, up to `max_draws` in all (default `count`: none)."""
        with self.metrics.stage_timing("search/replay_seconds"):
            trace = with_state(sketch.trace, None)
            seeds = self._seeds(count)
            if sketch.thread_bounds is not None:
                seeds = self._seeds_within(sketch.thread_bounds, trace, seeds, count,
                                           max(count, max_draws or count))
            plans = [trace if sketch.shortcut is None else sketch.shortcut.sample_plan(trace)
                     for _ in seeds]
            schedules = schedules_of(self.mod, plans, self.postprocs, seeds, workers=self.workers)
        drawn = []
        for plan, sch in zip(plans, schedules, strict=True):
            if sch is None:
                continue
            state = state_of(sch.trace)
            if isinstance(plan, TailShortcut) and plan.location is not None:
                state = (*state, plan.location)  # sampled last, by the shortcut
            drawn.append((state, sch))
        return drawn

    def _seeds_within(self, bounds: ThreadBounds, trace, seeds: list[int], count: int,
                      max_draws: int) -> list[int]:
        """Of `seeds` and of more drawn after them (`max_draws` in all), the first `count`
        whose samples bind threads within `bounds`. Each round draws what the rate seen so
        far needs (a quarter more, so that one more round is rarely wanted), so a pool of
        mostly illegal samples costs few rounds."""
        kept: list[int] = []
        tried = 0
        while seeds:
            tried += len(seeds)
            within = self._within_bounds(bounds, trace, seeds)
            kept += [seed for seed, ok in zip(seeds, within, strict=True) if ok]
            missing = count - len(kept)
            if missing <= 0 or tried >= max_draws:
                break
            rate = max(len(kept), 1) / tried
            seeds = self._seeds(min(max_draws - tried, int(np.ceil(1.25 * missing / rate))))
        return kept[:count]

    def as_measured(self, sketch, state: State, sch):
        """`sch` (of `state`) in the form a database stores: a schedule the location shortcut
        replayed is replayed again from the original trace, with the location the shortcut
        applied (the state then decides every sample, so it is the same program)."""
        if sketch.shortcut is None or sketch.shortcut.is_original(sch):
            return sch
        state = sketch.shortcut.measured_state(state, sch)
        with self.metrics.stage_timing("search/replay_seconds"):
            return schedule_of(self.mod, with_state(sketch.trace, state), self.postprocs, 1)
