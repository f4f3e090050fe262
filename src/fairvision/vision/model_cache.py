"""Face models built once per process: one keyed cache, the mediapipe import, and the imports a pool preloads.

Building a model (a mediapipe graph, dlib's 68-landmark predictor) is the slow part of using it, so every
wrapper in :mod:`fairvision.vision` keeps its models in a :class:`ModelCache`: one instance per key (the
model's settings), built on first use under a lock so that two threads never build the same model twice.
:func:`fairvision.vision.faces.preload_face_models` imports the heavy libraries, without building anything, before
a process pool forks its workers, so that each worker inherits the imports instead of repeating them.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Hashable



class ModelCache:
    """Models of one kind, by key, built once per process (double-checked lock).

    ``lock`` is the lock the models are built under; wrappers of models that are not re-entrant (mediapipe's
    pose and selfie segmentation graphs) also hold it while a model runs. ``threads=True``: the models start
    native threads (every mediapipe graph), which makes forking this process unsafe once one is built
    (:func:`threaded_models_built`).
    """

    def __init__(self, *, threads: bool = False) -> None:
        self.lock = threading.Lock()
        self._models: dict[Hashable, object] = {}
        if threads:
            _THREADED.append(self)

    def get(self, key: Hashable, build: Callable[[], object], *, lock: bool = True) -> object:
        """The model of ``key``, built by ``build()`` on first use.

        ``lock=False`` builds without holding the lock (a model loaded in a background thread while the
        process forks workers: a child must not inherit a held lock); a model another thread built
        meanwhile wins.
        """
        model = self._models.get(key)
        if model is not None:
            return model
        if not lock:
            return self._models.setdefault(key, build())
        with self.lock:
            model = self._models.get(key)
            if model is None:
                model = build()
                self._models[key] = model
        return model

    def __contains__(self, key: Hashable) -> bool:
        return key in self._models

    def __len__(self) -> int:
        return len(self._models)


#: the caches whose models start native threads
_THREADED: list[ModelCache] = []


def threaded_models_built() -> bool:
    """Whether this process has built a model with native threads (a mediapipe face mesh, face detector, selfie
    segmentation or pose graph): a child forked now inherits their locks and heap state but not the threads, and
    can crash building its own (a process pool then starts its workers from a fork server instead)."""
    return any(len(cache) for cache in _THREADED)


def import_mediapipe():
    """The ``mediapipe`` module, imported on first use (heavy, about 1 s), with its C++ info and warning
    lines turned off."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    import mediapipe as mp  # lazy: optional and slow to import

    return mp
