"""Layering: data flows io -> schema/groups -> skin/vision/metrics -> stats -> audits -> report -> cli.

A module may import its own layer or lower ones, never a higher one; stats and metrics import no image
or model code (checked on every import statement, including those inside functions).
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fairvision"

RANK = {
    "errors": 0, "__init__": 0, "_lazy": 0,
    "io": 1,
    "schema": 2, "groups": 2, "datasets": 2,
    "skin": 3, "vision": 3, "metrics": 3, "engine": 3,
    "stats": 4,
    "audits": 5, "retrieval": 5,
    "report": 6,
    "cli": 7, "__main__": 7,
}
IMAGE_CODE = {"cv2", "mediapipe", "dlib", "PIL", "torch", "skimage", "face_recognition_models"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fairvision":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _modules():
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        yield rel.parts[0].removesuffix(".py"), p


@pytest.mark.parametrize("part,path", list(_modules()), ids=lambda x: str(x).split("fairvision/")[-1])
def test_no_upward_imports(part, path):
    mine = RANK[part]
    for mod in _imports(path):
        other = _part(mod)
        if other is None or other == part:
            continue
        assert RANK[other] <= mine, f"{path.relative_to(SRC)} (layer {part}) imports {mod} (higher layer {other})"


@pytest.mark.parametrize("part,path", [m for m in _modules() if m[0] in ("stats", "metrics")],
                         ids=lambda x: str(x).split("fairvision/")[-1])
def test_stats_and_metrics_import_no_image_code(part, path):
    for mod in _imports(path):
        top = mod.split(".")[0]
        assert top not in IMAGE_CODE, f"{path.relative_to(SRC)} imports {mod}"
        assert _part(mod) not in ("skin", "vision"), f"{path.relative_to(SRC)} imports {mod}"


@pytest.mark.parametrize("package", ["fairvision.stats", "fairvision.skin"])
def test_lazy_exports_are_not_shadowed_by_submodules(package):
    """A submodule named like an exported function would replace it once imported."""
    import importlib
    import pkgutil
    import types

    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{package}.{info.name}")
    for name in pkg._EXPORTS:
        value = getattr(pkg, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module, not the exported object"
