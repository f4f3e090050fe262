"""An offline face embedder for people photos: dlib's 128-d face descriptor.

The visual-search harness of the retrieval audit (Khaziev et al., section
3.3.1, retrieval by k-nearest neighbours over image embeddings) needs an
embedder that runs with no download. dlib's ResNet face descriptor (the model
behind ``face_recognition``; King, dlib 19.x, 99.38% on LFW) ships in the
``face-recognition-models`` package, together with the 5-point shape
predictor it aligns faces with. Faces are found by the face finder
(:mod:`fairvision.vision.faces`: face mesh, then mediapipe detector + dlib, then
dlib's HOG detector), the same faces and boxes as skin masks and face crops; the
5-point shape is fitted in the finder's box. When an image has several faces
the largest is described.

Images without a detectable face (or that cannot be read) are recorded in the
status table with a reason, never raised: the caller decides what to do with
them (the retrieval audit leaves them out of the catalog and says how many).

The model folder is located with :func:`importlib.util.find_spec`, because
importing ``face_recognition_models`` imports ``pkg_resources``. dlib is imported
lazily; images are read with :func:`fairvision.io.images.read_image`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError
from fairvision.io.images import ImageTooLargeError, read_image
from fairvision.vision import faces as face_finder

DESCRIPTOR_DIM = 128
_RESNET = "dlib_face_recognition_resnet_model_v1.dat"
_SHAPE5 = "shape_predictor_5_face_landmarks.dat"


def model_dir() -> Path:
    """The ``models`` folder of the installed ``face-recognition-models`` package."""
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or spec.origin is None:
        raise FairvisionError("the face descriptor needs the vision extra: pip install 'fairvision[vision]' (face-recognition-models)")
    folder = Path(spec.origin).parent / "models"
    for f in (_RESNET, _SHAPE5):
        if not (folder / f).is_file():
            raise FairvisionError(f"{folder / f}: model file missing; reinstall face-recognition-models")
    return folder


def _load_rgb(path) -> np.ndarray:
    return read_image(path)  # the pixel limit is checked from the header before decoding


class FaceDescriptor:
    """The face finder's largest face + dlib's 5-point alignment + 128-d ResNet descriptor.

    Faces are found by the face finder (:func:`fairvision.vision.faces.find_faces`, docs/METHODS.md §2.5), as
    for skin masks and face crops; dlib's 5-point shape predictor is fitted in the finder's box of the largest
    face and the descriptor computed from that shape.

    Parameters
    ----------
    upsample : int
        Times the finder's last stage (dlib's HOG detector) upsamples the image (1 finds faces down to about
        40 px; more is slower).
    jitter : int
        Random re-crops averaged by dlib (0 = deterministic, fastest).
    """

    def __init__(self, upsample: int = 1, jitter: int = 0):
        self.upsample = int(upsample)
        self.jitter = int(jitter)
        self._models = None
        face_finder.mark_used()  # it may run in worker processes: the report names the finder

    def _load(self):
        if self._models is None:
            try:
                import dlib
            except ImportError:
                raise FairvisionError("the face descriptor needs dlib: pip install 'fairvision[vision]'") from None
            folder = model_dir()
            self._models = (
                dlib,
                dlib.shape_predictor(str(folder / _SHAPE5)),
                dlib.face_recognition_model_v1(str(folder / _RESNET)),
            )
        return self._models

    def describe(self, image) -> tuple[np.ndarray | None, dict]:
        """Descriptor of the largest face in ``image`` (an RGB uint8 array or a path).

        Returns
        -------
        descriptor : numpy.ndarray of shape (128,) or None
            None when no face is found or the image cannot be read.
        info : dict
            ``n_faces``, ``box`` (the finder's ``[x0, y0, x1, y1]``, float pixels), ``source`` (the finder's
            stage) and ``reason`` (``""``, ``"no face"`` or ``"unreadable: ..."``).
        """
        dlib, shape_predictor, encoder = self._load()
        if not isinstance(image, np.ndarray):
            try:
                image = _load_rgb(image)
            except ImageTooLargeError as exc:  # not "unreadable": not stored, so a raised limit describes it
                return None, {"n_faces": 0, "box": None, "source": None, "reason": f"image too large: {exc}"}
            except Exception as exc:  # any decoder failure is recorded, not raised
                return None, {"n_faces": 0, "box": None, "source": None, "reason": f"unreadable: {type(exc).__name__}"}
        img = np.asarray(image)
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        img = np.ascontiguousarray(img[:, :, :3], dtype=np.uint8)
        faces = face_finder.find_faces(img, upsample=self.upsample)
        if not faces:
            return None, {"n_faces": 0, "box": None, "source": None, "reason": "no face"}
        face = faces[0]  # the largest
        rect = dlib.rectangle(*(int(round(float(v))) for v in face.box))
        shape = shape_predictor(img, rect)
        vec = np.asarray(encoder.compute_face_descriptor(img, shape, self.jitter), dtype=np.float64)
        box = tuple(float(v) for v in face.box)
        return vec, {"n_faces": len(faces), "box": box, "source": face.source, "reason": ""}


@dataclass
class FaceEmbeddings:
    """Face descriptors of a set of images.

    Attributes
    ----------
    embeddings : numpy.ndarray, shape (n_ok, 128)
        One row per image with a face, in input order.
    ids : list of str
        The ids of those rows.
    status : pandas.DataFrame
        Every input image: ``item_id``, ``image_path``, ``ok``, ``n_faces``,
        ``reason``.
    """

    embeddings: np.ndarray
    ids: list[str]
    status: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        return self.status

    @property
    def failed(self) -> pd.DataFrame:
        return self.status[~self.status["ok"]]


def embed_faces(
    paths: Sequence,
    ids: Sequence | None = None,
    *,
    upsample: int = 1,
    jitter: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> FaceEmbeddings:
    """Describe the largest face of every image; images without a face are recorded, not raised.

    Parameters
    ----------
    paths : sequence of path-like
        Image files.
    ids : sequence, optional
        One id per image (default: the file name without suffix).
    progress : callable, optional
        ``progress(done, total)`` after every image.
    """
    paths = [str(p) for p in paths]
    ids = [Path(p).stem for p in paths] if ids is None else [str(i) for i in ids]
    if len(ids) != len(paths):
        raise FairvisionError(f"{len(ids)} ids for {len(paths)} images")
    fd = FaceDescriptor(upsample=upsample, jitter=jitter)
    vecs, ok_ids, rows = [], [], []
    for i, (pid, p) in enumerate(zip(ids, paths)):
        if not os.path.isfile(p):
            vec, info = None, {"n_faces": 0, "reason": "file not found"}
        else:
            vec, info = fd.describe(p)
        if vec is not None:
            vecs.append(vec)
            ok_ids.append(pid)
        rows.append({"item_id": pid, "image_path": p, "ok": vec is not None, "n_faces": int(info["n_faces"]),
                     "reason": info["reason"]})
        if progress is not None:
            progress(i + 1, len(paths))
    emb = np.vstack(vecs) if vecs else np.zeros((0, DESCRIPTOR_DIM))
    return FaceEmbeddings(emb, ok_ids, pd.DataFrame(rows))
