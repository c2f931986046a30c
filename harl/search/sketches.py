"""The sketches harl searches for a task, and what it keeps of each during the search."""

from __future__ import annotations

from dataclasses import dataclass, field

from harl.agents.tile_tuner import State, TileTuner
from harl.frontend.tasks import task_flop
from harl.search.location_shortcut import LocationShortcut
from harl.search.thread_bounds import ThreadBounds
from harl.search.trace_sites import all_samples_are_sites, serial_variant


def sketch_traces(mod, design_spaces, serial_max_flop: float) -> list:
    """The sketches harl searches: the design spaces' traces, and for a task of at most
    `serial_max_flop` their serial variants after them."""
    traces = [space.trace.simplified(remove_postproc=True) for space in design_spaces]
    if task_flop(mod) <= serial_max_flop:
        traces += [v for v in map(serial_variant, traces) if v is not None]
    return traces


@dataclass
class Sketch:
    """One design space: its trace, the tuner of its decisions, and its best measured states."""

    trace: object
    tuner: TileTuner
    elites: list[tuple[float, State]] = field(default_factory=list)
    shortcut: LocationShortcut | None = None
    """replays its sampled compute location cheaply, for scoring (see location_shortcut)"""
    deterministic: bool = False
    """the trace samples nothing: every replay is the same program, so one is drawn, not a
    pool (a fused chain of many blocks may take 50 ms to replay)"""
    serial: bool = False
    """a serial variant of one of TVM's sketches (see `HarlSearchConfig.serial_max_flop`)"""
    thread_bounds: ThreadBounds | None = None
    """the thread extents a GPU sketch allows, judged from a state before it is replayed"""
    transplantable: bool = field(init=False)
    """a state decides every sample of its program (so another sketch's state carried into it,
    see `harl.search.transplant`, is one program), and it samples something"""

    def __post_init__(self) -> None:
        self.transplantable = not self.deterministic and all_samples_are_sites(self.trace)
