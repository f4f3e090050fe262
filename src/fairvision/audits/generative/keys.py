"""Unknown keys in a table of the generative spec, with a did-you-mean (docs/METHODS.md §10.1).

Every table of the spec whose keys are fixed (the top level, ``[seeds]``, ``[prompts]``, each generator by its
kind, a built-in editor's shift, ``[assessors]``, ``[thresholds]``, ``[min_effect]``, ``[scores]``) is checked
with :func:`check_keys`: a misspelt key is an error naming the file, the table and the key, with the closest
known key (:func:`difflib.get_close_matches`), instead of being silently ignored.
"""

from __future__ import annotations

import difflib
from typing import Iterable

from fairvision.errors import FairvisionError

__all__ = ["check_keys", "closest", "unknown_key_message"]


def closest(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` was most likely meant to be: the same ignoring case, else the closest by
    :func:`difflib.get_close_matches` (cutoff 0.6), else None."""
    known = [str(k) for k in known]
    same = [k for k in known if k.casefold() == str(key).casefold()]
    if same:
        return same[0]
    match = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if not match:
        match = difflib.get_close_matches(str(key).casefold(), [k.casefold() for k in known], n=1, cutoff=0.6)
        match = [next(k for k in known if k.casefold() == match[0])] if match else []
    return match[0] if match else None


def unknown_key_message(key: str, known: Iterable[str], where: str) -> str:
    """``"<where>: unknown key 'noise_l'; did you mean 'noise_L'? (keys: ...)"``."""
    known = list(dict.fromkeys(str(k) for k in known))
    guess = closest(key, known)
    hint = f"; did you mean {guess!r}?" if guess else ""
    return f"{where}: unknown key {str(key)!r}{hint} (known keys: {', '.join(known)})"


def check_keys(table: dict, known: Iterable[str], where: str) -> None:
    """Raise a :class:`~fairvision.errors.FairvisionError` for the first key of ``table`` not in ``known``."""
    known = list(known)
    for key in table:
        if key not in known:
            raise FairvisionError(unknown_key_message(key, known, where))
