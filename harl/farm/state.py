"""The farm's state file: what `up` started, so `status` and `down` work from any shell."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harl.errors import HarlError

STATE_FILE = "farm.json"


def farm_dir() -> Path:
    """$HARL_FARM_DIR, else ~/.harl: holds the state file and the processes' logs."""
    configured = os.environ.get("HARL_FARM_DIR")
    return Path(configured) if configured else Path.home() / ".harl"


@dataclass(frozen=True)
class ProcessRecord:
    """One process the farm started."""

    role: str  # "tracker" or "server"
    pid: int
    port: int
    log: str
    core: int | None = None  # the core a server is pinned to
    started: float = 0.0  # its creation time, so a later process reusing the pid is not ours


@dataclass(frozen=True)
class FarmState:
    """A running farm: its tracker, its servers and the key they serve."""

    host: str
    port: int
    key: str
    processes: list[ProcessRecord] = field(default_factory=list)
    no_fork: bool = False  # the servers spawn a process per session instead of forking

    @property
    def tracker(self) -> ProcessRecord:
        return next(p for p in self.processes if p.role == "tracker")

    @property
    def servers(self) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role == "server"]


def state_path(directory: Path | None = None) -> Path:
    return (directory or farm_dir()) / STATE_FILE


def save_state(state: FarmState, directory: Path | None = None) -> Path:
    path = state_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)
    return path


def load_state(directory: Path | None = None) -> FarmState | None:
    """The saved farm, or None when none was started (or it was taken down)."""
    path = state_path(directory)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        processes = [ProcessRecord(**p) for p in raw.pop("processes")]
        return FarmState(**raw, processes=processes)
    except (ValueError, TypeError, KeyError) as err:
        raise HarlError(f"farm state file {path} is unreadable ({err}); "
                        "stop its processes by hand and delete it") from None


def clear_state(directory: Path | None = None) -> None:
    state_path(directory).unlink(missing_ok=True)
