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


def _module_path(module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = SRC.joinpath(*parts) if parts else SRC
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("part,path", list(_modules()), ids=lambda x: str(x).split("fairvision/")[-1])
def test_no_private_names_imported_across_modules(part, path):
    """``from fairvision.x import _helper`` or ``x._helper`` from another module: make it public or move it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("fairvision"):
            for a in node.names:
                assert not _is_private(a.name), f"{path.relative_to(SRC)} imports private {a.name} from {node.module}"
                if _module_path(f"{node.module}.{a.name}") is not None:
                    module_aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fairvision.") and a.asname:
                    module_aliases.add(a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases:
            assert not _is_private(node.attr), (
                f"{path.relative_to(SRC)}:{node.lineno} uses private {node.value.id}.{node.attr} of another module")


def test_cli_start_up_imports_no_numerics():
    """`fairvision --help` and every command's option parsing load neither numpy nor pandas (0.15 s instead of
    0.45 s): command modules import the heavy stack inside the command."""
    import subprocess
    import sys

    code = ("import sys, fairvision.cli; heavy = [m for m in ('numpy', 'pandas', 'scipy', 'duckdb', 'ray') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"imported at start-up: {out.stdout.strip()}"


AUDITS = SRC / "audits"
#: modules of audits/ that are shared infrastructure, not audits: every audit may import them
AUDIT_INFRASTRUCTURE = {"gates", "settings", "__init__"}


def _audit_family(module: str) -> str | None:
    """``fairvision.audits.curation.withdraw`` -> ``curation``; None outside audits/."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["fairvision", "audits"] else None


def _entry_points(module: str) -> set[str]:
    """What another audit may import from ``module``: its ``audit_*`` functions and the classes they return."""
    path = _module_path(module)
    if path is None:
        return set()
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("audit_"):
            names.add(node.name)
            if node.returns is not None:
                names.update(n.id for n in ast.walk(node.returns) if isinstance(n, ast.Name))
                names.update(n.value for n in ast.walk(node.returns)
                             if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return names


@pytest.mark.parametrize("path", sorted(AUDITS.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_audits_are_leaves(path):
    """An audit imports from another audit only its ``audit_*`` entry points and their result classes (plus the
    shared ``audits.gates`` and ``audits.settings``): whatever two audits share lives in a lower layer."""
    mine = path.relative_to(AUDITS).parts[0].removesuffix(".py")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                other = _audit_family(a.name)
                assert other in (None, mine) or other in AUDIT_INFRASTRUCTURE, (
                    f"{path.relative_to(SRC)} imports the module {a.name} of another audit")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            other = _audit_family(node.module)
            if other is None or other == mine or other in AUDIT_INFRASTRUCTURE:
                continue
            allowed = _entry_points(node.module)
            for a in node.names:
                assert a.name in allowed, (
                    f"{path.relative_to(SRC)} imports {a.name} from {node.module}, which is not an audit_* entry "
                    f"point or its result class: move it to the layer that owns it")


def test_leaf_rule_catches_a_sideways_import(tmp_path):
    """The rule above is not vacuous: a helper of the model audit is not an entry point."""
    assert "audit_model" in _entry_points("fairvision.audits.model")
    assert "ModelAuditResult" in _entry_points("fairvision.audits.model")
    assert "group_estimates" not in _entry_points("fairvision.audits.model")


MAX_MODULE_LINES = 600
MAX_PARAMETERS = 12  # besides the data a function works on (and self)


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_small_modules(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_MODULE_LINES, f"{path.relative_to(SRC)} has {n} lines: split it along its seams"


@pytest.mark.parametrize("path", [p for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] != "cli"],
                         ids=lambda p: str(p.relative_to(SRC)))
def test_library_signatures_are_short(path):
    """Shared options travel as one AuditSettings; cohesive options as small objects. (Commands in cli/ declare
    one parameter per option, as typer needs.)"""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            names = names[1:] if names[:1] in (["self"], ["cls"]) else names
            assert len(names) - 1 <= MAX_PARAMETERS, (
                f"{path.relative_to(SRC)}:{node.lineno} {node.name} takes {len(names)} parameters")


def test_plain_words():
    """Code, docs and messages speak to users: no tracker numbers or build-plan words."""
    import re

    pattern = re.compile(r"\bissues? \d+|\(issue|\bpart [A-F]\b|not built yet", re.IGNORECASE)
    root = SRC.parents[1]
    files = [*SRC.rglob("*.py"), *(root / "docs").glob("*.md"), root / "README.md"]
    hits = [f"{p.relative_to(root)}:{i}: {line.strip()[:80]}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)
