"""The face finder: one detection path, with one fallback order, for every command (docs/METHODS.md §2.5).

Skin masks (:func:`fairvision.skin.masks.skin_mask`), the derived face sets
(:func:`fairvision.vision.face_crops.find_faces`) and the face descriptor
(:class:`fairvision.vision.face_descriptor.FaceDescriptor`) all find faces here, so one photo gives the same
faces, and the same face boxes, whichever command reads it. The stages, in :data:`ORDER`:

1. ``facemesh``: the mediapipe face mesh (468 landmarks per face, several faces);
2. ``detector+dlib``: the mediapipe face detector (short range, then full range; confidence 0.3), its best box
   only, with dlib's 68 landmarks fitted in it;
3. ``dlib``: dlib's HOG detector with its 68 landmarks.

A stage runs only when the stages before it found nothing. Every stage drops boxes whose content is not a
photograph (:func:`fairvision.vision.detect.plausible_face_box`). A face's box is the extent of its outline
landmarks (mesh: the face oval; dlib: jaw line and eyebrows), so it is the same box whatever uses it.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

import numpy as np

from fairvision.vision.model_cache import import_mediapipe

#: Name and version of the face finder (named in every report whose run used it).
FACE_FINDER = "fairvision face finder"
FACE_FINDER_VERSION = "1"
#: The stages, in the order they are tried (each only when the ones before found no face).
ORDER = ("facemesh", "detector+dlib", "dlib")

_STATE = {"used": False}


@dataclass(frozen=True)
class Face:
    """One face found in an image.

    Attributes
    ----------
    box : ndarray, (4,) float32
        ``[x0, y0, x1, y1]`` pixels: the extent of the outline landmarks (mesh face oval; dlib jaw and eyebrows).
    landmarks : ndarray, (468, 2) or (68, 2) float32
        ``(x, y)`` pixels: face-mesh points, or dlib's 68 points (iBUG 300-W layout).
    source : str
        The stage that found it: ``"facemesh"``, ``"detector+dlib"`` or ``"dlib"``.
    """

    box: np.ndarray
    landmarks: np.ndarray
    source: str

    @property
    def area(self) -> float:
        """Area of the box in pixels."""
        return float((self.box[2] - self.box[0]) * (self.box[3] - self.box[1]))


def mark_used() -> None:
    """Record that this run finds faces with the face finder (a caller whose workers run it in other
    processes says so here, so that the report names the finder)."""
    _STATE["used"] = True


def face_finder_used() -> bool:
    """Whether this process ran (or handed out work that runs) the face finder."""
    return bool(_STATE["used"])


def _version(*dists: str) -> str | None:
    for name in dists:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def face_finder_meta() -> dict:
    """The face finder's name, version, stage order and the versions of the libraries behind it (for a
    report's ``meta["face_finder"]``)."""
    return {"name": FACE_FINDER, "version": FACE_FINDER_VERSION, "order": list(ORDER),
            "mediapipe": _version("mediapipe"), "dlib": _version("dlib", "dlib-bin"),
            "face_recognition_models": _version("face-recognition-models")}


def _box_of(points: np.ndarray) -> np.ndarray:
    return np.r_[points.min(axis=0), points.max(axis=0)].astype(np.float32)


def _mesh_faces(image_rgb: np.ndarray, max_faces: int, min_confidence: float) -> list[Face]:
    from fairvision.vision import facemesh  # lazy: mediapipe (about 1 s)

    oval = facemesh.regions()["face_oval"]
    return [Face(_box_of(pts[oval]), pts, "facemesh")
            for pts in facemesh.face_landmarks(image_rgb, max_faces=max_faces, min_confidence=min_confidence)]


def _dlib_faces(image_rgb: np.ndarray, boxes: list, source: str) -> list[Face]:
    from fairvision.vision import dlib_landmarks as dl  # lazy: dlib (about 0.5 s)

    if not boxes:
        return []
    return [Face(_box_of(pts[dl.FACE_OUTLINE]), pts, source) for pts in dl.landmarks(image_rgb, boxes)]


def find_faces(
    image_rgb: np.ndarray,
    *,
    max_faces: int = 5,
    min_confidence: float = 0.5,
    upsample: int = 1,
    stages: tuple[str, ...] = ORDER,
) -> list[Face]:
    """Faces of an RGB image, largest box first (docs/METHODS.md §2.5).

    Parameters
    ----------
    image_rgb : ndarray, (H, W, 3) uint8
    max_faces : int
        Most faces to return (the mesh and the HOG stage; the detector stage gives one face).
    min_confidence : float
        Detection confidence of the face mesh.
    upsample : int
        Upsampling of dlib's HOG detector (1 finds faces down to about 40 px).
    stages : tuple of str
        The stages to try, a subsequence of :data:`ORDER` (``("facemesh",)``: the mesh only;
        ``("dlib",)``: BiasPainter's HOG detector and 68 landmarks only).

    Returns
    -------
    list of Face
        The faces of the first stage that finds any; empty when none does. Faces whose box is not a photograph
        (pixel noise, a flat patch) are never returned.

    Raises
    ------
    FairvisionError
        A fallback stage is needed and dlib or its model file is missing.
    """
    unknown = [s for s in stages if s not in ORDER]
    if unknown:
        raise ValueError(f"unknown face finder stage {unknown[0]!r}; use {', '.join(ORDER)}")
    mark_used()
    img = np.ascontiguousarray(image_rgb, dtype=np.uint8)
    found: list[Face] = []
    for stage in (s for s in ORDER if s in stages):
        if stage == "facemesh":
            found = _mesh_faces(img, max_faces, min_confidence)
        elif stage == "detector+dlib":
            from fairvision.vision.detect import detect_faces

            # only the best box: low-confidence second boxes are mostly hands and backgrounds
            found = _dlib_faces(img, [b for b, _ in detect_faces(img)[:1]], stage)
        else:
            from fairvision.vision.dlib_landmarks import detect

            found = _dlib_faces(img, detect(img, upsample=upsample)[:max_faces], stage)
        if found:
            break
    return sorted(found, key=lambda f: -f.area)[:max_faces]


def preload_face_models(mask_method: str) -> None:
    """Import (not build: building starts threads) the libraries of the face models a skin mask method
    (:func:`fairvision.skin.masks.skin_mask`) uses, before a process pool forks its workers.

    OpenCV always; the mediapipe face mesh for ``mediapipe`` and ``auto``; dlib for ``dlib``, ``auto`` and
    ``mediapipe`` (whose second chance is dlib's 68 landmarks). For the methods that find faces, the face
    finder (:mod:`fairvision.vision.faces`) is marked used, so that the run's report names it.
    """
    import cv2  # noqa: F401  - lazy: OpenCV, mediapipe and dlib are optional and slow to import

    if mask_method in ("mediapipe", "auto", "dlib"):
        mark_used()  # the workers find faces with the face finder: the report names it
    if mask_method in ("mediapipe", "auto"):
        import_mediapipe().solutions.face_mesh  # noqa: B018 - the attribute access imports the submodule
    if mask_method in ("dlib", "auto", "mediapipe"):
        import dlib  # noqa: F401
