"""harl's messages: its loggers' records on the run's stream, one plain line each."""

import io
import logging

from harl.report.messages import messages_to


def test_messages_go_to_the_stream_while_inside_and_nowhere_when_quiet():
    logger = logging.getLogger("harl.loop")
    shown, hidden = io.StringIO(), io.StringIO()
    with messages_to(shown):
        logger.info("harl: a message")
        logger.warning("harl: warning: %s", "a warning")
        logging.getLogger("tvm").warning("not harl's")
    with messages_to(hidden, quiet=True):
        logger.warning("harl: warning: not shown")
    assert shown.getvalue() == "harl: a message\nharl: warning: a warning\n"
    assert hidden.getvalue() == ""
    assert logging.getLogger("harl").handlers == []  # nothing left behind
