"""Errors that describe a user's mistake.

Every error raised for bad input is a :class:`FairvisionError` whose message is
one line naming the file, column or row at fault. The CLI prints that line and
exits non-zero; it never shows a traceback for such errors.
"""

from __future__ import annotations


class FairvisionError(ValueError):
    """Bad input or an impossible request, described in one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class InputFileError(FairvisionError):
    """A file that is missing, unreadable or malformed."""


class ColumnError(FairvisionError):
    """A missing or invalid column in a table."""


class ParameterError(FairvisionError):
    """An invalid value of a library parameter. The message starts with the parameter's name
    (``"alpha must be between 0 and 1, not 1.5"``); the command line shows the option's flag instead."""

    def __init__(self, parameter: str, message: str):
        self.parameter = parameter
        super().__init__(f"{parameter} {message}")
