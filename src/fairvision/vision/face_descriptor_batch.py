"""Face descriptors of many images: on a process pool or Ray, and kept in the results store (docs/METHODS.md §8.4).

:func:`embed_face_images` runs :func:`fairvision.vision.face_descriptor.embed_faces` over many images: with
one local worker it is ``embed_faces`` itself; otherwise the images are cut into chunks mapped with
:func:`fairvision.engine.imap` and joined in input order. With a results store, each image's descriptor (or
the reason it has none) is kept under the SHA-256 of the image's bytes, so a second run describes no face again.
The retrieval audit's visual-search harness and the bias-transfer demo embed their photos with it.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.engine import ExecutionSettings, content_key, imap, source_signature
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.vision.face_descriptor import DESCRIPTOR_DIM, FaceEmbeddings, embed_faces
from fairvision.vision.faces import mark_used

#: results-store stage of the face descriptors of :func:`embed_face_images`
DESCRIPTOR_STAGE = "face_descriptor"
#: the code whose change makes stored descriptors stale
DESCRIPTOR_SOURCES = ("vision/face_descriptor.py", "vision/faces.py", "vision/facemesh.py", "vision/detect.py",
                      "vision/dlib_landmarks.py", "io/images.py")
_STATUS_COLUMNS = ["item_id", "image_path", "ok", "n_faces", "reason"]


def embed_face_images(paths: Sequence, ids: Sequence, *, upsample: int = 1, settings: ExecutionSettings | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      store: ResultsStore | None = None) -> FaceEmbeddings:
    """Face descriptors of many images (:func:`fairvision.vision.face_descriptor.embed_faces`) on an engine.

    Parameters
    ----------
    paths, ids : sequence
        The images and their ids.
    upsample : int
        Face detector upsampling, as for ``embed_faces``.
    settings : AuditSettings or any object with ``engine``, ``address`` and ``workers``, optional
        Where the work runs (default: one local worker). With one local worker this is ``embed_faces``
        itself; otherwise the images are cut into chunks of 32-64 (each chunk loads the descriptor's models
        once, about 0.5 s, against about 0.15 s per image), mapped with :func:`fairvision.engine.imap` on
        the ``local`` pool or ``ray``, and joined in input order: the same rows as one ``embed_faces`` call.
        A chunk whose worker failed gives its images ``ok=False`` with the error as reason.
    progress : callable, optional
        ``progress(done, total)`` as images are described.
    store : ResultsStore, optional
        Keeps each image's result (descriptor or the reason there is none) in stage ``face_descriptor`` under
        the SHA-256 of its bytes and a hash of ``upsample`` and the descriptor's code: images already there
        are not described again. Worker failures are not stored.

    Returns
    -------
    FaceEmbeddings
    """
    paths, ids = [str(p) for p in paths], [str(i) for i in ids]
    if store is not None:
        return _embed_stored(paths, ids, store, upsample=upsample, settings=settings, progress=progress)
    return _embed_on_engine(paths, ids, upsample=upsample, settings=settings, progress=progress)


def _embed_chunk(task: dict) -> FaceEmbeddings:
    return embed_faces(task["paths"], task["ids"], upsample=task["upsample"])


def _embed_on_engine(paths: list[str], ids: list[str], *, upsample: int, settings: ExecutionSettings | None,
                     progress: Callable[[int, int], None] | None) -> FaceEmbeddings:
    engine, address, workers = ("local", None, 1) if settings is None else \
        (settings.engine, settings.address, settings.workers)
    if workers <= 1 and engine == "local":
        return embed_faces(paths, ids, upsample=upsample, progress=progress)
    mark_used()  # the workers find the faces: the report names the face finder
    size = max(32, min(64, -(-len(paths) // (4 * max(1, workers)))))
    chunks = [{"paths": paths[i : i + size], "ids": ids[i : i + size], "upsample": upsample}
              for i in range(0, len(paths), size)]
    done = 0
    parts: list[FaceEmbeddings | None] = [None] * len(chunks)
    for outcome in imap(_embed_chunk, chunks, workers=workers, engine=engine, address=address, ordered=False):
        c = chunks[outcome.index]
        if outcome.ok:
            parts[outcome.index] = outcome.value
        else:
            rows = pd.DataFrame({"item_id": c["ids"], "image_path": c["paths"], "ok": False, "n_faces": 0,
                                 "reason": str(outcome.failure)})
            parts[outcome.index] = FaceEmbeddings(np.zeros((0, DESCRIPTOR_DIM)), [], rows)
        done += len(c["paths"])
        if progress is not None:
            progress(done, len(paths))
    vecs = [p.embeddings for p in parts if len(p.ids)]
    return FaceEmbeddings(
        np.vstack(vecs) if vecs else np.zeros((0, DESCRIPTOR_DIM)),
        [i for p in parts for i in p.ids],
        pd.concat([p.status for p in parts], ignore_index=True),
    )


def _embed_stored(paths: list[str], ids: list[str], store: ResultsStore, *, upsample: int,
                  settings: ExecutionSettings | None, progress: Callable[[int, int], None] | None) -> FaceEmbeddings:
    phash = content_key({"stage": DESCRIPTOR_STAGE, "pkg": __version__, "upsample": int(upsample),
                         "code": source_signature(DESCRIPTOR_SOURCES)})
    hashes = [file_sha256(p) for p in paths]
    keys = [row_key(h, phash) if h else None for h in hashes]
    hits = store.get_many(DESCRIPTOR_STAGE, (k for k in keys if k))
    todo = [i for i, k in enumerate(keys) if k is None or k not in hits]
    fresh = _embed_on_engine([paths[i] for i in todo], [ids[i] for i in todo], upsample=upsample, settings=settings,
                             progress=progress) if todo else FaceEmbeddings(np.zeros((0, DESCRIPTOR_DIM)), [], pd.DataFrame())
    vec_of = dict(zip(fresh.ids, fresh.embeddings))
    rows = {} if fresh.status.empty else {r["item_id"]: r for r in fresh.status.to_dict("records")}
    _store_fresh(store, todo, keys, hashes, paths, ids, rows, vec_of, phash)
    status, vecs, ok_ids = [], [], []
    for p, sid, k in zip(paths, ids, keys):
        if k is not None and k in hits:
            h = hits[k]
            status.append({"item_id": sid, "image_path": p, "ok": bool(h["ok"]), "n_faces": int(h["n_faces"]),
                           "reason": h.get("reason")})
            if h["ok"] and h.get("embedding") is not None:
                vecs.append(np.asarray(h["embedding"], dtype=np.float64))
                ok_ids.append(sid)
        else:
            r = rows.get(sid, {"item_id": sid, "image_path": p, "ok": False, "n_faces": 0, "reason": "not described"})
            status.append({"item_id": sid, "image_path": p, "ok": bool(r["ok"]), "n_faces": int(r["n_faces"]),
                           "reason": r["reason"]})
            if sid in vec_of:
                vecs.append(np.asarray(vec_of[sid], dtype=np.float64))
                ok_ids.append(sid)
    return FaceEmbeddings(np.vstack(vecs) if vecs else np.zeros((0, DESCRIPTOR_DIM)), ok_ids,
                          pd.DataFrame(status, columns=_STATUS_COLUMNS))


def _store_fresh(store: ResultsStore, todo: list[int], keys: list, hashes: list, paths: list[str], ids: list[str],
                 rows: dict, vec_of: dict, phash: str) -> None:
    """Keep the images just described; a worker's failure is not a fact about the image: only faces, "no face"
    and undecodable bytes are kept."""
    for i in todo:
        r = rows.get(ids[i])
        reason = str(r.get("reason") or "") if r is not None else ""
        if keys[i] is None or r is None or not (r["ok"] or reason == "no face" or reason.startswith("unreadable")):
            continue
        emb = vec_of.get(ids[i])
        store.put(DESCRIPTOR_STAGE, keys[i], {"ok": bool(r["ok"]), "n_faces": int(r["n_faces"]),
                                               "reason": r["reason"] if not r["ok"] else None,
                                               "embedding": None if emb is None else [float(v) for v in emb]},
                  content_hash=hashes[i], params_hash=phash, sample_id=ids[i], image_path=paths[i])
    store.flush()
