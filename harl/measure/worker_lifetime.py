"""Builder and runner workers die with the tuner, even when it is killed with `kill -9`.

TVM's popen workers only notice their parent is gone when they next read from it: a worker busy
with a slow or hung candidate keeps burning CPU after the tuner died. Each worker runs
`die_with_parent` first (the pools' `initializer`), which asks Linux to SIGKILL it when the
parent goes. Workers also ignore Ctrl-C, which a terminal sends to the whole process group (and
SIGTERM and SIGHUP, which service managers and closed terminals send to every process): the
tuner decides when they stop (harl.interrupt), so a batch in flight is not turned into failures.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """In a worker: be killed when `parent_pid` exits (Linux); exit at once if it already has."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the tuner's to handle
        signal.signal(signum, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect.
    if os.getppid() != parent_pid:
        os._exit(0)


def worker_initializer():
    """An initializer for PopenPoolExecutor / LocalRunner bound to this (the tuner's) process."""
    return functools.partial(die_with_parent, os.getpid())
