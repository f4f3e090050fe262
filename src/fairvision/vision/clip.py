"""CLIP-style model adapters: images and prompts to unit embedding vectors (docs/METHODS.md §12.4).

The zero-shot probe (docs/METHODS.md §12.1) reads precomputed embeddings. The adapters here make them from
weights the user already has, so that images go to a zero-shot audit in two commands:

- :class:`TransformersCLIP`: a Hugging Face ``CLIPModel`` checkpoint folder, loaded with
  ``local_files_only=True`` (fairvision never downloads). The checkpoint's own processor is used when the folder
  has one; otherwise the images go through :func:`clip_preprocess` (numpy / PIL) with the checkpoint's input size.
- :class:`OpenCLIP`: an ``open_clip`` architecture name and a local weights file
  (``open_clip.create_model_and_transforms(arch, pretrained=FILE)``). open_clip is not a dependency of
  fairvision and is imported only here; its code path is tested against a stand-in module with open_clip's API.
- :class:`TinyRandomCLIP` (``tiny-random``): a small CLIP model built from a config with weights drawn from a
  seeded numpy generator and a byte-level tokenizer built in code. No PyPI wheel ships CLIP weights, so this is
  the offline demo backend: it is deterministic and its labels are meaningless (:attr:`ClipAdapter.note`).

Every adapter returns float32 L2-normalised rows, runs batches under ``torch.no_grad`` and has a ``signature``
(a hash of what shapes its output: backend, weights fingerprint, preprocessing, library versions) that keys
its image embeddings in the results store (:func:`fairvision.vision.clip_embeddings.embed_images`).

torch, transformers and open_clip are imported inside the adapters: they take several seconds to import and are
optional (the ``diffusers`` extra brings torch and transformers).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from fairvision.engine.cache import content_key
from fairvision.errors import FairvisionError, InputFileError, ParameterError

#: the three backends of ``fairvision audit vlm embed --backend``
BACKENDS = ("transformers", "open_clip", "tiny-random")
#: OpenAI CLIP's per-channel normalisation (RGB in [0, 1]), used by CLIP checkpoints and open_clip's OpenAI models
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
#: the warning every output made with ``tiny-random`` carries
TINY_RANDOM_NOTE = ("tiny-random is a randomly initialised demo model: its embeddings and the zero-shot labels "
                    "made from them are meaningless (they show the pipeline, not a finding)")
TORCH_HINT = "pip install 'fairvision[clip]' (torch==2.13.0 and transformers)"
#: files of a checkpoint fingerprinted in full below this size, by size and their first and last MiB above it
_FULL_HASH_BYTES = 8 << 20
_EDGE_BYTES = 1 << 20


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32 (an all-zero row stays zero)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))[:, None]
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


def clip_preprocess(images: Sequence[np.ndarray], size: int, *, mean: Sequence[float] = CLIP_MEAN,
                    std: Sequence[float] = CLIP_STD) -> np.ndarray:
    """CLIP's image preprocessing in numpy / PIL (docs/METHODS.md §12.4).

    Each RGB uint8 image is resized (bicubic) so its shorter side is ``size`` (longer side rounded down as in
    Hugging Face's ``CLIPImageProcessor``), centre-cropped to ``size x size`` (offset ``(h - size) // 2``, as Hugging Face crops),
    scaled to [0, 1] and normalised per channel with ``mean`` and ``std``.

    Parameters
    ----------
    images : sequence of numpy.ndarray
        ``(H, W, 3)`` uint8 RGB arrays.
    size : int
        Input side of the model.
    mean, std : sequence of float
        Per-channel normalisation (default OpenAI CLIP's).

    Returns
    -------
    numpy.ndarray, shape (n, 3, size, size), float32
    """
    from PIL import Image  # lazy: only the embedding path needs PIL

    size = int(size)
    out = np.empty((len(images), size, size, 3), dtype=np.uint8)
    for i, img in enumerate(images):  # one resize per image (PIL's C resampler); the rest is vectorised below
        img = np.asarray(img)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise FairvisionError(f"image {i + 1}: expected an (H, W, 3) uint8 RGB array, got {img.dtype} {img.shape}")
        h, w = img.shape[:2]
        nh, nw = (size, int(size * w / h)) if h <= w else (int(size * h / w), size)
        pil = Image.fromarray(img)
        if (nh, nw) != (h, w):
            pil = pil.resize((nw, nh), Image.Resampling.BICUBIC)
        top, left = (nh - size) // 2, (nw - size) // 2
        out[i] = np.asarray(pil)[top:top + size, left:left + size]
    # (v / 255 - mean) / std as one multiply-add per channel, written straight into the (n, 3, S, S) layout
    scale = (1.0 / (255.0 * np.asarray(std, dtype=np.float64))).astype(np.float32)[:, None, None]
    offset = (-np.asarray(mean, dtype=np.float64) / np.asarray(std, dtype=np.float64)).astype(np.float32)[:, None, None]
    x = np.empty((len(images), 3, size, size), dtype=np.float32)
    np.multiply(out.transpose(0, 3, 1, 2), scale, out=x)
    x += offset
    return x


def weights_fingerprint(paths: Sequence[str | Path]) -> str:
    """SHA-256 identifying model files: small files by their whole content, large ones (weights) by their name,
    size and first and last MiB (hashing gigabytes on every run would cost seconds; docs/METHODS.md §12.4)."""
    h = hashlib.sha256()
    for p in sorted(Path(x) for x in paths):
        size = p.stat().st_size
        h.update(f"{p.name}\0{size}\0".encode())
        with open(p, "rb") as fh:
            if size <= _FULL_HASH_BYTES:
                h.update(fh.read())
            else:
                h.update(fh.read(_EDGE_BYTES))
                fh.seek(size - _EDGE_BYTES)
                h.update(fh.read(_EDGE_BYTES))
    return h.hexdigest()


def _import_torch():
    # lazy: torch takes ~2 s to import and is an optional dependency
    try:
        import torch
    except ImportError as exc:
        raise FairvisionError(f"CLIP adapters need torch: {TORCH_HINT} ({exc})") from None
    return torch


def _pick_device(torch, device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class ClipAdapter(ABC):
    """A CLIP-style model as two encoders into one space (docs/METHODS.md §12.4).

    Subclasses set ``name``, ``signature`` and ``note`` and implement ``_image_batch`` (a list of RGB uint8
    arrays to an (n, d) array) and ``_text_batch`` (a list of strings to an (m, d) array); this class batches,
    runs them under ``torch.no_grad`` and L2-normalises the rows.

    Attributes
    ----------
    name : str
        What the model is, for reports (backend and model).
    signature : str
        Hash of everything that shapes the embeddings; keys the stored image embeddings.
    note : str or None
        A warning every output must carry (``tiny-random``: its labels are meaningless).
    batch_size : int
        Images or prompts per forward pass.
    """

    backend = ""

    def __init__(self, batch_size: int = 32):
        if int(batch_size) < 1:
            raise ParameterError("batch_size", f"must be at least 1, not {batch_size}")
        self.batch_size = int(batch_size)
        self.name = self.backend
        self.signature = ""
        self.note: str | None = None
        self.calls = 0  # forward passes run (tests and the CLI's summary count them)

    def _batched(self, items: list, fn: Callable) -> np.ndarray:
        torch = _import_torch()
        parts = []
        with torch.no_grad():
            for i in range(0, len(items), self.batch_size):
                self.calls += 1
                out = fn(items[i:i + self.batch_size])
                if hasattr(out, "detach"):
                    out = out.detach().float().cpu().numpy()
                parts.append(np.asarray(out, dtype=np.float32))
        if not parts:
            raise FairvisionError("nothing to embed")
        return l2_normalise(np.concatenate(parts, axis=0))

    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """(n, d) float32 unit rows for ``(H, W, 3)`` uint8 RGB images."""
        return self._batched(list(images), self._image_batch)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(m, d) float32 unit rows for prompts."""
        return self._batched([str(t) for t in texts], self._text_batch)

    @abstractmethod
    def _image_batch(self, images):
        """Raw image embeddings of one batch (a tensor or array)."""

    @abstractmethod
    def _text_batch(self, texts):
        """Raw text embeddings of one batch (a tensor or array)."""

    def describe(self) -> dict:
        """Provenance written next to the embeddings (and read back by :func:`read_provenance`)."""
        return {"backend": self.backend, "model": self.name, "signature": self.signature, "note": self.note}


def _features(out):
    """Projected features from ``get_*_features``: a tensor (transformers 4) or an output with ``pooler_output``
    (transformers 5)."""
    return out if hasattr(out, "shape") else out.pooler_output


class _HFModelMixin:
    """Shared forward passes of the transformers-based adapters (a ``CLIPModel`` with a tokenizer)."""

    def _setup(self, model, tokenizer, image_processor, size, mean, std, device):
        self._model, self._tokenizer, self._image_processor = model, tokenizer, image_processor
        self._size, self._mean, self._std, self._device = int(size), tuple(mean), tuple(std), device
        self._max_len = int(model.config.text_config.max_position_embeddings)

    def _image_batch(self, images):
        torch = _import_torch()
        if self._image_processor is not None:
            px = self._image_processor(images=list(images), return_tensors="pt")["pixel_values"]
        else:
            px = torch.from_numpy(clip_preprocess(images, self._size, mean=self._mean, std=self._std))
        return _features(self._model.get_image_features(pixel_values=px.to(self._device)))

    def _text_batch(self, texts):
        enc = self._tokenizer(list(texts), padding=True, truncation=True, max_length=self._max_len, return_tensors="pt")
        return _features(self._model.get_text_features(input_ids=enc["input_ids"].to(self._device),
                                                       attention_mask=enc["attention_mask"].to(self._device)))


def _quiet_transformers():
    """Turn off transformers' weight-loading progress bars (they would print on every run); returns the undo."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar if was else (lambda: None)


class TransformersCLIP(_HFModelMixin, ClipAdapter):
    """A Hugging Face ``CLIPModel`` checkpoint folder the user has (``local_files_only``; docs/METHODS.md §12.4).

    Parameters
    ----------
    path : path-like
        Folder with ``config.json`` (``model_type`` ``clip``), the weights (``model.safetensors`` or
        ``pytorch_model.bin``) and the tokenizer (``tokenizer.json`` or ``vocab.json`` + ``merges.txt``);
        a ``preprocessor_config.json`` is used when present, else :func:`clip_preprocess` at the model's
        input size with CLIP's mean and std.
    batch_size : int
    device : str
        ``auto`` (CUDA when available), ``cpu``, ``cuda``, ...
    """

    backend = "transformers"

    def __init__(self, path, *, batch_size: int = 32, device: str = "auto"):
        super().__init__(batch_size)
        folder = Path(path).expanduser()
        if not folder.exists():
            raise InputFileError(f"{folder}: no such model folder (the transformers backend needs a local Hugging Face "
                                 "CLIP checkpoint folder)")
        if not folder.is_dir():
            raise InputFileError(f"{folder}: not a folder (the transformers backend needs a local Hugging Face CLIP "
                                 "checkpoint folder)")
        cfg_path = folder / "config.json"
        if not cfg_path.is_file():
            raise InputFileError(f"{folder}: no config.json: not a Hugging Face checkpoint folder")
        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputFileError(f"{cfg_path}: cannot read: {' '.join(str(exc).split())}") from None
        if not isinstance(cfg, dict) or cfg.get("model_type") != "clip":
            kind = cfg.get("model_type") if isinstance(cfg, dict) else None
            raise InputFileError(f"{folder}: model_type {kind!r} in config.json is not a CLIP checkpoint (model_type 'clip')")
        torch = _import_torch()
        try:
            # lazy: transformers takes ~2.5 s to import and is optional
            from transformers import CLIPModel, CLIPProcessor, CLIPTokenizer
        except ImportError as exc:
            raise FairvisionError(f"the transformers backend needs transformers: {TORCH_HINT} ({exc})") from None
        device = _pick_device(torch, device)
        undo = _quiet_transformers()
        try:
            try:
                model = CLIPModel.from_pretrained(str(folder), local_files_only=True)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise InputFileError(f"{folder}: cannot load as a CLIP checkpoint: {' '.join(str(exc).split())[:300]}") from None
            image_processor = None
            try:
                proc = CLIPProcessor.from_pretrained(str(folder), local_files_only=True)
                tokenizer, image_processor = proc.tokenizer, proc.image_processor
            except (OSError, ValueError, KeyError, TypeError):
                try:
                    tokenizer = CLIPTokenizer.from_pretrained(str(folder), local_files_only=True)
                except (OSError, ValueError, KeyError, TypeError):
                    raise InputFileError(f"{folder}: no CLIP tokenizer (tokenizer.json, or vocab.json and merges.txt)") from None
        finally:
            undo()
        model = model.eval().to(device)
        size = int(model.config.vision_config.image_size)
        self._setup(model, tokenizer, image_processor, size, CLIP_MEAN, CLIP_STD, device)
        files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
        import transformers

        self.name = f"transformers CLIP {folder.name}"
        self.path = str(folder.resolve())
        self.signature = content_key({"backend": self.backend, "files": weights_fingerprint(files),
                                      "processor": image_processor is not None, "size": size,
                                      "transformers": transformers.__version__, "torch": torch.__version__})


def _byte_encoder() -> dict[int, str]:
    """GPT-2 / CLIP byte-to-unicode table: each of the 256 bytes as a printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, map(chr, chars)))


def byte_level_vocab() -> dict[str, int]:
    """A CLIP BPE vocabulary of single bytes (each also in its word-final ``</w>`` form) and CLIP's two special
    tokens, with no merges: every word is spelled byte by byte. Built in code, nothing downloaded."""
    chars = list(_byte_encoder().values())
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(tokens)}


#: the tiny-random model's size (vision: 64 px input, 16 px patches; both towers 2 layers of width 32)
TINY_CONFIG = {"width": 32, "layers": 2, "heads": 2, "mlp": 64, "image_size": 64, "patch_size": 16,
               "projection_dim": 32, "context_length": 77}


def tiny_clip_parts(seed: int = 0):
    """The tiny-random model (eval mode, weights from ``numpy.random.default_rng``), its tokenizer and config.

    Every parameter ``name`` is drawn from its own generator seeded with ``(seed, crc32(name))``, so the weights
    depend neither on torch's generator nor on the order the parameters are created in: weight matrices and the
    patch convolution normal with standard deviation ``1 / sqrt(fan_in)`` (so different images get different
    embeddings: with CLIP's 0.02 everywhere all images embed to nearly one vector), token and position embeddings
    and the other vectors normal with 0.02, layer-norm weights 1 and biases 0, ``logit_scale`` log(1/0.07).
    """
    torch = _import_torch()
    try:
        from transformers import CLIPConfig, CLIPModel, CLIPTokenizer  # lazy: see the module docstring
    except ImportError as exc:
        raise FairvisionError(f"the tiny-random backend needs transformers: {TORCH_HINT} ({exc})") from None
    vocab = byte_level_vocab()
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=TINY_CONFIG["context_length"])
    c = TINY_CONFIG
    common = dict(hidden_size=c["width"], intermediate_size=c["mlp"], num_hidden_layers=c["layers"],
                  num_attention_heads=c["heads"])
    config = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), max_position_embeddings=c["context_length"],
                         bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                         pad_token_id=vocab["<|endoftext|>"], **common),
        vision_config=dict(image_size=c["image_size"], patch_size=c["patch_size"], **common),
        projection_dim=c["projection_dim"])
    model = CLIPModel(config).eval()
    state = {}
    for name, tensor in model.state_dict().items():
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])
        if name == "logit_scale":
            value = np.full(tensor.shape, np.log(1 / 0.07))
        elif "norm" in name and name.endswith(".weight"):
            value = np.ones(tensor.shape)
        elif "norm" in name and name.endswith(".bias"):
            value = np.zeros(tensor.shape)
        elif tensor.ndim >= 2 and "position" not in name and "token_embedding" not in name:
            value = rng.normal(0.0, 1.0 / np.sqrt(np.prod(tensor.shape[1:])), tensor.shape)
        else:
            value = rng.normal(0.0, 0.02, tensor.shape)
        state[name] = torch.from_numpy(np.asarray(value, dtype=np.float32))
    model.load_state_dict(state)
    return model, tokenizer, config


class TinyRandomCLIP(_HFModelMixin, ClipAdapter):
    """The offline demo backend ``tiny-random`` (docs/METHODS.md §12.4): a two-layer CLIP with seeded random
    weights and a byte-level tokenizer, all built in code. Same ``seed``, same embeddings; its labels are
    meaningless (:data:`TINY_RANDOM_NOTE`)."""

    backend = "tiny-random"

    def __init__(self, *, seed: int = 0, batch_size: int = 32, device: str = "cpu"):
        super().__init__(batch_size)
        torch = _import_torch()
        device = _pick_device(torch, device)
        model, tokenizer, _ = tiny_clip_parts(seed)
        self._setup(model.to(device), tokenizer, None, TINY_CONFIG["image_size"], CLIP_MEAN, CLIP_STD, device)
        self.seed = int(seed)
        self.name = f"tiny-random (seed {self.seed})"
        self.note = TINY_RANDOM_NOTE
        import transformers

        self.signature = content_key({"backend": self.backend, "seed": self.seed, "config": TINY_CONFIG,
                                      "transformers": transformers.__version__, "torch": torch.__version__})


class OpenCLIP(ClipAdapter):
    """An open_clip architecture with a local weights file (docs/METHODS.md §12.4).

    ``open_clip.create_model_and_transforms(arch, pretrained=FILE)`` builds the model and its evaluation
    transform (applied to each image as a PIL image), ``open_clip.get_tokenizer(arch)`` the tokenizer; features
    come from ``model.encode_image`` / ``model.encode_text``. open_clip is imported here only (``pip install
    open_clip_torch``; it needs torchvision).
    """

    backend = "open_clip"

    def __init__(self, arch: str, path, *, batch_size: int = 32, device: str = "auto"):
        super().__init__(batch_size)
        if not arch:
            raise ParameterError("arch", "is needed by the open_clip backend (an open_clip model name, e.g. ViT-B-32)")
        weights = Path(path).expanduser()
        if not weights.is_file():
            what = "is a folder" if weights.is_dir() else "no such file"
            raise InputFileError(f"{weights}: {what}; the open_clip backend needs a local weights file "
                                 "(.pt, .bin or .safetensors)")
        torch = _import_torch()
        try:
            # lazy: optional, and imports torchvision (seconds)
            import open_clip
        except ImportError as exc:
            raise FairvisionError(f"the open_clip backend needs open_clip: pip install open_clip_torch ({exc})") from None
        listed = getattr(open_clip, "list_models", None)
        if listed is not None and arch not in listed():
            raise FairvisionError(f"unknown open_clip architecture {arch!r} (open_clip.list_models() names them)")
        device = _pick_device(torch, device)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=str(weights), device=device)
            tokenizer = open_clip.get_tokenizer(arch)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise InputFileError(f"{weights}: cannot load as open_clip {arch} weights: "
                                 f"{' '.join(str(exc).split())[:300]}") from None
        self._model, self._preprocess, self._tokenizer, self._device = model.eval(), preprocess, tokenizer, device
        self.name = f"open_clip {arch} {weights.name}"
        self.signature = content_key({"backend": self.backend, "arch": arch, "weights": weights_fingerprint([weights]),
                                      "open_clip": getattr(open_clip, "__version__", "?"), "torch": torch.__version__})

    def _image_batch(self, images):
        from PIL import Image  # lazy, as in clip_preprocess

        torch = _import_torch()
        px = torch.stack([self._preprocess(Image.fromarray(np.asarray(im))) for im in images])
        return self._model.encode_image(px.to(self._device))

    def _text_batch(self, texts):
        return self._model.encode_text(self._tokenizer(list(texts)).to(self._device))


def load_adapter(backend: str, *, model=None, arch: str | None = None, batch_size: int = 32, device: str = "auto",
                 seed: int = 0) -> ClipAdapter:
    """The adapter of ``backend`` (:data:`BACKENDS`; docs/METHODS.md §12.4).

    Parameters
    ----------
    backend : {"transformers", "open_clip", "tiny-random"}
    model : path-like, optional
        ``transformers``: the checkpoint folder; ``open_clip``: the weights file; not used by ``tiny-random``.
    arch : str, optional
        open_clip architecture name (``open_clip`` only).
    batch_size : int
    device : str
        ``auto``, ``cpu``, ``cuda``, ... (``tiny-random`` ignores ``auto`` and runs on the CPU).
    seed : int
        Weights of ``tiny-random``.
    """
    if backend not in BACKENDS:
        raise ParameterError("backend", f"{backend!r} is unknown; use one of {', '.join(BACKENDS)}")
    if backend == "tiny-random":
        if model is not None or arch is not None:
            raise ParameterError("model", "is not used by the tiny-random backend, which builds its own model "
                                          "(give neither model nor arch)")
        return TinyRandomCLIP(seed=seed, batch_size=batch_size, device="cpu" if device == "auto" else device)
    if model is None:
        need = "a local Hugging Face CLIP checkpoint folder" if backend == "transformers" else "a local weights file"
        raise ParameterError("model", f"is needed by the {backend} backend: {need} (fairvision never downloads weights)")
    if backend == "transformers":
        if arch is not None:
            raise ParameterError("arch", "is for the open_clip backend; the transformers backend reads config.json")
        return TransformersCLIP(model, batch_size=batch_size, device=device)
    return OpenCLIP(arch, model, batch_size=batch_size, device=device)
