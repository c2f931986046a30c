"""One tuning run per model x arm x budget x seed, each a `python -m harl.tune` process."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.arms import Arm, arm_named, write_arm_config
from benchlib.curves import CurvePoint, TrialCost, estimate_curve, trial_cost
from benchlib.machine import ROOT

ARM_CONFIG = "arm.toml"
"""the arm's settings in a run's work dir, handed to harl.tune as --config"""


@dataclass(frozen=True)
class RunSpec:
    """One harl.tune run to make: which model, how (the arm), how many trials, which seed."""

    model: Path
    label: str  # the model's short name
    arm: str  # a name in benchlib.arms.ARMS; a strategy's name is the arm of its defaults
    trials: int  # global budget handed to harl.tune
    seed: int

    @property
    def arm_spec(self) -> Arm:
        return arm_named(self.arm)

    @property
    def strategy(self) -> str:
        """harl.tune --strategy of the run's arm."""
        return self.arm_spec.strategy

    def work_dir(self, out: Path) -> Path:
        return out / self.label / f"{self.arm}-t{self.trials}-s{self.seed}"


@dataclass
class RunResult:
    """What one run left in its work dir, plus what the bench measured afterwards."""

    spec: RunSpec
    work_dir: Path
    exit_code: int
    process_s: float | None = None
    report: dict = field(default_factory=dict)
    curve: list[CurvePoint] = field(default_factory=list)
    cost: TrialCost | None = None
    # Filled by the interleaved timing of the model's builds:
    latency_ms: float | None = None  # median over the timing processes
    latencies_ms: list[float] = field(default_factory=list)  # one median per timing process
    verified: bool | None = None
    max_abs_err: float | None = None

    @property
    def ok(self) -> bool:
        """A database exists that can be compiled (verification failures are still timed)."""
        return bool(self.report) and self.report.get("trials_done", 0) > 0

    @property
    def final_estimate_ms(self) -> float | None:
        return self.curve[-1].estimate_ms if self.curve else None


def tune_command(spec: RunSpec, work_dir: Path, target: str | None,
                 trials_per_batch: int | None, extra_args: tuple[str, ...] = (),
                 config: Path | None = None, store: Path | None = None) -> list[str]:
    """harl.tune's command line for `spec`; `config` is the arm's --config file, if it has one;
    `store` the knowledge store it learns from and adds to (None: none, so that no run of a
    benchmark depends on the runs before it)."""
    # --no-evaluate: the bench compiles, verifies and times every build itself, interleaved.
    command = [sys.executable, "-m", "harl.tune", str(spec.model), "--quiet", "--no-evaluate",
               "--work-dir", str(work_dir), "--strategy", spec.strategy,
               "--trials", str(spec.trials), "--seed", str(spec.seed)]
    command += ["--no-store"] if store is None else ["--store", str(store)]
    if config is not None:
        command += ["--config", str(config)]
    if target is not None:
        command += ["--target", target]
    if trials_per_batch is not None:
        command += ["--trials-per-batch", str(trials_per_batch)]
    return command + list(extra_args)


def run_tuning(spec: RunSpec, out: Path, target: str | None = None,
               trials_per_batch: int | None = None, resume: bool = False,
               extra_args: tuple[str, ...] = (), store: Path | None = None) -> RunResult:
    """Tune once (or, with `resume`, reuse a finished work dir) and load what it wrote
    (`store`: see `tune_command`)."""
    work_dir = spec.work_dir(out)
    if resume and (work_dir / "report.json").is_file():
        return load_run(spec, work_dir, exit_code=0)
    work_dir.mkdir(parents=True, exist_ok=True)
    config = write_arm_config(spec.arm_spec, work_dir / ARM_CONFIG)
    command = tune_command(spec, work_dir, target, trials_per_batch, extra_args, config, store)
    start = time.monotonic()
    with open(work_dir / "tune_output.txt", "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        proc = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    result = load_run(spec, work_dir, exit_code=proc.returncode)
    result.process_s = round(time.monotonic() - start, 2)
    return result


def load_run(spec: RunSpec, work_dir: Path, exit_code: int) -> RunResult:
    """Read report.json and history.csv of a finished run (empty when it wrote none)."""
    result = RunResult(spec, work_dir, exit_code)
    report_path, history_path = work_dir / "report.json", work_dir / "history.csv"
    if report_path.is_file():
        result.report = json.loads(report_path.read_text())
    if history_path.is_file() and result.report:
        with history_path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        weights = [task["weight"] for task in result.report["tasks"]]
        result.curve = estimate_curve(rows, weights)
        result.cost = trial_cost(rows)
    return result


def tail(path: Path, lines: int = 5) -> str:
    """The last lines of a run's output, for error messages."""
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return ""
