"""A builder whose worker processes outlive a batch.

TVM's LocalBuilder starts new workers for every batch, and each imports every tensor intrinsic
(30-40 s per batch on 2 cores). Here workers are started once, import only TVM, and are recycled
after `max_uses` builds to bound the leak that made TVM restart them. A build that runs far
longer than its batch's others is abandoned (see harl.measure.build_pool).
"""

from __future__ import annotations

import os
import tempfile
import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder

from harl.interrupt import InterruptFlag
from harl.measure.artifacts import remove_build_dir
from harl.measure.build_pool import BuildJob, BuildPool, StragglerCutoff
from harl.measure.clock import StageClock
from harl.measure.worker_lifetime import worker_initializer
from harl.target import use_nvcc_for_cuda


def build_in_worker(mod, target) -> str:
    """Compile one scheduled module and export it; return the artifact's path.

    CPU candidates become a tar of objects (as TVM's LocalBuilder exports them); CUDA candidates a
    shared library whose kernels nvcc compiled here (see harl.measure.cuda_build).
    """
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    if target.kind.name == "cuda":
        use_nvcc_for_cuda()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    runtime_mod = tvm.compile(mod, target=target)
    artifact_dir = tempfile.mkdtemp(prefix="harl_build_")
    if target.kind.name == "cuda":
        from harl.measure.cuda_build import export_cuda_library

        return export_cuda_library(runtime_mod, target, os.path.join(artifact_dir, "candidate.so"))
    artifact_path = os.path.join(artifact_dir, "candidate." + tar.output_format)
    runtime_mod.export_library(artifact_path, fcompile=tar)
    return artifact_path


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in a pool of long-lived worker processes; failures become error results."""

    def __init__(self, max_workers: int, timeout_s: float, *, max_uses: int = 256,
                 clock: StageClock | None = None,
                 interrupt: InterruptFlag | None = None,
                 cutoff: StragglerCutoff | None = None, pooled_cutoff: bool = False,
                 warm_workers: int = 0) -> None:
        super().__init__()
        self.warm_workers = warm_workers
        """worker processes started together with the first build (a full batch's worth), so
        that larger batches later find them running"""
        self.pooled_cutoff = pooled_cutoff
        """the cutoff also counts the successful builds of earlier calls (calls of a few
        builds each, as the rounds of the untuned tasks' picks, still get a limit)"""
        self._finished_s: list[float] = []
        self.clock = clock
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self.max_uses = max_uses
        self.interrupt = interrupt  # checked while a batch builds: Ctrl-C need not wait for it
        self.cutoff = cutoff  # None: only `timeout_s` ends a build
        self._pool: BuildPool | None = None

    def _get_pool(self) -> BuildPool:
        if self._pool is None:
            self._pool = BuildPool(self.max_workers, self.timeout_s, self.max_uses,
                                   initializer=worker_initializer())
            self._pool.start_workers(self.warm_workers)
        return self._pool

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        start = time.perf_counter()
        pool = self._get_pool()
        jobs = [pool.submit(build_in_worker, item.mod, item.target) for item in build_inputs]
        try:
            pool.wait(jobs, self.cutoff,
                      check=self.interrupt.check if self.interrupt is not None else None,
                      earlier_s=self._finished_s)
        except KeyboardInterrupt:  # Ctrl-C: the batch will never be measured
            for job in jobs:
                if job.succeeded:
                    remove_build_dir(job.future.result())
            raise
        if self.pooled_cutoff:
            self._finished_s += [job.duration_s for job in jobs
                                 if job.succeeded and job.duration_s is not None]
        if self.clock is not None:
            self.clock.build_s += time.perf_counter() - start
        return [self._result(job) for job in jobs]

    def _result(self, job: BuildJob) -> BuilderResult:
        try:
            return BuilderResult(job.future.result(), None)
        except TimeoutError:
            return BuilderResult(None, f"build timed out after {self.timeout_s} s")
        except Exception as err:  # noqa: BLE001  (a failed build is a result, not a crash)
            return BuilderResult(None, f"build failed: {err}")

    def shutdown(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
