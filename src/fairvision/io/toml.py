"""Read a TOML file (a spec, a word list, prompt sets) with one-line errors naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from fairvision.errors import InputFileError


def read_toml(path: str | Path, *, what: str = "file") -> dict:
    """The parsed document of ``path``.

    Raises
    ------
    InputFileError
        ``"<path>: no such <what>"`` when the file is missing, ``"<path>: not valid TOML: ..."`` when it
        does not parse.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (FileNotFoundError, IsADirectoryError):
        raise InputFileError(f"{path}: no such {what}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(f"{path}: not valid TOML: {exc}") from None
