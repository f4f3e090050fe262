"""Image generators behind one interface, and the resumable generation run (docs/METHODS.md §10.1).

Every generator has ``edit(image, prompt, seed, **info) -> image``: ``image`` is
an ``(H, W, 3)`` uint8 RGB array, ``prompt`` the full prompt, ``seed`` the
generation seed, and ``info`` carries ``seed_id``, ``word`` and ``topic`` for
generators that need them (a folder of pre-generated outputs, the built-in
editor). Kinds:

- ``builtin``: :class:`ColourEditor`, a deterministic colorimetric editor: it
  shifts the skin's L* and/or rotates its h* inside the skin mask by amounts
  set per word (``[generator.shifts]``), plus an optional seeded jitter. No model.
- ``folder``: :class:`FolderGenerator`, outputs made elsewhere, found by a
  naming convention (default ``<path>/<seed_id>/<word>.png``).
- ``callable``: :class:`CallableGenerator`, any ``module:function``.
- ``http``: :class:`HTTPGenerator`, the ``/sdapi/v1/img2img`` JSON API of a
  locally running AUTOMATIC1111 / Forge web UI (base64 PNG in and out).
- ``diffusers``: :class:`DiffusersGenerator`, a Hugging Face diffusers
  image-to-image pipeline loaded from local weights (the ``diffusers`` extra).

:func:`generate` runs a generator over seeds x prompts x generation seeds,
writes every output as a PNG under the work folder and appends one record per
output to ``manifest.jsonl`` (seed, prompt, parameters, content hash, or the
cause and reason it failed, :mod:`~fairvision.audits.generative.failures`), and
lists the failures in ``failures.csv`` beside it. Outputs already recorded with
the same parameters are not generated again, so an interrupted run resumes.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import inspect
import json
import time
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.generative.base import (  # noqa: F401 - re-exported: the names every generator uses
    Generator, as_rgb_uint8, file_name, near_duplicates, output_name, params_hash, slug)
from fairvision.audits.generative.failures import GenerationError, classify, failure_table, plain
from fairvision.audits.generative.keys import check_keys
from fairvision.audits.generative.webui import ENDPOINT, MAX_REPLY_BYTES, img2img
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.engine import imap
from fairvision.errors import FairvisionError
from fairvision.io.atomic import atomic_write_bytes, atomic_write_text
from fairvision.io.images import decode_image, encode_png, read_image
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.skin.masks import skin_mask
from fairvision.skin.transect import shift_region_colour

MANIFEST = "manifest.jsonl"
#: the failed outputs of a generator's last run, beside its manifest
FAILURES = "failures.csv"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
RECORD_COLUMNS = ["generator", "seed_id", "topic", "word", "prompt", "seed", "output_path", "ok", "cause", "reason",
                  "sha256", "params_hash", "params", "seconds"]
#: keys of every generator table in a spec, whatever its kind
COMMON_KEYS = ("kind", "name", "seeds", "workers")


class ColourEditor(Generator):
    """The built-in colorimetric editor (docs/METHODS.md §10.1).

    Parameters
    ----------
    shifts : dict
        ``word -> {"L": dL, "h": dh}``: requested change of the skin region's
        mean L* (negative = darker) and rotation of its hue angle (degrees,
        positive = yellower), applied with
        :func:`fairvision.skin.transect.shift_region_colour`
        inside the automatic skin mask. Words not listed are left unchanged.
    noise_L, noise_h : float
        Standard deviation of a jitter added to every output's L* / h* shift,
        drawn from a generator seeded by (seed, seed id, word), so reruns are
        identical: a stand-in for a real model's variation.
    mask_method : str
        Skin mask used to find the pixels to change.
    """

    kind = "builtin"

    def __init__(self, name: str = "builtin", *, shifts: dict | None = None, noise_L: float = 0.0, noise_h: float = 0.0,
                 mask_method: str = "mediapipe"):
        shifts = dict(shifts or {})
        for w, s in shifts.items():
            if not isinstance(s, dict):
                raise FairvisionError(f"builtin editor: shift of {w!r} must be a table like {{ L = -5.0, h = 3.0 }}")
            check_keys(s, ("L", "h"), f"builtin editor: shift of {w!r}")
        super().__init__(name, {"noise_L": float(noise_L), "noise_h": float(noise_h), "mask_method": mask_method})
        self.shifts = {w: {k: float(v) for k, v in s.items()} for w, s in shifts.items()}

    def item_params(self, word: str) -> dict:
        return {**super().item_params(word), "shift": self.shifts.get(word, {})}

    def edit(self, image, prompt, seed, *, word: str | None = None, seed_id: str = "", **info) -> np.ndarray:
        img = as_rgb_uint8(image, "seed image")
        shift = self.shifts.get(word or "", {})
        d_l, d_h = shift.get("L", 0.0), shift.get("h", 0.0)
        nl, nh = self.params["noise_L"], self.params["noise_h"]
        if nl or nh:
            rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(str(seed_id).encode()),
                                         zlib.crc32(str(word).encode())])
            jl, jh = rng.normal(size=2)
            d_l, d_h = d_l + nl * jl, d_h + nh * jh
        if d_l == 0 and d_h == 0:
            return img.copy()
        res = skin_mask(img, method=self.params["mask_method"])
        if res.mask is None:
            raise GenerationError("no face to edit", f"no skin mask to edit ({res.reason or 'no face'})")
        out = img
        if d_l:
            out = shift_region_colour(out, res.mask, axis="L", delta=d_l).image
        if d_h:
            out = shift_region_colour(out, res.mask, axis="h", delta=d_h).image
        return out


class FolderGenerator(Generator):
    """Outputs generated elsewhere, found by a naming convention.

    ``pattern`` (default ``"{seed_id}/{word}"``) is formatted with
    ``seed_id``, ``word`` (as :func:`slug`: ``bus driver`` -> ``bus-driver``),
    ``topic`` and ``seed``, relative to ``path``; with no suffix in the pattern
    ``.png``, ``.jpg``, ``.jpeg`` and ``.webp`` are tried in that order. With
    several generation seeds use a pattern such as ``"{seed_id}/{word}__s{seed}"``.
    Two outputs whose filled-in patterns name one file (ignoring case) are an
    error naming both ids (:meth:`check_names`), never one image read twice.
    """

    kind = "folder"

    def __init__(self, name: str = "folder", *, path: str | Path, pattern: str = "{seed_id}/{word}"):
        super().__init__(name, {"path": str(path), "pattern": pattern})
        self.path = Path(path)
        if not self.path.is_dir():
            raise FairvisionError(f"folder generator: {self.path}: no such folder")

    def relative(self, seed_id: str, word: str, topic: str, seed: int) -> str:
        """The pattern filled in for one output (relative to ``path``, maybe without a suffix)."""
        try:
            return self.params["pattern"].format(seed_id=seed_id, word=slug(word), topic=slug(topic), seed=seed)
        except (KeyError, IndexError, ValueError) as exc:
            raise FairvisionError(f"folder generator {self.name!r}: pattern {self.params['pattern']!r} is not valid "
                                  f"({type(exc).__name__}: {exc}); use {{seed_id}}, {{word}}, {{topic}}, {{seed}}") from None

    def check_names(self, items) -> None:
        """Raise when two different ``(seed_id, word, topic, seed)`` map to one file (docs/METHODS.md §10.1).

        File names are compared ignoring case (the same file on macOS and Windows), and words lose their
        punctuation (``nurse`` and ``Nurse!`` are both ``nurse.png``): such outputs would be read twice
        as one, so the error names both ids.
        """
        seen: dict[str, tuple] = {}
        for it in items:
            rel = self.relative(*it)
            prev = seen.setdefault(rel.casefold(), it)
            if prev != it:
                what = [(lab, a, b) for lab, a, b in zip(("seed ids", "words", "topics", "seeds"), prev, it) if a != b]
                ids = " and ".join(f"{lab} {a!r} and {b!r}" for lab, a, b in what)
                raise FairvisionError(f"folder generator {self.name!r}: {ids} map to the same file "
                                      f"{self.path / rel} (file names ignore case and punctuation); rename one in the "
                                      "seed table or word list, or use a pattern that tells them apart")

    def locate(self, seed_id: str, word: str, topic: str, seed: int) -> Path:
        base = self.path / self.relative(seed_id, word, topic, seed)
        if base.suffix.lower() in IMAGE_SUFFIXES:
            return base
        for suf in IMAGE_SUFFIXES:
            p = base.with_name(base.name + suf)
            if p.is_file():
                return p
        return base.with_name(base.name + ".png")

    def edit(self, image, prompt, seed, *, seed_id: str = "", word: str = "", topic: str = "", **info):
        p = self.locate(seed_id, word, topic, seed)
        if not p.is_file():
            raise GenerationError("output missing", f"no pre-generated output {p}")
        return read_image(p)


class CallableGenerator(Generator):
    """Any Python function ``edit(image, prompt, seed)`` named as ``module:function``.

    The function gets ``seed_id``, ``word`` and ``topic`` as keyword arguments
    too when it accepts them (or ``**kwargs``). It returns an RGB array (uint8,
    or float in [0, 1]) or a PIL image.
    """

    kind = "callable"

    def __init__(self, name: str = "callable", *, target: str | Callable, options: dict | None = None):
        label = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"
        super().__init__(name, {"target": label, "options": dict(options or {})})
        self.fn = load_callable(target) if isinstance(target, str) else target
        try:
            sig = inspect.signature(self.fn).parameters
        except (TypeError, ValueError):
            sig = {}
        self._var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
        self._names = set(sig)

    def edit(self, image, prompt, seed, **info):
        extra = {k: v for k, v in {**info, **self.params["options"]}.items() if self._var_kw or k in self._names}
        return self.fn(image, prompt, seed, **extra)


def load_callable(target: str) -> Callable:
    """``"package.module:function"`` -> the function (a :class:`FairvisionError` naming what is missing)."""
    if not isinstance(target, str) or ":" not in target:
        raise FairvisionError(f"callable {target!r}: expected 'module:function'")
    mod_name, _, attr = target.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise FairvisionError(f"callable {target!r}: cannot import {mod_name!r} ({exc})") from None
    fn = mod
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise FairvisionError(f"callable {target!r}: {mod_name!r} has no {attr!r}")
    if not callable(fn):
        raise FairvisionError(f"callable {target!r} is not callable")
    return fn


class HTTPGenerator(Generator):
    """The image-to-image JSON API of a local Stable Diffusion web UI (AUTOMATIC1111, Forge).

    Each edit is one ``POST {url}/sdapi/v1/img2img`` with ``init_images``
    (the seed as base64 PNG), ``prompt``, ``seed`` and the spec's ``params``
    (e.g. ``denoising_strength``, ``steps``, ``cfg_scale``, ``negative_prompt``);
    the first of the returned base64 ``images`` is the output. At most
    ``max_bytes`` (default 64 MiB) of a reply are read; a larger one fails that prompt.
    """

    kind = "http"
    ENDPOINT = ENDPOINT

    def __init__(self, name: str = "http", *, url: str = "http://127.0.0.1:7860", params: dict | None = None,
                 timeout: float = 600.0, max_bytes: int = MAX_REPLY_BYTES):
        super().__init__(name, {"url": url.rstrip("/"), "params": dict(params or {}), "timeout": float(timeout)})
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise FairvisionError(f"http generator {name!r}: max_bytes must be a positive number of bytes")
        self.max_bytes = max_bytes  # bounds the reply; not an output parameter, so not hashed

    def edit(self, image, prompt, seed, **info):
        payload = {**self.params["params"], "init_images": [base64.b64encode(encode_png(as_rgb_uint8(image))).decode()],
                   "prompt": prompt, "seed": int(seed)}
        return decode_image(img2img(self.params["url"], payload, timeout=self.params["timeout"],
                                    max_bytes=self.max_bytes), f"the image in the reply of {self.params['url']}")


class DiffusersGenerator(Generator):
    """A Hugging Face diffusers image-to-image pipeline from weights already on this machine (the ``diffusers`` extra).

    ``StableDiffusionImg2ImgPipeline.from_pretrained(path, local_files_only=True)``:
    ``path`` must be a local folder in the diffusers layout (``model_index.json``,
    ``unet/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``, as
    written by ``save_pretrained``); nothing is ever downloaded. The pipeline is
    loaded once per worker. Each :meth:`edit` runs the pipeline on the seed
    image with a ``torch.Generator`` seeded with the generation seed, so an
    output is reproducible from its record. The output has the pipeline's size:
    the input's, rounded down to a multiple of the VAE's scale factor.

    Parameters
    ----------
    path : path
        Local folder of the pipeline's weights.
    strength, guidance_scale, num_inference_steps : float, float, int
        The pipeline's image-to-image settings (how far from the seed, prompt
        adherence, denoising steps).
    negative_prompt : str, optional
    device : str
        ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``, ``mps``.
    dtype : {"float32", "float16", "bfloat16"}
        Weights and computation type (float16 needs a GPU).
    safety_checker : bool
        Keep a safety checker the weights ship with (off by default: a
        blacked-out output would read as a lost face).
    """

    kind = "diffusers"
    DTYPES = ("float32", "float16", "bfloat16")

    def __init__(self, name: str = "diffusers", *, path: str | Path, strength: float = 0.5,
                 guidance_scale: float = 7.5, num_inference_steps: int = 30, negative_prompt: str | None = None,
                 device: str = "auto", dtype: str = "float32", safety_checker: bool = False):
        if dtype not in self.DTYPES:
            raise FairvisionError(f"diffusers generator {name!r}: dtype must be one of {', '.join(self.DTYPES)}")
        if not 0 < float(strength) <= 1:
            raise FairvisionError(f"diffusers generator {name!r}: strength must lie in (0, 1]")
        folder = Path(path).expanduser()
        if not (folder / "model_index.json").is_file():
            raise FairvisionError(f"diffusers generator {name!r}: {folder} is not a local diffusers pipeline folder "
                                  "(no model_index.json); fairvision loads weights you already have, never downloads")
        super().__init__(name, {"path": str(folder.resolve()), "strength": float(strength),
                                "guidance_scale": float(guidance_scale),
                                "num_inference_steps": int(num_inference_steps), "negative_prompt": negative_prompt,
                                "device": device, "dtype": dtype, "safety_checker": bool(safety_checker)})
        self._pipe = None

    def pipeline(self):
        """The loaded pipeline (loaded on first use; torch and diffusers are imported only here)."""
        if self._pipe is None:
            # lazy: torch + diffusers take ~5 s to import (measured) and are an optional extra
            try:
                import torch
                from diffusers import StableDiffusionImg2ImgPipeline
            except ImportError as exc:
                raise FairvisionError(f"the diffusers generator needs the diffusers extra: pip install "
                                      f"'fairvision[diffusers]' ({exc})") from None
            pr = self.params
            device = pr["device"]
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            extra = {} if pr["safety_checker"] else {"safety_checker": None, "requires_safety_checker": False}
            try:
                pipe = StableDiffusionImg2ImgPipeline.from_pretrained(
                    pr["path"], local_files_only=True, dtype=getattr(torch, pr["dtype"]), **extra)
            except (OSError, ValueError) as exc:
                raise FairvisionError(f"diffusers generator {self.name!r}: cannot load {pr['path']}: "
                                      f"{' '.join(str(exc).split())}") from None
            pipe = pipe.to(device)
            pipe.set_progress_bar_config(disable=True)
            self._torch, self._device, self._pipe = torch, device, pipe
        return self._pipe

    def edit(self, image, prompt, seed, **info) -> np.ndarray:
        from PIL import Image  # lazy, as in decode_image

        pipe = self.pipeline()
        pr = self.params
        gen = self._torch.Generator(device=self._device).manual_seed(int(seed))
        out = pipe(prompt=prompt, image=Image.fromarray(as_rgb_uint8(image, "seed image")), strength=pr["strength"],
                   guidance_scale=pr["guidance_scale"], num_inference_steps=pr["num_inference_steps"],
                   negative_prompt=pr["negative_prompt"], generator=gen, output_type="np")
        return as_rgb_uint8(np.asarray(out.images[0], dtype=np.float32))


KINDS = {"builtin": ColourEditor, "folder": FolderGenerator, "callable": CallableGenerator, "http": HTTPGenerator,
         "diffusers": DiffusersGenerator}


def generator_keys(kind: str) -> tuple[str, ...]:
    """The keys a generator table of ``kind`` may have: :data:`COMMON_KEYS` and its class's keyword arguments."""
    params = inspect.signature(KINDS[kind].__init__).parameters
    return COMMON_KEYS + tuple(p for p in params if p not in ("self", "name"))


def check_generator_keys(config: dict, where: str) -> None:
    """A one-line error for an unknown key (with a did-you-mean) or a missing required key of a generator table."""
    kind = config.get("kind", "builtin")
    if kind not in KINDS:
        raise FairvisionError(f"{where}: unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    check_keys(config, generator_keys(kind), f"{where} ({kind})")
    params = inspect.signature(KINDS[kind].__init__).parameters
    missing = [p for p, v in params.items() if p not in ("self", "name") and v.default is inspect.Parameter.empty
               and p not in config]
    if missing:
        raise FairvisionError(f"{where} ({kind}): needs the key {missing[0]!r}")


def make_generator(config: dict, base: Path | None = None) -> Generator:
    """A generator from its spec table (``kind`` and the kind's keys; an unknown key is an error with a
    did-you-mean, docs/METHODS.md §10.1)."""
    cfg = dict(config)
    kind = cfg.get("kind", "builtin")
    name = cfg.get("name", kind)
    check_generator_keys(cfg, f"generator {name!r}")
    for key in COMMON_KEYS:
        cfg.pop(key, None)
    try:
        if kind == "builtin":
            return ColourEditor(name, **cfg)
        if kind == "folder":
            p = Path(cfg.pop("path", ""))
            if base is not None and not p.is_absolute():
                p = base / p
            return FolderGenerator(name, path=p, **cfg)
        if kind == "callable":
            return CallableGenerator(name, **cfg)
        if kind == "http":
            return HTTPGenerator(name, **cfg)
        if kind == "diffusers":
            p = Path(str(cfg.pop("path", ""))).expanduser()
            if base is not None and not p.is_absolute():
                p = base / p
            return DiffusersGenerator(name, path=p, **cfg)
    except TypeError as exc:  # a value of the wrong type where the class needs another
        raise FairvisionError(f"generator {name!r} ({kind}): {plain(exc)}") from None
    raise FairvisionError(f"unknown generator kind {kind!r}")


# ---------------------------------------------------------------------------
# the generation run

_WORKER: dict = {}


def _init_worker(config: dict, base: str | None) -> None:
    _WORKER["gen"] = make_generator(config, Path(base) if base else None)


def _generate_one(item: dict) -> dict:
    gen = _WORKER["gen"]
    rec = {k: item[k] for k in ("seed_id", "topic", "word", "prompt", "seed", "output_path", "params_hash", "params")}
    rec["generator"] = gen.name
    t0 = time.perf_counter()
    try:
        try:
            img = read_image(item["image_path"])
        except FairvisionError as exc:
            raise GenerationError("seed image unreadable", str(exc)) from None
        out = as_rgb_uint8(gen.edit(img, item["prompt"], item["seed"], seed_id=item["seed_id"], word=item["word"],
                                    topic=item["topic"]))
        data = encode_png(out)
        atomic_write_bytes(Path(item["root"]) / item["output_path"], data)
        rec.update(ok=True, cause="", reason="", sha256=hashlib.sha256(data).hexdigest())
    except Exception as exc:  # a generator failing for one prompt is a recorded outcome, the run goes on
        cause, reason = classify(exc)
        rec.update(ok=False, cause=cause, reason=reason, sha256="")
    rec["seconds"] = round(time.perf_counter() - t0, 4)
    return rec


def _intact(path: Path, sha256: str) -> bool:
    """The output file is there and still has the bytes its record names (nothing overwrote it)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    except OSError:
        return False


def read_manifest(path: Path) -> pd.DataFrame:
    """The records of a manifest; the last record of each (seed_id, word, seed) wins."""
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by an interrupted write: that output is redone
                continue
    df = pd.DataFrame(rows, columns=RECORD_COLUMNS)
    if not df.empty:
        df = df.drop_duplicates(["seed_id", "word", "seed"], keep="last").reset_index(drop=True)
    return df


def generate(seeds: pd.DataFrame, prompts: pd.DataFrame, config: dict, workdir: str | Path, *,
             base: Path | None = None, settings: AuditSettings | None = None,
             progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Generate every (seed, prompt, generation seed) output not made yet; return all their records.

    Parameters
    ----------
    seeds : DataFrame
        ``sample_id`` and ``image_path`` of the seed photos.
    prompts : DataFrame
        ``topic``, ``word``, ``prompt``.
    config : dict
        The generator's spec table (``kind``, ``name``, ``seeds`` ...).
    workdir : path
        Outputs go to ``workdir/<generator>/<slug>-<hash8>/<slug>-<hash8>__s<seed>.png``
        (:func:`output_name`: seed id, then word, each a slug plus a hash of the
        exact id) and records to ``workdir/<generator>/manifest.jsonl``. A
        recorded output is reused only when its file has that name and still
        has the recorded SHA-256; otherwise it is made again (an older work
        folder's outputs, named without the hash, are made again once).
    settings : AuditSettings, optional
        Uses ``engine``, ``address`` and ``workers``: parallel workers (each
        builds its own generator; default 1); use 1 for a model that holds a
        GPU or a web UI that serves one request at a time.
    progress : callable, optional
        ``progress(done, total)`` after each output.

    Returns
    -------
    DataFrame
        One record per requested output (:data:`RECORD_COLUMNS` plus
        ``generated``: False when it was already there): ``ok``, ``cause``
        and ``reason`` (why it failed, in plain words:
        :func:`~fairvision.audits.generative.failures.classify`), ``sha256``
        of the PNG, ``params`` (JSON) and ``params_hash``. The failed ones
        are also written to ``workdir/<generator>/failures.csv``
        (:func:`~fairvision.audits.generative.failures.failure_table`;
        removed when none failed).
    """
    settings = settings or DEFAULT_SETTINGS
    gen = make_generator(config, base)  # validates the config here, before any work
    g_seeds = [int(x) for x in config.get("seeds", [0])]
    if isinstance(gen, FolderGenerator):
        gen.check_names((str(sid), w, t, g) for sid in seeds[SAMPLE_ID]
                        for w, t in zip(prompts["word"], prompts["topic"]) for g in g_seeds)
    root = Path(workdir) / slug(gen.name)
    root.mkdir(parents=True, exist_ok=True)
    manifest = root / MANIFEST
    done = read_manifest(manifest)
    done_ok = {}
    if not done.empty:
        for r in done.itertuples(index=False):
            if r.ok and r.output_path == output_name(r.seed_id, r.word, r.seed) and _intact(root / r.output_path,
                                                                                             r.sha256):
                done_ok[(str(r.seed_id), str(r.word), int(r.seed))] = r
    todo, kept = [], []
    for s in seeds[[SAMPLE_ID, IMAGE_PATH]].itertuples(index=False):
        for p in prompts.itertuples(index=False):
            ip = gen.item_params(p.word)
            h = params_hash(ip)
            for g_seed in g_seeds:
                key = (str(s.sample_id), p.word, int(g_seed))
                prev = done_ok.get(key)
                if prev is not None and prev.params_hash == h:
                    kept.append({**prev._asdict(), "topic": p.topic, "prompt": p.prompt, "generated": False})
                    continue
                todo.append({"seed_id": str(s.sample_id), "image_path": str(s.image_path), "topic": p.topic,
                             "word": p.word, "prompt": p.prompt, "seed": int(g_seed), "params_hash": h,
                             "params": json.dumps(ip, sort_keys=True, default=str), "root": str(root),
                             "output_path": output_name(s.sample_id, p.word, g_seed)})
    total = len(todo) + len(kept)
    new = []
    if todo:
        outcomes = imap(_generate_one, todo, workers=settings.workers, engine=settings.engine,
                        address=settings.address, initializer=_init_worker,
                        initargs=(config, str(base) if base else None), ordered=False)
        with open(manifest, "a", encoding="utf-8") as fh:
            for oc in outcomes:
                if oc.ok:
                    rec = oc.value
                else:  # the worker itself failed (not the generator): still a row with the reason
                    it = todo[oc.index]
                    rec = {k: it[k] for k in ("seed_id", "topic", "word", "prompt", "seed", "output_path",
                                              "params_hash", "params")}
                    rec.update(generator=gen.name, ok=False, cause="worker crashed", reason=plain(str(oc.failure)),
                               sha256="", seconds=0.0)
                fh.write(json.dumps(rec, default=str) + "\n")
                fh.flush()
                new.append({**rec, "generated": True})
                if progress is not None:
                    progress(len(kept) + len(new), total)
    out = pd.DataFrame(kept + new, columns=RECORD_COLUMNS + ["generated"])
    out["generator"] = gen.name
    out["output_path"] = [str(root / p) for p in out["output_path"]]
    out["cause"] = out["cause"].where(~out["ok"].astype(bool), "").fillna("generator error")
    write_failures(out, root / FAILURES)
    return out


def write_failures(records: pd.DataFrame, path: Path) -> Path | None:
    """Write the failures table of ``records`` to ``path`` (CSV), or remove a stale one when none failed."""
    table = failure_table(records)
    if table.empty:
        path.unlink(missing_ok=True)
        return None
    atomic_write_text(path, table.to_csv(index=False))
    return path
