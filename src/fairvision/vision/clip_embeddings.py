"""CLIP image embeddings kept in the results store, and the provenance of embedding files (docs/METHODS.md §12.4).

:func:`embed_images` runs the images through an adapter of :mod:`fairvision.vision.clip` once: each embedding is
kept under the SHA-256 of the image file and a hash of the model signature and this code (stage :data:`STAGE`),
so a second run with the same model reads them instead. :func:`read_provenance` reads back which model made an
embedding file written by ``audit vlm embed``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.vision.clip import ClipAdapter

#: stage of the image embeddings in the results store
STAGE = "clip_image"
#: bump when a change here changes stored embeddings (the source of the CLIP modules is hashed as well)
CACHE_VERSION = 1
#: a run that leaves the stage with more parts than this compacts it (as the other per-image stages do)
COMPACT_PARTS = 64


def params_hash(adapter: ClipAdapter) -> str:
    """Hash of what shapes a stored image embedding besides the image: the adapter's signature and the code of
    this module and of the image decoder."""
    return content_key({"v": CACHE_VERSION, "model": adapter.signature,
                        "code": source_signature(["vision/clip.py", "vision/clip_embeddings.py", "io/images.py"])})


def _pack(vec: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vec, dtype="<f4").tobytes()).decode("ascii")


def _unpack(text: str, dim: int) -> np.ndarray:
    v = np.frombuffer(base64.b64decode(text), dtype="<f4")
    if v.size != dim:
        raise FairvisionError(f"results store: a {STAGE} record has {v.size} values, expected {dim}")
    return v.astype(np.float32)


def embed_images(paths: Sequence[str], adapter: ClipAdapter, *, store: ResultsStore | None = None,
                 sample_ids: Sequence | None = None, subject_ids: Sequence | None = None,
                 progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, dict]:
    """Unit image embeddings of ``paths`` in order, reading and keeping them in the results store
    (docs/METHODS.md §12.4).

    With a ``store``, each embedding is kept under stage :data:`STAGE` and the key of the SHA-256 of the image
    file's bytes with :func:`params_hash` (the model signature and this code): a second run with the same model
    reads them instead of running the model, and files with the same bytes are embedded once. Images are read
    and embedded ``adapter.batch_size`` at a time, so memory stays one batch of images.

    Returns
    -------
    embeddings : numpy.ndarray, shape (n, d), float32, unit rows
    summary : dict
        ``images``, ``from_store`` (read from the store), ``computed`` (images run through the model).

    Raises
    ------
    InputFileError
        An image that cannot be read (one line naming it); what was embedded before it is kept in the store.
    """
    paths = [str(p) for p in paths]
    n = len(paths)
    if n == 0:
        raise FairvisionError("no images to embed")
    sids = [None] * n if sample_ids is None else list(sample_ids)
    subs = [None] * n if subject_ids is None else list(subject_ids)
    result: list[np.ndarray | None] = [None] * n
    keys: list[str | None] = [None] * n
    contents: list[str | None] = [None] * n
    phash = params_hash(adapter) if store is not None else None
    if store is not None:
        for i, p in enumerate(paths):
            c = file_sha256(p)
            if c is not None:  # an unreadable file fails below with its own message
                contents[i], keys[i] = c, row_key(c, phash)
        hits = store.get_many(STAGE, (k for k in keys if k))
        for i, k in enumerate(keys):
            hit = hits.get(k) if k else None
            if hit is not None and hit.get("signature") == adapter.signature:
                result[i] = _unpack(hit["embedding"], int(hit["dim"]))
    from_store = sum(r is not None for r in result)
    # one forward pass per distinct content among the images not stored
    todo: dict[str, list[int]] = {}
    for i in range(n):
        if result[i] is None:
            todo.setdefault(contents[i] or f"path:{paths[i]}", []).append(i)
    groups = list(todo.values())
    done = from_store
    if progress is not None:
        progress(done, n)
    try:
        for b in range(0, len(groups), adapter.batch_size):
            batch = groups[b:b + adapter.batch_size]
            emb = adapter.encode_images([read_image(paths[g[0]]) for g in batch])
            for g, vec in zip(batch, emb):
                for i in g:
                    result[i] = vec
                    if store is not None and keys[i] is not None:
                        store.put(STAGE, keys[i], {"embedding": _pack(vec), "dim": int(vec.size),
                                                   "model": adapter.name, "signature": adapter.signature},
                                  content_hash=contents[i], params_hash=phash, sample_id=sids[i],
                                  subject_id=subs[i], image_path=paths[i])
                done += len(g)
            if progress is not None:
                progress(done, n)
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted or when an image fails
    if store is not None and n > from_store:
        store.vacuum(max_parts=COMPACT_PARTS, blocking=False)  # many small parts: compact if no one else holds it
    dims = {r.size for r in result}
    if len(dims) != 1:
        raise FairvisionError(f"results store: stored embeddings of {STAGE} have different lengths {sorted(dims)}")
    return np.stack(result).astype(np.float32), {"images": n, "from_store": from_store, "computed": n - from_store}


def read_provenance(path) -> dict | None:
    """The provenance :func:`ClipAdapter.describe` wrote into an embedding file made by ``audit vlm embed``
    (the ``provenance`` array of an ``.npz``, or the ``fairvision`` key of a Parquet file's metadata); None
    for any other file. A caller adds its ``note`` (e.g. tiny-random's) to its report."""
    p = Path(path)
    try:
        if p.suffix.lower() == ".npz":
            with np.load(p, allow_pickle=False) as z:
                if "provenance" not in z.files:
                    return None
                return json.loads(str(z["provenance"]))
        if p.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq  # lazy: only for Parquet inputs

            meta = pq.read_schema(p).metadata or {}
            raw = meta.get(b"fairvision")
            return json.loads(raw) if raw else None
    except (OSError, ValueError):
        return None
    return None
