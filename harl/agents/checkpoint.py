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
SIBLINGS_FILE = "sibling_board.json"  # harl.search.sibling_transfer: each signature's best state


def write_atomically(path: Path, write) -> None:
    """`write(file)` into a file beside `path` that then replaces it, once on disk: a crash
    leaves the old file or the new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    write_atomically(path, lambda file: np.savez(file, **arrays))


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def save_json(path: Path, value, indent: int = 1) -> None:
    write_atomically(path, lambda file: file.write(json.dumps(value, indent=indent).encode()))


def load_json(path: Path):
    return json.loads(Path(path).read_text())


def damaged_checkpoints(agents_dir: Path) -> list[tuple[str, str]]:
    """(file name, what is wrong) for each checkpoint in `agents_dir` that does not load."""
    loaders = {POLICY_FILE: load_arrays, ALLOCATOR_FILE: load_json, SIBLINGS_FILE: load_json}
    damaged = []
    for name, load in loaders.items():
        path = Path(agents_dir) / name
        if not path.exists():
            continue
        try:
            load(path)
        except Exception as err:  # noqa: BLE001  (numpy and zipfile raise many kinds)
            damaged.append((name, str(err).strip().splitlines()[0] if str(err).strip()
                            else type(err).__name__))
    return damaged
