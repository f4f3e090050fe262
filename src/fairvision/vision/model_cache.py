"""Face models built once per process: one keyed cache, the mediapipe import, and the imports a pool preloads.

Building a model (a mediapipe graph, dlib's 68-landmark predictor) is the slow part of using it, so every
wrapper in :mod:`fairvision.vision` keeps its models in a :class:`ModelCache`: one instance per key (the
model's settings), built on first use under a lock so that two threads never build the same model twice.
:func:`fairvision.vision.faces.preload_face_models` imports the heavy libraries, without building anything, before
a process pool forks its workers, so that each worker inherits the imports instead of repeating them;
:func:`lean_mediapipe_import` imports mediapipe without the parts of it the face mesh never uses.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import types
from typing import Any, Callable, Hashable


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


class _DeferredModule(types.ModuleType):
    """Stands in for a module that an import asked for but never uses: the real module is imported on the first
    attribute read (by then the stand-in has left ``sys.modules``, so that import is an ordinary one)."""

    def __getattr__(self, name: str):
        if name.startswith("__") or sys.modules.get(self.__name__) is self:  # still standing in: not used then
            raise AttributeError(name)
        real = importlib.import_module(self.__name__)
        try:
            return getattr(real, name)
        except AttributeError:  # a package's submodule not imported yet, or no such name
            try:
                return importlib.import_module(f"{self.__name__}.{name}")
            except ModuleNotFoundError:
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


#: modules mediapipe's ``__init__`` imports that its face mesh never uses, with their cost (``python -X importtime``)
_UNUSED_BY_THE_MESH = (
    "matplotlib",  # with pyplot: 0.29 s, for a plotting helper of mediapipe's drawing_utils fairvision never calls
    "matplotlib.pyplot",
    "mediapipe.tasks",  # with tasks.python: 0.16 s, the Tasks API (audio, text, vision tasks), not the face mesh
    "mediapipe.tasks.python",
)


@contextlib.contextmanager
def lean_mediapipe_import() -> Any:
    """While mediapipe is imported: the modules of :data:`_UNUSED_BY_THE_MESH` not yet imported are stand-ins
    (:class:`_DeferredModule`), which takes 0.45 s off the 0.54 s mediapipe takes to import, paid by every run that
    measures skin (the batch measurement imports it so, before its pool forks). The stand-ins leave
    ``sys.modules`` as soon as the import is done, so any later import of those modules gets the real ones; the
    modules left holding a stand-in (mediapipe's ``drawing_utils.plt`` and ``mediapipe.tasks``) forward every
    attribute to the real module, imported then.
    """
    if "mediapipe" in sys.modules:
        yield
        return
    stubs = {name: _DeferredModule(name) for name in _UNUSED_BY_THE_MESH if name not in sys.modules}
    for name, stub in stubs.items():  # ``import a.b as c`` reads ``b`` off the package ``a``
        parent, _, child = name.rpartition(".")
        if parent in stubs:
            setattr(stubs[parent], child, stub)
    sys.modules.update(stubs)
    try:
        yield
    finally:
        for name, stub in stubs.items():
            if sys.modules.get(name) is stub:
                del sys.modules[name]
        mp = sys.modules.get("mediapipe")
        if mp is not None and "mediapipe.tasks" in stubs:
            # the real package (an empty __init__), so that importing its submodules later does not rebind
            # ``mediapipe.tasks``, which mediapipe binds to ``mediapipe.tasks.python`` (the stand-in, forwarding)
            importlib.import_module("mediapipe.tasks")
            mp.tasks = stubs["mediapipe.tasks.python"]
