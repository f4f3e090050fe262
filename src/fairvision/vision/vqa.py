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
import hashlib
import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from fairvision.errors import FairvisionError, InputFileError
from PIL import Image

from fairvision.io.images import encode_png, read_image

#: MIME type of image files sent as they are; other formats are re-encoded as PNG
MIME = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp", ".gif": "image/gif"}
IMAGE_KINDS = ("array", "pil", "path")


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
        Identity of the function in the results store (default: its module and qualified name). Give a new name
        when the function's behaviour changes, or the stored answers of the old one are reused.
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
        self.name = name or f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"

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

    @property
    def signature(self) -> str:
        h = hashlib.sha256()
        for name in sorted(os.listdir(self.path)):
            p = self.path / name
            if p.is_file():
                st = p.stat()
                h.update(f"{name}:{st.st_size}".encode())
                if p.suffix in (".json", ".txt", ".model", ".jinja") and st.st_size < 5_000_000:
                    h.update(p.read_bytes())
        return f"transformers:{self.path.resolve()}:{h.hexdigest()[:16]}:{self.max_new_tokens}:{self.prompt}"

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


def image_data_url(path: str | os.PathLike) -> str:
    """``data:<mime>;base64,...`` of an image file: JPEG, PNG, WebP and GIF as they are, other formats as PNG."""
    path = Path(path)
    mime = MIME.get(path.suffix.lower())
    if mime is not None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputFileError(f"{path}: cannot read the image ({exc.strerror or exc})") from None
    else:
        data, mime = encode_png(read_image(path)), "image/png"
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
        Seconds to wait for one answer.
    retries : int
        Further tries after a 5xx reply or a timeout, waiting ``backoff * 2**i`` seconds before try ``i + 1``.
    max_tokens, temperature, system
        Answer length, sampling temperature (0: greedy, reproducible) and an optional system message.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, max_tokens: int = 64, temperature: float = 0.0,
                 system: str | None = None):
        if not base_url or not str(base_url).startswith(("http://", "https://")):
            raise FairvisionError(f"--url must start with http:// or https://, not {base_url!r}")
        if not model:
            raise FairvisionError("the HTTP backend needs a model name (--model)")
        root = str(base_url).rstrip("/")
        self.base_url = root.removesuffix("/v1")
        self.url = f"{self.base_url}/v1/chat/completions"
        self.model = str(model)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.backoff = float(backoff)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.system = system

    @property
    def signature(self) -> str:
        return (f"openai-chat:{self.base_url}:{self.model}:{self.max_tokens}:{self.temperature}:"
                f"{hashlib.sha256((self.system or '').encode()).hexdigest()[:12]}")

    def payload(self, image_path: str | os.PathLike, question: str) -> dict:
        """The JSON body sent for one image and question."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": [
            {"type": "text", "text": question},
            {"type": "image_url", "image_url": {"url": image_data_url(image_path)}},
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
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                detail = _one_line(exc.read().decode("utf-8", "replace"))
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
            except (ConnectionError, OSError) as exc:
                raise FairvisionError(f"{self.url}: {_one_line(exc)}") from None
            return self.parse(raw)
        raise FairvisionError(f"{self.url}: {last} (after {self.retries + 1} tries)")

    def parse(self, raw: bytes) -> str:
        """The answer text of a chat completion response (content as a string or as a list of text parts)."""
        try:
            doc = json.loads(raw)
            content = doc["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise FairvisionError(f"{self.url}: malformed response (expected JSON with "
                                  f"choices[0].message.content): {_one_line(raw.decode('utf-8', 'replace'), 120)}") from None
        if content is None:
            return ""
        if isinstance(content, list):
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict)).strip()
        return str(content).strip()
