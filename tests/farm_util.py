"""Loopback farms for tests: started through the CLI on free ports, always stopped, never leaked."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from harl.farm.farm import free_port, group_members
from harl.farm.state import ProcessRecord


def sessions_tmpdir(farm_dir: Path) -> Path:
    """The TMPDIR for a test's farm: a server session killed by `down` leaves its temp folder,
    which then stays in the test's folder, not in /tmp."""
    folder = farm_dir / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def farm_cli(farm_dir: Path, *args, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARL_FARM_DIR": str(farm_dir),
           "TMPDIR": str(sessions_tmpdir(farm_dir))}
    return subprocess.run([sys.executable, "-m", "harl.farm", *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def recorded_processes(farm_dir: Path) -> list[ProcessRecord]:
    path = farm_dir / "farm.json"
    if not path.exists():
        return []
    return [ProcessRecord(**p) for p in json.loads(path.read_text())["processes"]]


def leftovers(records: list[ProcessRecord]) -> list[int]:
    """Pids still alive in any process group the farm started."""
    return [proc.pid for record in records for proc in group_members(record)]


@contextlib.contextmanager
def loopback_farm(farm_dir: Path, servers: int, key: str):
    """`harl.farm up` on a free port; yields (port, records); `down` and a leak check after."""
    port = free_port()
    proc = farm_cli(farm_dir, "up", "--servers", servers, "--key", key, "--port", port)
    records = recorded_processes(farm_dir)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield port, records
    finally:
        down = farm_cli(farm_dir, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert leftovers(records) == []
