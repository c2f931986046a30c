"""The per-task search's hyperparameters, and how a batch splits between fresh samples and
refinements (harl.search.harl_search uses them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harl.agents.sketch_chooser import SketchConfig
from harl.agents.tile_tuner import TileTunerConfig


@dataclass(frozen=True)
class HarlSearchConfig:
    """Hyperparameters of the per-task search (middle and low levels)."""

    sketch: SketchConfig = field(default_factory=SketchConfig)
    tile: TileTunerConfig = field(default_factory=TileTunerConfig)
    elites_per_sketch: int = 4
    """best measured states each sketch keeps as trajectory starts"""
    fresh_samples: int = 4
    """fresh samples per sketch and batch that start trajectories (the pool's best predicted)"""
    fresh_pool: int = 64
    """random samples drawn per sketch and batch once a cost model ranks the task (the run's
    once it has learned, or the prior), until the sketch has a measured elite: it scores them
    all, and with enough trust the sketch's first candidates are measured from the top of the
    pool (a model that ranks only moderately well still enriches the top of a broad pool far
    more than a local search can)"""
    refine_pool: int = 32
    """the same pool once the sketch has measured elites: the pool's best then start a few
    trajectories and supply the batch's fresh share, at most half of the sketch's candidates"""
    bounded_draws: int = 8
    """on a GPU sketch with thread bounds, samples drawn per fresh sample wanted, at most:
    those outside the bounds (most of a conv's, which a postproc would reject) are replaced
    by more draws, so the cost model chooses among legal schedules, as MetaSchedule's
    evolutionary search samples until its population is legal"""
    screen_trust: float = 0.3
    """trust (see `trust_window`) from which the cost model chooses which fresh samples are
    measured"""
    trust_window: int = 24
    """a task's latest measured candidates on which the cost model's ranking is judged (its
    trust: rank correlation of predicted and measured); the batch's share measured from fresh
    samples is at least 1 - trust, up to `max_fresh_share`"""
    max_fresh_share: float = 0.5
    """once a sketch has measured elites, at most this share of its candidates are fresh
    samples; the rest refine the elites, even before the cost model ranks well (neighbours of
    good schedules are often good: the prior MetaSchedule's mutations rely on)"""
    serial_max_flop: float = 2e6
    """tasks of at most this many floating-point operations also get each sketch without its
    parallel annotation (one thread): waking the thread pool costs microseconds, a large share of
    a small kernel, and MetaSchedule's CPU space has no serial schedule. The sketch chooser
    learns which kind wins; larger tasks keep only TVM's sketches (a serial one would be
    measured only to lose)"""
    outlook_samples: int = 16
    """fresh samples per measured sketch the cost model scores before each batch (once it ranks
    the task), for the sketch chooser's predicted outlook of the sketch (see
    `SketchChooser.predict`)"""
    transplant_share: float = 0.25
    """share of a batch (rounded half to even: a batch of 2 takes none, so many-task models at
    small budgets search as before) that may go to the task's best measured state carried into
    sibling sketches that draw the same decisions, each sketch once per best state (see
    `harl.search.transplant`): the chooser then compares sketches on equal tiles, not on the
    luck of their first samples (0: none). A compute location is carried only once the
    sibling's own samples have drawn it, so on tasks with locations transplants start later"""
    sibling_share: float = 0.25
    """share of a batch (at least one candidate while any is offered) that may go to the best
    states of the run's other tasks whose sketches have the same sites and loop extents (a
    matmul or conv fused with another epilogue; see `harl.search.sibling_transfer`), each
    offered state once per sketch (0: none)"""
    fill_rounds: int = 4
    """rounds of drawing a batch: a round short of candidates (random samples that fail the
    postprocs, states measured before) is topped up by the next. An empty batch ends the task
    for good in MetaSchedule, so a few unlucky samples must not empty it"""

    def __post_init__(self) -> None:
        for name in ("transplant_share", "sibling_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], not {getattr(self, name)}")


def fresh_count(count: int, *, has_elites: bool, trust: float, tuner_share: float,
                max_share: float) -> int:
    """How many of a sketch's `count` candidates are fresh samples.

    All of them until the sketch has a measured elite; then 1 - trust of them (a model that
    ranks badly steers little), at least the tile tuner's adaptive share and at most `max_share`
    (the rest refine the elites, whatever the model's trust).
    """
    if not has_elites:
        return count
    return int(round(count * min(max_share, max(tuner_share, 1.0 - trust))))
