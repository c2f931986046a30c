"""Errors that reach the user as one plain line instead of a traceback."""


class HarlError(Exception):
    """A problem the user can fix (bad input, unreachable service); exit code 2."""

    exit_code = 2


class VerificationError(HarlError):
    """The tuned model's outputs disagree with the reference; the database is kept."""

    exit_code = 1
