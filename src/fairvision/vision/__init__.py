"""Wrappers of real face models: the mediapipe face mesh and face detector, and dlib's
HOG detector with its 68-landmark shape predictor.

Each wrapper builds its model once per process (construction is the slow part)
and imports the heavy library on first use, so ``import fairvision.vision``
stays cheap. Landmarks are returned in pixel coordinates of the input image.
"""

from __future__ import annotations

__all__ = ["facemesh", "detect", "dlib_landmarks"]
