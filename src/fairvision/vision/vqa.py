"""Visual question answering adapters: anything that answers ``(image, question) -> text`` (docs/METHODS.md §12.3).

Every adapter has ``answer(image_path, question) -> str`` and a ``signature`` string: what, besides the image
and the question, decides its answers (the model, its settings). The VQA probe keys the answers it keeps in the
results store by the image's SHA-256, the signature and the question, so a run that was interrupted resumes and
a different model or setting is asked again.

- :class:`CallableVQA` wraps any Python function ``fn(image, question) -> str`` (the image as an RGB uint8
  array, a PIL image or the path).
- :class:`TransformersVQA` runs local Hugging Face weights (BLIP / BLIP-2 question answering, or any
  image-text-to-text model with a chat template), loaded with ``local_files_only``: nothing is downloaded.
- :class:`OpenAIChatVQA` posts to a locally running OpenAI-compatible chat endpoint with image input (vLLM,
  the llama.cpp server, Ollama), with the standard library's ``urllib``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import io
import json
import os
import socket
import threading
import time
import types
import urllib.error
import urllib.request
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from fairvision.errors import FairvisionError, InputFileError, ParameterError
from PIL import Image

from fairvision.io.images import check_image_pixels, encode_png, read_image
from fairvision.vision.clip import weights_fingerprint

#: MIME type of image files sent as they are (by file suffix; kept for callers, the content type sent is taken
#: from the file's bytes, see :func:`sniff_mime`); other formats are re-encoded as PNG
MIME = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp", ".gif": "image/gif"}
IMAGE_KINDS = ("array", "pil", "path")
#: default longest side (pixels) of the images the HTTP adapter sends; larger ones are downscaled
MAX_SIDE = 1024
#: data URLs kept per adapter (the questions of one image are asked one after the other)
DATA_URL_CACHE = 32
#: default cap on the bytes read from one HTTP reply of :class:`OpenAIChatVQA` (1 MB; an answer is a few hundred
#: bytes): a longer reply is a failed reply, refused after reading at most this many bytes plus one chunk
MAX_REPLY_BYTES = 1_000_000
#: bytes read from the socket at a time
READ_CHUNK = 64 * 1024
#: bytes of an HTTP error reply's body read for its one-line message
ERROR_BODY_BYTES = 4096


class FailedReply(FairvisionError):
    """A reply that arrived but holds no answer: larger than the adapter's byte cap, or ``content: null``.

    The VQA probe counts these per question and leaves them out of every rate (they are neither an answer nor a
    model that stays silent); they are not kept in the results store, so a later run asks again. ``reason`` is
    the short kind of failure used for counting; the message names the URL and the details.
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def read_reply(resp, limit: int, *, url: str = "reply", deadline: float | None = None) -> bytes:
    """The body of an HTTP reply, reading at most ``limit`` bytes (plus one chunk) (docs/METHODS.md §12.3).

    A ``Content-Length`` above ``limit`` is refused before anything is read; otherwise the body is read in
    chunks of at most :data:`READ_CHUNK` bytes (one socket read each) and refused as soon as more than ``limit``
    bytes came. ``deadline`` (a ``time.monotonic()`` value) bounds the whole read: past it, ``TimeoutError``.
    A body shorter than its ``Content-Length`` raises ``http.client.IncompleteRead``.

    Raises
    ------
    FailedReply
        With reason ``"reply over the byte cap"`` when the reply is larger than ``limit``.
    """
    declared = resp.headers.get("Content-Length") if getattr(resp, "headers", None) is not None else None
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise FailedReply(f"{url}: reply of {int(declared)} bytes (Content-Length) is larger than the cap of "
                          f"{limit} bytes (max_reply_bytes); not read", "reply over the byte cap")
    read = getattr(resp, "read1", None) or resp.read
    buf = bytearray()
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("reply not complete in time")
        chunk = read(min(READ_CHUNK, limit + 1 - len(buf)))
        if not chunk:
            if declared is not None and declared.strip().isdigit() and len(buf) < int(declared):
                raise http.client.IncompleteRead(bytes(buf), int(declared) - len(buf))  # read1 does not say
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise FailedReply(f"{url}: reply larger than the cap of {limit} bytes (max_reply_bytes); stopped "
                              f"reading after {len(buf)} bytes", "reply over the byte cap")


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CallableVQA:
    """Any function ``fn(image, question) -> str`` as a VQA adapter.

    Parameters
    ----------
    fn : callable
        Called with the image and the question; returns the answer text (None counts as no response).
    name : str, optional
        Identity of the function in the results store. Default: its module and qualified name plus a hash of
        its code (bytecode, constants and names, nested code included), its default arguments and the values
        of its closure cells (their ``repr``), so two lambdas, or two closures of one factory with different
        captured values, do not share stored answers. When that hash cannot be taken reliably (a callable
        object, a captured value whose ``repr`` holds a memory address, an empty cell), the adapter refuses a
        results store until ``name`` is given. Globals the function reads are not part of the hash: give a
        new name when its behaviour changes through them.
    image : {"array", "pil", "path"}
        What ``fn`` receives: an ``(H, W, 3)`` uint8 RGB array (default), a PIL image, or the path as a str.
    """

    def __init__(self, fn: Callable[[Any, str], Any], *, name: str | None = None, image: str = "array"):
        if not callable(fn):
            raise FairvisionError(f"CallableVQA needs a callable, not {type(fn).__name__}")
        if image not in IMAGE_KINDS:
            raise FairvisionError(f"image must be one of {', '.join(IMAGE_KINDS)}, not {image!r}")
        self.fn = fn
        self.image = image
        #: why the default identity is not reliable (None: it is, or ``name`` was given)
        self.unreliable: str | None = None
        if name:
            self.name = str(name)
        else:
            base = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
            digest, self.unreliable = function_fingerprint(fn)
            self.name = f"{base}#{digest[:16]}"

    @property
    def cacheable(self) -> bool:
        """Whether answers may be kept in a results store under :attr:`signature`."""
        return self.unreliable is None

    def store_error(self) -> str:
        """The one-line reason a results store is refused (see ``name``)."""
        return (f"CallableVQA({self.name.split('#')[0]}): cannot identify the function reliably for the results "
                f"store ({self.unreliable}); pass name='...' (a new one whenever its behaviour changes) or no store")

    @property
    def signature(self) -> str:
        return f"callable:{self.name}:{self.image}"

    def answer(self, image_path: str | os.PathLike, question: str) -> str:
        if self.image == "path":
            img: Any = str(image_path)
        elif self.image == "pil":
            img = load_pil(image_path)
        else:
            img = read_image(image_path)
        out = self.fn(img, question)
        return "" if out is None else str(out)


def function_fingerprint(fn: Callable) -> tuple[str, str | None]:
    """SHA-256 of what decides a Python function's behaviour, and why it is unreliable (None when it is not).

    Hashed: the code object (``co_code``, ``co_consts`` with nested code objects recursively, ``co_names``),
    ``__defaults__`` and ``__kwdefaults__`` and the closure cell values; functions among them recursively, arrays
    by their bytes, other values by ``repr``. Unreliable: an object without ``__code__`` (a callable instance, ``functools.partial``,
    a builtin), an empty closure cell, or a ``repr`` that holds a memory address (``... at 0x...``), which differs
    between runs.
    """
    h = hashlib.sha256()
    problems: list[str] = []

    def code(c: types.CodeType) -> None:
        h.update(b"code:")
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                code(const)
            else:
                value(const)

    def value(v: Any, depth: int = 0) -> None:
        if isinstance(v, types.FunctionType) and depth < 8:
            func(v, depth + 1)
            return
        if hasattr(v, "tobytes") and hasattr(v, "dtype") and hasattr(v, "shape"):  # an array: all of its values
            h.update(f"array:{v.dtype}:{tuple(v.shape)}:".encode())
            h.update(v.tobytes())
            return
        text = repr(v)
        if " at 0x" in text:
            problems.append(f"{type(v).__name__} value {_one_line(text, 60)} has no stable repr")
        h.update(b"value:" + text.encode("utf-8", "replace"))

    def func(f: types.FunctionType, depth: int = 0) -> None:
        code(f.__code__)
        value(f.__defaults__, depth)
        value(sorted((f.__kwdefaults__ or {}).items()), depth)
        for cell in f.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:
                problems.append("an empty closure cell")
                continue
            value(content, depth)

    target = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(target, types.FunctionType):
        func(target)
        if target is not fn:
            value(fn.__self__)
    else:
        problems.append(f"{type(fn).__name__} is not a plain Python function")
        h.update(repr(type(fn)).encode())
    return h.hexdigest(), (problems[0] if problems else None)


def load_pil(path: str | os.PathLike):
    """An RGB PIL image of a file (EXIF orientation applied, as :func:`fairvision.io.images.read_image`)."""
    return Image.fromarray(read_image(path))


class TransformersVQA:
    """Local Hugging Face weights as a VQA adapter (lazy import of ``transformers`` and ``torch``).

    Models of type ``blip`` (``BlipForQuestionAnswering``) and ``blip-2`` (``Blip2ForConditionalGeneration``,
    prompted ``"Question: {question} Answer:"`` as in its model card) are loaded with
    ``AutoModelForVisualQuestionAnswering``; every other model with ``AutoModelForImageTextToText`` and asked
    through its processor's chat template (one user turn: the image, then the question). Decoding is greedy.

    Parameters
    ----------
    path : path-like
        Folder of ``save_pretrained`` weights and processor (read with ``local_files_only=True``).
    max_new_tokens : int
        Longest answer, in tokens.
    device : str
        Torch device (``"cpu"``, ``"cuda"``, ...).
    prompt : str, optional
        Template with ``{question}`` (default: the question as it is; ``blip-2``: see above).
    """

    def __init__(self, path: str | os.PathLike, *, max_new_tokens: int = 40, device: str = "cpu",
                 prompt: str | None = None):
        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise InputFileError(f"{self.path}: no config.json; give a folder written by save_pretrained "
                                 "(nothing is downloaded)")
        self.max_new_tokens = int(max_new_tokens)
        self.device = device
        self.prompt = prompt
        self._model = None
        self._processor = None
        self._kind = None

    @functools.cached_property
    def _files_fingerprint(self) -> str:
        # the folder's files, hashed once per adapter (weights by name, size and ends: vision.clip)
        return weights_fingerprint([p for p in self.path.iterdir() if p.is_file()])

    @property
    def signature(self) -> str:
        return (f"transformers:{self.path.resolve()}:{self._files_fingerprint[:16]}:{self.max_new_tokens}:"
                f"{self.prompt}")

    def _load(self) -> None:
        if self._model is not None:
            return
        # lazy: transformers and torch take seconds to import and are only needed with this adapter
        import transformers
        from transformers import AutoConfig, AutoProcessor

        try:
            config = AutoConfig.from_pretrained(self.path, local_files_only=True)
            self._processor = AutoProcessor.from_pretrained(self.path, local_files_only=True)
            vqa_types = transformers.models.auto.modeling_auto.MODEL_FOR_VISUAL_QUESTION_ANSWERING_MAPPING_NAMES
            if config.model_type in ("blip", "blip-2"):
                self._kind = config.model_type
                cls = transformers.AutoModelForVisualQuestionAnswering
            elif config.model_type in vqa_types:
                raise InputFileError(f"{self.path}: model type {config.model_type!r} answers from a fixed list of "
                                     "labels, not free text; use a generative model (BLIP, BLIP-2, or an "
                                     "image-text-to-text chat model)")
            else:
                self._kind = "chat"
                cls = transformers.AutoModelForImageTextToText
            self._model = cls.from_pretrained(self.path, local_files_only=True).to(self.device).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise InputFileError(f"{self.path}: cannot load the model: {_one_line(exc)}") from None

    def answer(self, image_path: str | os.PathLike, question: str) -> str:
        import torch  # lazy: see _load

        self._load()
        image = load_pil(image_path)
        proc = self._processor
        if self._kind == "chat":
            text = (self.prompt or "{question}").format(question=question)
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
            prompt = proc.apply_chat_template(messages, add_generation_prompt=True)
        else:
            default = "Question: {question} Answer:" if self._kind == "blip-2" else "{question}"
            prompt = (self.prompt or default).format(question=question)
        inputs = proc(images=image, text=prompt, return_tensors="pt").to(self.device)
        with torch.no_grad():
            out = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        if self._kind == "chat" or (self._kind == "blip-2" and out.shape[1] > inputs["input_ids"].shape[1]
                                     and bool((out[0, :inputs["input_ids"].shape[1]] == inputs["input_ids"][0]).all())):
            out = out[:, inputs["input_ids"].shape[1]:]  # the prompt is echoed: keep the new tokens
        return proc.batch_decode(out, skip_special_tokens=True)[0].strip()


def sniff_mime(data: bytes) -> str | None:
    """The image type of file bytes from their magic number: ``image/jpeg``, ``png``, ``webp``, ``gif`` or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def image_data_url(path: str | os.PathLike, max_side: int | None = None) -> str:
    """``data:<mime>;base64,...`` of an image file.

    JPEG, PNG, WebP and GIF files (recognised by their bytes, not the file name) are sent as they are when no
    side exceeds ``max_side``; larger images are decoded (EXIF orientation applied), downscaled with area
    interpolation so the longer side is ``max_side`` and re-encoded (JPEG as JPEG at quality 90, others as
    PNG); other formats are re-encoded as PNG. ``max_side`` None or 0 sends every size as it is.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the image ({exc.strerror or exc})") from None
    check_image_pixels(data, path)  # a bomb is refused from its header, even when it would be sent as it is
    mime = sniff_mime(data)
    limit = int(max_side) if max_side else None
    if mime is not None and limit is not None:
        try:
            with Image.open(io.BytesIO(data)) as im:
                big = max(im.size) > limit
        except (OSError, ValueError, Image.DecompressionBombError):
            big = True  # let read_image decode it (or say why it cannot)
        if big:
            small = read_image(path, max_side=limit)
            if mime == "image/jpeg":
                buf = io.BytesIO()
                Image.fromarray(small).save(buf, format="JPEG", quality=90)
                data = buf.getvalue()
            else:
                data, mime = encode_png(small), "image/png"
    elif mime is None:
        data, mime = encode_png(read_image(path, max_side=limit)), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


class OpenAIChatVQA:
    """A locally running OpenAI-compatible chat endpoint with image input as a VQA adapter.

    Posts ``{"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": question},
    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,..."}}]}], "temperature": 0,
    "max_tokens": max_tokens}`` to ``{base_url}/v1/chat/completions`` (vLLM, the llama.cpp server and Ollama
    serve this route) and returns ``choices[0].message.content``.

    Parameters
    ----------
    base_url : str
        Server root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted).
    model : str
        Model name the server knows.
    api_key : str, optional
        Sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY`` when set, else none.
    timeout : float
        Seconds to wait for one answer (positive).
    retries : int
        Further tries after a 5xx reply, a timeout, a reply cut short (``IncompleteRead``) or a connection the
        server closed without answering (``RemoteDisconnected``), waiting ``backoff * 2**i`` seconds before try
        ``i + 1``. Any other malformed HTTP reply is a one-line error.
    max_side : int, optional
        Longest side in pixels of the images sent (default 1024): larger ones are downscaled before sending;
        None or 0 sends them as they are. Part of :attr:`signature`. The data URL of an image is reused for the
        questions that follow (the last 32 images are kept).
    max_tokens, temperature, system
        Answer length, sampling temperature (0: greedy, reproducible) and an optional system message.
    max_reply_bytes : int
        Most bytes read from one reply (default :data:`MAX_REPLY_BYTES`, 1 MB): a larger reply (by its
        ``Content-Length``, or once more bytes came) is a :class:`FailedReply`, not read to its end and not
        tried again. Not part of :attr:`signature` (it decides whether an answer is read, not what it says).

    A reply whose ``choices[0].message.content`` is null is a :class:`FailedReply` too (unless the message
    carries a ``refusal`` text, which is the answer), never an empty answer: an empty answer is a model that
    stays silent, a null one is a reply without an answer. The time limit ``timeout`` also bounds reading the
    whole reply.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, max_tokens: int = 64, temperature: float = 0.0,
                 system: str | None = None, max_side: int | None = MAX_SIDE,
                 max_reply_bytes: int = MAX_REPLY_BYTES):
        if not base_url or not str(base_url).startswith(("http://", "https://")):
            raise ParameterError("base_url", f"must start with http:// or https://, not {base_url!r}")
        if not model:
            raise ParameterError("model", "is needed by the HTTP backend: the model name the server knows")
        root = str(base_url).rstrip("/")
        self.base_url = root.removesuffix("/v1")
        self.url = f"{self.base_url}/v1/chat/completions"
        self.model = str(model)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = float(timeout)
        if not self.timeout > 0:
            raise ParameterError("timeout", f"must be a positive number of seconds, not {timeout!r}")
        if max_side is not None and int(max_side) < 0:
            raise ParameterError("max_side", f"must be 0 (send as is) or a positive number of pixels, not {max_side!r}")
        self.max_side = int(max_side) if max_side else None
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int) or max_reply_bytes < 1:
            raise ParameterError("max_reply_bytes", f"must be a positive whole number of bytes, not {max_reply_bytes!r}")
        self.max_reply_bytes = max_reply_bytes
        self._urls: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.retries = max(0, int(retries))
        self.backoff = float(backoff)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.system = system

    @property
    def signature(self) -> str:
        size = "" if self.max_side is None else f":max_side={self.max_side}"
        return (f"openai-chat:{self.base_url}:{self.model}:{self.max_tokens}:{self.temperature}:"
                f"{hashlib.sha256((self.system or '').encode()).hexdigest()[:12]}{size}")

    def data_url(self, image_path: str | os.PathLike) -> str:
        """The image as a data URL (:func:`image_data_url` with :attr:`max_side`), reused for the same path."""
        key = str(image_path)
        with self._lock:
            hit = self._urls.get(key)
            if hit is not None:
                self._urls.move_to_end(key)
                return hit
        url = image_data_url(image_path, self.max_side)
        with self._lock:
            self._urls[key] = url
            while len(self._urls) > DATA_URL_CACHE:
                self._urls.popitem(last=False)
        return url

    def payload(self, image_path: str | os.PathLike, question: str) -> dict:
        """The JSON body sent for one image and question."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": [
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": self.data_url(image_path)}},
        ]})
        return {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}

    def answer(self, image_path: str | os.PathLike, question: str) -> str:
        body = json.dumps(self.payload(image_path, question)).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = read_reply(resp, self.max_reply_bytes, url=self.url,
                                     deadline=time.monotonic() + self.timeout)
            except urllib.error.HTTPError as exc:
                try:
                    detail = _one_line(exc.read(ERROR_BODY_BYTES).decode("utf-8", "replace"))
                except (OSError, http.client.HTTPException):
                    detail = _one_line(exc.reason)
                finally:
                    exc.close()  # the rest of the body is not read
                if exc.code >= 500:
                    last = f"HTTP {exc.code}: {detail}"
                    continue
                raise FairvisionError(f"{self.url}: HTTP {exc.code}: {detail}") from None
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, ConnectionRefusedError):
                    raise FairvisionError(f"{self.url}: connection refused; is the server running "
                                          "(vLLM, llama.cpp server, Ollama) at that address?") from None
                if isinstance(reason, (socket.timeout, TimeoutError)):
                    last = f"no answer within {self.timeout:g} s"
                    continue
                raise FairvisionError(f"{self.url}: {_one_line(reason)}") from None
            except (socket.timeout, TimeoutError):
                last = f"no answer within {self.timeout:g} s"
                continue
            except http.client.IncompleteRead as exc:
                last = f"reply cut short after {len(exc.partial)} bytes"
                continue
            except http.client.RemoteDisconnected:
                last = "the server closed the connection without replying"
                continue
            except http.client.HTTPException as exc:
                raise FairvisionError(f"{self.url}: not a valid HTTP reply ({type(exc).__name__}: "
                                      f"{_one_line(exc, 80)}); is an HTTP server listening there?") from None
            except (ConnectionError, OSError) as exc:
                raise FairvisionError(f"{self.url}: {_one_line(exc)}") from None
            return self.parse(raw)
        raise FairvisionError(f"{self.url}: {last} (after {self.retries + 1} tries)")

    def parse(self, raw: bytes) -> str:
        """The answer text of a chat completion response (content as a string or as a list of text parts); a
        null content is a :class:`FailedReply` (a ``refusal`` text beside it is the answer)."""
        try:
            doc = json.loads(raw)
            message = doc["choices"][0]["message"]
            content = message.get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise FairvisionError(f"{self.url}: malformed response (expected JSON with "
                                  f"choices[0].message.content): {_one_line(raw.decode('utf-8', 'replace'), 120)}") from None
        if content is None:
            refusal = message.get("refusal")
            if isinstance(refusal, str) and refusal.strip():
                return refusal.strip()
            finish = doc["choices"][0].get("finish_reason")
            raise FailedReply(f"{self.url}: the reply's message content is null (no answer text"
                              + (f"; finish_reason {_one_line(finish, 40)!r}" if finish else "") + ")",
                              "content null")
        if isinstance(content, list):
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict)).strip()
        return str(content).strip()
