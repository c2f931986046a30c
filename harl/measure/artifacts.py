"""Build artifacts on disk: each candidate's in a folder of its own under the temp root."""

from __future__ import annotations

import os
import shutil
import tempfile


def remove_build_dir(artifact_path: str) -> None:
    """The artifact's own folder, as MetaSchedule removes a trial's (never the temp root)."""
    folder = os.path.dirname(artifact_path)
    if folder and os.path.realpath(folder) != os.path.realpath(tempfile.gettempdir()):
        shutil.rmtree(folder, ignore_errors=True)
