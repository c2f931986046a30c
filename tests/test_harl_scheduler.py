"""The harl task scheduler in the real MetaSchedule loop, with a fake builder and a fake runner
whose futures come back pending (as the RPC farm's do): builds overlap measurement, every batch
is still joined."""

import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import matmul_module
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner
from tvm.s_tir.meta_schedule.runner.rpc_runner import RPCRunnerFuture

from harl.agents.task_allocator import AllocatorConfig
from harl.config import MeasureConfig
from harl.frontend.tasks import TuningTask
from harl.loop import LoopSettings, default_batch_size, tune_tasks
from harl.search.harl_scheduler import AllocatorFeedback, HarlTaskScheduler, allocator_for
from harl.search.plan import SearchPlan
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics

MEASURE_S = 0.3  # per batch, on the fake farm


@derived_object
class FakeBuilder(PyBuilder):
    """Builds nothing; notes when each batch's build started."""

    def __init__(self, ctrl_c_at: int = 0) -> None:
        super().__init__()
        self.starts: list[float] = []
        self.ctrl_c_at = ctrl_c_at  # press Ctrl-C during this batch's build (1: the first)
        self.folders: list[str] = []  # each candidate's build folder

    def build(self, build_inputs):
        self.starts.append(time.monotonic())
        if len(self.starts) == self.ctrl_c_at:
            os.kill(os.getpid(), signal.SIGINT)  # harl's handler only sets the loop's flag
        folders = [tempfile.mkdtemp(prefix="harl_fake_") for _ in build_inputs]
        self.folders.extend(folders)
        return [BuilderResult(os.path.join(folder, "x.tar"), None) for folder in folders]


@derived_object
class PendingRunner(PyRunner):
    """One worker 'measures' each batch for MEASURE_S; `run` only submits, like the farm's."""

    returns_pending_futures = True  # harl's Ctrl-C wrapper then passes batches whole

    def __init__(self) -> None:
        super().__init__()
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.spans: list[tuple[float, float]] = []  # each batch's measurement, start and end
        self.lock = threading.Lock()

    def _measure(self) -> None:
        start = time.monotonic()
        time.sleep(MEASURE_S)
        with self.lock:
            self.spans.append((start, time.monotonic()))

    def run(self, runner_inputs):
        batch = self.pool.submit(self._measure)
        return [RPCRunnerFuture(self.pool.submit(lambda: (batch.result(), [1e-3])[1]), 60)
                for _ in runner_inputs]


def tune(tmp_path, sizes, max_in_flight, trials=12, builder=None):
    target = parse_target(None)
    load_tensor_intrinsics(target)
    tasks = [TuningTask(f"matmul{n}", matmul_module(n), 1.0, 2 * n**3) for n in sizes]
    scheduler = HarlTaskScheduler(allocator_for(tasks, AllocatorConfig(), seed=0),
                                  max_in_flight=max_in_flight)
    plan = SearchPlan(task_scheduler=scheduler, cost_model=ms.cost_model.RandomModel(),
                      make_search_strategy=lambda _index: ms.search_strategy.ReplayTrace(),
                      measure_callbacks=[AllocatorFeedback(scheduler)])
    builder, runner = builder if builder is not None else FakeBuilder(), PendingRunner()
    try:
        _, stats = tune_tasks(tasks, target, plan, tmp_path,
                              settings=LoopSettings(trials=trials, trials_per_batch=2, seed=0,
                                                    num_cores=1),
                              measure=MeasureConfig(), builder=builder, runner=runner)
    finally:
        runner.pool.shutdown(wait=True)
    return scheduler, builder, runner, stats


def builds_during_measurement(builder, runner) -> int:
    return sum(any(start < build < end for start, end in runner.spans)
               for build in builder.starts)


@pytest.mark.parametrize("max_in_flight", [0, 1])
def test_builds_overlap_measurement_only_when_allowed(tmp_path, max_in_flight):
    scheduler, builder, runner, stats = tune(tmp_path, (16, 24, 32), max_in_flight)
    # every batch was joined, its results recorded and learned from
    assert sum(s.trials for s in stats) == 12 and len(runner.spans) == 6
    assert sum(t.trials for t in scheduler.allocator.tasks) == 12
    assert all(s.trials > 0 for s in stats)
    history = (tmp_path / "history.csv").read_text().splitlines()
    assert len(history) - 1 == 12
    if max_in_flight:
        assert scheduler.overlapped_batches >= 4  # all but the first and maybe the last
        assert builds_during_measurement(builder, runner) >= 4
    else:
        assert scheduler.overlapped_batches == 0
        assert builds_during_measurement(builder, runner) == 0


def test_the_allocator_weighs_tasks_as_tvms_task_records_do(tmp_path):
    scheduler, *_ = tune(tmp_path, (16, 24), max_in_flight=0, trials=4)
    assert [(t.weight, t.flop) for t in scheduler.allocator.tasks] == [
        (float(r.task_weight), float(r.flop)) for r in scheduler.tasks_]
    uncounted = TuningTask("copy", matmul_module(16), 2.0, 0.0)  # TVM counts at least 1 FLOP
    assert allocator_for([uncounted], AllocatorConfig()).tasks[0].flop == 1.0


def test_a_single_task_waits_for_its_own_measurement(tmp_path):
    scheduler, builder, runner, (stats,) = tune(tmp_path, (16,), max_in_flight=1, trials=6)
    assert stats.trials == 6 and len(runner.spans) == 3
    assert scheduler.overlapped_batches == 0 and builds_during_measurement(builder, runner) == 0


def test_ctrl_c_still_records_the_batch_left_in_measurement(tmp_path):
    # Ctrl-C while the second task's batch builds: the first's is still on the fake farm.
    builder = FakeBuilder(ctrl_c_at=2)
    with pytest.raises(KeyboardInterrupt):
        tune(tmp_path, (16, 24), max_in_flight=1, builder=builder)
    history = (tmp_path / "history.csv").read_text().splitlines()[1:]
    records = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    assert len(history) == len(records) == 2
    # the second batch is never measured; its build folders go all the same
    assert len(builder.folders) == 4
    assert not [folder for folder in builder.folders if os.path.exists(folder)]


def test_default_batch_visits_each_task_about_twice_in_three_batches_or_more():
    for trials, n_tasks in [(64, 5), (64, 3), (64, 2), (120, 30), (64, 11), (4000, 3)]:
        batch = default_batch_size(trials, n_tasks)
        assert 2 <= batch <= 64
        if 2 < batch < 64:  # neither bound binds: the largest batch that visits each task twice
            assert 2 * n_tasks * batch <= trials < 2 * n_tasks * (batch + 1)
    assert default_batch_size(64, 5) == 6  # the CNN: 6 trials a batch, not 4
    assert default_batch_size(120, 30) == 2  # too few trials for two visits: the floor
    assert default_batch_size(64, 1) == 21  # a lone task still learns between three batches
    assert default_batch_size(1000, 1) == 64
