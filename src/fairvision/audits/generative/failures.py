"""Why a generation failed, in plain words (docs/METHODS.md §10.1).

A generator can fail for one prompt in many ways: the web UI answers HTTP 500, times out, refuses the
connection, answers something that is not an image or an image too large to decode, a pre-generated output is
missing, the built-in editor finds no face to edit, or a user's function raises. :func:`classify` turns any
such exception into one of a small set of causes (:data:`CAUSES`; an HTTP error is ``HTTP <status>``) and a
one-line message without Python reprs (no ``<urlopen error ...>``, no ``ConnectionRefusedError(111, ...)``).
:func:`failure_table` lists every failure with its cause and reason, and :class:`GenerationFailed` is the
one-line error of a generator none of whose outputs could be made.
"""

from __future__ import annotations

import http.client
import re
import socket
import urllib.error

import pandas as pd

from fairvision.errors import FairvisionError, InputFileError

__all__ = ["CAUSES", "FAILURE_COLUMNS", "GenerationError", "GenerationFailed", "classify", "failure_table",
           "most_common_cause", "plain"]

#: the causes a failed generation is put under (an HTTP error is ``"HTTP <status>"``, e.g. ``"HTTP 500"``)
CAUSES = ("HTTP error", "timeout", "connection refused", "connection failed", "not an image", "image too large",
          "output missing", "no face to edit", "seed image unreadable", "worker crashed", "generator error")
#: columns of the failures table (one row per failed output)
FAILURE_COLUMNS = ["generator", "seed_id", "topic", "word", "prompt", "seed", "cause", "reason"]

# Python reprs that some exception messages carry, and what is left of them
_REPRS = [
    (re.compile(r"<urlopen error (.*)>"), r"\1"),
    (re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>:?\s*"), ""),
    (re.compile(r"\[Errno -?\d+\]\s*"), ""),
    (re.compile(r"\b[A-Z]\w*(?:Error|Exception|Timeout)\(-?\d+,\s*'([^']*)'\)"), r"\1"),
    (re.compile(r"\b[A-Z]\w*(?:Error|Exception|Timeout)\('([^']*)'\)"), r"\1"),
    (re.compile(r"\(Caused by (.*)\)"), r"(\1)"),
]
MAX_MESSAGE = 300


class GenerationError(FairvisionError):
    """A generation that failed for a known ``cause`` (one of :data:`CAUSES`, or ``HTTP <status>``)."""

    def __init__(self, cause: str, message: str):
        self.cause = cause
        super().__init__(message)


def plain(text: str) -> str:
    """``text`` on one line without Python reprs, at most :data:`MAX_MESSAGE` characters."""
    out = " ".join(str(text).split())
    for pattern, repl in _REPRS:
        out = pattern.sub(repl, out)
    out = out.strip(" :")
    return out if len(out) <= MAX_MESSAGE else out[:MAX_MESSAGE - 3] + "..."


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and the ``reason`` of URL errors (bounded, no cycles)."""
    out, todo = [], [exc]
    while todo and len(out) < 16:
        e = todo.pop(0)
        if e is None or any(e is x for x in out) or not isinstance(e, BaseException):
            continue
        out.append(e)
        todo += [getattr(e, "reason", None), e.__cause__, e.__context__]
    return out


def _network_cause(chain: list[BaseException]) -> str | None:
    for e in chain:
        if isinstance(e, urllib.error.HTTPError):
            return f"HTTP {e.code}"
    for e in chain:
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
    for e in chain:
        if isinstance(e, (TimeoutError, socket.timeout)):
            return "timeout"
    for e in chain:
        if isinstance(e, (ConnectionError, socket.gaierror, urllib.error.URLError, http.client.HTTPException)):
            return "connection failed"
    return None


_NETWORK_WORDS = {"connection refused": "the connection was refused", "timeout": "no answer in time",
                  "connection failed": "the connection failed"}
#: a detail that says no more than the cause's words is left out
_SAME = {"connection refused": ("refused",), "timeout": ("timed out", "timeout"), "connection failed": ()}


def classify(exc: BaseException) -> tuple[str, str]:
    """``(cause, message)`` of an exception raised while generating one output (docs/METHODS.md §10.1).

    ``cause`` is one of :data:`CAUSES` (``HTTP <status>`` for an HTTP error); ``message`` is one line in plain
    words: the :class:`~fairvision.errors.FairvisionError`'s own message, else the exception's class and its
    message with Python reprs removed (``RuntimeError: the model refused this prompt``).
    """
    if isinstance(exc, GenerationError):
        return exc.cause, plain(exc)
    chain = _chain(exc)
    net = _network_cause(chain)
    if net is not None:
        if net.startswith("HTTP "):
            e = next(x for x in chain if isinstance(x, urllib.error.HTTPError))
            return net, plain(f"HTTP {e.code} {e.reason or ''}")
        detail = plain(exc)
        words = _NETWORK_WORDS[net]
        same = not detail or any(w in detail.lower() for w in _SAME[net])
        return net, words if same else f"{words} ({detail})"
    if type(exc).__name__ == "ImageTooLargeError":
        return "image too large", plain(exc)
    if isinstance(exc, InputFileError) and re.search(r"not a readable image|image file is empty", str(exc)):
        return "not an image", plain(exc)
    if type(exc).__name__ in ("UnidentifiedImageError", "DecompressionBombError"):
        return ("image too large" if "Bomb" in type(exc).__name__ else "not an image"), plain(exc)
    if isinstance(exc, FairvisionError):
        return "generator error", plain(exc)
    msg = plain(exc)
    return "generator error", f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def most_common_cause(causes) -> tuple[str, int]:
    """The most frequent cause and its count (ties: the first in :data:`CAUSES` order, then by name)."""
    counts = pd.Series(list(causes), dtype=object).value_counts()
    if counts.empty:
        return "", 0
    order = sorted(counts.index, key=lambda c: (-int(counts[c]), CAUSES.index(c) if c in CAUSES else len(CAUSES), c))
    return str(order[0]), int(counts[order[0]])


def failure_table(records: pd.DataFrame) -> pd.DataFrame:
    """The failed outputs of generation records: :data:`FAILURE_COLUMNS` (cause and plain reason)."""
    failed = records.loc[~records["ok"].astype(bool)]
    out = failed.reindex(columns=FAILURE_COLUMNS).copy()
    out["cause"] = out["cause"].fillna("generator error").astype(str)
    out["reason"] = [plain(r) for r in out["reason"].fillna("")]
    return out.reset_index(drop=True)


class GenerationFailed(FairvisionError):
    """Every output of a generator failed: the most common cause, how many of how many, and where the list is.

    ``generator``, ``n_total``, ``cause``, ``n_cause``, ``example`` (one reason of that cause) and ``failures``
    (:func:`failure_table`) are kept, so a command can write the list elsewhere and say so
    (:meth:`message_for`).
    """

    def __init__(self, generator: str, records: pd.DataFrame, where: str):
        self.generator = str(generator)
        self.failures = failure_table(records)
        self.n_total = int(len(records))
        self.cause, self.n_cause = most_common_cause(self.failures["cause"])
        same = self.failures.loc[self.failures["cause"] == self.cause, "reason"]
        self.example = str(same.iloc[0]) if len(same) else ""
        super().__init__(self.message_for(where))

    def message_for(self, where: str) -> str:
        """The one-line message naming ``where`` the failures table is."""
        n = self.n_total
        return (f"generator {self.generator!r}: all {n:,} generation{'s' if n != 1 else ''} failed; most common "
                f"cause: {self.cause} ({self.n_cause:,} of {n:,}, e.g. {self.example}); every failure with its "
                f"reason: {where}")
