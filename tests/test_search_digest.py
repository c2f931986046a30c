"""harl's search is a function of what it measures: with a measurement fixed by the program
(tools/search_digest.py), two runs make the same records."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _digest(work_dir: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "search_digest.py"),
         str(ROOT / "tasks" / "examples" / "mlp.onnx"), str(work_dir), "--trials", "12",
         "--trials-per-batch", "4"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_same_feedback_gives_the_same_records(tmp_path):
    first, second = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert first.startswith("15 records")  # 12 trials and the 3 tasks' unscheduled nests
    assert first == second
