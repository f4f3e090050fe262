"""Keyed pseudonyms for ids before release, and the curator's key file (docs/METHODS.md §13.10).

A pseudonym is ``prefix + the first HASH_HEX hex digits of HMAC-SHA256(key, id)``: the same id and key give the
same pseudonym in every table and every run, so tables still join; without the key nobody can recompute it from
a guessed id (a plain hash of an id such as ``subject_0042`` could be reversed by trying all likely ids). The key
stays with the curator; the released data hold only pseudonyms.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Iterable

from fairvision.errors import FairvisionError, InputFileError

#: Hex digits kept of the HMAC-SHA256 (16 = 64 bits): among a million ids the chance that two share a
#: pseudonym is about 3 in 100 million, and a collision is checked for and refused anyway.
HASH_HEX = 16
#: Bytes of a key made by :func:`create_key` (256 bits, written as 64 hex digits).
KEY_BYTES = 32
#: Shortest key accepted from a key file (characters after stripping white space).
MIN_KEY_CHARS = 32
#: Prefix of each kind of id.
PREFIXES = {"sample": "s_", "subject": "p_", "id": "x_"}


def create_key(path: str | os.PathLike) -> bytes:
    """Write a new random key (64 hex digits and a newline) to ``path``, readable by its owner only (0600).

    Refuses to overwrite an existing file (a lost or replaced key changes every pseudonym)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise FairvisionError(f"{path}: key file exists already; leave out --new-key to use it") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot create the key file: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    os.chmod(path, 0o600)  # whatever the umask
    return text.encode()


def read_key(path: str | os.PathLike) -> bytes:
    """The key in ``path``: its text without surrounding white space, at least :data:`MIN_KEY_CHARS` characters."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such key file (give --new-key to create one)")
    if path.is_dir():
        raise InputFileError(f"{path}: is a folder, not a key file")
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the key file: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY_CHARS:
        raise InputFileError(f"{path}: key of {len(key)} characters is too short (at least {MIN_KEY_CHARS}; "
                             "--new-key makes a 256-bit key)")
    return key


def key_is_private(path: str | os.PathLike) -> bool:
    """Whether the key file is readable by its owner only (no group or other permission bits)."""
    return not (Path(path).stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))


def pseudonym(key: bytes, value: str, prefix: str = "s_", length: int = HASH_HEX) -> str:
    """``prefix`` + the first ``length`` hex digits of HMAC-SHA256(``key``, ``value`` as UTF-8)."""
    return prefix + hmac.new(key, str(value).encode("utf-8"), hashlib.sha256).hexdigest()[:length]


def pseudonyms(key: bytes, values: Iterable[str], prefix: str = "s_", *, what: str = "ids") -> dict[str, str]:
    """``{id: pseudonym}`` of the distinct ``values``; two ids with one pseudonym are refused (never expected at
    64 bits; it would merge two people)."""
    out = {str(v): pseudonym(key, str(v), prefix) for v in dict.fromkeys(map(str, values))}
    if len(set(out.values())) < len(out):
        raise FairvisionError(f"two {what} have the same pseudonym; use another key (--new-key with a new key file)")
    return out
