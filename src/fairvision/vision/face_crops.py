"""Derived face images: cropped-only and cropped-and-aligned (docs/METHODS.md §13.6).

* :func:`crop_face`: the face box enlarged ``scale`` times about its centre, pixels outside the image filled
  with the image's mean colour.
* :func:`align_face`: an oriented square resampled to ``size`` x ``size``, by one of three methods that fix
  different things. ``eye-mouth`` (default) fixes the eye MIDPOINT and a level eye line, with the scale from the
  eye-to-mouth distance, so each eye's x still varies with the face's proportions (eye distance relative to
  eye-to-mouth distance); ``eyes`` fixes both eye centres (scale from the eye distance); ``ffhq`` is the FFHQ
  procedure (Karras et al. 2019, ``ffhq-dataset/download_ffhq.py``) that FHIBE's cropped-and-aligned set
  follows, a square from the eye centres and the mouth corners that fixes no point exactly (its tilt and scale
  follow the mouth too). Returned with the 2 x 3 affine matrix that maps input pixel coordinates to output pixel
  coordinates, so where any input point (the eyes) lands is known exactly.
* :func:`face_points`: the four points (eye centres, mouth corners) from the mediapipe face mesh or dlib's 68
  landmarks.

Coordinates are pixel coordinates with pixel centres at integers (OpenCV's and dlib's convention); "left" and
"right" are the image's left and right (``left_eye`` is the subject's right eye in an upright, frontal photo).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.vision import faces as face_finder

#: Most bilinear samples per output pixel and axis (the supersampling factor is the input-to-output scale,
#: rounded up, at most this): 8 x 512 = 4096, FHIBE's intermediate size.
MAX_SUPERSAMPLE = 8

#: Face-mesh landmark ids of the mouth corners (image left, image right).
MESH_MOUTH_CORNERS = (61, 291)
#: dlib 68-point ids: image-left eye 36-41, image-right eye 42-47, mouth corners 48 and 54 (as FFHQ).
DLIB_LEFT_EYE, DLIB_RIGHT_EYE, DLIB_MOUTH_CORNERS = np.arange(36, 42), np.arange(42, 48), (48, 54)


def _cv2():
    import cv2  # heavy; imported on first use

    return cv2


@dataclass(frozen=True)
class Crop:
    """A cropped-only face: the pixels and the source rectangle ``[x0, y0, x1, y1)`` (integers, may extend past
    the image) they were cut from; ``padded`` is the share of output pixels filled with the mean colour."""

    image: np.ndarray
    region: tuple[int, int, int, int]
    fill: tuple[int, int, int]
    padded: float


@dataclass(frozen=True)
class Aligned:
    """A cropped-and-aligned face: the pixels, the affine ``matrix`` (2 x 3, input -> output pixel
    coordinates), the oriented square ``quad`` in the input (corners: top-left, bottom-left, bottom-right,
    top-right, input pixel coordinates), the supersampling factor, and the share of output pixels padded."""

    image: np.ndarray
    matrix: np.ndarray
    quad: np.ndarray
    supersample: int
    padded: float

    def transform(self, points) -> np.ndarray:
        """Output pixel coordinates of input points ``(..., 2)``."""
        p = np.asarray(points, dtype=np.float64)
        return p @ self.matrix[:, :2].T + self.matrix[:, 2]


def mean_colour(image: np.ndarray) -> tuple[int, ...]:
    """The image's mean colour per channel, rounded (the padding of both face sets)."""
    img = np.asarray(image)
    m = img.reshape(-1, img.shape[2]).mean(axis=0) if img.ndim == 3 else np.array([img.mean()])
    return tuple(int(v) for v in np.clip(np.rint(m), 0, 255))


def crop_face(image: np.ndarray, box, scale: float = 2.0) -> Crop:
    """The cropped-only face: ``box`` enlarged ``scale`` times about its centre (docs/METHODS.md §13.6).

    Parameters
    ----------
    image : ndarray, (H, W, 3) uint8
    box : sequence ``[x0, y0, x1, y1]``
        Face box in pixels (edges, ``x1 - x0`` is the width).
    scale : float
        Enlargement of the box's width and height (FHIBE: 2).

    Returns
    -------
    Crop
        The crop is ``round(scale * w)`` x ``round(scale * h)`` pixels, its centre the box's centre (to the
        nearest half pixel); pixels outside the image take the image's mean colour.
    """
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[0] == 0 or img.shape[1] == 0:
        raise FairvisionError(f"crop_face needs an (H, W, 3) image, got shape {img.shape}")
    x0, y0, x1, y1 = (float(v) for v in box[:4])
    if not (np.isfinite([x0, y0, x1, y1]).all() and x1 > x0 and y1 > y0):
        raise FairvisionError(f"face box {list(box)[:4]} is empty or not finite")
    if not scale > 0:
        raise FairvisionError(f"scale must be positive, got {scale}")
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    w, h = max(1, int(round(scale * (x1 - x0)))), max(1, int(round(scale * (y1 - y0))))
    rx0, ry0 = int(np.floor(cx - w / 2 + 0.5)), int(np.floor(cy - h / 2 + 0.5))
    rx1, ry1 = rx0 + w, ry0 + h
    fill = mean_colour(img)
    out = np.empty((h, w, img.shape[2]), dtype=img.dtype)
    out[...] = np.asarray(fill, dtype=img.dtype)
    H, W = img.shape[:2]
    sx0, sy0, sx1, sy1 = max(rx0, 0), max(ry0, 0), min(rx1, W), min(ry1, H)
    inside = 0
    if sx1 > sx0 and sy1 > sy0:
        out[sy0 - ry0:sy1 - ry0, sx0 - rx0:sx1 - rx0] = img[sy0:sy1, sx0:sx1]
        inside = (sx1 - sx0) * (sy1 - sy0)
    return Crop(out, (rx0, ry0, rx1, ry1), fill, 1.0 - inside / (w * h))


def ffhq_quad(left_eye, right_eye, left_mouth, right_mouth) -> np.ndarray:
    """FFHQ's oriented square (4 x 2: top-left, bottom-left, bottom-right, top-right) from the eye centres and
    mouth corners (docs/METHODS.md §13.6)."""
    el, er, ml, mr = (np.asarray(p, dtype=np.float64).reshape(2) for p in (left_eye, right_eye, left_mouth, right_mouth))
    if not np.isfinite(np.concatenate([el, er, ml, mr])).all():
        raise FairvisionError("eye and mouth landmarks must be finite")
    eye_avg = (el + er) / 2
    eye_to_eye = er - el
    eye_to_mouth = (ml + mr) / 2 - eye_avg
    x = eye_to_eye - np.array([-eye_to_mouth[1], eye_to_mouth[0]])  # eye_to_eye - rot90(eye_to_mouth)
    norm = np.hypot(*x)
    if not norm > 0:
        raise FairvisionError("eye and mouth landmarks are degenerate (no face orientation)")
    x = x / norm * max(np.hypot(*eye_to_eye) * 2.0, np.hypot(*eye_to_mouth) * 1.8)
    y = np.array([-x[1], x[0]])  # x turned 90 degrees (image y points down)
    c = eye_avg + eye_to_mouth * 0.1
    return np.stack([c - x - y, c - x + y, c + x + y, c + x - y])


#: Where ``method="eyes"`` puts the eye centres, as fractions of the output side: FFHQ's positions for a face
#: whose eye-to-mouth distance equals its eye distance (eyes a quarter of the side apart, 2.5% above centre).
EYES_AT = ((0.375, 0.475), (0.625, 0.475))

#: Where ``method="eye-mouth"`` puts the midpoint of the eye centres (fractions of the output side), and the
#: output side as a multiple of the eye-to-mouth distance: FFHQ's values for a face whose mouth sets the scale
#: (side 3.6 |m|, square centre 0.1 |m| below the eyes).
EYE_MIDPOINT_AT = (0.5, 0.5 - 0.1 / 3.6)
SIDE_PER_EYE_MOUTH = 3.6

#: Alignment methods of :func:`align_face` (the first is the default).
ALIGN_METHODS = ("eye-mouth", "ffhq", "eyes")


def eye_mouth_quad(left_eye, right_eye, left_mouth, right_mouth) -> np.ndarray:
    """The square (as :func:`ffhq_quad`) of the similarity transform with rotation from the eye line and scale
    from the eye-to-mouth distance that puts the eye midpoint at :data:`EYE_MIDPOINT_AT` (docs/METHODS.md §13.6).

    The eye line comes out level and its midpoint at the same output pixel in every face; the scale follows the
    eye-to-mouth distance ``|m|`` (eye midpoint to mouth midpoint), which a turned head shortens far less than
    the eye distance."""
    el, er, ml, mr = (np.asarray(p, dtype=np.float64).reshape(2) for p in (left_eye, right_eye, left_mouth, right_mouth))
    if not np.isfinite(np.concatenate([el, er, ml, mr])).all():
        raise FairvisionError("eye and mouth landmarks must be finite")
    e = er - el
    eye_avg = (el + er) / 2
    m = (ml + mr) / 2 - eye_avg
    dist, mouth = np.hypot(*e), np.hypot(*m)
    if not (dist > 0 and mouth > 0):
        raise FairvisionError("eye and mouth landmarks are degenerate (no face orientation)")
    side = SIDE_PER_EYE_MOUTH * mouth
    x = e / dist * side / 2  # half-side vectors
    y = np.array([-x[1], x[0]])
    c = eye_avg + (0.5 - EYE_MIDPOINT_AT[1]) * 2 * y
    return np.stack([c - x - y, c - x + y, c + x + y, c + x - y])


def eyes_quad(left_eye, right_eye) -> np.ndarray:
    """The square (as :func:`ffhq_quad`) of the similarity transform that puts the eye centres at
    :data:`EYES_AT`: rotation from the eye line, scale from the eye distance (docs/METHODS.md §13.6)."""
    el, er = (np.asarray(p, dtype=np.float64).reshape(2) for p in (left_eye, right_eye))
    if not np.isfinite(np.concatenate([el, er])).all():
        raise FairvisionError("eye landmarks must be finite")
    e = er - el
    dist = np.hypot(*e)
    if not dist > 0:
        raise FairvisionError("the two eye landmarks coincide")
    (lx, ly), (rx, _) = EYES_AT
    side = dist / (rx - lx)
    x = e / dist * side / 2  # half-side vectors
    y = np.array([-x[1], x[0]])
    c = (el + er) / 2 + (0.5 - ly) * 2 * y  # the eye midpoint sits (0.5 - ly) of the side above the centre
    return np.stack([c - x - y, c - x + y, c + x + y, c + x - y])


def quad_matrix(quad, size: int) -> np.ndarray:
    """The 2 x 3 affine matrix taking input pixel coordinates to the pixel coordinates of a ``size`` x ``size``
    output whose outer edges are the quad's sides (corner ``quad[0]`` -> ``(-0.5, -0.5)``)."""
    q = np.asarray(quad, dtype=np.float64)
    ex, ey = q[3] - q[0], q[1] - q[0]  # input vectors along the output's x and y edges
    basis = np.stack([ex, ey], axis=1)  # columns
    a = size * np.linalg.inv(basis)
    b = -a @ q[0] - 0.5  # q[0] is the output's outer corner, half a pixel before pixel (0, 0)
    return np.hstack([a, b[:, None]])


def align_face(image: np.ndarray, left_eye, right_eye, left_mouth=None, right_mouth=None, size: int = 512, *,
               method: str = "eye-mouth") -> Aligned:
    """The cropped-and-aligned face (docs/METHODS.md §13.6).

    Parameters
    ----------
    image : ndarray, (H, W, 3) uint8
    left_eye, right_eye : (x, y)
        Eye centres (image left and image right), pixel coordinates.
    left_mouth, right_mouth : (x, y)
        Mouth corners (image left and image right).
    size : int
        Output side in pixels (FHIBE: 512).
    method : {"eye-mouth", "ffhq", "eyes"}
        What is fixed in every output:

        * ``eye-mouth`` (default): the eye MIDPOINT, at :data:`EYE_MIDPOINT_AT`, and a level eye line
          (rotation from the eye line, scale from the eye-to-mouth distance; :func:`eye_mouth_quad`). Each eye's
          x is not fixed: it is the midpoint -/+ half the eye distance, which varies with the face's proportions.
        * ``eyes``: both eye centres, at :data:`EYES_AT` (a similarity transform: rotation from the eye line,
          scale from the eye distance; :func:`eyes_quad`).
        * ``ffhq``: FHIBE's procedure, FFHQ's square (below; needs the mouth corners): no point exactly, since
          its scale and tilt also follow the mouth, so the eyes move by tens of pixels between faces of
          different proportions.

    Returns
    -------
    Aligned
        For ``ffhq``, with eye-to-eye vector ``e``, eye-to-mouth vector ``m`` (eye midpoint to mouth midpoint), the square's
        half-side vector is ``x = (e - rot90(m)) / |e - rot90(m)| * max(2 |e|, 1.8 |m|)``, ``y = rot90(x)``, its
        centre ``eye_avg + 0.1 m``. The square is resampled in one affine warp at ``k * size`` (``k`` the
        input-to-output scale rounded up, 1..8; bilinear) and averaged down ``k`` x ``k`` (area), which is
        supersampling in place of FFHQ's 4096 bilinear + Lanczos steps. Outside the image: the mean colour.
    """
    img = np.asarray(image)
    if img.ndim != 3:
        raise FairvisionError(f"align_face needs an (H, W, 3) image, got shape {img.shape}")
    size = int(size)
    if size < 8:
        raise FairvisionError(f"the aligned size must be at least 8 pixels, got {size}")
    cv2 = _cv2()
    if method in ("ffhq", "eye-mouth"):
        if left_mouth is None or right_mouth is None:
            raise FairvisionError(f"{method} alignment needs the two mouth corners (or use method='eyes')")
        quad = (ffhq_quad if method == "ffhq" else eye_mouth_quad)(left_eye, right_eye, left_mouth, right_mouth)
    elif method == "eyes":
        quad = eyes_quad(left_eye, right_eye)
    else:
        raise FairvisionError(f"unknown alignment method {method!r}; use one of {', '.join(ALIGN_METHODS)}")
    side = float(np.hypot(*(quad[3] - quad[0])))
    k = int(np.clip(np.ceil(side / size - 1e-9), 1, MAX_SUPERSAMPLE))
    big = quad_matrix(quad, size * k)
    fill = mean_colour(img)
    warped = cv2.warpAffine(np.ascontiguousarray(img), big, (size * k, size * k), flags=cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_CONSTANT, borderValue=tuple(float(v) for v in fill))
    ones = cv2.warpAffine(np.ones(img.shape[:2], np.uint8), big, (size * k, size * k), flags=cv2.INTER_NEAREST,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    if k > 1:
        warped = cv2.resize(warped, (size, size), interpolation=cv2.INTER_AREA)
    padded = 1.0 - float(ones.mean())
    return Aligned(warped, quad_matrix(quad, size), quad, k, padded)


def face_points(landmarks: np.ndarray) -> dict[str, np.ndarray]:
    """Eye centres and mouth corners from face-mesh (468) or dlib (68) landmarks (docs/METHODS.md §13.6).

    Face mesh: eye centres are the means of the mesh's eye contours (``FACEMESH_LEFT_EYE`` / ``RIGHT_EYE``),
    mouth corners the points 61 and 291. dlib: means of points 36-41 and 42-47, mouth corners 48 and 54 (FFHQ's
    choice). Returns ``left_eye``, ``right_eye``, ``left_mouth``, ``right_mouth`` by image side.
    """
    lm = np.asarray(landmarks, dtype=np.float64)
    if lm.shape == (68, 2):
        eyes = [lm[DLIB_LEFT_EYE].mean(axis=0), lm[DLIB_RIGHT_EYE].mean(axis=0)]
        mouth = [lm[DLIB_MOUTH_CORNERS[0]], lm[DLIB_MOUTH_CORNERS[1]]]
    elif lm.ndim == 2 and lm.shape[0] >= 468 and lm.shape[1] == 2:
        from fairvision.vision.facemesh import regions  # lazy: imports mediapipe (about 1 s)

        reg = regions()
        eyes = [lm[reg["left_eye"]].mean(axis=0), lm[reg["right_eye"]].mean(axis=0)]
        mouth = [lm[MESH_MOUTH_CORNERS[0]], lm[MESH_MOUTH_CORNERS[1]]]
    else:
        raise FairvisionError(f"landmarks must be (468, 2) face-mesh or (68, 2) dlib points, got shape {lm.shape}")
    eyes.sort(key=lambda p: p[0])
    mouth.sort(key=lambda p: p[0])
    return {"left_eye": eyes[0], "right_eye": eyes[1], "left_mouth": mouth[0], "right_mouth": mouth[1]}


def find_faces(image_rgb: np.ndarray, *, max_faces: int = 5) -> list[dict]:
    """Faces of an image with a box and the four alignment points (docs/METHODS.md §13.6).

    Faces come from the face finder (:func:`fairvision.vision.faces.find_faces`, docs/METHODS.md §2.5: the
    mediapipe face mesh, then the mediapipe face detector with dlib's 68 landmarks, then dlib's HOG detector),
    and so does the box (the extent of the face's outline landmarks). Returns dicts ``box``
    (``[x0, y0, x1, y1]``), ``left_eye``, ``right_eye``, ``left_mouth``, ``right_mouth``, ``model`` (``mesh``
    for face-mesh points, ``dlib`` for dlib's 68) and ``source`` (the finder's stage), largest face first.
    """
    return [{"box": f.box.astype(np.float64), **face_points(f.landmarks),
             "model": "mesh" if f.source == "facemesh" else "dlib", "source": f.source}
            for f in face_finder.find_faces(image_rgb, max_faces=max_faces)]
