"""The Ctrl-C flag: SIGINT only sets it; harl's hooks, deep in the search included, raise on it."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from harl.interrupt import check_interrupt, interrupt_flag


def test_sigint_sets_the_flag_and_hooks_raise_inside_the_loop_only():
    check_interrupt()  # no loop running: nothing to check
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background
    with pytest.raises(KeyboardInterrupt), interrupt_flag() as flag:
        check_interrupt()
        os.kill(os.getpid(), signal.SIGINT)  # the handler sets the flag, raises nothing
        assert flag.requested
        check_interrupt()
    check_interrupt()  # the loop is over: the flag no longer applies
    assert signal.getsignal(signal.SIGINT) is before


BUSY_IN_C = """
import numpy as np
from harl.interrupt import interrupt_flag
a = np.random.default_rng(0).random((1500, 1500))
with interrupt_flag():
    print("ready", flush=True)
    np.linalg.eigvals(a)  # seconds in LAPACK, which never returns to Python on a signal
    print("returned", flush=True)
"""


def test_a_second_stop_signal_exits_while_the_main_thread_is_in_c_code():
    """Python runs a handler only once C code returns (and two pending SIGTERMs run it once):
    the wakeup-fd watcher must exit on the second signal all the same."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_IN_C], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "returned" not in out
    assert "interrupted twice: exiting at once" in err
