"""The header every bench output starts with: how to reproduce it, when, where, with what."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_mhz() -> float | None:
    """The clock /proc/cpuinfo reports (under a hypervisor often the nominal one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001  (a missing optional package is reported, not fatal)
        return "not installed"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (uncommitted changes)' if dirty else ''}" if head else "unknown"


def header_lines(argv: list[str]) -> list[str]:
    """Command, date, machine and versions, one fact per line."""
    command = "python tools/bench.py" + ("" if not argv else " " + shlex.join(argv))
    return [
        f"command: {command}",
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {cpu_model()}, {usable_cores()} cores usable, {platform.system()} "
        f"{platform.release()}",
        f"versions: tvm {_version('tvm')}, onnxruntime {_version('onnxruntime')}, "
        f"openvino {_version('openvino').split('-')[0]}, onnx {_version('onnx')}, "
        f"numpy {_version('numpy')}, python {platform.python_version()}, harl {_git_commit()}",
        f"python: {sys.executable}",
    ]
