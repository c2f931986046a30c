"""The Ctrl-C flag: SIGINT only sets it; harl's hooks, deep in the search included, raise on it."""

import os
import signal

import pytest

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
