"""The build pool: a straggling build is abandoned and its process killed; the others go on."""

import os
import time

import psutil
import pytest

from harl.measure.build_pool import BuildAbandoned, BuildPool, StragglerCutoff
from harl.measure.worker_lifetime import worker_initializer


@pytest.fixture
def pool():
    pool = BuildPool(max_workers=2, timeout_s=60, max_uses=256, initializer=worker_initializer())
    # Each worker process imports TVM as it starts, which took 10 s on a loaded CI machine: the
    # tests time their builds, not that, so both processes start first.
    pool.wait([pool.submit(time.sleep, 0.01) for _ in range(2)], None)
    yield pool
    pool.shutdown()


def test_the_limit_is_a_multiple_of_the_median_finished_build_never_below_the_grace():
    cutoff = StragglerCutoff(factor=20, grace_s=5)
    assert cutoff.limit_s([]) is None  # nothing to compare with yet
    assert cutoff.limit_s([0.1, 0.2, 0.1]) == 5
    assert cutoff.limit_s([0.5, 1.0, 2.0]) == pytest.approx(20)


def test_a_straggler_is_abandoned_and_killed_while_the_others_finish(pool):
    jobs = [pool.submit(time.sleep, 30)] + [pool.submit(time.sleep, 0.05) for _ in range(4)]
    start = time.perf_counter()
    pool.wait(jobs, StragglerCutoff(factor=5, grace_s=1.0))
    assert time.perf_counter() - start < 10
    straggler, *others = jobs
    with pytest.raises(BuildAbandoned, match="abandoned after 1.0 s"):
        straggler.future.result()
    assert all(job.future.result() is None for job in others)
    assert not psutil.pid_exists(straggler.pid) or (
        psutil.Process(straggler.pid).status() == psutil.STATUS_ZOMBIE)


def test_after_an_abandoned_build_its_thread_builds_in_a_new_process():
    pool = BuildPool(max_workers=1, timeout_s=60, max_uses=256)
    try:
        first, straggler = pool.submit(time.sleep, 0.05), pool.submit(time.sleep, 30)
        pool.wait([first, straggler], StragglerCutoff(factor=5, grace_s=1.0))
        assert first.future.result() is None and first.pid == straggler.pid
        with pytest.raises(BuildAbandoned):
            straggler.future.result()
        again = pool.submit(time.sleep, 0.01)
        pool.wait([again], None)
        assert again.future.result() is None and again.pid != straggler.pid
    finally:
        pool.shutdown()


def test_without_a_cutoff_or_before_any_build_finished_nothing_is_abandoned(pool):
    jobs = [pool.submit(time.sleep, 1.5), pool.submit(time.sleep, 1.5)]
    # Both start together; none has finished while both run: no median, no limit.
    pool.wait(jobs, StragglerCutoff(factor=3, grace_s=0.1))
    assert all(job.future.result() is None for job in jobs)


def test_builds_finished_earlier_give_a_lone_build_its_limit(pool):
    # as the rounds of the untuned tasks' picks: a round of one build, builds done before it
    lone = pool.submit(time.sleep, 30)
    start = time.perf_counter()
    pool.wait([lone], StragglerCutoff(factor=3, grace_s=1.0), earlier_s=[0.05, 0.1])
    assert time.perf_counter() - start < 10
    with pytest.raises(BuildAbandoned, match="abandoned after 1.0 s"):
        lone.future.result()


def test_shutdown_ends_the_builds_in_flight_at_once():
    pool = BuildPool(max_workers=1, timeout_s=60, max_uses=256)
    jobs = [pool.submit(time.sleep, 0.01), pool.submit(time.sleep, 60), pool.submit(time.sleep, 0)]
    pool.wait(jobs[:1], None)
    deadline = time.monotonic() + 30
    while jobs[1].started is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jobs[1].started is not None
    start = time.perf_counter()
    pool.shutdown()
    assert time.perf_counter() - start < 5
    for job in jobs[1:]:
        with pytest.raises(ChildProcessError):
            job.future.result(timeout=1)


def test_workers_started_up_front_serve_a_growing_batch_without_new_processes():
    pool = BuildPool(max_workers=2, timeout_s=60, max_uses=256, initializer=worker_initializer())
    try:
        pool.start_workers(2)
        first = pool.submit(os.getpid)  # queued behind both starts
        pool.wait([first], None)
        processes = list(pool._processes)
        assert len(processes) == 2 and all(p.pid is not None for p in processes)
        jobs = [pool.submit(os.getpid) for _ in range(2)]
        pool.wait(jobs, None)
        assert pool._processes == processes  # the batch of two started none
        assert {job.future.result() for job in [first, *jobs]} <= {p.pid for p in processes}
    finally:
        pool.shutdown()
