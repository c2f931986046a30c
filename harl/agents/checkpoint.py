"""Agent state in the work dir, in formats that execute nothing on load: .npz arrays read with
`allow_pickle=False`, and JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

AGENTS_DIR = "agents"  # in the work dir
POLICY_FILE = "tile_policy.npz"
ALLOCATOR_FILE = "task_allocator.json"


def _replace_atomically(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as file:
            np.savez(file, **arrays)
    _replace_atomically(path, write)


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def save_json(path: Path, value) -> None:
    _replace_atomically(path, lambda tmp: tmp.write_text(json.dumps(value, indent=1)))


def load_json(path: Path):
    return json.loads(Path(path).read_text())
