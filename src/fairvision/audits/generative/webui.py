"""One bounded exchange with the img2img JSON API of a local Stable Diffusion web UI (docs/METHODS.md §10.1).

:func:`img2img` posts a payload to ``{url}/sdapi/v1/img2img`` (AUTOMATIC1111, Forge) and returns the bytes of
the first returned image. At most ``max_bytes`` of the reply are read (default :data:`MAX_REPLY_BYTES`,
64 MiB): a larger reply is refused, before it is read when its ``Content-Length`` says so, so a server that
answers too much fails that one prompt with a reason instead of filling the memory. Every failure is a
:class:`~fairvision.audits.generative.failures.GenerationError` with its cause (``HTTP 500``, ``timeout``,
``connection refused``, ``connection failed``, ``not an image``, ``image too large``) and a plain message.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import urllib.error
import urllib.request

from fairvision.audits.generative.failures import GenerationError, classify

__all__ = ["ENDPOINT", "MAX_REPLY_BYTES", "img2img", "read_capped"]

ENDPOINT = "/sdapi/v1/img2img"
#: the most bytes read from one reply (a 1024 x 1024 PNG in base64 JSON is a few MB)
MAX_REPLY_BYTES = 64 * 2**20


def read_capped(resp, max_bytes: int, where: str) -> bytes:
    """The body of an HTTP response, or a :class:`GenerationError` (``image too large``) when it is over ``max_bytes``."""
    too_big = f"{where}: the answer is larger than max_bytes ({max_bytes:,} bytes); raise max_bytes if it is meant to be"
    length = str(resp.headers.get("Content-Length") or "").strip()
    if length.isdigit() and int(length) > max_bytes:
        raise GenerationError("image too large", f"{too_big} (Content-Length {int(length):,})")
    data = resp.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise GenerationError("image too large", too_big)
    return data


def img2img(url: str, payload: dict, *, timeout: float, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """POST ``payload`` to ``url + ENDPOINT``; the decoded bytes of the first of the reply's ``images``."""
    where = f"{url}{ENDPOINT}"
    req = urllib.request.Request(where, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(read_capped(resp, max_bytes, where).decode())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GenerationError("not an image", f"{where}: the answer is not JSON (not an image)") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # HTTPError is a URLError
        cause, message = classify(exc)
        raise GenerationError(cause, f"{where}: {message}") from None
    images = body.get("images") if isinstance(body, dict) else None
    if not images or not isinstance(images, list) or not isinstance(images[0], str):
        raise GenerationError("not an image", f"{where}: the answer has no images")
    data = images[0].split(",", 1)[1] if images[0].startswith("data:") else images[0]
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        raise GenerationError("not an image", f"{where}: the first image is not base64") from None
