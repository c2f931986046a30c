"""The cost-model prior: an XGBoost model trained offline on other workloads' measurements.

A run's own cost model knows nothing about a task until the task has been measured, so its first
batch is random samples, and at a few trials per task those samples decide the result (a conv2d's
random samples span 2 to 80 ms). The prior ranks that first batch instead. It was trained by
`tools/train_cost_prior.py` on synthetic workloads (convs, depthwise convs, dense and batched
matmuls of shapes no benchmarked model has, 0.1-600 MFLOP), measured on a 2-core AMD EPYC (x86-64;
TVM's target says znver4) with TVM's kernels on one thread. It is used for CPU targets of the same
instruction set only, only on the TVM it was trained on (its features are TVM's `PerStoreFeature`),
and only for tasks of at least the FLOPs it was trained on.
"""

from __future__ import annotations

import json
import logging
import platform
from dataclasses import dataclass, field
from pathlib import Path

from harl.tvm_adapter import xgb_trainer

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
MODEL_FILE = "cost_prior_llvm.ubj"
MANIFEST_FILE = "cost_prior_llvm.json"


@dataclass
class CostPrior:
    """A trained XGBModel (TVM's, Python side), how well it ranked workloads held out, and the
    smallest tasks it ranks."""

    xgb: object
    trust: float
    """median rank correlation of its predictions with measured throughputs, per workload left out
    of training (the manifest's `held_out_rho`)"""
    min_flop: float = 0.0
    """smaller tasks are not its to rank: it was trained on none (where a kernel takes a few
    microseconds, the thread pool's wake-up and serial schedules decide; a prior trained on 1
    MFLOP or more ranked such tasks worse than the run's model)"""
    _flop: dict = field(default_factory=dict, repr=False)  # structural hash -> FLOPs

    def applies_to(self, mod) -> bool:
        """Whether the task `mod` is within the FLOP range the prior was trained on."""
        from tvm.s_tir.meta_schedule.utils import shash2hex

        from harl.frontend.tasks import task_flop

        key = shash2hex(mod)
        if key not in self._flop:
            self._flop[key] = task_flop(mod)
        return self._flop[key] >= self.min_flop


def target_arch(target) -> str:
    """The instruction set a CPU target compiles for: its triple's, or this host's."""
    triple = str(target.attrs.get("mtriple", "") or "")
    return triple.split("-")[0] if triple else platform.machine()


def prior_mismatch(manifest: dict, target) -> str | None:
    """Why the prior does not apply to `target` on this TVM; None when it does."""
    import tvm

    if target.kind.name != manifest.get("target_kind"):
        return f"it was trained for {manifest.get('target_kind')} targets"
    if target_arch(target) != manifest.get("arch"):
        return f"it was trained on {manifest.get('arch')}"
    if manifest.get("tvm_version") != tvm.__version__:
        return f"it was trained on TVM {manifest.get('tvm_version')}"
    return None


def trained_model(path: Path):
    """TVM's XGBModel (Python side) holding the booster saved at `path` (XGBoost's own format):
    the shipped prior's and the store's trained model load through here."""
    import xgboost as xgb

    model = xgb_trainer(num_warmup_samples=0)
    booster = xgb.Booster()
    booster.load_model(str(path))
    model.booster = booster
    return model


def load_cost_prior(target, folder: Path = DATA_DIR) -> CostPrior | None:
    """The shipped prior when it applies to `target`; None otherwise, or when it is missing or
    unreadable (then with a warning: the run goes on without it)."""
    manifest_path, model_path = folder / MANIFEST_FILE, folder / MODEL_FILE
    if not (manifest_path.is_file() and model_path.is_file()):
        return None
    import xgboost as xgb

    try:
        manifest = json.loads(manifest_path.read_text())
        if prior_mismatch(manifest, target) is not None:
            return None
        return CostPrior(trained_model(model_path), float(manifest["held_out_rho"]),
                         float(manifest["min_flop"]))
    except (OSError, ValueError, KeyError, TypeError, xgb.core.XGBoostError) as err:
        from harl.report.history import one_line_error

        logger.warning(f"harl: warning: cost-model prior in {folder} unreadable "
                       f"({one_line_error(err)}); going on without it")
        return None
