"""harl's messages to the user: what its loggers say, one plain line each, on the run's stream."""

from __future__ import annotations

import contextlib
import logging

HARL_LOGGER = "harl"


class LineHandler(logging.Handler):
    """Writes each record's message as it is, flushed at once (a run's messages are few)."""

    def __init__(self, stream) -> None:
        super().__init__(logging.INFO)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(record.getMessage(), file=self.stream, flush=True)
        except Exception:  # noqa: BLE001  (logging's rule: a message never breaks the run)
            self.handleError(record)


@contextlib.contextmanager
def messages_to(stream, *, quiet: bool = False):
    """While inside, the harl loggers' messages (INFO and above) go to `stream`; with `quiet`,
    nowhere."""
    logger = logging.getLogger(HARL_LOGGER)
    handler = logging.NullHandler() if quiet else LineHandler(stream)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
