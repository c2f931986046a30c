"""A builder whose worker processes outlive a batch.

TVM's LocalBuilder starts new workers for every batch, and each imports every tensor intrinsic
(30-40 s per batch on 2 cores). Here workers are started once, import only TVM, and are recycled
after `max_uses` builds to bound the leak that made TVM restart them.
"""

from __future__ import annotations

import os
import tempfile

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from harl.measure.worker_lifetime import worker_initializer


def build_in_worker(mod, target) -> str:
    """Compile one scheduled module and export it as a tar of objects; return its path."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    runtime_mod = tvm.compile(mod, target=target)
    artifact_dir = tempfile.mkdtemp(prefix="harl_build_")
    artifact_path = os.path.join(artifact_dir, "candidate." + tar.output_format)
    runtime_mod.export_library(artifact_path, fcompile=tar)
    return artifact_path


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in a pool of long-lived worker processes; failures become error results."""

    def __init__(self, max_workers: int, timeout_s: float, max_uses: int = 256) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self.max_uses = max_uses
        self._pool: PopenPoolExecutor | None = None

    def _get_pool(self) -> PopenPoolExecutor:
        if self._pool is None:
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers,
                timeout=self.timeout_s,
                maximum_process_uses=self.max_uses,
                initializer=worker_initializer(),
            )
        return self._pool

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        pool = self._get_pool()
        results = []
        outcomes = pool.map_with_error_catching(
            lambda item: build_in_worker(item.mod, item.target), build_inputs
        )
        for outcome in outcomes:
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"build timed out after {self.timeout_s} s"))
            else:
                results.append(BuilderResult(None, f"build failed: {outcome.value}"))
        return results

    def shutdown(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
