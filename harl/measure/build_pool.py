"""Long-lived build processes, one per thread, in which a straggling build can be abandoned.

Within a task, a candidate that compiles far longer than the others is one whose loops LLVM unrolled
into a huge body, and such a kernel runs slowly too (in a sample of stored candidates, every build
of 5 s or more was a kernel 4-15 times slower than its task's best). So once a build has run
`factor` times as long as the median of its batch's finished builds (and at least `grace_s`), it is
abandoned: its process is killed and the candidate scores as a failed build. Only that process dies;
the others go on with the batch.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tvm.support.popen_pool import PopenWorker, kill_child_processes


@dataclass(frozen=True)
class StragglerCutoff:
    """When a build still running is abandoned (defaults: harl.config.MeasureConfig)."""

    factor: float
    """times the median duration of the batch's finished builds"""
    grace_s: float
    """never earlier"""

    def why(self, limit_s: float) -> str:
        return (f"build abandoned after {limit_s:.1f} s (limit: {self.factor:g} times its batch's "
                f"median build, at least {self.grace_s:g} s): such builds were slow kernels")

    def limit_s(self, finished_s: list[float]) -> float | None:
        """Seconds a build may run, given the batch's finished builds; None: no limit yet."""
        if not finished_s:
            return None
        return max(self.grace_s, self.factor * statistics.median(finished_s))


@dataclass
class BuildJob:
    """One call in flight: when it started, in which process, and how it ended."""

    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    started: float | None = None
    finished: float | None = None
    process: _BuildProcess | None = None
    pid: int | None = None
    abandoned: str | None = None
    """why the build was abandoned, if it was"""

    @property
    def duration_s(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started

    @property
    def succeeded(self) -> bool:
        return self.future.done() and self.future.exception() is None


class BuildAbandoned(Exception):
    """The build ran far longer than its batch's others and was killed."""


class _BuildProcess:
    """One worker process whose pid is known, so that its build can be killed.

    It is recycled here, not by PopenWorker, so that a new process's pid is always asked for.
    `current` (under `lock`) is the job it runs: only that job's build is ever killed.
    """

    def __init__(self, initializer: Callable | None, max_uses: int) -> None:
        self.worker = PopenWorker(initializer)
        self.max_uses = max_uses
        self.pid: int | None = None
        self.uses = 0
        self.lock = threading.Lock()
        self.current: BuildJob | None = None

    def call(self, job: BuildJob, fn: Callable, args: tuple, timeout_s: float,
             closed: threading.Event):
        if closed.is_set():
            raise ChildProcessError("the build pool was shut down")
        if self.pid is not None and self.uses >= self.max_uses:
            self.kill()
        self.start(closed)
        self.uses += 1
        with self.lock:
            self.current, job.process, job.pid = job, self, self.pid
            job.started = time.perf_counter()
        self.worker.send(fn, args, None, timeout_s)
        try:
            return self.worker.recv()
        except (ChildProcessError, TimeoutError):
            self.pid = None  # recv killed it: the next call starts another
            raise
        except BaseException:  # a reply cut short: the process may be gone
            if not self.worker.is_alive():
                self.kill()
            raise
        finally:
            with self.lock:
                self.current, job.finished = None, time.perf_counter()
            if job.abandoned is not None and self.pid is not None:
                self.kill()  # killed just after it replied: start afresh

    def start(self, closed: threading.Event) -> None:
        """Start the process unless it runs (its start imports TVM: seconds)."""
        if self.pid is None:
            self.worker.send(os.getpid)
            self.pid, self.uses = self.worker.recv(), 0
            if closed.is_set():  # shut down while this process started: its pid came too late
                self.kill()
                raise ChildProcessError("the build pool was shut down")

    def abandon(self, job: BuildJob, why: str) -> None:
        """Kill this process if it still runs `job`'s build."""
        with self.lock:
            if self.current is job and self.pid is not None:
                job.abandoned = why
                _kill_pid(self.pid)  # the thread reads EOF and moves on to its next job

    def kill(self) -> None:
        self.worker.kill()
        self.pid = None


class BuildPool:
    """`max_workers` threads, each driving one long-lived worker process."""

    def __init__(self, max_workers: int, timeout_s: float, max_uses: int,
                 initializer: Callable | None = None) -> None:
        self.timeout_s = timeout_s
        self.max_workers = max_workers
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers)
        self._local = threading.local()
        self._processes: list[_BuildProcess] = []
        self._lock = threading.Lock()
        self._initializer = initializer
        self._max_uses = max_uses
        self._closed = threading.Event()

    def _process(self) -> _BuildProcess:
        process = getattr(self._local, "process", None)
        if process is None:
            process = self._local.process = _BuildProcess(self._initializer, self._max_uses)
            with self._lock:
                self._processes.append(process)
        return process

    def start_workers(self, count: int) -> None:
        """Start `count` worker processes side by side, without waiting; jobs submitted next
        queue behind them. Started as batches need them, a run whose batches grow (a GPU task's
        first ones, short of legal samples) waited for new workers batch after batch."""
        count = min(count, self.max_workers)
        if count <= 0:
            return
        together = threading.Barrier(count)  # each start holds its thread: none takes two

        def start():
            try:
                self._process().start(self._closed)
                together.wait(timeout=self.timeout_s)
            except BaseException:
                together.abort()  # the others stop waiting; their processes stay started
                raise

        for _ in range(count):
            self._threads.submit(start)

    def submit(self, fn: Callable, *args) -> BuildJob:
        job = BuildJob()

        def run():
            return self._process().call(job, fn, args, self.timeout_s, self._closed)

        inner = self._threads.submit(run)
        inner.add_done_callback(lambda done: _settle(job, done))
        return job

    def wait(self, jobs: list[BuildJob], cutoff: StragglerCutoff | None,
             check: Callable[[], None] | None = None, poll_s: float = 0.05,
             earlier_s: Sequence[float] = ()) -> None:
        """Until every job has ended; builds past the cutoff are abandoned. `check` runs at
        every poll (it may raise: an interrupt). `earlier_s`: durations of successful builds
        outside `jobs` that the cutoff counts as the batch's too."""
        pending = [job for job in jobs if not job.future.done()]
        while pending:
            if check is not None:
                check()
            concurrent.futures.wait([job.future for job in pending], timeout=poll_s)
            pending = [job for job in pending if not job.future.done()]
            if cutoff is not None:
                self._abandon_stragglers(jobs, pending, cutoff, earlier_s)

    def _abandon_stragglers(self, jobs: list[BuildJob], pending: list[BuildJob],
                            cutoff: StragglerCutoff, earlier_s: Sequence[float]) -> None:
        # Successful builds only: an instant failure says nothing of how long a build takes.
        limit = cutoff.limit_s([*earlier_s, *(job.duration_s for job in jobs
                                              if job.succeeded and job.duration_s is not None)])
        if limit is None:
            return
        now = time.perf_counter()
        for job in pending:
            if (job.process is not None and job.started is not None
                    and job.finished is None and now - job.started > limit):
                job.process.abandon(job, cutoff.why(limit))

    def shutdown(self) -> None:
        """Kill every worker process; builds in flight end as failures, queued ones never start."""
        self._closed.set()
        with self._lock:
            processes = list(self._processes)
        for process in processes:
            with process.lock:
                if process.pid is not None:
                    _kill_pid(process.pid)  # first, so that no thread stays blocked reading
        self._threads.shutdown(wait=True, cancel_futures=True)
        for process in processes:
            process.kill()


def _settle(job: BuildJob, done: concurrent.futures.Future) -> None:
    if job.abandoned is not None:
        job.future.set_exception(BuildAbandoned(job.abandoned))
    elif done.cancelled():
        job.future.set_exception(ChildProcessError("the build pool was shut down"))
    elif done.exception() is not None:
        job.future.set_exception(done.exception())
    else:
        job.future.set_result(done.result())


def _kill_pid(pid: int) -> None:
    # Its children first (nvcc and the like); psutil may find them gone or refuse.
    with contextlib.suppress(Exception):
        kill_child_processes(pid)
    with contextlib.suppress(OSError):  # gone already
        os.kill(pid, signal.SIGKILL)
