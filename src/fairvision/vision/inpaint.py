"""In-painting regions of a photo with a local diffusers in-painting pipeline (docs/METHODS.md §13.11).

FHIBE removes bystanders and personal information (licence plates, documents) before release by in-painting
the annotated regions with a text-guided Stable Diffusion in-painting model. This module is that step for one
image: :class:`Inpainter` loads a ``StableDiffusionInpaintPipeline`` from a folder already on this machine
(``from_pretrained(folder, local_files_only=True)``; nothing is downloaded) and :meth:`Inpainter.inpaint`
in-paints one RGB image inside one boolean mask with FHIBE's settings (:class:`InpaintOptions`):

- the fixed prompt :data:`FHIBE_PROMPT` and negative prompt :data:`FHIBE_NEGATIVE_PROMPT`;
- a guidance scale drawn uniformly from [12, 16] for every image, from a generator seeded with the image's seed
  (:func:`image_seed`: the run's seed and the sample id), so a rerun gives the same image;
- 20 denoising steps of a DDIM scheduler with eta = 0 (the folder's scheduler, rebuilt as DDIM from its config);
- the model sees a window around the regions (:func:`crop_box`; or the whole image) at
  :attr:`InpaintOptions.resolution` (the longer side, 512 by default, each side a multiple of the VAE's scale
  factor); its output is resized back to the window's size;
- the mask is grown by :attr:`InpaintOptions.dilate` pixels (4 by default, a disk) so the seam falls just
  outside the region, and every pixel outside the grown mask is copied back from the original: only the
  (grown) region can change.

Masks come from boxes (:func:`box_mask`) and mask images (:func:`region_mask`, read with
:func:`fairvision.io.masks.load_mask`); several regions of one image unite.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import ndimage

from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.io.masks import load_mask

#: FHIBE's in-painting prompt (Methods, privacy assurance)
FHIBE_PROMPT = "a high-resolution image with no humans or people in it"
#: FHIBE's negative prompt
FHIBE_NEGATIVE_PROMPT = "human, people, person, human body parts, android, animal"
#: FHIBE draws the guidance scale uniformly from this range for every image
FHIBE_GUIDANCE = (12.0, 16.0)
#: FHIBE's denoising steps
FHIBE_STEPS = 20
#: pixels the mask grows by before in-painting (and outside of which the original is copied back)
DEFAULT_DILATE = 4
#: longer side, in pixels, of the image the model works on (Stable Diffusion in-painting models are trained at 512)
DEFAULT_RESOLUTION = 512
SCHEDULERS = ("ddim", "pipeline")
CONTEXTS = ("crop", "whole")
DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class InpaintOptions:
    """How to in-paint (docs/METHODS.md §13.11); the defaults are FHIBE's.

    Parameters
    ----------
    prompt, negative_prompt : str
        Text prompts (FHIBE's fixed pair by default).
    guidance : (float, float)
        The guidance scale of each image is drawn uniformly from this range; equal ends fix it.
    steps : int
        Denoising steps (20).
    dilate : int
        Pixels the mask grows by (a disk of this radius); 0 keeps it as given.
    resolution : int
        Longer side of the image the model sees; each side is rounded down to a multiple of the VAE's scale
        factor. The output is resized back to the image's size.
    scheduler : {"ddim", "pipeline"}
        ``ddim``: a DDIM scheduler built from the folder's scheduler config, run with eta = 0 (FHIBE);
        ``pipeline``: the folder's own scheduler.
    device : str
        ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``, ``mps``.
    dtype : {"float32", "float16", "bfloat16"}
    context : {"crop", "whole"}
        What the model sees: ``crop`` (default) a window around the regions (:func:`crop_box`: their bounding
        box widened by half its size on every side and to at least ``resolution`` pixels, within the image);
        ``whole`` the whole image. Either way it is scaled to ``resolution`` on its longer side.
    """

    prompt: str = FHIBE_PROMPT
    negative_prompt: str = FHIBE_NEGATIVE_PROMPT
    guidance: tuple[float, float] = FHIBE_GUIDANCE
    steps: int = FHIBE_STEPS
    dilate: int = DEFAULT_DILATE
    resolution: int = DEFAULT_RESOLUTION
    scheduler: str = "ddim"
    device: str = "auto"
    dtype: str = "float32"
    context: str = "crop"

    def __post_init__(self) -> None:
        try:
            lo, hi = (float(v) for v in self.guidance)
        except (TypeError, ValueError):
            lo = hi = float("nan")
        if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo <= hi):
            raise ParameterError("guidance", f"must be a range 0 < low <= high, not {self.guidance!r}")
        object.__setattr__(self, "guidance", (lo, hi))
        for name, least in (("steps", 1), ("dilate", 0), ("resolution", 8)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                raise ParameterError(name, f"must be a whole number of at least {least}, not {v!r}")
        if self.scheduler not in SCHEDULERS:
            raise ParameterError("scheduler", f"must be one of {', '.join(SCHEDULERS)}, not {self.scheduler!r}")
        if self.context not in CONTEXTS:
            raise ParameterError("context", f"must be one of {', '.join(CONTEXTS)}, not {self.context!r}")
        if self.dtype not in DTYPES:
            raise ParameterError("dtype", f"must be one of {', '.join(DTYPES)}, not {self.dtype!r}")

    def to_meta(self) -> dict:
        """The options as plain values (a report's meta, the manifest)."""
        out = asdict(self)
        out["guidance"] = list(self.guidance)
        return out


def image_seed(run_seed: int, sample_id: str) -> int:
    """The seed of one image: the first 8 bytes of SHA-256 of ``"<run_seed>:<sample_id>"``, as a non-negative
    63-bit whole number (docs/METHODS.md §13.11). The same run seed and sample id always give the same seed,
    whatever the order or the number of workers."""
    digest = hashlib.sha256(f"{int(run_seed)}:{sample_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def draw_guidance(seed: int, guidance: tuple[float, float] = FHIBE_GUIDANCE) -> float:
    """The guidance scale of an image: uniform on ``guidance`` from a generator seeded with the image's seed."""
    lo, hi = guidance
    return float(lo if lo == hi else np.random.default_rng(int(seed)).uniform(lo, hi))


def box_mask(shape: tuple[int, int], boxes) -> np.ndarray:
    """A boolean ``(H, W)`` mask, true inside any of ``boxes`` (rows ``x0, y0, x1, y1`` in pixels, x1 and y1
    exclusive; clipped to the image). Filled through a 2-D prefix sum of box corners, without a loop over
    pixels."""
    h, w = int(shape[0]), int(shape[1])
    b = np.asarray(boxes, dtype=float).reshape(-1, 4)
    if not len(b):
        return np.zeros((h, w), dtype=bool)
    x0 = np.clip(np.floor(b[:, 0]), 0, w).astype(np.int64)
    y0 = np.clip(np.floor(b[:, 1]), 0, h).astype(np.int64)
    x1 = np.clip(np.ceil(b[:, 2]), 0, w).astype(np.int64)
    y1 = np.clip(np.ceil(b[:, 3]), 0, h).astype(np.int64)
    keep = (x1 > x0) & (y1 > y0)
    x0, y0, x1, y1 = x0[keep], y0[keep], x1[keep], y1[keep]
    diff = np.zeros((h + 1, w + 1), dtype=np.int64)
    np.add.at(diff, (y0, x0), 1)
    np.add.at(diff, (y0, x1), -1)
    np.add.at(diff, (y1, x0), -1)
    np.add.at(diff, (y1, x1), 1)
    return diff.cumsum(axis=0).cumsum(axis=1)[:h, :w] > 0


def region_mask(shape: tuple[int, int], boxes=(), mask_paths: Sequence[str] = ()) -> np.ndarray:
    """The union of an image's regions: its boxes and its mask images (binary masks of the image's size,
    :func:`fairvision.io.masks.load_mask`; a mask of another size is an :class:`InputFileError` naming it)."""
    mask = box_mask(shape, boxes)
    for p in mask_paths:
        mask |= load_mask(p, None, tuple(shape[:2]))
    return mask


def dilate_mask(mask: np.ndarray, pixels: int) -> np.ndarray:
    """``mask`` grown by ``pixels`` (a disk of that radius; 0 returns a copy)."""
    mask = np.asarray(mask, dtype=bool)
    if pixels <= 0 or not mask.any():
        return mask.copy()
    r = int(pixels)
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    return ndimage.binary_dilation(mask, structure=(xx * xx + yy * yy) <= r * r)


def working_size(height: int, width: int, resolution: int, multiple: int) -> tuple[int, int]:
    """``(height, width)`` the model sees: the longer side scaled to ``resolution``, each side rounded down to a
    multiple of ``multiple`` (at least one multiple)."""
    scale = resolution / max(height, width)
    h = max(multiple, int(round(height * scale)) // multiple * multiple)
    w = max(multiple, int(round(width * scale)) // multiple * multiple)
    return h, w


def crop_box(mask: np.ndarray, resolution: int) -> tuple[int, int, int, int]:
    """``(y0, y1, x0, x1)``: the part of the image the model sees in ``context="crop"`` (docs/METHODS.md §13.11).

    The bounding box of ``mask`` widened by half its longer side on every side, then to at least ``resolution``
    pixels along each axis (centred on the box, shifted to stay inside), clipped to the image: context around a
    small region at the model's own scale, rather than the whole photo shrunk to ``resolution``.
    """
    h, w = mask.shape
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    y0, y1, x0, x1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    pad = max(y1 - y0, x1 - x0) // 2
    out = []
    for lo, hi, size in ((y0, y1, h), (x0, x1, w)):
        lo, hi = max(0, lo - pad), min(size, hi + pad)
        want = min(size, int(resolution))
        if hi - lo < want:  # widen about the centre, shifted back inside the image
            lo = min(max(0, (lo + hi) // 2 - want // 2), size - want)
            hi = lo + want
        out += [lo, hi]
    return out[0], out[1], out[2], out[3]


def composite(original: np.ndarray, generated: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``generated`` inside ``mask``, ``original`` everywhere else (both ``(H, W, 3)`` uint8)."""
    return np.where(np.asarray(mask, dtype=bool)[..., None], generated, original).astype(np.uint8)


def torch_threads(workers: int) -> int:
    """Threads each of ``workers`` worker processes may give torch: an equal share of this process's CPUs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, int(workers)))


def check_pipeline_folder(path: str | os.PathLike) -> Path:
    """The folder as a resolved path, or a one-line :class:`FairvisionError` when it is not a diffusers pipeline
    folder (``model_index.json`` naming ``unet``, ``vae``, ``text_encoder``, ``tokenizer`` and ``scheduler``)."""
    folder = Path(path).expanduser()
    index = folder / "model_index.json"
    hint = ("give a local folder in the diffusers layout (as written by save_pretrained); fairvision loads weights "
            "you already have and never downloads")
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such in-painting weights folder; {hint}")
    if not index.is_file():
        raise FairvisionError(f"{folder}: not a diffusers pipeline folder (no model_index.json); {hint}")
    try:
        parts = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FairvisionError(f"{index}: not a readable pipeline index ({' '.join(str(exc).split())})") from None
    missing = [c for c in ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
               if not isinstance(parts, dict) or c not in parts or not (folder / c).is_dir()]
    if missing:
        raise FairvisionError(f"{folder}: not a Stable Diffusion pipeline folder (no {missing[0]}/); {hint}")
    return folder.resolve()


class Inpainter:
    """A local diffusers in-painting pipeline, loaded on first use (docs/METHODS.md §13.11).

    Parameters
    ----------
    path : path
        Local folder of a ``StableDiffusionInpaintPipeline`` (its UNet takes 9 input channels: the noisy
        latents, the mask and the masked image's latents). Checked at once (:func:`check_pipeline_folder`).
    options : InpaintOptions, optional
        Prompts, guidance range, steps, dilation, working resolution, scheduler, device, dtype (FHIBE's).
    threads : int, optional
        Torch's intra-op threads in this process (a worker's share of the CPUs); None leaves torch's default.
    """

    def __init__(self, path: str | os.PathLike, options: InpaintOptions | None = None, *, threads: int | None = None):
        self.path = check_pipeline_folder(path)
        self.options = options or InpaintOptions()
        self.threads = threads
        self._pipe = None

    def pipeline(self):
        """The loaded pipeline (torch and diffusers are imported here, on first use)."""
        if self._pipe is not None:
            return self._pipe
        # lazy: torch + diffusers take about 4 s to import (measured) and are the optional diffusers extra
        for var in ("TRANSFORMERS_VERBOSITY", "DIFFUSERS_VERBOSITY"):  # their import-time advice is not a result
            os.environ.setdefault(var, "error")
        try:
            import torch
            from diffusers import DDIMScheduler, StableDiffusionInpaintPipeline
            from diffusers.utils import logging as diffusers_logging
            from transformers.utils import logging as transformers_logging
        except ImportError as exc:
            raise FairvisionError("in-painting needs the diffusers extra: pip install 'fairvision[diffusers]' "
                                  f"({exc})") from None
        for lib in (diffusers_logging, transformers_logging):  # loading bars and advice, not results
            lib.set_verbosity_error()
            lib.disable_progress_bar()
        if self.threads:
            torch.set_num_threads(int(self.threads))
        o = self.options
        device = ("cuda" if torch.cuda.is_available() else "cpu") if o.device == "auto" else o.device
        try:
            pipe = StableDiffusionInpaintPipeline.from_pretrained(
                str(self.path), local_files_only=True, dtype=getattr(torch, o.dtype), safety_checker=None,
                requires_safety_checker=False)
        except Exception as exc:  # noqa: BLE001 - any loader failure is one line naming the folder
            raise FairvisionError(f"{self.path}: cannot load an in-painting pipeline: "
                                  f"{' '.join(str(exc).split())[:300]}") from None
        if pipe.unet.config.in_channels != 9:
            raise FairvisionError(f"{self.path}: not an in-painting model (its UNet takes "
                                  f"{pipe.unet.config.in_channels} input channels, an in-painting UNet 9)")
        if o.scheduler == "ddim":
            pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
        try:
            pipe = pipe.to(device)
        except Exception as exc:  # noqa: BLE001 - an unknown or absent device is one line
            raise FairvisionError(f"in-painting device {device!r}: {' '.join(str(exc).split())[:200]}") from None
        pipe.set_progress_bar_config(disable=True)
        self._torch, self._device, self._pipe = torch, device, pipe
        return pipe

    def inpaint(self, image: np.ndarray, mask: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
        """In-paint ``image`` (``(H, W, 3)`` uint8 RGB) inside ``mask`` (``(H, W)`` bool).

        Returns the in-painted image (same size; pixels outside the mask grown by ``options.dilate`` are the
        original's, exactly) and the guidance scale used (drawn from ``seed``, :func:`draw_guidance`). An
        empty mask returns a copy of the image (the model does not run).
        """
        from PIL import Image  # lazy, as in fairvision.io.images

        img = np.asarray(image)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ParameterError("image", f"must be an (H, W, 3) uint8 RGB array, not {img.dtype} {img.shape}")
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != img.shape[:2]:
            raise InputFileError(f"mask is {mask.shape[1]}x{mask.shape[0]} but the image is "
                                 f"{img.shape[1]}x{img.shape[0]} (width x height)")
        o = self.options
        guidance = draw_guidance(seed, o.guidance)
        grown = dilate_mask(mask, o.dilate)
        if not grown.any():
            return img.copy(), guidance
        pipe = self.pipeline()
        y0, y1, x0, x1 = crop_box(grown, o.resolution) if o.context == "crop" else (0, img.shape[0], 0, img.shape[1])
        part, pmask = img[y0:y1, x0:x1], grown[y0:y1, x0:x1]
        h, w = part.shape[:2]
        wh, ww = working_size(h, w, o.resolution, int(pipe.vae_scale_factor))
        gen = self._torch.Generator(device="cpu").manual_seed(int(seed))
        extra = {"eta": 0.0} if o.scheduler == "ddim" else {}
        out = pipe(prompt=o.prompt, negative_prompt=o.negative_prompt,
                   image=Image.fromarray(np.ascontiguousarray(part)),
                   mask_image=Image.fromarray(pmask.astype(np.uint8) * 255), height=wh, width=ww,
                   guidance_scale=guidance, num_inference_steps=o.steps, generator=gen, output_type="np", **extra)
        res = np.clip(np.round(np.asarray(out.images[0], dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)
        if res.shape[:2] != (h, w):
            res = np.asarray(Image.fromarray(res).resize((w, h), Image.Resampling.LANCZOS))
        result = img.copy()
        result[y0:y1, x0:x1] = composite(part, res, pmask)
        return result, guidance
